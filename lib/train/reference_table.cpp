#include "train/reference_table.h"

#include <spdlog/spdlog.h>

#include <fstream>

#include "parallel/replica_sums.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/failpoint.h"
#include "util/text_file.h"

namespace gputrain {

namespace fs = std::filesystem;

namespace {

nlohmann::json table_facts(const PreferencePairs& pairs) {
  return {{"pairs_file", pairs.path()}, {"pairs", pairs.window_count()}, {"pairs_crc32c", pairs.data_crc32c()}};
}

// The stored table, when its facts are these pairs'.
std::optional<torch::Tensor> stored_table(const ReferenceTableOptions& o, const nlohmann::json& facts) {
  const fs::path json = o.dir / (o.name + ".json"), bin = o.dir / (o.name + ".bin");
  std::error_code ec;
  if (!fs::exists(json, ec) || !fs::exists(bin, ec)) return std::nullopt;
  const nlohmann::json stored = parse_json_file(json, "reference table", "remove " + o.dir.string());
  const int64_t pairs = facts["pairs"].get<int64_t>();
  if (stored.value("pairs_crc32c", "") != facts["pairs_crc32c"] || stored.value("pairs", int64_t{-1}) != pairs ||
      static_cast<int64_t>(fs::file_size(bin, ec)) != pairs * 2 * 4) {
    spdlog::warn("reference: {} holds the reference log-probabilities of other pairs than {}: computed again",
                 bin.string(), facts["pairs_file"].get<std::string>());
    return std::nullopt;
  }
  torch::Tensor table = torch::empty({pairs, 2}, torch::kFloat);
  std::ifstream in(bin, std::ios::binary);
  in.read(reinterpret_cast<char*>(table.data_ptr<float>()), static_cast<std::streamsize>(table.nbytes()));
  if (!in)
    throw data_error("cannot read '" + bin.string() + "'\n    fix: remove " + o.dir.string() + " to compute it again");
  return table;
}

void write_table(const ReferenceTableOptions& o, const torch::Tensor& table, const nlohmann::json& facts) {
  fs::create_directories(o.dir);
  const std::string bin = (o.dir / (o.name + ".bin")).string(), tmp = bin + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(table.data_ptr<float>()), static_cast<std::streamsize>(table.nbytes()));
    if (!out) throw runtime_error("cannot write '" + tmp + "'\n    fix: check the disk has room");
  }
  fs::rename(tmp, bin);
  write_file_atomic((o.dir / (o.name + ".json")).string(), facts.dump(2) + "\n");  // last: the table is whole
}

// The pass so far: <name>.partial.bin holds the first pairs' rows in order, <name>.partial.json
// their facts and count. The lead rank reads it; the others take it from the lead.
int64_t read_partial(const ReferenceTableOptions& o, const nlohmann::json& facts, torch::Tensor& table) {
  const fs::path json = o.dir / (o.name + ".partial.json"), bin = o.dir / (o.name + ".partial.bin");
  std::error_code ec;
  if (!fs::exists(json, ec) || !fs::exists(bin, ec)) return 0;
  nlohmann::json stored = parse_json_file(json, "reference table progress", "remove " + o.dir.string());
  const int64_t done = stored.value("pairs_done", int64_t{0});
  stored.erase("pairs_done");
  if (stored != facts || done <= 0 || done > table.size(0) ||
      static_cast<int64_t>(fs::file_size(bin, ec)) < done * 2 * 4) {
    spdlog::warn("reference: {} is the progress of a pass over other pairs: started again", json.string());
    return 0;
  }
  std::ifstream in(bin, std::ios::binary);
  in.read(reinterpret_cast<char*>(table.data_ptr<float>()), static_cast<std::streamsize>(done * 2 * 4));
  if (!in) throw data_error("cannot read '" + bin.string() + "'\n    fix: remove it to start the pass again");
  return done;
}

// Appends rows [from, to) of `table` to the progress file, then records them as done.
void append_partial(const ReferenceTableOptions& o, const torch::Tensor& table, int64_t from, int64_t to,
                    const nlohmann::json& facts) {
  fs::create_directories(o.dir);
  const fs::path bin = o.dir / (o.name + ".partial.bin");
  {
    // From the rows recorded: a killed pass may have written more than it recorded.
    std::fstream out(bin, std::ios::binary | std::ios::out | (from == 0 ? std::ios::trunc : std::ios::in));
    out.seekp(from * 2 * 4);
    out.write(reinterpret_cast<const char*>(table.narrow(0, from, to - from).contiguous().data_ptr<float>()),
              static_cast<std::streamsize>((to - from) * 2 * 4));
    if (!out) throw runtime_error("cannot write '" + bin.string() + "'\n    fix: check the disk has room");
  }
  nlohmann::json progress = facts;
  progress["pairs_done"] = to;
  write_file_atomic((o.dir / (o.name + ".partial.json")).string(), progress.dump(2) + "\n");
}

}  // namespace

torch::Tensor reference_table(const PreferencePairs& pairs, const ReferenceModel& live, const ProcessGroups& groups,
                              const ReferenceTableOptions& o) {
  const nlohmann::json facts = table_facts(pairs);
  std::optional<torch::Tensor> stored = stored_table(o, facts);
  // Computed by all or by none: a rank that cannot read the table (another node's disk) computes it
  // with the others.
  if (!groups.any_rank(!stored, "agreement on reading the reference table")) {
    spdlog::info("reference: the log-probabilities of {} pairs read from {}", pairs.window_count(),
                 (o.dir / (o.name + ".bin")).string());
    return *stored;
  }
  const int64_t n = pairs.window_count();
  torch::Tensor table = torch::zeros({n, 2}, torch::kFloat);
  // An interrupted pass goes on from the pairs it recorded (the lead's files, sent to every rank).
  torch::Tensor done_t = torch::tensor({o.lead ? read_partial(o, facts, table) : int64_t{0}}, torch::kLong);
  if (groups.distributed()) {
    const torch::Device wire = groups.world_comm()->tensor_device();
    torch::Tensor d = done_t.to(wire);
    groups.world_comm()->broadcast_now(d, 0, "the reference pass's progress");
    done_t = d.cpu();
  }
  const int64_t done = done_t.item<int64_t>();
  if (groups.distributed() && done > 0) {  // the rows so far, where there are some
    torch::Tensor t = table.to(groups.world_comm()->tensor_device());
    groups.world_comm()->broadcast_now(t, 0, "the reference table so far");
    table = t.cpu();
  }
  if (done > 0) spdlog::info("reference: the pass over {} pairs goes on from pair {}", n, done);
  // Each replica its share of each round's pairs in a batch (its tp ranks the same ones, as their
  // forwards need); every entry is written by one replica, so the sum over them is the round's rows.
  // Every replica runs as many forwards (ZeRO-3's gathers are collectives): one past the end reruns
  // pair 0 unkept.
  const int64_t replicas = groups.dp() ? groups.dp()->size() : 1, replica = groups.coord().dp;
  const int64_t per_round = replicas * o.batch;
  for (int64_t start = done; start < n; start += per_round) {
    const int64_t first = start + replica * o.batch, end = std::min(start + per_round, n);
    std::vector<uint64_t> keys;
    for (int64_t k = first; k < std::min(first + o.batch, n); ++k) keys.push_back(static_cast<uint64_t>(k));
    const bool kept = !keys.empty();
    if (!kept) keys.push_back(0);
    std::vector<Batch> one = {batch_on(preference_batch(pairs, keys, o.seq_len), o.device)};
    live.fill(one);
    const auto P = static_cast<int64_t>(keys.size());
    torch::Tensor round = torch::zeros({end - start, 2}, torch::TensorOptions().dtype(torch::kFloat).device(o.device));
    if (kept) round.narrow(0, first - start, P).copy_(one[0].reference_logps.to(o.device).view({2, P}).t());
    table.narrow(0, start, end - start).copy_(global_sums(groups, round.to(torch::kDouble)).to(torch::kFloat).cpu());
    if (o.lead) append_partial(o, table, start, end, facts);
    failpoint("reference.round_done");  // tests stop the pass here and continue it
  }
  if (o.lead) {
    write_table(o, table, facts);
    std::error_code ec;
    fs::remove(o.dir / (o.name + ".partial.json"), ec);
    fs::remove(o.dir / (o.name + ".partial.bin"), ec);
  }
  spdlog::info("reference: the log-probabilities of {} pairs computed once and stored in {}", n,
               (o.dir / (o.name + ".bin")).string());
  return table;
}

}  // namespace gputrain

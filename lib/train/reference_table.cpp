#include "train/reference_table.h"

#include <spdlog/spdlog.h>

#include <fstream>

#include "parallel/replica_sums.h"
#include "util/atomic_file.h"
#include "util/error.h"
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
  // Each replica its share of the pairs in batches (its tp ranks the same ones, as their forwards
  // need); every entry is written by one replica, so the sum over them is the table. Every replica
  // runs as many forwards (ZeRO-3's gathers are collectives): one past the end reruns pair 0 unkept.
  const int64_t n = pairs.window_count();
  const int64_t replicas = groups.dp() ? groups.dp()->size() : 1, replica = groups.coord().dp;
  const int64_t rounds = (n + replicas * o.batch - 1) / (replicas * o.batch);
  torch::Tensor table = torch::zeros({n, 2}, torch::TensorOptions().dtype(torch::kFloat).device(o.device));
  for (int64_t round = 0; round < rounds; ++round) {
    const int64_t first = (round * replicas + replica) * o.batch;
    std::vector<uint64_t> keys;
    for (int64_t k = first; k < std::min(first + o.batch, n); ++k) keys.push_back(static_cast<uint64_t>(k));
    const bool kept = !keys.empty();
    if (!kept) keys.push_back(0);
    std::vector<Batch> one = {batch_on(preference_batch(pairs, keys, o.seq_len), o.device)};
    live.fill(one);
    const auto P = static_cast<int64_t>(keys.size());
    if (kept) table.narrow(0, first, P).copy_(one[0].reference_logps.to(o.device).view({2, P}).t());
  }
  table = global_sums(groups, table.to(torch::kDouble)).to(torch::kFloat).cpu();
  if (o.lead) write_table(o, table, facts);
  spdlog::info("reference: the log-probabilities of {} pairs computed once and stored in {}", n,
               (o.dir / (o.name + ".bin")).string());
  return table;
}

}  // namespace gputrain

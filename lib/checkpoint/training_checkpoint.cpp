#include "checkpoint/training_checkpoint.h"

#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "checkpoint/checkpoint_dir.h"
#include "parallel/fully_sharded.h"
#include "util/error.h"
#include "util/text_file.h"
#include "util/version.h"

namespace gputrain {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

constexpr const char* kStateFormat = "gputrain-training-state";
// Version 2: ZeRO-3 state laid out in blocks of its parameter (adamw8bit's scales) in row pieces
// ("blocks" metadata), which version 1 readers would not join; others are still written as 1.
constexpr int kStateVersion = 2;

json optional_number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

std::vector<NamedTensor> rng_tensors(const RngSnapshot& r) {
  std::vector<NamedTensor> t = {{"cpu", r.cpu}};
  if (r.cuda.defined()) t.push_back({"cuda", r.cuda});
  return t;
}

// Checkpoints before per-rank files: one model and optimizer file per tp rank.
std::string shard_file(const char* stem, size_t rank) {
  return std::string(stem) + ".tp" + std::to_string(rank) + ".safetensors";
}

std::string rank_file(const char* stem, int rank) {
  return std::string(stem) + ".rank" + std::to_string(rank) + ".safetensors";
}

// How a checkpoint's tensors are laid out in files: `ranks` per-rank files (0: the files of a
// single process, or per tp rank before per-rank files), split over `tp` ranks as `split` says.
struct FileLayout {
  size_t tp = 1;
  std::vector<TensorShard> split;
  int ranks = 0;
};

json split_to_json(const std::vector<TensorShard>& split) {
  json out = json::array();
  for (const auto& t : split)
    if (t.dim >= 0) out.push_back({t.name, t.dim, t.sections});
  return out;
}

// trainer.json's "tensor_parallel" (the tp degree, 1 when absent, and the split parameters) and "ranks".
FileLayout layout_of(const json& j) {
  FileLayout out;
  out.ranks = j.value("ranks", 0);
  const auto it = j.find("tensor_parallel");
  if (it == j.end() || it->is_null()) return out;
  std::vector<TensorShard> split;
  for (const auto& e : it->at("split")) {
    TensorShard t{e.at(0).get<std::string>(), e.at(1).get<int64_t>()};
    // Relative section sizes; a count of equal sections in checkpoints before grouped-query attention.
    if (e.at(2).is_array()) t.sections = e.at(2).get<std::vector<int64_t>>();
    else t.sections.assign(e.at(2).get<size_t>(), 1);
    split.push_back(std::move(t));
  }
  out.tp = it->at("size").get<size_t>();
  out.split = std::move(split);
  return out;
}

json read_json_file(const fs::path& p) {
  try {
    return json::parse(read_text_file(p, "checkpoint file", "resume from another checkpoint"));
  } catch (const json::exception& e) {
    throw data_error("'" + p.string() + "' is malformed: " + e.what() + "\n    fix: resume from another checkpoint");
  }
}

// Each tp rank's lists joined into whole tensors by name (a parameter not in `split` is whole in every file).
std::vector<NamedTensor> join_shards(const std::vector<std::vector<NamedTensor>>& shards,
                                     const std::vector<TensorShard>& split, const fs::path& dir) {
  std::map<std::string, const TensorShard*> how;
  for (const auto& t : split) how[t.name] = &t;
  std::vector<NamedTensor> whole;
  for (const auto& first : shards.front()) {
    const auto it = how.find(first.name);
    if (it == how.end()) {
      whole.push_back(first);
      continue;
    }
    std::vector<torch::Tensor> parts;
    for (size_t r = 0; r < shards.size(); ++r) {
      const NamedTensor* mine = nullptr;
      for (const auto& e : shards[r])
        if (e.name == first.name) mine = &e;
      if (!mine)
        throw data_error("checkpoint '" + dir.string() + "': " + shard_file("model", r) + " lacks '" + first.name +
                         "'\n    fix: resume from another checkpoint");
      parts.push_back(mine->tensor);
    }
    whole.push_back({first.name, unshard(parts, *it->second)});
  }
  return whole;
}

// Of a row piece read from a file, what `keep` keeps: its overlap with the rank's rows, placed
// within them (an empty piece for a rank past the last row, so its rows join into zero rows).
std::optional<RowPiece> kept_rows(const std::string& name, const RowPiece& piece, const RowShare& keep,
                                  bool first_of_name) {
  const int64_t row_numel = piece.rows.size(0) > 0 ? piece.rows.numel() / piece.rows.size(0) : 0;
  const int64_t multiple = keep.blocks.row_multiple(name.substr(0, name.rfind('.')), piece.slice.whole_rows, row_numel);
  const RankRows mine = rank_rows(piece.slice.whole_rows, keep.rank, keep.size, multiple);
  const int64_t from = std::max(piece.slice.first, mine.first);
  const int64_t to = std::min(piece.slice.first + piece.rows.size(0), mine.first + mine.count);
  if (to > from)
    return RowPiece{{from - mine.first, mine.count}, piece.rows.narrow(0, from - piece.slice.first, to - from).clone()};
  if (mine.count == 0 && first_of_name) return RowPiece{{0, 0}, piece.rows.narrow(0, 0, 0).clone()};
  return std::nullopt;
}

// A per-rank file's metadata: its tp rank (returned) and the rows (or blocks) of its row pieces.
size_t rank_file_metadata(const fs::path& path, const std::map<std::string, std::string>& metadata, const FileLayout& l,
                          std::map<std::string, RowSlice>& rows, std::map<std::string, RowSlice>& blocks) {
  size_t tp_rank = 0;
  try {
    tp_rank = std::stoul(metadata.at("tp_rank"));
    for (auto [key, slices] : {std::pair("rows", &rows), std::pair("blocks", &blocks)})
      if (const auto it = metadata.find(key); it != metadata.end()) {
        const json listed = json::parse(it->second);
        for (const auto& [name, r] : listed.items())
          (*slices)[name] = RowSlice{r.at(0).get<int64_t>(), r.at(1).get<int64_t>()};
      }
  } catch (const std::exception& e) {
    throw data_error("'" + path.string() + "': its metadata is malformed (" + e.what() +
                     ")\n    fix: resume from another checkpoint");
  }
  if (tp_rank >= l.tp)
    throw data_error("'" + path.string() + "' is of tp rank " + std::to_string(tp_rank) + ", trainer.json says " +
                     std::to_string(l.tp) + " tp ranks\n    fix: resume from another checkpoint");
  return tp_rank;
}

// Per-rank files <stem>.rank<r>.safetensors joined: one list per tp rank, each tensor once (a tied
// embedding two stages hold is in both files), ZeRO-3's row pieces joined into whole tensors, or
// into the rows `keep` keeps (then only its tp rank's list is filled, when the tp degree matches).
std::vector<std::vector<NamedTensor>> read_rank_files(const fs::path& dir, const char* stem, const FileLayout& l,
                                                      const RowShare* keep = nullptr,
                                                      TrainingSnapshot* counted = nullptr) {
  if (keep && keep->tp_size != l.tp) keep = nullptr;  // tp resharding needs each tp rank's state whole
  struct Joined {
    std::vector<std::string> order;
    std::map<std::string, torch::Tensor> whole;
    std::map<std::string, std::vector<RowPiece>> pieces;
  };
  std::vector<Joined> by_tp(l.tp);
  for (int r = 0; r < l.ranks; ++r) {
    const fs::path path = dir / rank_file(stem, r);
    if (!fs::exists(path)) continue;  // a rank that held nothing to write
    SafetensorsFile f = read_safetensors(path.string());
    std::map<std::string, RowSlice> rows, blocks;  // blocks: joined whole (a rank keeps all its parameters' scales)
    const size_t tp_rank = rank_file_metadata(path, f.metadata, l, rows, blocks);
    if (keep && tp_rank != keep->tp_rank) continue;
    Joined& j = by_tp[tp_rank];
    for (auto& e : f.tensors) {
      const bool new_name = !j.whole.count(e.name) && !j.pieces.count(e.name);
      if (new_name) j.order.push_back(e.name);
      if (const auto b = blocks.find(e.name); b != blocks.end()) {
        if (keep && counted) {
          const double mb = static_cast<double>(e.tensor.nbytes()) / (1024.0 * 1024.0);
          counted->optimizer_rows_read_mb += mb;
          counted->optimizer_rows_kept_mb += mb;
        }
        j.pieces[e.name].push_back({b->second, e.tensor});
        continue;
      }
      const auto it = rows.find(e.name);
      if (it == rows.end()) {
        if (new_name) j.whole[e.name] = e.tensor;
        continue;
      }
      std::vector<RowPiece>& pieces = j.pieces[e.name];
      if (!keep) {
        pieces.push_back({it->second, e.tensor});
        continue;
      }
      std::optional<RowPiece> mine = kept_rows(e.name, {it->second, e.tensor}, *keep, pieces.empty());
      if (counted) {
        counted->optimizer_rows_read_mb += static_cast<double>(e.tensor.nbytes()) / (1024.0 * 1024.0);
        if (mine) counted->optimizer_rows_kept_mb += static_cast<double>(mine->rows.nbytes()) / (1024.0 * 1024.0);
      }
      if (mine) pieces.push_back(std::move(*mine));
    }
  }
  std::vector<std::vector<NamedTensor>> out(l.tp);
  for (size_t t = 0; t < l.tp; ++t)
    for (const auto& name : by_tp[t].order) {
      if (const auto it = by_tp[t].whole.find(name); it != by_tp[t].whole.end()) {
        out[t].push_back({name, it->second});
        continue;
      }
      std::string problem;
      torch::Tensor whole = join_rows(by_tp[t].pieces.at(name), &problem);
      if (!whole.defined())
        throw data_error("checkpoint '" + dir.string() + "': '" + name + "' cannot be joined from the " + stem +
                         ".rank<r> files: " + problem + "\n    fix: resume from another checkpoint");
      out[t].push_back({name, whole});
    }
  return out;
}

// Each tp rank's <stem> tensors ("model" or "optimizer"), from whichever files hold them: the per-rank
// files, <stem>.safetensors of a single process, or (before per-rank files) one file per tp rank.
std::vector<std::vector<NamedTensor>> read_tp_lists(const fs::path& dir, const char* stem, const FileLayout& l,
                                                    const RowShare* keep = nullptr,
                                                    TrainingSnapshot* counted = nullptr) {
  if (l.ranks > 0) return read_rank_files(dir, stem, l, keep, counted);
  if (l.tp == 1) return {read_safetensors((dir / (std::string(stem) + ".safetensors")).string()).tensors};
  std::vector<std::vector<NamedTensor>> lists;
  for (size_t r = 0; r < l.tp; ++r) lists.push_back(read_safetensors((dir / shard_file(stem, r)).string()).tensors);
  return lists;
}

// The whole model, tp shards joined.
std::vector<NamedTensor> read_model_files(const fs::path& dir, const FileLayout& l) {
  auto lists = read_tp_lists(dir, "model", l);
  return l.tp == 1 ? std::move(lists.front()) : join_shards(lists, l.split, dir);
}

// A rank's part as its two files; the metadata say its tp rank and the rows (or blocks) of its pieces.
void add_part(CheckpointWriter& w, const CheckpointPart& p, const std::string& optimizer) {
  auto metadata = [&](std::map<std::string, std::string> m, const std::map<std::string, RowSlice>& rows,
                      const std::map<std::string, RowSlice>& blocks) {
    m["rank"] = std::to_string(p.rank);
    m["tp_rank"] = std::to_string(p.tp_rank);
    m["tp_size"] = std::to_string(p.tp_size);
    for (auto [key, slices] : {std::pair("rows", &rows), std::pair("blocks", &blocks)})
      if (!slices->empty()) {
        json r = json::object();
        for (const auto& [name, slice] : *slices) r[name] = {slice.first, slice.whole_rows};
        m[key] = r.dump();
      }
    return m;
  };
  if (!p.model.empty())
    w.add_safetensors(rank_file("model", p.rank), p.model, metadata({{"format", "gputrain"}}, p.model_rows, {}));
  if (!p.optimizer.empty())
    w.add_safetensors(rank_file("optimizer", p.rank), p.optimizer,
                      metadata({{"optimizer", optimizer}}, p.optimizer_rows, p.optimizer_blocks));
}

}  // namespace

std::vector<NamedTensor> read_checkpoint_model(const fs::path& dir) {
  return read_model_files(dir, layout_of(read_json_file(dir / "trainer.json")));
}

StoredModel checkpoint_model_files(const fs::path& dir) {
  const FileLayout l = layout_of(read_json_file(dir / "trainer.json"));
  StoredModel out{l.tp, l.split, {}};
  auto add = [&](const fs::path& path, size_t tp_rank) {
    out.files.push_back({path.string(), read_safetensors_header(path.string()), tp_rank, {}});
  };
  if (l.ranks > 0) {
    for (int r = 0; r < l.ranks; ++r) {
      const fs::path path = dir / rank_file("model", r);
      if (!fs::exists(path)) continue;  // a rank that held nothing to write
      add(path, 0);
      std::map<std::string, RowSlice> blocks;
      StoredModelFile& f = out.files.back();
      f.tp_rank = rank_file_metadata(path, f.header.metadata, l, f.rows, blocks);
    }
  } else if (l.tp == 1) {
    add(dir / "model.safetensors", 0);
  } else {
    for (size_t r = 0; r < l.tp; ++r) add(dir / shard_file("model", r), r);
  }
  return out;
}

fs::path save_training_checkpoint(const fs::path& root, const TrainingSnapshot& s, std::optional<CheckpointJoin> join) {
  const int ranks = join ? join->ranks : 0;
  CheckpointWriter w(root, s.counters.step, std::move(join));
  if (s.part) {
    add_part(w, *s.part, s.optimizer);
    if (s.part->rank > 0) return w.commit();  // the lead writes the rest
  } else {
    w.add_safetensors("model.safetensors", s.model, {{"format", "gputrain"}});
    w.add_safetensors("optimizer.safetensors", s.optimizer_state, {{"optimizer", s.optimizer}});
  }
  w.add_safetensors("rng.safetensors", rng_tensors(s.rng));
  const TrainingCounters& c = s.counters;
  json j;
  j["format"] = kStateFormat;
  j["version"] = s.part && !s.part->optimizer_blocks.empty() ? kStateVersion : 1;
  j["step"] = c.step;
  j["tokens"] = c.tokens;
  j["train_s"] = c.train_seconds;
  j["last_loss"] = optional_number(c.last_loss);
  j["last_eval_loss"] = c.last_eval ? json(*c.last_eval) : json(nullptr);
  j["nan_skipped_steps"] = c.nan_skipped_steps;
  j["spike_skipped_steps"] = c.spike_skipped_steps;
  j["spike_rollbacks"] = c.spike_rollbacks;
  j["metrics_bytes"] = c.metrics_bytes;
  j["per_device_batch_size"] = s.per_device_batch_size;
  j["grad_accum_steps"] = s.grad_accum_steps;
  j["sampler"] = sampler_state_to_json(s.sampler);
  j["loss_scaler"] = s.scaler ? json{{"scale", s.scaler->scale},
                                     {"growth_tracker", s.scaler->growth_tracker},
                                     {"skipped_steps", s.scaler->skipped_steps}}
                              : json(nullptr);
  j["cuda_rng_device"] = s.rng.cuda_index;
  j["optimizer"] = s.optimizer;
  j["gputrain_version"] = version_string();
  j["torch_version"] = TORCH_VERSION;
  j["settings"] = s.settings;
  if (!s.lora_base.empty()) j["lora_base"] = s.lora_base;  // model files hold LoRA's adapters only
  if (!s.expert_bias.is_null()) j["moe_expert_bias"] = s.expert_bias;
  if (s.part) j["ranks"] = ranks;  // model.rank<r> and optimizer.rank<r> files
  if (s.part && s.part->tp_size > 1)
    j["tensor_parallel"] = {{"size", s.part->tp_size}, {"split", split_to_json(s.tp_split)}};
  w.add_json("trainer.json", j);
  w.add_text("recipe.yaml", s.recipe_yaml);
  return w.commit();
}

void copy_to_host(TrainingSnapshot& s) {
  auto copy = [](std::vector<NamedTensor>& v) {
    for (auto& e : v) e.tensor = e.tensor.detach().to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true);
  };
  copy(s.model);
  copy(s.optimizer_state);
  if (s.part) {
    copy(s.part->model);
    copy(s.part->optimizer);
  }
}

bool is_training_checkpoint(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "trainer.json", ec) &&
         (fs::is_regular_file(dir / "model.safetensors", ec) || fs::is_regular_file(dir / rank_file("model", 0), ec) ||
          fs::is_regular_file(dir / shard_file("model", 0), ec));
}

TrainingSnapshot load_training_checkpoint(const fs::path& dir, const std::optional<RowShare>& keep, bool with_model) {
  if (auto problem = checkpoint_problem(dir))
    throw data_error(
        "checkpoint '" + dir.string() + "' is not usable: " + *problem +
        "\n    fix: resume from another checkpoint (checkpoint.resume: auto picks the newest complete one)");
  TrainingSnapshot s;
  const fs::path state_path = dir / "trainer.json";
  FileLayout layout;
  try {
    const json j = json::parse(read_text_file(state_path, "checkpoint file", "resume from another checkpoint"));
    if (j.at("format") != kStateFormat || j.at("version").get<int>() > kStateVersion)
      throw data_error("'" + state_path.string() + "' is not a gputrain training state this version can read (format " +
                       j.at("format").dump() + ", version " + j.at("version").dump() + ")" +
                       "\n    fix: resume with the gputrain version that wrote it");
    TrainingCounters& c = s.counters;
    c.step = j.at("step").get<int64_t>();
    c.tokens = j.at("tokens").get<int64_t>();
    c.train_seconds = j.at("train_s").get<double>();
    c.last_loss = j.at("last_loss").is_null() ? NAN : j.at("last_loss").get<double>();
    if (!j.at("last_eval_loss").is_null()) c.last_eval = j.at("last_eval_loss").get<double>();
    c.nan_skipped_steps = j.at("nan_skipped_steps").get<int64_t>();
    c.spike_skipped_steps = j.value("spike_skipped_steps", int64_t{0});  // absent before the spike guard
    c.spike_rollbacks = j.value("spike_rollbacks", int64_t{0});
    c.metrics_bytes = j.at("metrics_bytes").get<int64_t>();
    s.per_device_batch_size = j.at("per_device_batch_size").get<int64_t>();
    s.grad_accum_steps = j.at("grad_accum_steps").get<int64_t>();
    s.sampler = sampler_state_from_json(j.at("sampler"));
    if (const json& ls = j.at("loss_scaler"); !ls.is_null())
      s.scaler = LossScalerState{ls.at("scale").get<double>(), ls.at("growth_tracker").get<int64_t>(),
                                 ls.at("skipped_steps").get<int64_t>()};
    s.rng.cuda_index = j.at("cuda_rng_device").get<int>();
    s.optimizer = j.at("optimizer").get<std::string>();
    s.settings = j.at("settings");
    s.lora_base = j.value("lora_base", std::string());
    s.expert_bias = j.value("moe_expert_bias", json(nullptr));
    layout = layout_of(j);
    s.tp_split = layout.split;
  } catch (const json::exception& e) {
    throw data_error("'" + state_path.string() + "' is malformed: " + e.what() +
                     "\n    fix: resume from another checkpoint");
  }
  s.recipe_yaml = read_text_file(dir / "recipe.yaml", "checkpoint file", "resume from another checkpoint");
  if (with_model) s.model = read_model_files(dir, layout);
  // The state of a split parameter stays split; under `keep` a ZeRO-3 rank's rows only.
  auto state = read_tp_lists(dir, "optimizer", layout, keep ? &*keep : nullptr, &s);
  if (layout.tp == 1) s.optimizer_state = std::move(state.front());
  else s.optimizer_shards = std::move(state);
  const SafetensorsFile rng = read_safetensors((dir / "rng.safetensors").string());
  const torch::Tensor* cpu = rng.find("cpu");
  if (!cpu) throw data_error("'" + (dir / "rng.safetensors").string() + "' has no 'cpu' generator state");
  s.rng.cpu = *cpu;
  if (const torch::Tensor* cuda = rng.find("cuda")) s.rng.cuda = *cuda;
  return s;
}

std::optional<RowShare> optimizer_row_share(const RankLayout& l, const OptimSettings& o) {
  if (l.zero != 3 || l.grid.ep() > 1) return std::nullopt;
  return RowShare{l.replica, l.replicas, static_cast<size_t>(l.at.tp), static_cast<size_t>(l.grid.tp()),
                  zero3_shard_blocks(o)};
}

}  // namespace gputrain

#include "data/preference_pairs.h"

#include <filesystem>
#include <fstream>

#include "util/atomic_file.h"
#include "util/crc32c.h"
#include "util/document_layout.h"
#include "util/error.h"
#include "util/ignore_index.h"
#include "util/text_file.h"

namespace gputrain {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "gputrain-preference-pairs";

// Writes `bytes` to `path` through a temporary name, so a reader never sees half a file.
void write_binary(const std::string& path, const void* data, size_t bytes) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
    if (!out) throw runtime_error("cannot write '" + tmp + "'\n    fix: check the disk has room and is writable");
  }
  fs::rename(tmp, path);
}

}  // namespace

nlohmann::json PreferenceSidecar::to_json() const {
  return {{"format", kFormat},        {"version", 1},
          {"tokenizer", tokenizer},   {"tokenizer_crc32c", tokenizer_crc32c},
          {"vocab_size", vocab_size}, {"pairs", pairs},
          {"tokens", tokens},         {"longest", longest},
          {"max_length", max_length}, {"max_prompt_length", max_prompt_length}};
}

PreferenceSidecar PreferenceSidecar::from_json(const nlohmann::json& j, const std::string& path) {
  if (!j.is_object() || j.value("format", "") != kFormat || j.value("version", 0) != 1)
    throw data_error("'" + path + "' is not the sidecar of preference pairs (format " + kFormat +
                     ", version 1)\n    fix: prepare the pairs with `gputrain data prepare --format preference`");
  try {
    PreferenceSidecar s;
    s.tokenizer = j.at("tokenizer").get<std::string>();
    s.tokenizer_crc32c = j.at("tokenizer_crc32c").get<std::string>();
    s.vocab_size = j.at("vocab_size").get<int64_t>();
    s.pairs = j.at("pairs").get<int64_t>();
    s.tokens = j.at("tokens").get<int64_t>();
    s.longest = j.at("longest").get<int64_t>();
    s.max_length = j.at("max_length").get<int64_t>();
    s.max_prompt_length = j.at("max_prompt_length").get<int64_t>();
    return s;
  } catch (const nlohmann::json::exception& e) {
    throw data_error("'" + path + "': " + e.what() +
                     "\n    fix: prepare the pairs again with `gputrain data prepare --format preference`");
  }
}

std::string pairs_path(const std::string& dir, const std::string& split, const std::string& ext) {
  return (fs::path(dir) / (split + "_pairs." + ext)).string();
}

PreferencePairWriter::PreferencePairWriter(std::string dir, std::string split, PreferenceSidecar info)
    : dir_(std::move(dir)), split_(std::move(split)), info_(std::move(info)) {}

void PreferencePairWriter::add(const std::vector<uint32_t>& prompt, const std::vector<uint32_t>& chosen,
                               const std::vector<uint32_t>& rejected) {
  for (const auto* part : {&prompt, &chosen, &rejected}) tokens_.insert(tokens_.end(), part->begin(), part->end());
  for (const auto* part : {&prompt, &chosen, &rejected}) lengths_.push_back(static_cast<int64_t>(part->size()));
  ++info_.pairs;
  info_.tokens += static_cast<int64_t>(prompt.size() + chosen.size() + rejected.size());
  info_.longest =
      std::max<int64_t>(info_.longest, static_cast<int64_t>(prompt.size() + std::max(chosen.size(), rejected.size())));
}

void PreferencePairWriter::finish() {
  write_binary(pairs_path(dir_, split_, "bin"), tokens_.data(), tokens_.size() * sizeof(uint32_t));
  write_binary(pairs_path(dir_, split_, "idx"), lengths_.data(), lengths_.size() * sizeof(int64_t));
  write_file_atomic(pairs_path(dir_, split_, "json"), info_.to_json().dump(2) + "\n");
}

PreferencePairs::PreferencePairs(const std::string& bin_path, const ModelSettings& m, const std::string& key,
                                 bool shared_prompt, bool pack)
    : path_(bin_path), shared_prompt_(shared_prompt), pack_(pack) {
  const std::string suffix = "_pairs.bin";
  if (!bin_path.ends_with(suffix))
    throw data_error(key + ".path '" + bin_path +
                     "' is not a <split>_pairs.bin file\n    fix: name the train_pairs.bin " +
                     "(or val_pairs.bin) `gputrain data prepare --format preference` wrote");
  const std::string stem = bin_path.substr(0, bin_path.size() - 4);  // ".../train_pairs"
  const std::string fix = "prepare the pairs again with `gputrain data prepare --format preference`";
  std::error_code ec;
  if (!fs::is_regular_file(bin_path, ec))
    throw data_error(key + ".path: '" + bin_path + "' does not exist\n    fix: prepare the pairs with `gputrain data " +
                     "prepare FILES --format preference -o DIR` and name DIR/train_pairs.bin (relative paths are " +
                     "relative to the recipe file)");
  info_ = PreferenceSidecar::from_json(parse_json_file(stem + ".json", "preference sidecar", fix), stem + ".json");
  tokens_ = std::make_unique<MappedFile>(bin_path);
  index_ = std::make_unique<MappedFile>(stem + ".idx");
  if (index_->size() != static_cast<size_t>(info_.pairs) * 3 * sizeof(int64_t) ||
      tokens_->size() != static_cast<size_t>(info_.tokens) * sizeof(uint32_t))
    throw data_error("'" + bin_path + "' and its index do not hold the " + std::to_string(info_.pairs) + " pairs and " +
                     std::to_string(info_.tokens) + " tokens its sidecar says (truncated?)\n    fix: " + fix);
  if (info_.pairs == 0)
    throw data_error("'" + bin_path + "' holds no pairs\n    fix: " + fix + " from rows that have some");
  const auto* lengths = reinterpret_cast<const int64_t*>(index_->data());
  offsets_.resize(static_cast<size_t>(info_.pairs) + 1);
  for (int64_t i = 0; i < info_.pairs; ++i)
    offsets_[static_cast<size_t>(i) + 1] =
        offsets_[static_cast<size_t>(i)] + lengths[3 * i] + lengths[3 * i + 1] + lengths[3 * i + 2];
  if (offsets_.back() != info_.tokens)
    throw data_error("'" + stem + ".idx' does not add up to the " + std::to_string(info_.tokens) + " tokens of '" +
                     bin_path + "'\n    fix: " + fix);
  if (info_.vocab_size > m.vocab_size)
    throw data_error(key + ": the pairs in '" + bin_path + "' use ids up to " + std::to_string(info_.vocab_size - 1) +
                     " (tokenizer " + info_.tokenizer + "), but model.vocab_size is " + std::to_string(m.vocab_size) +
                     "\n    fix: set model.vocab_size to at least " + std::to_string(info_.vocab_size));
  // A row holds prompt + chosen (+ rejected, the prompt shared): its tokens but the last are inputs.
  int64_t longest = info_.longest;
  if (shared_prompt_)
    for (int64_t i = 0; i < info_.pairs; ++i)
      longest = std::max(longest, offsets_[static_cast<size_t>(i) + 1] - offsets_[static_cast<size_t>(i)]);
  if (longest - 1 > m.seq_len)
    throw data_error(key + ": the longest " + (shared_prompt_ ? "pair" : "prompt + completion") + " in '" + bin_path +
                     "' is " + std::to_string(longest) + " tokens" +
                     (shared_prompt_ ? " (prompt, chosen and rejected in one row: " + key + ".shared_prompt)" : "") +
                     ", which needs model.seq_len " + std::to_string(longest - 1) + ", and it is " +
                     std::to_string(m.seq_len) + "\n    fix: raise model.seq_len, or prepare the pairs with a " +
                     "smaller --max-length" + (shared_prompt_ ? ", or set " + key + ".shared_prompt: false" : ""));
}

PreferencePair PreferencePairs::pair(int64_t i) const {
  const auto* lengths = reinterpret_cast<const int64_t*>(index_->data()) + 3 * i;
  const auto* t = reinterpret_cast<const uint32_t*>(tokens_->data()) + offsets_[static_cast<size_t>(i)];
  const auto p = static_cast<size_t>(lengths[0]), c = static_cast<size_t>(lengths[1]),
             r = static_cast<size_t>(lengths[2]);
  return {{t, p}, {t + p, c}, {t + p + c, r}};
}

std::string PreferencePairs::data_crc32c() const {
  Crc32c crc;
  crc.update(tokens_->data(), tokens_->size());
  crc.update(index_->data(), index_->size());
  return crc.hex();
}

int64_t PreferencePairs::fill_window(uint64_t key, int64_t len, int64_t* out) const {
  const PreferencePair p = pair(static_cast<int64_t>(key));
  int64_t n = 0;
  for (auto part : {p.prompt, p.chosen})
    for (uint32_t id : part)
      if (n < len) out[n++] = id;
  return n;
}

std::string PreferencePairs::describe() const {
  return "preference pairs " + path_ + " (" + std::to_string(info_.pairs) + " pairs, longest " +
         std::to_string(info_.longest) + " tokens, tokenizer " + info_.tokenizer + ")";
}

namespace {

// Where target row j's sequence sits: input row `row`, from position `offset` (its prompt's first
// token; a shared prompt's two target rows sit at the same place).
struct Place {
  int64_t row = 0, offset = 0;
};

// The tokens target row j's sequence takes in an input row (a shared prompt's pair: all three parts).
int64_t unit_length(const PreferencePair& p, bool shared, bool rejected) {
  const auto n = static_cast<int64_t>(p.prompt.size());
  if (shared) return n + static_cast<int64_t>(p.chosen.size() + p.rejected.size());
  return n + static_cast<int64_t>(rejected ? p.rejected.size() : p.chosen.size());
}

// Each of the 2P target rows' places: a row each (shared: a row a pair), or under `pack` one after
// another in rows of T tokens, a sequence going to the next row when it does not fit the current
// one's rest (one of T + 1 tokens, whose last is only a target, only ever alone). Returns the rows.
int64_t place_sequences(const std::vector<PreferencePair>& pairs, bool shared, bool pack, int64_t T,
                        std::vector<Place>& places) {
  const auto P = static_cast<int64_t>(pairs.size());
  places.assign(static_cast<size_t>(2 * P), Place{});
  int64_t row = -1, used = T;
  for (int64_t j = 0; j < (shared ? P : 2 * P); ++j) {
    const int64_t length = unit_length(pairs[static_cast<size_t>(j % P)], shared, j >= P);
    if (!pack || used + length > T) ++row, used = 0;
    places[static_cast<size_t>(j)] = {row, used};
    if (shared) places[static_cast<size_t>(P + j)] = {row, used};
    used += length;
  }
  return row + 1;
}

// TRL's layout: target row j (the chosen of pair j, then the rejected of pair j - P) reads
// prompt + completion. `positions` (packed rows) get each token's place in its sequence.
void sequence_unit(Batch& b, const PreferencePair& p, int64_t j, int64_t P, int64_t T, const Place& at,
                   int64_t* positions) {
  int64_t* x = b.input.data_ptr<int64_t>() + at.row * T;
  int64_t* y = b.target.data_ptr<int64_t>() + j * T;
  std::span<const uint32_t> completion = j < P ? p.chosen : p.rejected;
  const auto prompt = static_cast<int64_t>(p.prompt.size());
  const int64_t len = prompt + static_cast<int64_t>(completion.size());
  b.lengths.data_ptr<int64_t>()[j] = len;
  auto token = [&](int64_t t) -> int64_t { return t < prompt ? p.prompt[t] : completion[t - prompt]; };
  for (int64_t t = 0; t < len && at.offset + t < T; ++t) {
    x[at.offset + t] = token(t);
    if (positions) positions[at.row * T + at.offset + t] = t;
  }
  // Position t predicts token t + 1; only completion tokens are targets.
  for (int64_t t = std::max<int64_t>(prompt - 1, 0); t + 1 < len && at.offset + t < T; ++t) {
    y[at.offset + t] = token(t + 1);
    b.target_count += 1;
  }
}

// The shared prompt's layout: prompt, chosen, rejected from at.offset; target rows i and P + i.
void shared_unit(Batch& b, const PreferencePair& p, int64_t i, int64_t P, int64_t T, const Place& at,
                 int64_t* positions, int64_t* branches) {
  int64_t* x = b.input.data_ptr<int64_t>() + at.row * T;
  int64_t* chosen_y = b.target.data_ptr<int64_t>() + i * T;
  int64_t* rejected_y = b.target.data_ptr<int64_t>() + (P + i) * T;
  const auto n = static_cast<int64_t>(p.prompt.size()), c = static_cast<int64_t>(p.chosen.size()),
             r = static_cast<int64_t>(p.rejected.size());
  b.lengths.data_ptr<int64_t>()[i] = n + c;
  b.lengths.data_ptr<int64_t>()[P + i] = n + r;
  int64_t t = at.offset;  // (a row of T + 1 tokens: the last is only a target)
  auto put = [&](std::span<const uint32_t> tokens, int64_t first_position, int64_t branch) {
    for (size_t k = 0; k < tokens.size(); ++k, ++t)
      if (t < T)
        x[t] = tokens[k], positions[at.row * T + t] = first_position + static_cast<int64_t>(k),
        branches[at.row * T + t] = branch;
  };
  put(p.prompt, 0, 0);
  put(p.chosen, n, 1);
  put(p.rejected, n, 2);
  // Completion token k is predicted where the token before it in its own branch sits: the prompt's
  // last token for the first of each (none without a prompt).
  auto predict = [&](int64_t* y, int64_t first, int64_t count, std::span<const uint32_t> tokens) {
    for (int64_t k = n > 0 ? 0 : 1; k < count; ++k) {
      const int64_t where = at.offset + (k == 0 ? n - 1 : first + k - 1);
      if (where >= T) break;
      y[where] = tokens[static_cast<size_t>(k)];
      b.target_count += 1;
    }
  };
  predict(chosen_y, n, c, p.chosen);
  predict(rejected_y, n + c, r, p.rejected);
}

}  // namespace

Batch preference_batch(const PreferencePairs& pairs, std::span<const uint64_t> keys, int64_t T,
                       torch::TensorOptions options) {
  const auto P = static_cast<int64_t>(keys.size());
  const bool shared = pairs.shared_prompt(), pack = pairs.packed();
  std::vector<PreferencePair> held;
  for (uint64_t k : keys) held.push_back(pairs.pair(static_cast<int64_t>(k)));
  std::vector<Place> places;
  const int64_t rows = place_sequences(held, shared, pack, T, places);
  Batch b;
  b.input = torch::zeros({rows, T}, options);
  b.target = torch::full({2 * P, T}, kIgnoreIndex, options);
  b.pairs = P;
  b.pair_source = &pairs;
  b.pair_keys = torch::empty({P}, torch::kLong);
  std::copy(keys.begin(), keys.end(), b.pair_keys.data_ptr<int64_t>());
  b.lengths = torch::zeros({2 * P}, torch::kLong);
  b.target_rows = torch::empty({2 * P}, torch::kLong);
  b.target_offsets = torch::empty({2 * P}, torch::kLong);
  std::vector<int64_t> end(static_cast<size_t>(rows), 0);  // each row's tokens in use
  for (int64_t j = 0; j < 2 * P; ++j) {
    const Place& at = places[static_cast<size_t>(j)];
    b.target_rows.data_ptr<int64_t>()[j] = at.row;
    b.target_offsets.data_ptr<int64_t>()[j] = at.offset;
    int64_t& used = end[static_cast<size_t>(at.row)];
    used = std::max(used, std::min(T, at.offset + unit_length(held[static_cast<size_t>(j % P)], shared, j >= P)));
  }
  // Positions where a row holds more than one sequence (a shared prompt's branches, packed pairs):
  // each sequence its own document, the padding after a row's last one more.
  torch::Tensor positions, branches;
  if (shared || pack) positions = torch::zeros({rows, T}, options);
  if (shared) branches = torch::zeros({rows, T}, options);
  for (int64_t j = 0; j < (shared ? P : 2 * P); ++j) {
    const PreferencePair& p = held[static_cast<size_t>(j % P)];
    const Place& at = places[static_cast<size_t>(j)];
    if (shared) shared_unit(b, p, j, P, T, at, positions.data_ptr<int64_t>(), branches.data_ptr<int64_t>());
    else sequence_unit(b, p, j, P, T, at, pack ? positions.data_ptr<int64_t>() : nullptr);
  }
  if (positions.defined()) {
    int64_t* pos = positions.data_ptr<int64_t>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t t = end[static_cast<size_t>(r)]; t < T; ++t) pos[r * T + t] = t - end[static_cast<size_t>(r)];
    b.token_layout = document_layout(positions);
    if (shared) b.token_layout.branches = branches;
  }
  return b;
}

}  // namespace gputrain

#include "data/token_dataset.h"

#include <endian.h>
#include <glob.h>

#include <cstring>
#include <filesystem>

#include "data/token_shard.h"
#include "util/error.h"
#include "util/paths.h"

namespace gputrain {
namespace {

namespace fs = std::filesystem;

std::string fix(const std::string& f) { return "\n    fix: " + f; }

uint32_t id_at(const uint8_t* p, int64_t width, int64_t i) {
  if (width == 1) return p[i];
  if (width == 2) return static_cast<uint32_t>(p[2 * i]) | static_cast<uint32_t>(p[2 * i + 1]) << 8;
  uint32_t v;
  std::memcpy(&v, p + 4 * i, 4);
  return le32toh(v);
}

}  // namespace

std::vector<std::string> expand_data_paths(const std::vector<std::string>& paths, const std::string& key) {
  std::vector<std::string> out;
  for (const auto& p : paths) {
    if (!is_glob_pattern(p)) {
      out.push_back(p);
      continue;
    }
    glob_t g{};
    const int rc = ::glob(p.c_str(), 0, nullptr, &g);  // results come sorted
    if (rc == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i)
        if (!fs::is_directory(g.gl_pathv[i])) out.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
    if (rc == GLOB_NOMATCH || out.empty()) {
      // A missing directory is usually shards not prepared yet (a recipe's header says how).
      const fs::path dir = fs::path(p).parent_path();
      std::error_code ec;
      if (!dir.empty() && !is_glob_pattern(dir.string()) && !fs::exists(dir, ec))
        throw data_error(key + ".path: the pattern '" + p + "' matches no files: the directory '" + dir.string() +
                         "' does not exist" +
                         fix("make the shards first with `gputrain data prepare <text files> -o " + dir.string() +
                             "` (a recipe's header comment may give the full command), or correct the path"));
      throw data_error(key + ".path: the pattern '" + p + "' matches no files" +
                       fix("check the directory and pattern, e.g. data/train_*.bin"));
    }
    if (rc != 0 && rc != GLOB_NOMATCH) throw data_error(key + ".path: cannot expand '" + p + "'");
  }
  return out;
}

TokenDataset::TokenDataset(const DataSourceSettings& d, int64_t model_vocab_size, const std::string& key)
    : vocab_size_(model_vocab_size), key_(key) {
  const bool text = d.format == DataFormat::kText;
  int64_t sidecar_vocab = 0;
  std::string vocab_from;
  for (const auto& path : expand_data_paths(d.paths, key)) {
    std::error_code ec;
    if (fs::is_directory(path, ec))
      throw data_error(key + ".path: '" + path + "' is a directory, not a data file" +
                       fix("name the files, e.g. " + (fs::path(path) / "train_*.bin").string()));
    TokenShard s;
    s.file = std::make_unique<MappedFile>(path);  // throws for a missing or unreadable file
    const size_t size = s.file->size();
    if (size == 0)
      throw data_error("data file '" + path + "' is empty" + fix("re-create it, or remove it from " + key + ".path"));
    const std::optional<ShardInfo> info = text ? std::nullopt : read_sidecar(path);
    if (text) {
      s.width = 1;
    } else if (auto h = parse_llmc_header(s.file->data(), size, path)) {
      if (d.dtype != TokenDtype::kAuto && d.dtype != h->dtype)
        throw data_error(key + ".dtype is " + dtype_name(d.dtype) + " but '" + path + "' is an llm.c shard of " +
                         dtype_name(h->dtype) + " ids" + fix("set " + key + ".dtype: auto (the header decides)"));
      s.width = dtype_width(h->dtype);
      s.header_bytes = kLlmcHeaderBytes;
      const auto expected = static_cast<size_t>(kLlmcHeaderBytes + h->tokens * s.width);
      if (size < expected)
        throw data_error("token shard '" + path + "' is truncated: its header declares " + std::to_string(h->tokens) +
                         " tokens (" + std::to_string(expected) + " bytes) but the file has " + std::to_string(size) +
                         " bytes" + fix("re-create or re-download the shard"));
      if (size > expected)
        throw data_error("token shard '" + path + "' has " + std::to_string(size - expected) + " bytes after the " +
                         std::to_string(h->tokens) + " tokens its header declares" +
                         fix("re-create the shard; it was not written by a matching writer"));
    } else {
      TokenDtype dtype = d.dtype;
      if (dtype == TokenDtype::kAuto && info) dtype = info->dtype;
      if (dtype == TokenDtype::kAuto)
        throw data_error(
            "cannot tell the token width of '" + path + "': it has no llm.c header and no .json sidecar" +
            fix("set " + key + ".dtype: uint16 (nanoGPT-style files, vocabularies up to 65536) or uint32"));
      if (info && info->dtype != dtype)
        throw data_error(key + ".dtype is " + std::string(dtype_name(dtype)) + " but the sidecar of '" + path +
                         "' says " + dtype_name(info->dtype) + fix("set " + key + ".dtype: auto"));
      s.width = dtype_width(dtype);
      if (size % static_cast<size_t>(s.width) != 0)
        throw data_error("data file '" + path + "' has " + std::to_string(size) + " bytes, not a multiple of " +
                         std::to_string(s.width) + " (one " + dtype_name(dtype) + " token)" +
                         fix("check " + key + ".dtype (uint16 or uint32) or the file"));
    }
    s.count = static_cast<int64_t>((size - static_cast<size_t>(s.header_bytes)) / static_cast<size_t>(s.width));
    s.tokens = s.file->data() + s.header_bytes;
    if (s.count == 0)
      throw data_error("token shard '" + path + "' holds no tokens" +
                       fix("re-create it, or remove it from " + key + ".path"));
    if (info) {
      if (info->tokens != s.count)
        throw data_error("token shard '" + path + "' holds " + std::to_string(s.count) + " tokens but its sidecar '" +
                         sidecar_path(path) + "' says " + std::to_string(info->tokens) + fix("re-create the shard"));
      if (info->vocab_size > sidecar_vocab) sidecar_vocab = info->vocab_size, vocab_from = path;
      // The same tokenizer file is the same tokenizer wherever it was read from: compare contents.
      const std::string identity =
          info->tokenizer_crc32c.empty() ? info->tokenizer : "crc32c:" + info->tokenizer_crc32c;
      if (!tokenizer_identity_.empty() && !identity.empty() && identity != tokenizer_identity_)
        throw data_error(key + ": '" + path + "' was made with tokenizer " + info->tokenizer + " but '" +
                         shards_.front().path() + "' with " + tokenizer_ + fix("use shards from one tokenizer"));
      if (tokenizer_.empty()) tokenizer_ = info->tokenizer, tokenizer_identity_ = identity;
      if (d.eot_token < 0 && info->eot_token >= 0) {
        if (eot_ && *eot_ != info->eot_token)
          throw data_error(key + ": the sidecars disagree on the end-of-document id (" + std::to_string(*eot_) +
                           " and " + std::to_string(info->eot_token) + " in '" + path + "')" +
                           fix("use shards from one tokenizer, or set " + key + ".eot_token"));
        eot_ = info->eot_token;
      }
    }
    if (info && info->loss_mask) {
      s.mask = std::make_unique<MappedFile>(mask_path(path));
      if (static_cast<int64_t>(s.mask->size()) != s.count)
        throw data_error("loss mask '" + s.mask->path() + "' has " + std::to_string(s.mask->size()) +
                         " bytes for the " + std::to_string(s.count) + " tokens of '" + path + "'" +
                         fix("re-create the shards with `gputrain data prepare`"));
    }
    if (!shards_.empty() && (s.mask != nullptr) != has_mask_)
      throw data_error(key + ": '" + path + "' " + (s.mask ? "has" : "has no") + " loss mask but '" +
                       shards_.front().path() + "' " + (has_mask_ ? "has" : "has no") +
                       fix("use chat shards (data prepare --format chat) or plain ones, not both"));
    has_mask_ = s.mask != nullptr;
    total_ += s.count;
    shards_.push_back(std::move(s));
  }
  if (sidecar_vocab > vocab_size_)
    throw data_error(key + ": '" + vocab_from + "' was made with the " + tokenizer_ + " tokenizer, whose " +
                     std::to_string(sidecar_vocab) + " ids do not fit model.vocab_size (" +
                     std::to_string(vocab_size_) + ")" +
                     fix("set model.vocab_size to at least " + std::to_string(sidecar_vocab) +
                         " (GPT-2: 50304, a multiple of 64 for speed)"));
  if (d.eot_token >= 0) eot_ = d.eot_token;
}

void TokenDataset::read(int64_t si, int64_t offset, int64_t len, int64_t* out) const {
  const TokenShard& s = shards_[static_cast<size_t>(si)];
  const uint8_t* p = s.tokens + offset * s.width;
  for (int64_t i = 0; i < len; ++i) {
    const uint32_t v = id_at(p, s.width, i);
    // Checked per window instead of scanning every file at start.
    if (v >= static_cast<uint64_t>(vocab_size_))
      throw data_error("data file '" + s.path() + "': token id " + std::to_string(v) + " at token offset " +
                       std::to_string(offset + i) + " (byte " +
                       std::to_string(s.header_bytes + (offset + i) * s.width) + ") is >= model.vocab_size (" +
                       std::to_string(vocab_size_) + ")" +
                       fix("raise model.vocab_size, or check " + key_ + ".dtype and that the file is not corrupt"));
    out[i] = v;
  }
}

void TokenDataset::read_mask(int64_t si, int64_t offset, int64_t len, uint8_t* out) const {
  const TokenShard& s = shards_[static_cast<size_t>(si)];
  if (!s.mask) return void(std::memset(out, 1, static_cast<size_t>(len)));
  std::memcpy(out, s.mask->data() + offset, static_cast<size_t>(len));
}

std::vector<int64_t> TokenDataset::eot_positions(int64_t si) const {
  const TokenShard& s = shards_[static_cast<size_t>(si)];
  std::vector<int64_t> out;
  if (!eot_) return out;
  const auto eot = static_cast<uint32_t>(*eot_);
  for (int64_t i = 0; i < s.count; ++i)
    if (id_at(s.tokens, s.width, i) == eot) out.push_back(i);
  return out;
}

std::optional<ShardInfo> first_sidecar(const DataSourceSettings& d) {
  std::vector<std::string> patterns = d.paths;
  for (const auto& source : d.mixture) patterns.insert(patterns.end(), source.paths.begin(), source.paths.end());
  for (const std::string& pattern : patterns) {
    try {
      for (const std::string& path : expand_data_paths({pattern}, "data"))
        if (auto info = read_sidecar(path)) return info;
    } catch (const Error&) {
      // The data may be gone since training: the tokenizer is then unknown, not an error.
    }
  }
  return std::nullopt;
}

}  // namespace gputrain

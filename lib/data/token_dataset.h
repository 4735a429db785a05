// The token files of one data source (data.train or data.eval), memory-mapped
// and checked when opened: every path or glob resolves to files, headers
// are valid, sizes match, and dtype, vocabulary and end-of-document id agree
// with the recipe. Token ids themselves are checked as windows are read.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/settings.h"
#include "data/token_shard.h"
#include "util/mapped_file.h"

namespace gputrain {

struct TokenShard {
  std::unique_ptr<MappedFile> file;
  const uint8_t* tokens = nullptr;   // the first token id
  int64_t count = 0;                 // token ids in the shard
  int64_t width = 2;                 // bytes per id: 1 (text), 2 or 4
  int64_t header_bytes = 0;          // 1024 for llm.c shards, 0 for raw files
  std::unique_ptr<MappedFile> mask;  // the .mask file (chat data: 1 = the token takes loss), if any
  const std::string& path() const { return file->path(); }
};

// Expands glob patterns (sorted, so the order is stable) and keeps plain
// paths. Throws a data Error naming `key` for a pattern that matches nothing.
std::vector<std::string> expand_data_paths(const std::vector<std::string>& paths, const std::string& key);

// The sidecar of the first shard of `d` (its paths or mixture sources) that has one: what the data was
// prepared with. Data gone since (a run's recipe read later) gives nullopt, not an error.
std::optional<ShardInfo> first_sidecar(const DataSourceSettings& d);

class TokenDataset {
 public:
  // `key` names the recipe section in messages, e.g. "data.train".
  TokenDataset(const DataSourceSettings& d, int64_t model_vocab_size, const std::string& key);

  const std::vector<TokenShard>& shards() const { return shards_; }
  int64_t total_tokens() const { return total_; }
  std::optional<int64_t> eot_token() const { return eot_; }
  const std::string& tokenizer() const { return tokenizer_; }  // from the sidecars; "" if unknown

  // Copies ids [offset, offset + len) of shard `s` to `out`, throwing a data
  // Error naming the file and byte offset for an id >= the model's vocabulary.
  void read(int64_t s, int64_t offset, int64_t len, int64_t* out) const;
  // Whether the shards carry loss masks (all of them, or none).
  bool has_loss_mask() const { return has_mask_; }
  // Copies mask bytes [offset, offset + len) of shard `s` to `out` (1 where there is no mask).
  void read_mask(int64_t s, int64_t offset, int64_t len, uint8_t* out) const;
  // Offsets of the end-of-document tokens in shard `s`, where documents
  // start (a full scan of the shard: used only by packing: documents).
  std::vector<int64_t> eot_positions(int64_t s) const;

 private:
  std::vector<TokenShard> shards_;
  int64_t total_ = 0;
  int64_t vocab_size_;
  std::optional<int64_t> eot_;
  bool has_mask_ = false;
  std::string tokenizer_, tokenizer_identity_;
  std::string key_;
};

}  // namespace gputrain

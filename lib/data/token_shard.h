// On-disk token shards: llm.c's format (a 256 x int32 little-endian header
// with magic, version and token count, then the token ids), which is what
// `gputrain data prepare` writes, plus a JSON sidecar next to each shard
// ("train_000000.bin" -> "train_000000.json") describing how it was made.
// Raw headerless files (nanoGPT's train.bin) are read too (token_dataset.h).
#pragma once
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "config/settings.h"

namespace gputrain {

// llm.c: GPT-2 shards hold uint16 ids, Llama-3 shards uint32 ids.
constexpr int32_t kLlmcMagicUint16 = 20240520, kLlmcVersionUint16 = 1;
constexpr int32_t kLlmcMagicUint32 = 20240801, kLlmcVersionUint32 = 7;
constexpr int64_t kLlmcHeaderInts = 256;
constexpr int64_t kLlmcHeaderBytes = kLlmcHeaderInts * 4;
constexpr int64_t kLlmcMaxTokens = (int64_t{1} << 31) - 1;  // the count is an int32

int64_t dtype_width(TokenDtype dtype);  // 2 or 4; 0 for kAuto, which must be resolved first
const char* dtype_name(TokenDtype dtype);

struct LlmcHeader {
  TokenDtype dtype;
  int64_t tokens;
};

// The header at the start of `data` if it carries an llm.c magic number;
// nullopt for a headerless file. Throws a data Error naming `path` for a
// known magic with an unknown version or a negative count.
std::optional<LlmcHeader> parse_llmc_header(const uint8_t* data, size_t size, const std::string& path);

// The sidecar: what `data prepare` knows about a shard.
struct ShardInfo {
  std::string tokenizer;         // bytes | gpt2 | the tokenizer file's path | "" (unknown)
  std::string tokenizer_kind;    // bytes | gpt2 | tokenizer.json | sentencepiece | "" (unknown)
  std::string tokenizer_crc32c;  // of the tokenizer file, "" for bytes and gpt2
  int64_t vocab_size = 0;        // 0 = unknown
  int64_t eot_token = -1;        // the id that starts each document (end-of-text or BOS), -1 = none
  int64_t bos_token = -1, eos_token = -1, pad_token = -1;  // the tokenizer's, -1 = none
  std::vector<uint32_t> document_before, document_after;   // the framing of every document (tokenizer.h)
  bool loss_mask = false;  // a .mask file beside the shard: one byte per token, 1 = the token takes loss
  TokenDtype dtype = TokenDtype::kUint16;
  int64_t tokens = 0;
  int64_t documents = 0;  // documents that start in this shard
  std::string split;      // train | val
};

std::string sidecar_path(const std::string& shard_path);
std::string mask_path(const std::string& shard_path);  // "train_000000.bin" -> "train_000000.mask"
// Reads the sidecar of `shard_path` if there is one; throws a data Error for
// one that exists but is malformed.
std::optional<ShardInfo> read_sidecar(const std::string& shard_path);

// Writes one shard: tokens go to "<path>.partial" and the file is renamed
// into place, header count filled in, only by finish(); a run that stops
// early leaves no shard that looks complete. The sidecar is written last.
class ShardWriter {
 public:
  ShardWriter(std::string path, ShardInfo info);
  ~ShardWriter();  // without finish(): removes the partial file
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  void append(std::span<const uint32_t> ids);
  // With ShardInfo::loss_mask: each id's mask byte (1 = takes loss), as many as ids.
  void append(std::span<const uint32_t> ids, std::span<const uint8_t> mask);
  void add_document() { ++info_.documents; }
  int64_t tokens() const { return info_.tokens; }
  const std::string& path() const { return path_; }
  void finish();

 private:
  std::string path_, partial_, mask_partial_;
  ShardInfo info_;
  std::FILE* f_ = nullptr;
  std::FILE* mask_ = nullptr;
  std::vector<uint8_t> buf_;
};

}  // namespace gputrain

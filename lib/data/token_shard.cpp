#include "data/token_shard.h"

#include <endian.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "util/atomic_file.h"
#include "util/error.h"

namespace gputrain {
namespace fs = std::filesystem;

int64_t dtype_width(TokenDtype dtype) {
  return dtype == TokenDtype::kUint32 ? 4 : dtype == TokenDtype::kUint16 ? 2 : 0;
}

const char* dtype_name(TokenDtype dtype) {
  switch (dtype) {
    case TokenDtype::kUint16:
      return "uint16";
    case TokenDtype::kUint32:
      return "uint32";
    case TokenDtype::kAuto:
      break;
  }
  return "auto";
}

std::optional<LlmcHeader> parse_llmc_header(const uint8_t* data, size_t size, const std::string& path) {
  if (size < 8) return std::nullopt;
  int32_t h[3] = {0, 0, 0};
  std::memcpy(h, data, std::min<size_t>(size, 12));
  for (auto& v : h) v = static_cast<int32_t>(le32toh(static_cast<uint32_t>(v)));
  LlmcHeader out;
  int32_t want_version;
  if (h[0] == kLlmcMagicUint16) out.dtype = TokenDtype::kUint16, want_version = kLlmcVersionUint16;
  else if (h[0] == kLlmcMagicUint32) out.dtype = TokenDtype::kUint32, want_version = kLlmcVersionUint32;
  else return std::nullopt;
  if (h[1] != want_version)
    throw data_error("token shard '" + path + "' has llm.c magic " + std::to_string(h[0]) + " but version " +
                     std::to_string(h[1]) + " (expected " + std::to_string(want_version) +
                     ")\n    fix: re-create the shard with `gputrain data prepare` or llm.c's current scripts");
  if (size < static_cast<size_t>(kLlmcHeaderBytes))
    throw data_error("token shard '" + path + "' is truncated: " + std::to_string(size) +
                     " bytes, less than its 1024-byte llm.c header\n    fix: re-create or re-download the shard");
  if (h[2] < 0)
    throw data_error("token shard '" + path +
                     "' has a negative token count in its header\n    fix: re-create the shard");
  out.tokens = h[2];
  return out;
}

std::string sidecar_path(const std::string& shard_path) {
  fs::path p(shard_path);
  if (p.extension() == ".bin") return p.replace_extension(".json").string();
  return shard_path + ".json";
}

std::string mask_path(const std::string& shard_path) {
  fs::path p(shard_path);
  if (p.extension() == ".bin") return p.replace_extension(".mask").string();
  return shard_path + ".mask";
}

std::optional<ShardInfo> read_sidecar(const std::string& shard_path) {
  const std::string path = sidecar_path(shard_path);
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  auto bad = [&](const std::string& why) {
    return data_error("shard description '" + path + "' " + why +
                      "\n    fix: re-create the shard with `gputrain data prepare`, or delete the .json file");
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    throw bad(std::string("is not valid JSON: ") + e.what());
  }
  if (!j.is_object() || j.value("format", "") != "gputrain-token-shard") return std::nullopt;  // someone else's JSON
  ShardInfo s;
  try {
    s.tokenizer = j.value("tokenizer", "");
    s.tokenizer_kind = j.value("tokenizer_kind", "");
    s.tokenizer_crc32c = j.value("tokenizer_crc32c", "");
    s.vocab_size = j.value("vocab_size", int64_t{0});
    s.eot_token = j.value("eot_token", int64_t{-1});
    s.bos_token = j.value("bos_token", int64_t{-1});
    s.eos_token = j.value("eos_token", int64_t{-1});
    s.pad_token = j.value("pad_token", int64_t{-1});
    s.document_before = j.value("document_before", std::vector<uint32_t>{});
    s.document_after = j.value("document_after", std::vector<uint32_t>{});
    s.loss_mask = j.value("loss_mask", false);
    const std::string dtype = j.value("dtype", "uint16");
    if (dtype != "uint16" && dtype != "uint32") throw bad("has dtype '" + dtype + "' (expected uint16 or uint32)");
    s.dtype = dtype == "uint16" ? TokenDtype::kUint16 : TokenDtype::kUint32;
    s.tokens = j.value("tokens", int64_t{0});
    s.documents = j.value("documents", int64_t{0});
    s.split = j.value("split", "");
  } catch (const nlohmann::json::exception& e) {
    throw bad(std::string("has a field of the wrong type: ") + e.what());
  }
  return s;
}

ShardWriter::ShardWriter(std::string path, ShardInfo info)
    : path_(std::move(path)), partial_(path_ + ".partial"), info_(std::move(info)) {
  info_.tokens = info_.documents = 0;
  f_ = std::fopen(partial_.c_str(), "wb");
  if (f_ == nullptr) throw data_error("cannot create '" + partial_ + "': " + std::strerror(errno));
  std::vector<uint8_t> zeros(kLlmcHeaderBytes, 0);  // the header is filled in by finish()
  if (std::fwrite(zeros.data(), 1, zeros.size(), f_) != zeros.size())
    throw data_error("cannot write '" + partial_ + "': " + std::strerror(errno));
  if (info_.loss_mask) {
    mask_partial_ = mask_path(path_) + ".partial";
    mask_ = std::fopen(mask_partial_.c_str(), "wb");
    if (mask_ == nullptr) throw data_error("cannot create '" + mask_partial_ + "': " + std::strerror(errno));
  }
}

ShardWriter::~ShardWriter() {
  if (f_ != nullptr) {
    std::fclose(f_);
    std::remove(partial_.c_str());
  }
  if (mask_ != nullptr) {
    std::fclose(mask_);
    std::remove(mask_partial_.c_str());
  }
}

void ShardWriter::append(std::span<const uint32_t> ids, std::span<const uint8_t> mask) {
  if (mask.size() != ids.size() || mask_ == nullptr)
    throw runtime_error("ShardWriter: a loss mask needs ShardInfo::loss_mask and one byte per id");
  if (std::fwrite(mask.data(), 1, mask.size(), mask_) != mask.size())
    throw data_error("cannot write '" + mask_partial_ + "': " + std::strerror(errno) + "\n    fix: free disk space");
  append(ids);
}

void ShardWriter::append(std::span<const uint32_t> ids) {
  const int64_t width = dtype_width(info_.dtype);
  if (info_.tokens + static_cast<int64_t>(ids.size()) > kLlmcMaxTokens)
    throw runtime_error("shard '" + path_ + "' would exceed llm.c's 2^31 - 1 tokens per shard");
  buf_.resize(ids.size() * width);
  uint8_t* p = buf_.data();
  for (uint32_t id : ids) {
    if (width == 2) {
      p[0] = static_cast<uint8_t>(id), p[1] = static_cast<uint8_t>(id >> 8), p += 2;
    } else {
      const uint32_t le = htole32(id);
      std::memcpy(p, &le, 4), p += 4;
    }
  }
  if (std::fwrite(buf_.data(), 1, buf_.size(), f_) != buf_.size())
    throw data_error("cannot write '" + partial_ + "': " + std::strerror(errno) + "\n    fix: free disk space");
  info_.tokens += static_cast<int64_t>(ids.size());
}

void ShardWriter::finish() {
  int32_t header[kLlmcHeaderInts] = {};
  const bool u16 = info_.dtype == TokenDtype::kUint16;
  header[0] = static_cast<int32_t>(htole32(u16 ? kLlmcMagicUint16 : kLlmcMagicUint32));
  header[1] = static_cast<int32_t>(htole32(u16 ? kLlmcVersionUint16 : kLlmcVersionUint32));
  header[2] = static_cast<int32_t>(htole32(static_cast<uint32_t>(info_.tokens)));
  const bool ok = std::fseek(f_, 0, SEEK_SET) == 0 && std::fwrite(header, 1, sizeof(header), f_) == sizeof(header) &&
                  std::fflush(f_) == 0;
  const int closed = std::fclose(f_);
  f_ = nullptr;
  if (!ok || closed != 0) {
    std::remove(partial_.c_str());
    throw data_error("cannot write '" + partial_ + "': " + std::strerror(errno) + "\n    fix: free disk space");
  }
  std::error_code ec;
  if (mask_ != nullptr) {  // the mask first: a shard that looks complete has its mask
    const bool mask_ok = std::fflush(mask_) == 0;
    const int mask_closed = std::fclose(mask_);
    mask_ = nullptr;
    if (!mask_ok || mask_closed != 0) {
      std::remove(mask_partial_.c_str());
      throw data_error("cannot write '" + mask_partial_ + "': " + std::strerror(errno) + "\n    fix: free disk space");
    }
    fs::rename(mask_partial_, mask_path(path_), ec);
    if (ec) throw data_error("cannot rename '" + mask_partial_ + "': " + ec.message());
  }
  fs::rename(partial_, path_, ec);
  if (ec) throw data_error("cannot rename '" + partial_ + "' to '" + path_ + "': " + ec.message());
  nlohmann::ordered_json j;
  j["format"] = "gputrain-token-shard";
  j["header"] = "llm.c";
  j["tokenizer"] = info_.tokenizer;
  j["tokenizer_kind"] = info_.tokenizer_kind;
  if (!info_.tokenizer_crc32c.empty()) j["tokenizer_crc32c"] = info_.tokenizer_crc32c;
  j["vocab_size"] = info_.vocab_size;
  j["eot_token"] = info_.eot_token;
  j["bos_token"] = info_.bos_token;
  j["eos_token"] = info_.eos_token;
  j["pad_token"] = info_.pad_token;
  j["document_before"] = info_.document_before;
  j["document_after"] = info_.document_after;
  if (info_.loss_mask) j["loss_mask"] = true;
  j["dtype"] = dtype_name(info_.dtype);
  j["tokens"] = info_.tokens;
  j["documents"] = info_.documents;
  j["split"] = info_.split;
  write_file_atomic(sidecar_path(path_), j.dump(2) + "\n");
}

}  // namespace gputrain

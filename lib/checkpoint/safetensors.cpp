#include "checkpoint/safetensors.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "util/crc32c.h"
#include "util/error.h"
#include "util/failpoint.h"
#include "util/fsync.h"
#include "util/mapped_file.h"
#include "util/read_only_file.h"

namespace gputrain {
namespace {

using json = nlohmann::ordered_json;

const std::vector<std::pair<std::string, at::ScalarType>>& dtype_table() {
  static const std::vector<std::pair<std::string, at::ScalarType>> t = {
      {"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf}, {"BF16", at::kBFloat16}, {"I64", at::kLong},
      {"I32", at::kInt},    {"I16", at::kShort}, {"I8", at::kChar},  {"U8", at::kByte},       {"BOOL", at::kBool}};
  return t;
}

// POSIX file writing with errors that name the file.
class OutFile {
 public:
  explicit OutFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot create");
  }
  ~OutFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  void write(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) fail("cannot write");
      crc_.update(p, static_cast<size_t>(w));
      bytes_ += static_cast<uint64_t>(w);
      p += w;
      n -= static_cast<size_t>(w);
    }
  }
  WrittenFile written() const { return {bytes_, crc_.value()}; }
  void sync_and_close() {
    if (::fsync(fd_) != 0) fail("cannot fsync");
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("cannot close");
  }

 private:
  [[noreturn]] void fail(const char* what) {
    throw runtime_error(std::string(what) + " '" + path_ + "': " + std::strerror(errno));
  }
  std::string path_;
  int fd_ = -1;
  Crc32c crc_;
  uint64_t bytes_ = 0;
};

}  // namespace

std::string safetensors_dtype(torch::ScalarType t) {
  for (const auto& [name, type] : dtype_table())
    if (type == t) return name;
  throw runtime_error(std::string("safetensors: no dtype for ") + c10::toString(t));
}

const torch::Tensor* SafetensorsFile::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t.tensor;
  return nullptr;
}

WrittenFile write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<at::Tensor> bytes;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__" || !names.insert(name).second)
      throw runtime_error("safetensors: tensor name '" + name + "' is reserved or repeated (writing " + path + ")");
    at::Tensor c = t.detach().to(at::kCPU).contiguous();
    const uint64_t n = c.nbytes();
    header[name] = {{"dtype", safetensors_dtype(c.scalar_type())},
                    {"shape", c.sizes().vec()},
                    {"data_offsets", {offset, offset + n}}};
    offset += n;
    bytes.push_back(std::move(c));
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // the data starts 8-byte aligned, as the reference writer does
  const std::filesystem::path target(path);
  const std::string tmp = path + ".tmp";
  WrittenFile written;
  {
    OutFile f(tmp);
    uint64_t len = h.size();
    unsigned char le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(len >> (8 * i));
    f.write(le, 8);
    f.write(h.data(), h.size());
    for (size_t i = 0; i < bytes.size(); ++i) {
      f.write(bytes[i].data_ptr(), bytes[i].nbytes());
      if (i == 0 && bytes.size() > 1) failpoint("safetensors.mid_file");  // tests kill a writer here
    }
    f.sync_and_close();
    written = f.written();
  }
  std::error_code ec;
  std::filesystem::rename(tmp, target, ec);
  if (ec) throw runtime_error("cannot rename '" + tmp + "' to '" + path + "': " + ec.message());
  fsync_directory(target.parent_path());
  return written;
}

const SafetensorsEntry* SafetensorsHeader::find(const std::string& name) const {
  for (const auto& e : entries)
    if (e.name == name) return &e;
  return nullptr;
}

namespace {

Error not_safetensors(const std::string& path, const std::string& what) {
  return data_error("'" + path + "' is not a valid safetensors file: " + what +
                    "\n    fix: the file is truncated or corrupt; use another copy or checkpoint");
}

// The header's JSON (`text`, of a file of `file_size` bytes) checked and listed: known dtypes, each
// byte range matching its shape, the ranges tiling the data exactly once.
SafetensorsHeader parse_header(const std::string& path, const char* text, uint64_t len, uint64_t file_size) {
  auto bad = [&](const std::string& what) { return not_safetensors(path, what); };
  json header;
  try {
    header = json::parse(text, text + len);
  } catch (const json::exception& e) {
    throw bad(std::string("its header is not JSON (") + e.what() + ")");
  }
  if (!header.is_object()) throw bad("its header is not a JSON object");
  const uint64_t data_start = 8 + len, data_size = file_size - data_start;
  SafetensorsHeader out;
  for (const auto& [name, entry] : header.items()) {
    try {
      if (name == "__metadata__") {
        for (const auto& [k, v] : entry.items()) out.metadata[k] = v.get<std::string>();
        continue;
      }
      const std::string dtype = entry.at("dtype").get<std::string>();
      const auto shape = entry.at("shape").get<std::vector<int64_t>>();
      const auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
      auto it =
          std::find_if(dtype_table().begin(), dtype_table().end(), [&](const auto& d) { return d.first == dtype; });
      if (it == dtype_table().end())
        throw bad("tensor '" + name + "' has dtype " + dtype + ", which gputrain does not read");
      if (offsets.size() != 2 || offsets[0] > offsets[1]) throw bad("tensor '" + name + "' has a malformed byte range");
      if (offsets[1] > data_size)
        throw bad("tensor '" + name + "' ends at data byte " + std::to_string(offsets[1]) + ", past the file's " +
                  std::to_string(data_size) + " (truncated?)");
      uint64_t numel = 1;
      for (int64_t s : shape) {
        if (s < 0) throw bad("tensor '" + name + "' has a negative dimension");
        numel *= static_cast<uint64_t>(s);
      }
      const uint64_t expected = numel * c10::elementSize(it->second);
      if (offsets[1] - offsets[0] != expected)
        throw bad("tensor '" + name + "' has " + std::to_string(offsets[1] - offsets[0]) +
                  " bytes but its shape needs " + std::to_string(expected));
      out.entries.push_back({name, it->second, shape, data_start + offsets[0], expected});
    } catch (const json::exception& e) {
      throw bad("the header entry of '" + name + "' is malformed (" + e.what() + ")");
    }
  }
  // The ranges must tile the data exactly: no holes, no overlaps, nothing left over.
  std::stable_sort(out.entries.begin(), out.entries.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return std::pair(a.offset, a.bytes) < std::pair(b.offset, b.bytes);
  });
  uint64_t end = data_start;
  for (const auto& e : out.entries) {
    if (e.offset != end)
      throw bad("tensor '" + e.name + "' starts at byte " + std::to_string(e.offset - data_start) + ", not " +
                std::to_string(end - data_start) + " (a hole or an overlap)");
    end = e.offset + e.bytes;
  }
  if (end != file_size) throw bad(std::to_string(file_size - end) + " bytes after the last tensor");
  return out;
}

void check_holds_length(const std::string& path, uint64_t size) {
  if (size < 8)
    throw not_safetensors(path, "it has " + std::to_string(size) + " bytes, fewer than the 8-byte header length");
}

// The header's length from a file's first 8 bytes (little-endian), checked against its `size`.
uint64_t header_length(const std::string& path, const uint8_t* first8, uint64_t size) {
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | first8[i];
  if (len > size - 8)
    throw not_safetensors(
        path, "the header claims " + std::to_string(len) + " bytes but the file has " + std::to_string(size));
  return len;
}

}  // namespace

SafetensorsHeader read_safetensors_header(const std::string& path) {
  const ReadOnlyFile file(path);
  check_holds_length(path, file.size());
  uint8_t first8[8];
  file.read(first8, 8, 0);
  const uint64_t len = header_length(path, first8, file.size());
  std::string text(len, '\0');
  file.read(text.data(), len, 8);
  return parse_header(path, text.data(), len, file.size());
}

SafetensorsFile read_safetensors(const std::string& path) {
  MappedFile file(path);
  check_holds_length(path, file.size());
  const uint64_t len = header_length(path, file.data(), file.size());
  const SafetensorsHeader header =
      parse_header(path, reinterpret_cast<const char*>(file.data()) + 8, len, static_cast<uint64_t>(file.size()));
  SafetensorsFile out;
  out.metadata = header.metadata;
  for (const auto& e : header.entries) {
    at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.dtype));
    if (e.bytes > 0) std::memcpy(t.data_ptr(), file.data() + e.offset, e.bytes);
    out.tensors.push_back({e.name, t});
  }
  return out;
}

}  // namespace gputrain

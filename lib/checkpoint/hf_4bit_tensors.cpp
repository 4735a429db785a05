#include "checkpoint/hf_4bit_tensors.h"

#include <nlohmann/json.hpp>

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <set>

#include "util/error.h"
#include "util/tensor_text.h"

namespace gputrain {
namespace {

constexpr const char* kQuantState = ".quant_state.bitsandbytes__";
constexpr const char* kStatistics[] = {".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map"};
constexpr const char* kFix =
    "use the folder save_pretrained wrote for the 4-bit model, or the unquantized model's folder";

[[noreturn]] void refuse(const std::string& file, const std::string& tensor, const std::string& what) {
  throw data_error("'" + file + "': " + tensor + " " + what + "\n    fix: " + kFix);
}

using Located = Stored4bitTensor::Located;

void read_entry(const Located& at, const std::vector<std::unique_ptr<ReadOnlyFile>>& readers, void* to,
                uint64_t first_byte, uint64_t bytes) {
  readers[static_cast<size_t>(at.file)]->read(to, bytes, at.entry.offset + first_byte);
}

torch::Tensor read_whole(const Located& at, const std::vector<std::unique_ptr<ReadOnlyFile>>& readers) {
  torch::Tensor t = torch::empty(at.entry.shape, torch::TensorOptions().dtype(at.entry.dtype));
  read_entry(at, readers, t.data_ptr(), 0, at.entry.bytes);
  return t;
}

// Elements [first, first + count) of a 1-D entry of `dtype`.
torch::Tensor read_range(const Located& at, const std::vector<std::unique_ptr<ReadOnlyFile>>& readers, int64_t first,
                         int64_t count) {
  torch::Tensor t = torch::empty({count}, torch::TensorOptions().dtype(at.entry.dtype));
  const auto es = static_cast<uint64_t>(c10::elementSize(at.entry.dtype));
  read_entry(at, readers, t.data_ptr(), static_cast<uint64_t>(first) * es, static_cast<uint64_t>(count) * es);
  return t;
}

torch::ScalarType dtype_named(const std::string& name, const std::string& file, const std::string& tensor) {
  const auto it = float_dtypes_by_name().find(name);
  if (it == float_dtypes_by_name().end())
    refuse(file, tensor, "has a quant_state of dtype '" + name + "', not float32/bfloat16/float16");
  return it->second;
}

// The quant_state JSON into `layout` (shape, dtype, type, block size, nesting), checked.
void read_quant_state(const Located& at, const std::vector<std::unique_ptr<ReadOnlyFile>>& readers,
                      const std::string& suffix_type, Stored4bitTensor& t) {
  const std::string& file = readers[static_cast<size_t>(at.file)]->path();
  std::string text(at.entry.bytes, '\0');
  read_entry(at, readers, text.data(), 0, at.entry.bytes);
  Quantized4bit& q = t.layout;
  try {
    const nlohmann::json s = nlohmann::json::parse(text);
    const std::string type = s.at("quant_type").get<std::string>();
    if (type != suffix_type) refuse(file, at.entry.name, "names quant_type '" + type + "'");
    q.type = type == "fp4" ? Quant4Type::kFp4 : Quant4Type::kNf4;
    q.block_size = s.at("blocksize").get<int64_t>();
    q.dtype = dtype_named(s.at("dtype").get<std::string>(), file, at.entry.name);
    q.shape = s.at("shape").get<std::vector<int64_t>>();
    q.nested = s.contains("nested_offset");
    if (q.nested) {
      q.offset = s.at("nested_offset").get<float>();
      q.nested_block_size = s.value("nested_blocksize", int64_t{256});
    }
  } catch (const nlohmann::json::exception& e) {
    refuse(file, at.entry.name, std::string("is not bitsandbytes' quant_state JSON: ") + e.what());
  }
  if (!is_quant4_block_size(q.block_size))
    refuse(file, at.entry.name, "has block size " + std::to_string(q.block_size) + ", which bitsandbytes lacks");
  if (q.nested && !is_quant4_block_size(q.nested_block_size))
    refuse(file, at.entry.name, "has a nested block size of " + std::to_string(q.nested_block_size));
  for (int64_t d : q.shape)
    if (d < 0) refuse(file, at.entry.name, "has a negative dimension in its shape");
}

// Each statistic where it lies, of its expected dtype and size.
void check_statistics(Stored4bitTensor& t, const std::vector<HfWeightFile>& files) {
  const Quantized4bit& q = t.layout;
  const auto where = [&](const Located& at) { return files[static_cast<size_t>(at.file)].path; };
  const std::string state_file = where(t.quant_state);
  const auto need = [&](const Located& at, const char* suffix, torch::ScalarType dtype, int64_t numel) {
    const std::string name = t.name + suffix;
    if (at.file < 0) refuse(state_file, t.name, std::string("is stored in 4 bits without its ") + (suffix + 1));
    const int64_t got = c10::multiply_integers(at.entry.shape);
    if (at.entry.dtype != dtype || got != numel)
      refuse(where(at), name,
             "holds " + std::to_string(got) + " values of " + c10::toString(at.entry.dtype) +
                 " where bitsandbytes keeps " + std::to_string(numel) + " of " + c10::toString(dtype));
  };
  if (t.codes.file < 0) refuse(state_file, t.name, "has a quant_state but no codes");
  const int64_t code_bytes = (q.numel() + 1) / 2;
  if (t.codes.entry.bytes != static_cast<uint64_t>(code_bytes))
    refuse(where(t.codes), t.name,
           "holds " + std::to_string(t.codes.entry.bytes) + " bytes of codes where its quant_state's shape needs " +
               std::to_string(code_bytes));
  need(t.absmax, ".absmax", q.nested ? torch::kUInt8 : torch::kFloat, q.blocks());
  need(t.quant_map, ".quant_map", torch::kFloat, 16);
  if (q.nested) {
    need(t.nested_absmax, ".nested_absmax", torch::kFloat,
         (q.blocks() + q.nested_block_size - 1) / q.nested_block_size);
    need(t.nested_quant_map, ".nested_quant_map", torch::kFloat, 256);
  }
}

}  // namespace

std::vector<Stored4bitTensor> take_4bit_tensors(std::vector<HfWeightFile>& files,
                                                const std::vector<std::unique_ptr<ReadOnlyFile>>& readers) {
  // Every entry by name first: a weight's pieces may lie in several shards.
  std::map<std::string, Located> by_name;
  for (size_t f = 0; f < files.size(); ++f)
    for (const auto& e : files[f].header.entries) by_name[e.name] = {static_cast<int>(f), e};
  std::map<std::string, Stored4bitTensor> found;
  for (const auto& [name, at] : by_name) {
    const size_t s = name.find(kQuantState);
    if (s == std::string::npos) continue;
    Stored4bitTensor& t = found[name.substr(0, s)];
    t.name = name.substr(0, s);
    t.quant_state = at;
    const std::string type = name.substr(s + std::string(kQuantState).size());
    if (type != "nf4" && type != "fp4")
      refuse(files[static_cast<size_t>(at.file)].path, name,
             "is a quant_state of type '" + type + "' (nf4 or fp4 only)");
    read_quant_state(at, readers, type, t);
  }
  std::vector<Stored4bitTensor> out;
  for (auto& [weight, t] : found) {
    const auto find = [&](const std::string& suffix) {
      const auto it = by_name.find(weight + suffix);
      return it == by_name.end() ? Located{} : it->second;
    };
    t.codes = find("");
    t.absmax = find(kStatistics[0]);
    t.quant_map = find(kStatistics[1]);
    t.nested_absmax = find(kStatistics[2]);
    t.nested_quant_map = find(kStatistics[3]);
    check_statistics(t, files);
    const torch::Tensor map = read_whole(t.quant_map, readers);
    if (!at::equal(map, quant4_code(t.layout.type)))
      refuse(files[static_cast<size_t>(t.quant_map.file)].path, weight + ".quant_map",
             "is not bitsandbytes' " + quant4_type_name(t.layout.type) + " code");
    out.push_back(std::move(t));
  }
  // A statistic whose weight has no quant_state would read as an unknown tensor: say what it is.
  for (const auto& [name, at] : by_name)
    for (const char* suffix : kStatistics)
      if (name.ends_with(suffix) && !found.count(name.substr(0, name.size() - std::string(suffix).size())))
        refuse(files[static_cast<size_t>(at.file)].path, name,
               "is a bitsandbytes statistic, but its weight has no quant_state.bitsandbytes__nf4 (or __fp4)");
  // What is left reads as plain tensors.
  std::set<std::string> taken;
  for (const Stored4bitTensor& t : out)
    for (const Located* at : {&t.codes, &t.absmax, &t.quant_map, &t.nested_absmax, &t.nested_quant_map, &t.quant_state})
      if (at->file >= 0) taken.insert(at->entry.name);
  for (auto& f : files)
    std::erase_if(f.header.entries, [&](const SafetensorsEntry& e) { return taken.count(e.name) > 0; });
  return out;
}

Quantized4bit read_4bit(const Stored4bitTensor& t, const std::vector<std::unique_ptr<ReadOnlyFile>>& readers) {
  Quantized4bit q = t.layout;
  q.codes = read_whole(t.codes, readers).view(torch::kUInt8).reshape({-1, 1});
  q.absmax = read_whole(t.absmax, readers).reshape({-1});
  if (q.nested) {
    q.nested_absmax = read_whole(t.nested_absmax, readers).reshape({-1});
    q.nested_code = read_whole(t.nested_quant_map, readers).reshape({-1});
  }
  return q;
}

torch::Tensor read_4bit_rows(const Stored4bitTensor& t, const std::vector<std::unique_ptr<ReadOnlyFile>>& readers,
                             int64_t first, int64_t count) {
  const Quantized4bit& whole = t.layout;
  const int64_t n = whole.numel(), rows = whole.shape.empty() ? 1 : whole.shape[0];
  const int64_t cols = rows > 0 ? n / rows : 0;
  const int64_t e0 = first * cols, e1 = (first + count) * cols;
  if (count == 0 || cols == 0) return torch::empty({count, cols}, torch::TensorOptions().dtype(whole.dtype));
  // From a block that starts a nested group (so the nested absmax index alike), to the last block touched.
  const int64_t group = whole.block_size * (whole.nested ? whole.nested_block_size : 1);
  const int64_t s0 = e0 / group * group;
  const int64_t s1 = std::min(n, (e1 + whole.block_size - 1) / whole.block_size * whole.block_size);
  Quantized4bit q = whole;
  q.shape = {s1 - s0};
  const int64_t b0 = s0 / whole.block_size, b1 = (s1 + whole.block_size - 1) / whole.block_size;
  q.codes = torch::empty({(s1 - s0 + 1) / 2, 1}, torch::kUInt8);
  read_entry(t.codes, readers, q.codes.data_ptr(), static_cast<uint64_t>(s0 / 2),
             static_cast<uint64_t>(q.codes.numel()));
  q.absmax = read_range(t.absmax, readers, b0, b1 - b0);
  if (q.nested) {
    const int64_t g0 = b0 / whole.nested_block_size, g1 = (b1 + whole.nested_block_size - 1) / whole.nested_block_size;
    q.nested_absmax = read_range(t.nested_absmax, readers, g0, g1 - g0);
    q.nested_code = read_whole(t.nested_quant_map, readers).reshape({-1});
  }
  return dequantize_4bit(q, whole.dtype).narrow(0, e0 - s0, e1 - e0).view({count, cols});
}

uint64_t stored_4bit_bytes(const Stored4bitTensor& t) {
  uint64_t bytes = 0;
  for (const Located* at : {&t.codes, &t.absmax, &t.quant_map, &t.nested_absmax, &t.nested_quant_map, &t.quant_state})
    if (at->file >= 0) bytes += at->entry.bytes;
  return bytes;
}

}  // namespace gputrain

// A bitsandbytes 4-bit tensor as transformers' save_pretrained stores it (the codes, its statistics
// beside, the quant_state JSON as bytes), read back whole and by rows: any range of rows, across a
// double quantization group of 256 blocks, equals the whole tensor dequantized.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "checkpoint/hf_4bit_tensors.h"
#include "checkpoint/safetensors.h"
#include "test_util.h"

using namespace gputrain;
using namespace gputrain::test;
using Catch::Matchers::Contains;

namespace {

// `q` under `name` as bitsandbytes' QuantState.as_dict(packed=True) names its pieces.
std::vector<NamedTensor> as_stored(const std::string& name, const Quantized4bit& q) {
  nlohmann::json state = {
      {"quant_type", quant4_type_name(q.type)}, {"blocksize", q.block_size}, {"dtype", "bfloat16"}, {"shape", q.shape}};
  if (q.nested) state.update({{"nested_blocksize", 256}, {"nested_dtype", "float32"}, {"nested_offset", q.offset}});
  const std::string text = state.dump();
  torch::Tensor bytes = torch::empty({static_cast<int64_t>(text.size())}, torch::kUInt8);
  std::copy(text.begin(), text.end(), bytes.data_ptr<uint8_t>());
  std::vector<NamedTensor> out = {{name, q.codes},
                                  {name + ".absmax", q.absmax},
                                  {name + ".quant_map", quant4_code(q.type)},
                                  {name + ".quant_state.bitsandbytes__" + quant4_type_name(q.type), bytes}};
  if (q.nested) {
    out.push_back({name + ".nested_absmax", q.nested_absmax});
    out.push_back({name + ".nested_quant_map", q.nested_code});
  }
  return out;
}

struct Folder {
  std::vector<HfWeightFile> files;
  std::vector<std::unique_ptr<ReadOnlyFile>> readers;
};

Folder open_file(const std::string& path) {
  Folder f;
  f.files.push_back({path, read_safetensors_header(path)});
  f.readers.push_back(std::make_unique<ReadOnlyFile>(path));
  return f;
}

}  // namespace

TEST_CASE("hf 4-bit tensors: read whole and by rows as stored, the plain tensors left", "[qlora][checkpoint]") {
  TempDir dir;
  torch::manual_seed(3);
  // 300 x 96 in blocks of 64: 450 blocks, two double-quantization groups; 5 x 13 is odd, not nested.
  const torch::Tensor w = torch::randn({300, 96}).to(torch::kBFloat16);
  const torch::Tensor odd = torch::randn({5, 13}).to(torch::kBFloat16);
  const Quantized4bit qw = quantize_4bit(w, Quant4Type::kNf4, 64, true);
  const Quantized4bit qo = quantize_4bit(odd, Quant4Type::kFp4, 64, false);
  std::vector<NamedTensor> all = as_stored("a.weight", qw);
  for (auto& t : as_stored("b.weight", qo)) all.push_back(t);
  all.push_back({"norm.weight", torch::ones({96})});
  write_safetensors(dir.file("m.safetensors"), all);

  Folder f = open_file(dir.file("m.safetensors"));
  const std::vector<Stored4bitTensor> found = take_4bit_tensors(f.files, f.readers);
  REQUIRE(found.size() == 2);
  REQUIRE(f.files[0].header.entries.size() == 1);
  CHECK(f.files[0].header.entries[0].name == "norm.weight");
  const Stored4bitTensor& a = found[0].name == "a.weight" ? found[0] : found[1];
  const Stored4bitTensor& b = found[0].name == "a.weight" ? found[1] : found[0];
  CHECK(a.layout.shape == std::vector<int64_t>{300, 96});
  CHECK(a.layout.nested);
  CHECK(a.layout.offset == qw.offset);

  const Quantized4bit back = read_4bit(a, f.readers);
  CHECK(at::equal(back.codes, qw.codes));
  CHECK(at::equal(back.absmax, qw.absmax));
  CHECK(at::equal(back.nested_absmax, qw.nested_absmax));
  const torch::Tensor whole = dequantize_4bit(qw, torch::kBFloat16);
  CHECK(at::equal(dequantize_4bit(back, torch::kBFloat16), whole));
  // Row 170 holds element 16384, where the second group of 256 blocks starts.
  for (const auto& [first, count] : std::vector<std::pair<int64_t, int64_t>>{{0, 300}, {1, 1}, {170, 3}, {299, 1}}) {
    INFO(first << " + " << count);
    CHECK(at::equal(read_4bit_rows(a, f.readers, first, count), whole.narrow(0, first, count)));
  }
  CHECK(at::equal(read_4bit_rows(b, f.readers, 2, 2), dequantize_4bit(qo, torch::kBFloat16).narrow(0, 2, 2)));
}

TEST_CASE("hf 4-bit tensors: a missing statistic or one without its quant_state names the file and the tensor",
          "[qlora][checkpoint]") {
  TempDir dir;
  const Quantized4bit q = quantize_4bit(torch::randn({4, 64}), Quant4Type::kNf4, 64, true);
  const auto refused = [&](const std::string& drop, const std::string& words) {
    std::vector<NamedTensor> kept;
    for (auto& t : as_stored("x.weight", q))
      if (t.name != drop) kept.push_back(t);
    write_safetensors(dir.file("m.safetensors"), kept);
    Folder f = open_file(dir.file("m.safetensors"));
    CHECK_THROWS_WITH(take_4bit_tensors(f.files, f.readers),
                      Contains(dir.file("m.safetensors")) && Contains(words) && Contains("fix:"));
  };
  refused("x.weight.absmax", "x.weight is stored in 4 bits without its absmax");
  refused("x.weight.nested_quant_map", "without its nested_quant_map");
  refused("x.weight", "has a quant_state but no codes");
  refused("x.weight.quant_state.bitsandbytes__nf4", "x.weight.absmax is a bitsandbytes statistic");
}

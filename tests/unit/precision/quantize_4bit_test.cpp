// 4-bit quantization (precision/quantize_4bit.h) against bitsandbytes from PyPI: for shapes that are
// and are not a multiple of the block, bf16, fp16 and fp32 inputs, NF4 and FP4, single and double
// quantization, the codes, statistics and dequantized values are bit for bit its own.
#include <catch2/catch.hpp>

#include <cstring>
#include <sstream>

#include "checkpoint/safetensors.h"
#include "precision/quantize_4bit.h"
#include "test_util.h"

using namespace gputrain;
using namespace gputrain::test;

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, sep);) out.push_back(part);
  return out;
}

// Bitwise equality: dtype, shape and every byte (NaN-safe, and -0 is not 0).
bool same_bits(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const torch::Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.numel() * x.element_size()) == 0;
}

}  // namespace

TEST_CASE("quantize_4bit: codes, absmax, nested statistics and dequantized values are bitsandbytes' bit for bit",
          "[precision][quantize]") {
  TempDir dir;
  const std::string ref = dir.file("bnb.safetensors");
  const auto r = run_python({std::string(GPUTRAIN_SOURCE_DIR) + "/tests/reference/bnb_quantize_4bit.py", ref});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const SafetensorsFile file = read_safetensors(ref);
  const std::vector<std::string> cases = split(file.metadata.at("cases"), ',');
  REQUIRE(cases.size() >= 8);
  for (const std::string& entry : cases) {
    INFO("case " << entry);
    const std::vector<std::string> fields = split(entry, ':');  // name:quant_type:block_size
    REQUIRE(fields.size() == 3);
    const std::string& name = fields[0];
    auto get = [&](const std::string& part) -> const torch::Tensor& {
      const torch::Tensor* t = file.find(name + "." + part);
      REQUIRE(t);
      return *t;
    };
    const Quant4Type type = fields[1] == "fp4" ? Quant4Type::kFp4 : Quant4Type::kNf4;
    const bool nested = file.find(name + ".nested_absmax") != nullptr;
    const torch::Tensor& input = get("input");
    const int64_t block = std::stoll(fields[2]);
    const Quantized4bit q = quantize_4bit(input, type, block, nested);
    CHECK(same_bits(q.codes, get("codes")));
    CHECK(same_bits(q.absmax, get("absmax")));
    if (nested) {
      CHECK(same_bits(q.nested_absmax, get("nested_absmax")));
      CHECK(same_bits(q.nested_code, get("nested_code")));
      CHECK(same_bits(torch::tensor({q.offset}, torch::kFloat), get("offset")));
    }
    // Values, not bits: bitsandbytes' own AVX-512 and scalar paths disagree on the sign of FP4's zero.
    const torch::Tensor dequant = dequantize_4bit(q, input.scalar_type());
    CHECK(dequant.scalar_type() == get("dequant").scalar_type());
    CHECK(torch::equal(dequant, get("dequant")));
    CHECK(q.blocks() == (input.numel() + block - 1) / block);
  }
}

TEST_CASE("quantize_4bit: about 4.13 bits a weight with double quantization, and bad arguments refused",
          "[precision][quantize]") {
  const torch::Tensor w = torch::randn({4096, 1024}).to(torch::kBFloat16);
  const Quantized4bit plain = quantize_4bit(w, Quant4Type::kNf4, 64, false);
  const Quantized4bit dq = quantize_4bit(w, Quant4Type::kNf4, 64, true);
  // 4 bits + 32 / 64 (fp32 absmax) = 4.5; with double quantization 4 + 8 / 64 + 32 / (64 * 256) = 4.127.
  CHECK(8.0 * plain.storage_bytes() / w.numel() == Approx(4.5).margin(0.001));
  CHECK(8.0 * dq.storage_bytes() / w.numel() == Approx(4.127).margin(0.005));
  CHECK(plain.storage_bytes() == quant4_storage_bytes(w.numel(), 64, false));  // the plan's count
  CHECK(dq.storage_bytes() == quant4_storage_bytes(w.numel(), 64, true));
  const Quantized4bit odd = quantize_4bit(torch::randn({37, 29}), Quant4Type::kFp4, 128, true);
  CHECK(odd.storage_bytes() == quant4_storage_bytes(37 * 29, 128, true));
  CHECK_THROWS_WITH(quantize_4bit(w, Quant4Type::kNf4, 48, true), Catch::Contains("block size 48"));
  CHECK_THROWS_WITH(quantize_4bit(w.to(torch::kDouble), Quant4Type::kNf4, 64, true), Catch::Contains("float32"));
}

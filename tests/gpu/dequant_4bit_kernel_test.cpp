// The 4-bit dequantization kernel (kernels/dequant_4bit.cuh) against the CPU path
// (precision/quantize_4bit.cpp, itself bitsandbytes' numbers, tests/unit/precision/quantize_4bit_test.cpp):
// bit for bit, for NF4 and FP4, with and without double quantization, sizes that are not a multiple of
// the block, fp32, bf16 and fp16 outputs; then a 4-bit Linear's product and input gradient on CUDA
// against the same on the CPU.
#include <catch2/catch.hpp>
#include <ATen/ATen.h>

#include "model/linear.h"
#include "model/quantized_weight.h"
#include "precision/quantize_4bit.h"

using namespace gputrain;

namespace {

Quantized4bit on_cuda(Quantized4bit q) {
  for (torch::Tensor* t : {&q.codes, &q.absmax, &q.nested_absmax, &q.nested_code})
    if (t->defined()) *t = t->cuda();
  return q;
}

}  // namespace

TEST_CASE("gpu: the 4-bit dequantization kernel gives the CPU path's values bit for bit", "[gpu][quantize]") {
  for (Quant4Type type : {Quant4Type::kNf4, Quant4Type::kFp4})
    for (bool nested : {true, false})
      for (const std::vector<int64_t>& shape : {std::vector<int64_t>{4096, 1024}, {37, 29}, {3}, {130, 70}})
        for (auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
          INFO(quant4_type_name(type) << (nested ? " double" : " plain") << " numel " << at::empty(shape).numel() << " "
                                      << c10::toString(dtype));
          at::manual_seed(7);
          const Quantized4bit q = quantize_4bit(at::randn(shape) * 0.02, type, shape.size() == 1 ? 64 : 128, nested);
          const at::Tensor cpu = dequantize_4bit(q, dtype);
          const at::Tensor gpu = dequantize_4bit(on_cuda(q), dtype);
          REQUIRE(gpu.is_cuda());
          CHECK(gpu.scalar_type() == dtype);
          CHECK(at::equal(gpu.cpu(), cpu));
        }
}

TEST_CASE("gpu: a 4-bit Linear multiplies and passes the input gradient on CUDA as on the CPU", "[gpu][quantize]") {
  at::manual_seed(9);
  Linear cpu(256, 384, /*bias=*/false);
  auto q = std::make_shared<QuantizedWeight>();
  q->pieces = {quantize_4bit(cpu->weight.detach(), Quant4Type::kNf4, 64, true)};
  q->out_features = 384, q->in_features = 256;
  auto qc = std::make_shared<QuantizedWeight>(*q);
  qc->pieces = {on_cuda(q->pieces.front())};
  Linear gpu(256, 384, false);
  cpu->set_quantized(q);
  gpu->set_quantized(qc);
  const at::Tensor x = at::randn({4, 16, 256});
  const at::Tensor xc = x.cuda().requires_grad_(true), xh = x.clone().requires_grad_(true);
  const at::Tensor yc = gpu(xc), yh = cpu(xh);
  CHECK(at::allclose(yc.cpu(), yh, 1e-4, 1e-4));
  const at::Tensor g = at::randn_like(yh);
  yc.backward(g.cuda());
  yh.backward(g);
  CHECK(at::allclose(xc.grad().cpu(), xh.grad(), 1e-4, 1e-4));
}

// Training FLOPs per token and MFU (metrics/flops.h): the published GPT-2
// 124M figure, agreement with the model's own parameter list, the peak table,
// and no MFU where no peak is known.
#include <catch2/catch.hpp>

#include "metrics/flops.h"
#include "model/gpt.h"

using namespace gputrain;

TEST_CASE("flops: GPT-2 124M trains at 6 N + 12 L T d = 855.4M FLOPs per token", "[metrics]") {
  ModelSettings m;  // the defaults are GPT-2 small with the vocabulary padded to 50304
  m.vocab_size = 50304;
  // N = 123,689,472: 124.4M parameters less the 1024 x 768 position embedding.
  CHECK(training_flops_per_token(m) == 6.0 * 123689472 + 12.0 * 12 * 1024 * 768);
}

TEST_CASE("flops: N is the model's parameters but the position embedding, for any shape", "[metrics]") {
  for (ModelArch arch : {ModelArch::kGpt, ModelArch::kLlama})
    for (bool bias : {true, false})
      for (bool tied : {true, false}) {
        ModelSettings m;
        m.arch = arch;
        m.vocab_size = 1000;
        m.seq_len = 96;
        m.n_layer = 3;
        m.d_model = 64;
        m.n_head = 4;
        m.n_kv_head = arch == ModelArch::kLlama ? 2 : 0;
        m.mlp_ratio = 3.0;
        m.bias = bias;
        m.tie_embeddings = tied;
        Gpt model(m);  // the real module, not the shape list the formula uses
        double n = static_cast<double>(model->parameter_count());
        if (model->transformer->wpe) n -= static_cast<double>(model->transformer->wpe->weight.numel());
        INFO("arch " << static_cast<int>(arch) << ", bias " << bias << ", tied " << tied);
        CHECK(training_flops_per_token(m) == 6 * n + 12.0 * 3 * 96 * 64);
      }
}

TEST_CASE("flops: the dense bf16 peak of known GPUs, none for others", "[metrics]") {
  CHECK(peak_bf16_tflops("NVIDIA H100 80GB HBM3") == 989.0);
  CHECK(peak_bf16_tflops("NVIDIA H100 PCIe") == 756.0);
  CHECK(peak_bf16_tflops("NVIDIA H100 NVL") == 835.0);
  CHECK(peak_bf16_tflops("NVIDIA H200") == 989.0);
  CHECK(peak_bf16_tflops("NVIDIA GH200 480GB") == 989.0);
  CHECK(peak_bf16_tflops("NVIDIA A100-SXM4-80GB") == 312.0);
  CHECK_FALSE(peak_bf16_tflops("cpu"));
  CHECK_FALSE(peak_bf16_tflops("Tesla T4"));
}

TEST_CASE("flops: MFU divides the achieved rate by the peak of every device used", "[metrics]") {
  const double fpt = 855.4e6;
  const auto one = model_flops_utilization(400000, fpt, 1, "NVIDIA H100 80GB HBM3");
  REQUIRE(one);
  CHECK(*one == Approx(400000 * fpt / 989e12));
  CHECK(*one == Approx(0.346).epsilon(1e-3));
  CHECK(*model_flops_utilization(400000, fpt, 2, "NVIDIA H100 80GB HBM3") == Approx(*one / 2));
  CHECK_FALSE(model_flops_utilization(400000, fpt, 1, "cpu"));
  CHECK_FALSE(model_flops_utilization(0, fpt, 1, "NVIDIA H100 80GB HBM3"));  // no steps timed: no MFU
}

// Reading parts of weights from files (checkpoint/stored_weights.h): any rows and columns of any
// parameter, read from a sharded Hugging Face folder (GPT-2's transposed Conv1D, Llama's q/k/v bands
// of our fused c_attn, bf16 files), equal the same part of the weights that were written, and only
// those elements' bytes are read.
#include <catch2/catch.hpp>
#include <ATen/ATen.h>

#include "checkpoint/hf_folder.h"
#include "checkpoint/module_weights.h"
#include "checkpoint/stored_weights.h"
#include "model/architecture.h"
#include "model/gpt.h"
#include "model/gpt_shapes.h"
#include "test_util.h"

using namespace gputrain;
using namespace gputrain::test;
using Catch::Matchers::Contains;

namespace {

ModelSettings small(ModelArch arch) {
  ModelSettings m = model_settings(100, 32, 2, 4, 64);
  m.pad_vocab_to_multiple_of = 64;  // 128 rows, 100 of them in the files
  m.arch = arch;
  m.tie_embeddings = false;
  if (arch == ModelArch::kLlama) m.n_kv_head = 2, m.mlp_width = 96;
  return m;
}

// A random selection of `n` indices (some of them, shuffled), with a padding row (-1) among rows.
at::Tensor some_of(int64_t n, bool padding) {
  at::Tensor picked = at::randperm(n, at::kLong).narrow(0, 0, std::max<int64_t>(1, n / 2 + 1));
  return padding ? at::cat({picked, at::full({1}, -1, at::kLong)}) : picked;
}

}  // namespace

TEST_CASE("A part read from a sharded Hugging Face folder is that part of the weights, and only its bytes are read",
          "[checkpoint][hf]") {
  for (ModelArch arch : {ModelArch::kGpt, ModelArch::kLlama})
    for (torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16}) {
      CAPTURE(static_cast<int>(arch), c10::toString(dtype));
      TempDir dir;
      const ModelSettings m = small(arch);
      torch::manual_seed(3);
      Gpt model(m);
      write_hf_folder(module_weights(*model), m, dtype, dir.path() / "hf", 40000);
      REQUIRE(hf_weight_files(dir.path() / "hf").size() > 2);  // sharded
      const std::vector<NamedTensor> params = module_weights(*model);
      const auto files = StoredWeights::init_from((dir.path() / "hf").string(), m, params);
      CHECK_THAT(files->description(), Contains("weights from"));
      CHECK(files->bytes_read() == 0);  // headers only so far
      const int64_t es = static_cast<int64_t>(c10::elementSize(dtype));
      torch::manual_seed(11);
      for (const auto& [name, whole] : params) {
        CAPTURE(name);
        const bool vocab = name == "transformer.wte.weight" || name == "lm_head.weight";
        REQUIRE(files->covers(name) == (vocab ? PartReader::Coverage::kPart : PartReader::Coverage::kAll));
        WholeIndex at = whole_index(whole.sizes());
        at.rows = some_of(at.rows.numel(), /*padding=*/true);
        at.cols = some_of(at.cols.numel(), false);
        at::Tensor out = at::full({at.rows.numel(), at.cols.numel()}, 7.0f);
        const uint64_t before = files->bytes_read();
        files->read(out, name, at);
        // What was written, rounded through the file's dtype: this part of it; rows the files lack
        // (the vocabulary's padding) untouched, padding rows zero.
        const at::Tensor stored = whole.detach().reshape({whole.size(0), -1}).to(dtype).to(at::kFloat);
        const at::Tensor real = at.rows >= 0, in_files = real & (at.rows < (vocab ? m.vocab_size : whole.size(0)));
        at::Tensor expected = stored.index_select(0, at.rows.clamp_min(0)).index_select(1, at.cols);
        expected.masked_fill_(~real.unsqueeze(1), 0.0f);
        expected.masked_fill_((real & ~in_files).unsqueeze(1), 7.0f);
        CHECK(at::equal(out, expected));
        const int64_t elements = in_files.sum().item<int64_t>() * at.cols.numel();
        CHECK(files->bytes_read() - before == static_cast<uint64_t>(elements * es));
      }
      // The whole of every parameter read: each stored byte once.
      Gpt copy(m);
      std::vector<NamedTensor> into = module_weights(*copy);
      const uint64_t before = files->bytes_read();
      files->read_whole(into);
      CHECK(files->bytes_read() - before == files->bytes_stored());
    }
}

TEST_CASE("Parts of weights refuse files of another model, naming the tensor and the key", "[checkpoint][hf]") {
  TempDir dir;
  const ModelSettings m = small(ModelArch::kGpt);
  Gpt model(m);
  write_hf_folder(module_weights(*model), m, torch::kFloat, dir.path() / "hf", 40000);
  ModelSettings wider = m;
  wider.d_model = 128;
  Gpt other(wider);
  CHECK_THROWS_WITH(StoredWeights::init_from((dir.path() / "hf").string(), wider, module_weights(*other)),
                    Contains("n_embd") || Contains("d_model"));
  // A file cut short: its header is checked before any part is read.
  const std::string first = hf_weight_files(dir.path() / "hf").front().path;
  std::filesystem::resize_file(first, std::filesystem::file_size(first) - 4);
  CHECK_THROWS_WITH(StoredWeights::init_from((dir.path() / "hf").string(), m, module_weights(*model)),
                    Contains(first) && Contains("truncated or corrupt"));
}

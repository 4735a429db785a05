// QLoRA under ZeRO-3 (parallel/sharded_4bit_base.h): ranks that quantize only their blocks, from
// only the rows those cover, and agree the offset by a sum, hold between them one process's 4-bit
// base bit for bit (codes, absmax, nested statistics), whatever the block, type and nesting, with blocks
// that straddle rows and a group of 256 nested blocks spread over ranks.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "model/gpt.h"
#include "model/linear.h"
#include "model/quantized_weight.h"
#include "parallel/sharded_4bit_base.h"
#include "test_util.h"
#include "thread_ranks.h"

using namespace gputrain;

namespace {

// The 4-bit pieces of a quantized model's block Linears, in module order (quantize_sharded_base's order).
std::vector<Quantized4bit> pieces_of(GptImpl& model) {
  std::vector<Quantized4bit> out;
  for (const auto& item : model.transformer->h->named_modules())
    if (auto* linear = dynamic_cast<LinearImpl*>(item.value().get()); linear && linear->quantized)
      for (const Quantized4bit& p : linear->quantized->pieces) out.push_back(p);
  return out;
}

}  // namespace

TEST_CASE("sharded 4-bit base: 3 ranks' blocks laid end to end are one process's 4-bit base, bit for bit",
          "[parallel][quantize]") {
  struct Variant {
    QuantBase base;
    int64_t block;
    bool nested;
    int64_t mlp_width;  // 99: gate and up end in a partial block of 128; down's rows are 99 wide
  };
  for (const Variant& v : {Variant{QuantBase::kNf4, 64, true, 96}, Variant{QuantBase::kFp4, 128, false, 99},
                           Variant{QuantBase::kNf4, 128, true, 99}}) {
    CAPTURE(v.block, v.nested, v.mlp_width);
    ModelSettings m = test::model_settings(50, 8, 2, 4, 64);
    m.arch = ModelArch::kLlama;
    m.n_kv_head = 2;
    m.mlp_width = v.mlp_width;
    m.lora.rank = 4;
    m.quantize = {v.base, v.nested, v.block};
    torch::manual_seed(3);
    Gpt whole(m);
    std::map<std::string, torch::Tensor> weights;
    for (const auto& p : whole->named_parameters()) weights[p.key()] = p.value().detach().clone();
    const int64_t one_process = quantize_whole_model(*whole);

    constexpr int kRanks = 3;
    std::vector<std::shared_ptr<GptImpl>> models(kRanks);
    std::vector<Sharded4bitBase> bases(kRanks);
    std::mutex read_lock;
    std::set<std::pair<std::string, int64_t>> read;  // (name, row) of every row a rank asked for, with repeats counted
    int64_t rows_read = 0;
    test::run_thread_ranks(kRanks, [&](int rank, Communicator& world) {
      torch::manual_seed(3);
      Gpt mine(m);
      const WeightRows rows = [&](const std::string& name, torch::Tensor& out, int64_t first, int64_t count) {
        out.copy_(weights.at(name).narrow(0, first, count));
        std::lock_guard<std::mutex> lock(read_lock);
        rows_read += count;
        for (int64_t r = first; r < first + count; ++r) read.insert({name, r});
      };
      bases[rank] = quantize_sharded_base(
          *mine, [](const std::string&) { return true; }, rows, {}, [&](const std::string&) { return &world; },
          torch::kCPU, torch::kCPU);
      models[rank] = mine.ptr();
    });

    const std::vector<Quantized4bit> reference = pieces_of(*whole);
    REQUIRE(reference.size() == 2 * 7);  // per block: q, k, v, o, gate, up, down
    int64_t nested = 0;  // what every rank holds whole: the offset, nested absmax and 8-bit map of each piece
    for (const Quantized4bit& p : reference)
      if (p.nested) nested += 4 + static_cast<int64_t>(p.nested_absmax.nbytes() + p.nested_code.nbytes());
    for (int rank = 0; rank < kRanks; ++rank) {
      CAPTURE(rank);
      const std::vector<Quantized4bit> mine = pieces_of(*models[rank]);
      REQUIRE(mine.size() == reference.size());
      REQUIRE(bases[rank].storage.size() == 2 * reference.size());  // codes and absmax of each
      for (size_t i = 0; i < reference.size(); ++i) {
        CHECK(mine[i].shape == reference[i].shape);
        CHECK(mine[i].nested == reference[i].nested);
        CHECK(mine[i].offset == reference[i].offset);  // the whole tensor's mean, agreed
        if (v.nested) CHECK(at::equal(mine[i].nested_absmax, reference[i].nested_absmax));
        CHECK(mine[i].codes.is_meta());  // memory only while gathered (FullyShardedModel)
      }
      // A third of the codes and absmax each (up to a block of padding a piece), and the nested statistics.
      const int64_t block_bytes = v.block / 2 + 4, even = (one_process - nested) / kRanks;
      CHECK(std::abs(bases[rank].bytes - nested - even) <= static_cast<int64_t>(reference.size()) * block_bytes);
    }
    // Every rank's rows of each tensor, laid end to end, are the one process's codes and absmax.
    for (size_t i = 0; i < reference.size(); ++i) {
      for (int which = 0; which < 2; ++which) {
        std::vector<torch::Tensor> shards;
        for (int rank = 0; rank < kRanks; ++rank) shards.push_back(bases[rank].storage[2 * i + which].shard);
        const torch::Tensor expected = which == 0 ? reference[i].codes : reference[i].absmax;
        CAPTURE(i, which, bases[0].storage[2 * i + which].name);
        CHECK(at::equal(torch::cat(shards).narrow(0, 0, expected.size(0)), expected));
      }
    }
    // Each row read about once: only the rows a rank's blocks cover (a row two ranks' blocks share twice).
    int64_t rows = 0;
    for (const auto& [name, w] : weights)
      if (is_quantized_base(m, name, w.sizes())) rows += w.size(0);
    CHECK(static_cast<int64_t>(read.size()) == rows);
    CHECK(rows_read <= rows + static_cast<int64_t>(reference.size()) * (kRanks - 1));
  }
}

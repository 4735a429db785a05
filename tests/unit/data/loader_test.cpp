// The loader: batches do not depend on worker threads, resume exactly, and
// packing by document and boundary masking take loss where they should.
#include <catch2/catch.hpp>

#include <filesystem>
#include <memory>

#include "data/loader.h"
#include "data/token_shard.h"
#include "test_util.h"
#include "util/error.h"
#include "util/ignore_index.h"

using namespace gputrain;
using namespace gputrain::test;

namespace {

constexpr uint32_t kEot = 99;

// A shard of documents [EOT, 1, 2, ..., len-1] (each document's ids count up).
std::string write_documents(const TempDir& dir, const std::vector<int>& lengths) {
  ShardInfo info;
  info.tokenizer = "test", info.vocab_size = 100, info.eot_token = kEot;
  info.dtype = TokenDtype::kUint16;
  ShardWriter w(dir.file("docs.bin"), info);
  for (int len : lengths) {
    std::vector<uint32_t> doc{kEot};
    for (int i = 1; i < len; ++i) doc.push_back(static_cast<uint32_t>(i));
    w.add_document();
    w.append(doc);
  }
  w.finish();
  return dir.file("docs.bin");
}

DataSourceSettings documents_source(const std::string& path, Packing packing, bool mask) {
  DataSourceSettings d;
  d.format = DataFormat::kTokens;
  d.paths = {path};
  d.packing = packing;
  d.mask_document_boundaries = mask;
  return d;
}

}  // namespace

TEST_CASE("batches are the same with 0 or 3 workers, and shift by one token", "[data]") {
  DataSourceSettings d;
  d.format = DataFormat::kSynthetic;
  d.synthetic.vocab = 16;
  auto src = make_window_source(d, model_settings(16, 12, 1, 1, 8), "data.train");
  WindowSampler sampler(src->window_count(), SamplerOptions{42, 1});
  LoaderOptions o;
  o.batch_size = 4;
  o.seq_len = 12;
  BatchLoader sync_loader(*src, sampler, o);
  o.num_workers = 3;
  o.prefetch = 2;
  BatchLoader async_loader(*src, sampler, o);
  for (int i = 0; i < 20; ++i) {
    Batch a = sync_loader.next(), b = async_loader.next();
    CHECK(torch::equal(a.input, b.input));
    CHECK(torch::equal(a.target, b.target));
    CHECK(torch::equal(a.input.slice(1, 1), a.target.slice(1, 0, 11)));
    CHECK(a.target_count == 48);
  }
  WindowSampler eval_sampler(src->window_count(), SamplerOptions{42, 2});  // eval stream: other windows
  BatchLoader other(*src, eval_sampler, o);
  CHECK_FALSE(torch::equal(other.next().input, sync_loader.make_host_batch(0).input));
}

TEST_CASE("sharded loaders split each global batch between ranks and keep a global position", "[data]") {
  DataSourceSettings d;
  d.format = DataFormat::kSynthetic;
  d.synthetic.vocab = 16;
  auto src = make_window_source(d, model_settings(16, 8, 1, 1, 8), "data.train");
  WindowSampler sampler(src->window_count(), SamplerOptions{5, 1});
  LoaderOptions o;
  o.batch_size = 6;
  o.seq_len = 8;
  BatchLoader whole(*src, sampler, o);  // one rank, batch 6
  o.batch_size = 2;
  o.shards = 3;
  std::vector<std::unique_ptr<BatchLoader>> ranks;
  for (int64_t r = 0; r < 3; ++r) {
    o.shard = r;
    o.num_workers = r;                                                     // workers or not: the same batches
    ranks.push_back(std::make_unique<BatchLoader>(*src, sampler, o, 12));  // started at a saved global sample
  }
  for (int i = 0; i < 2; ++i) whole.next();  // samples 0..11
  for (int step = 0; step < 5; ++step) {
    const Batch w = whole.next();
    std::vector<torch::Tensor> parts;
    for (auto& r : ranks) parts.push_back(r->next().input);
    CHECK(torch::equal(torch::cat(parts), w.input));
    for (auto& r : ranks) CHECK(r->next_sample() == whole.next_sample());  // the position is global
  }
}

TEST_CASE("a loader started at a saved sample continues exactly, workers or not", "[data]") {
  TempDir dir;
  ShardInfo info;
  info.vocab_size = 1000, info.dtype = TokenDtype::kUint16;
  {
    ShardWriter w(dir.file("t.bin"), info);
    std::vector<uint32_t> ids(20000);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>((i * 31) % 1000);
    w.append(ids);
    w.finish();
  }
  DataSourceSettings d;
  d.format = DataFormat::kTokens;
  d.paths = {dir.file("t.bin")};
  auto src = make_window_source(d, model_settings(1000, 32, 1, 1, 8), "data.train");
  WindowSampler sampler(src->window_count(), SamplerOptions{11, 1});
  LoaderOptions o;
  o.batch_size = 8;
  o.seq_len = 32;
  o.num_workers = 2;
  BatchLoader first(*src, sampler, o);
  for (int i = 0; i < 170; ++i) first.next();  // past the first epoch (624 windows / 8 = 78 batches)
  const SamplerState saved = sampler.state(first.next_sample());
  WindowSampler sampler2(src->window_count(), SamplerOptions{11, 1});
  o.num_workers = 0;
  BatchLoader resumed(*src, sampler2, o, sampler2.resume_sample(saved));
  for (int i = 0; i < 10; ++i) {
    Batch a = first.next(), b = resumed.next();
    CHECK(torch::equal(a.input, b.input));
    CHECK(torch::equal(a.target, b.target));
  }
}

TEST_CASE("packing by document: windows start at a document and hold whole documents", "[data]") {
  TempDir dir;
  // Documents of 5, 4, 12 (longer than a window), 3 and 2 tokens; windows of
  // seq_len 9 (10 tokens). Tokens: 0:E1234 5:E123 9:E1234567891011 21:E12 24:E1.
  // Windows: [0,10) docs 1-2 and the next EOT as last target; [9,19) the long
  // doc's first 10 tokens; [18,25) its rest, doc 4 and the next EOT; [24,26) the last doc.
  const std::string path = write_documents(dir, {5, 4, 12, 3, 2});
  const ModelSettings m = model_settings(100, 9, 1, 1, 8);
  auto src = make_window_source(documents_source(path, Packing::kDocuments, false), m, "data.train");
  REQUIRE(src->window_count() == 4);
  std::vector<int64_t> w(10);
  CHECK(src->fill_window(0, 10, w.data()) == 10);
  CHECK(w == std::vector<int64_t>{kEot, 1, 2, 3, 4, kEot, 1, 2, 3, kEot});
  CHECK(src->fill_window(1, 10, w.data()) == 10);
  CHECK(w[0] == kEot);
  CHECK(w[9] == 9);
  CHECK(src->fill_window(2, 10, w.data()) == 7);
  CHECK(w[0] == 9);
  CHECK(w[6] == kEot);
  CHECK(src->fill_window(3, 10, w.data()) == 2);
  CHECK(w[0] == kEot);
  CHECK(w[1] == 1);

  // In a batch, padding takes no loss and the boundary mask drops predictions
  // made from an EOT input with an earlier document in the window.
  auto masked = make_window_source(documents_source(path, Packing::kDocuments, true), m, "data.train");
  WindowSampler sampler(masked->window_count(), SamplerOptions{1, 1});
  LoaderOptions o;
  o.batch_size = 4;
  o.seq_len = 9;
  o.documents.mask_boundaries = true;
  BatchLoader loader(*masked, sampler, o);
  Batch b = loader.next();  // one epoch: every window once, in shuffled order
  int64_t with_loss = 0;
  bool saw_window0 = false;
  for (int64_t r = 0; r < 4; ++r) {
    auto x = b.input[r], y = b.target[r];
    if (x[0].item<int64_t>() == kEot && x[5].item<int64_t>() == kEot && x[1].item<int64_t>() == 1 &&
        x[4].item<int64_t>() == 4) {
      saw_window0 = true;                   // [E 1 2 3 4 E 1 2 3 | E]: position 5 predicts doc 2's "1" from its EOT
      CHECK(y[0].item<int64_t>() == 1);     // the first document's start is learned
      CHECK(y[4].item<int64_t>() == kEot);  // predicting the end of a document is learned
      CHECK(y[5].item<int64_t>() == kIgnoreIndex);  // across the boundary: masked
      CHECK(y[8].item<int64_t>() == kEot);          // the next document's EOT is the last target
    }
    if (x[0].item<int64_t>() == kEot && x[1].item<int64_t>() == 1 && x[2].item<int64_t>() == kEot) {
      CHECK(y[0].item<int64_t>() == 1);  // the last document: 2 real tokens, 1 target
      for (int64_t t = 1; t < 9; ++t) CHECK(y[t].item<int64_t>() == kIgnoreIndex);
    }
    with_loss += (y != kIgnoreIndex).sum().item<int64_t>();
  }
  CHECK(saw_window0);
  CHECK(b.target_count == with_loss);
  CHECK(with_loss == 9 + 9 + 6 + 1 - 2);  // real targets per window, minus two masked boundaries
}

TEST_CASE("stream packing with boundary masking masks only mid-window EOT inputs", "[data]") {
  TempDir dir;
  const std::string path = write_documents(dir, {3, 3, 3, 3, 3, 3});  // E12E12E12...
  auto src =
      make_window_source(documents_source(path, Packing::kStream, true), model_settings(100, 6, 1, 1, 8), "data.train");
  WindowSampler sampler(src->window_count(), SamplerOptions{});
  LoaderOptions o;
  o.batch_size = 1;
  o.seq_len = 6;
  o.documents.mask_boundaries = true;
  BatchLoader loader(*src, sampler, o);
  for (int i = 0; i < 2; ++i) {
    Batch b = loader.next();
    auto x = b.input[0], y = b.target[0];
    for (int64_t t = 0; t < 6; ++t) {
      const bool eot_input = x[t].item<int64_t>() == kEot;
      CHECK((y[t].item<int64_t>() == kIgnoreIndex) == (eot_input && t > 0));
    }
  }
}

TEST_CASE("document attention: positions restart at every document start and at the padding", "[data][documents]") {
  TempDir dir;
  const std::string path = write_documents(dir, {5, 4, 7, 2});
  DataSourceSettings d = documents_source(path, Packing::kDocuments, false);
  d.document_attention = true;
  auto src = make_window_source(d, model_settings(100, 10, 1, 1, 8), "data.train");
  const std::vector<uint64_t> keys = {0, 1, 2};  // [E1234E123E], [E123456E|pad pad], [E1|pad...]
  const Batch b = window_batch(*src, keys, 10, document_options(d));
  REQUIRE(b.token_layout.defined());
  const std::vector<int64_t> expected = {0, 1, 2, 3, 4, 0, 1, 2, 3, 0,   // two documents, then the next one's start
                                         0, 1, 2, 3, 4, 5, 6, 0, 0, 1,   // the next start, then the padding
                                         0, 1, 0, 1, 2, 3, 4, 5, 6, 7};  // [E 1], then the padding
  const torch::Tensor positions = b.token_layout.positions.reshape({-1});
  CHECK(std::vector<int64_t>(positions.data_ptr<int64_t>(), positions.data_ptr<int64_t>() + 30) == expected);
  const torch::Tensor offsets = b.token_layout.offsets.to(torch::kLong);
  CHECK(std::vector<int64_t>(offsets.data_ptr<int64_t>(), offsets.data_ptr<int64_t>() + offsets.numel()) ==
        std::vector<int64_t>{0, 5, 9, 10, 17, 18, 20, 22, 30});
  CHECK(b.token_layout.longest == 8);
  // Without the option there is no layout; the same batch through the loader has it.
  CHECK(!window_batch(*src, keys, 10, {}).token_layout.defined());
  WindowSampler sampler(src->window_count(), SamplerOptions{});
  LoaderOptions o;
  o.batch_size = 3;
  o.seq_len = 10;
  o.documents = document_options(d);
  BatchLoader loader(*src, sampler, o);
  CHECK(loader.next().token_layout.defined());
}

TEST_CASE("padded packing: one document per window, each with the next one's start as its last target", "[data]") {
  TempDir dir;
  const std::string path = write_documents(dir, {5, 4, 12, 2});
  auto src = make_window_source(documents_source(path, Packing::kPadded, false), model_settings(100, 10, 1, 1, 8),
                                "data.train");
  // [E1234|E], [E123|E], [E12345678910] and its last two tokens again: [10 11|E], then [E1].
  REQUIRE(src->window_count() == 5);
  std::vector<int64_t> w(11);
  CHECK(src->fill_window(0, 11, w.data()) == 6);
  CHECK(w[0] == kEot);
  CHECK(w[5] == kEot);
  CHECK(src->fill_window(1, 11, w.data()) == 5);
  CHECK(src->fill_window(2, 11, w.data()) == 11);  // a document longer than a window continues in the next
  CHECK(w[10] == 10);
  CHECK(src->fill_window(3, 11, w.data()) == 3);
  CHECK(w[0] == 10);
  CHECK(w[2] == kEot);
  CHECK(src->fill_window(4, 11, w.data()) == 2);
  CHECK_THAT(src->describe(), Catch::Matchers::Contains("one document each"));
}

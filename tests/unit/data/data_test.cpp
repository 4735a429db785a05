// Data: the synthetic language's entropy is what it claims, token/text files
// are read exactly and checked, and batches do not depend on worker count.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <map>

#include "data/loader.h"
#include "data/rng.h"
#include "data/synthetic_language.h"
#include "test_util.h"
#include "util/error.h"

using namespace gputrain;
using gputrain::test::TempDir;
using gputrain::test::write_file;

namespace {

// Plug-in estimate of H(X_t | previous `order` tokens) from one long sample.
double empirical_conditional_entropy(const std::vector<int64_t>& x, int64_t order) {
  std::map<std::vector<int64_t>, std::map<int64_t, double>> counts;
  for (size_t t = order; t < x.size(); ++t)
    counts[std::vector<int64_t>(x.begin() + t - order, x.begin() + t)][x[t]] += 1;
  double h = 0, n = static_cast<double>(x.size() - order);
  for (const auto& [ctx, next] : counts) {
    double c = 0;
    for (const auto& [_, k] : next) c += k;
    for (const auto& [_, k] : next) h -= (k / n) * std::log(k / c);
  }
  return h;
}

}  // namespace

TEST_CASE("the Markov language's entropy rate matches a long sample", "[data]") {
  for (int64_t order : {1, 2}) {
    MarkovLanguage lang(8, order, 3, 11);
    DataRng rng(5);
    std::vector<int64_t> x(400000);
    lang.generate(rng, static_cast<int64_t>(x.size()), x.data());
    INFO("order " << order);
    CHECK(lang.entropy_rate() > 0.1);
    CHECK(lang.entropy_rate() < std::log(3.0) + 1e-9);  // at most log(branching)
    CHECK(empirical_conditional_entropy(x, order) == Approx(lang.entropy_rate()).margin(0.01));
  }
}

TEST_CASE("the entropy floor accounts for the first tokens' shorter context", "[data]") {
  MarkovLanguage lang(8, 2, 3, 11);
  // Target 0 sees one token: H(X1 | X0) >= H(X2 | X0, X1).
  CHECK(lang.entropy_floor(1) >= lang.entropy_rate());
  CHECK(lang.entropy_floor(64) == Approx((lang.entropy_floor(1) + 63 * lang.entropy_rate()) / 64));
  // H(X1 | X0) measured on windows' first two tokens.
  std::map<int64_t, std::map<int64_t, double>> counts;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    DataRng rng(mix_seed(9, i));
    int64_t w[2];
    lang.generate(rng, 2, w);
    counts[w[0]][w[1]] += 1;
  }
  double h = 0;
  for (const auto& [_, next] : counts) {
    double c = 0;
    for (const auto& [__, k] : next) c += k;
    for (const auto& [__, k] : next) h -= (k / n) * std::log(k / c);
  }
  CHECK(h == Approx(lang.entropy_floor(1)).margin(0.01));
}

TEST_CASE("token files are read exactly, for uint16 and uint32", "[data]") {
  TempDir dir;
  for (auto dtype : {TokenDtype::kUint16, TokenDtype::kUint32}) {
    const int width = dtype == TokenDtype::kUint16 ? 2 : 4;
    std::string bytes;
    for (uint32_t i = 0; i < 5000; ++i) {
      uint32_t v = (i * 7) % 1000 + (width == 4 ? 70000 : 0);
      bytes.append(reinterpret_cast<const char*>(&v), width);
    }
    write_file(dir.file("t.bin"), bytes);
    DataSourceSettings d;
    d.format = DataFormat::kTokens;
    d.path = dir.file("t.bin");
    d.dtype = dtype;
    d.span = {0.5, 1.0};
    ModelSettings m;
    m.vocab_size = 80000;
    m.seq_len = 16;
    auto src = make_window_source(d, m);
    for (uint64_t seed = 0; seed < 50; ++seed) {
      int64_t w[17];
      src->fill_window(seed, 17, w);
      // Consecutive file positions i, i+1, ... all inside the span [2500, 5000).
      int64_t base = width == 4 ? 70000 : 0;
      int64_t first = -1;
      for (int64_t i = 2500; i + 17 <= 5000 && first < 0; ++i)
        if ((i * 7) % 1000 + base == w[0] && ((i + 1) * 7) % 1000 + base == w[1] && ((i + 2) * 7) % 1000 + base == w[2]) first = i;
      REQUIRE(first >= 0);
      for (int64_t k = 0; k < 17; ++k) CHECK(w[k] == ((first + k) * 7) % 1000 + base);
    }
  }
}

TEST_CASE("a token id beyond the vocabulary names the file and offset", "[data]") {
  TempDir dir;
  std::vector<uint16_t> t(100, 5);
  t[60] = 999;
  write_file(dir.file("bad.bin"), std::string(reinterpret_cast<const char*>(t.data()), t.size() * 2));
  DataSourceSettings d;
  d.format = DataFormat::kTokens;
  d.path = dir.file("bad.bin");
  d.span = {0.55, 0.65};  // windows of 10 tokens here all cover token 60
  ModelSettings m;
  m.vocab_size = 100;
  m.seq_len = 9;
  auto src = make_window_source(d, m);
  int64_t w[10];
  try {
    src->fill_window(1, 10, w);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(exit_code_for(e.kind()) == 2);
    CHECK_THAT(e.what(), Catch::Contains("bad.bin': token id 999 at token offset 60 (byte 120)"));
    CHECK_THAT(e.what(), Catch::Contains(">= model.vocab_size (100)"));
  }
  // The loader's worker threads pass the same error to the training thread.
  LoaderOptions o;
  o.batch_size = 2;
  o.seq_len = 9;
  o.num_workers = 2;
  BatchLoader loader(*src, o);
  CHECK_THROWS_WITH(loader.next(), Catch::Contains("token id 999"));
}

TEST_CASE("text is byte-level tokens", "[data]") {
  TempDir dir;
  write_file(dir.file("t.txt"), "abcdefghijklmnopqrstuvwxyz");
  DataSourceSettings d;
  d.format = DataFormat::kText;
  d.path = dir.file("t.txt");
  ModelSettings m;
  m.vocab_size = 256;
  m.seq_len = 25;
  auto src = make_window_source(d, m);
  int64_t w[26];
  src->fill_window(3, 26, w);
  for (int i = 0; i < 26; ++i) CHECK(w[i] == 'a' + i);
}

TEST_CASE("batches are the same with 0 or 3 workers, and shift by one token", "[data]") {
  DataSourceSettings d;
  d.format = DataFormat::kSynthetic;
  d.synthetic.vocab = 16;
  ModelSettings m;
  m.vocab_size = 16;
  m.seq_len = 12;
  auto src = make_window_source(d, m);
  LoaderOptions o;
  o.batch_size = 4;
  o.seq_len = 12;
  o.seed = 42;
  o.stream = 1;
  BatchLoader sync_loader(*src, o);
  o.num_workers = 3;
  o.prefetch = 2;
  BatchLoader async_loader(*src, o);
  for (int i = 0; i < 20; ++i) {
    Batch a = sync_loader.next(), b = async_loader.next();
    CHECK(torch::equal(a.input, b.input));
    CHECK(torch::equal(a.target, b.target));
    CHECK(torch::equal(a.input.slice(1, 1), a.target.slice(1, 0, 11)));
    CHECK(a.target_count == 48);
  }
  o.stream = 2;  // eval stream: different windows
  BatchLoader other(*src, o);
  BatchLoader again(*src, LoaderOptions{.batch_size = 4, .seq_len = 12, .seed = 42, .stream = 1});
  CHECK_FALSE(torch::equal(other.next().input, again.next().input));
  // Starting at batch 5 gives batch 5 at once (what resuming will need).
  BatchLoader resumed(*src, LoaderOptions{.batch_size = 4, .seq_len = 12, .seed = 42, .stream = 1}, 5);
  CHECK(torch::equal(resumed.next().input, sync_loader.make_host_batch(5).input));
}

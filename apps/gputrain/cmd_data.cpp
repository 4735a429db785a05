#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "config/recipe.h"
#include "data/loader_bench.h"
#include "data/prepare.h"
#include "model/architecture.h"

namespace gputrain::app {

int cmd_data_prepare(const PrepareOptions& o) {
  PrepareResult r = prepare_dataset(o);
  const std::string dir = std::filesystem::absolute(o.output_dir).lexically_normal().string();
  if (r.status != "ok") {
    std::fprintf(stderr, "data prepare: interrupted; %zu complete shard(s) kept in %s, no partial files\n",
                 r.shards.size(), dir.c_str());
    return 128 + r.signal;
  }
  std::printf(
      "data prepare: %.1f MB -> %lld train tokens (%lld documents), %lld val tokens (%lld documents) "
      "in %zu shard(s), %.1f s (%.1f MB/s)\n",
      r.input_bytes / 1e6, static_cast<long long>(r.train_tokens), static_cast<long long>(r.train_documents),
      static_cast<long long>(r.val_tokens), static_cast<long long>(r.val_documents), r.shards.size(), r.seconds,
      r.input_bytes / 1e6 / r.seconds);
  for (const auto& s : r.shards) std::printf("  %s\n", s.c_str());
  if (!r.chat_template.empty())
    std::printf("chat: rendered with the %s template; loss masks beside the shards (.mask)\n", r.chat_template.c_str());
  if (r.skipped_rows > 0)
    std::fprintf(stderr, "data prepare: skipped %lld bad row(s) (--skip-bad-rows); the first: %s\n",
                 static_cast<long long>(r.skipped_rows), r.first_skipped.c_str());
  std::printf("tokenizer %s: %lld ids; set model.vocab_size to at least %lld (a multiple of 64 runs faster: %lld)\n",
              r.tokenizer.c_str(), static_cast<long long>(r.vocab_size), static_cast<long long>(r.vocab_size),
              static_cast<long long>((r.vocab_size + 63) / 64 * 64));
  std::printf("\nuse it in a recipe:\n  data:\n    train: {format: tokens, path: %s/train_*.bin}\n", dir.c_str());
  if (r.val_tokens > 0) std::printf("    eval: {format: tokens, path: %s/val_*.bin}\n", dir.c_str());
  return 0;
}

int cmd_data_bench(const CommonArgs& a, const std::vector<int64_t>& workers, int64_t batches) {
  Recipe recipe = load_recipe(a.recipe, a.overrides, architecture_rules());
  const Settings& s = recipe.settings;
  std::printf("loader of %s: batch %lld x seq_len %lld\n", recipe.source.c_str(),
              static_cast<long long>(s.train.per_device_batch_size), static_cast<long long>(s.model.seq_len));
  std::vector<LoaderBenchRow> rows = bench_loader(s, workers, batches);
  std::printf("%s", loader_bench_table(rows).c_str());
  double best = 0;
  for (const auto& r : rows) best = std::max(best, r.tokens_per_s);
  std::printf("best %.3g tokens/s = %.1fx what a GPT-2 124M step on one H100 consumes (%.0fk tokens/s)%s\n", best,
              best / kH100Gpt2TokensPerS, kH100Gpt2TokensPerS / 1e3,
              best >= 10 * kH100Gpt2TokensPerS ? "" : "; below the 10x margin: add data.num_workers");
  return 0;
}

}  // namespace gputrain::app

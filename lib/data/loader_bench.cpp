#include "data/loader_bench.h"

#include <chrono>
#include <cstdio>

#include "data/loader.h"
#include "util/device.h"

namespace gputrain {

std::vector<LoaderBenchRow> bench_loader(const Settings& s, const std::vector<int64_t>& workers, int64_t batches) {
  const torch::Device device = resolve_device(s.run.device);
  auto source = make_window_source(s.data.train, s.model, "data.train");
  WindowSampler sampler(*source, SamplerOptions{static_cast<uint64_t>(s.run.seed), kTrainStream});
  std::vector<LoaderBenchRow> rows;
  for (int64_t w : workers) {
    BatchLoader loader(*source, sampler, loader_options(s, s.data.train, device, w));
    for (int64_t i = 0; i < std::min<int64_t>(batches / 10 + 1, 20); ++i)
      loader.next();  // warm-up: threads, page cache
    synchronize(device);
    const auto t0 = std::chrono::steady_clock::now();
    int64_t tokens = 0;
    for (int64_t i = 0; i < batches; ++i) tokens += loader.next().input.numel();
    synchronize(device);
    LoaderBenchRow r;
    r.workers = w;
    r.batches = batches;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.tokens_per_s = static_cast<double>(tokens) / r.seconds;
    rows.push_back(r);
  }
  return rows;
}

std::string loader_bench_table(const std::vector<LoaderBenchRow>& rows) {
  std::string out =
      "| workers | batches | seconds | tokens/s | x GPT-2 124M on H100 (500k tok/s) |\n|---:|---:|---:|---:|---:|\n";
  char line[256];
  for (const auto& r : rows) {
    std::snprintf(line, sizeof line, "| %lld | %lld | %.3f | %.3g | %.1fx |\n", static_cast<long long>(r.workers),
                  static_cast<long long>(r.batches), r.seconds, r.tokens_per_s, r.tokens_per_s / kH100Gpt2TokensPerS);
    out += line;
  }
  return out;
}

}  // namespace gputrain

// The CUDA StepGraph (train/step_graph.h explains what is captured and why).
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <fmt/format.h>

#include "train/step_graph.h"
#include "train/train_step.h"
#include "util/device.h"
#include "util/error.h"
#include "util/tensor_text.h"

namespace gputrain {
namespace {

using c10::cuda::CUDAStream;

// `waiter`'s later work starts after everything queued on `on` so far.
void wait_for(const CUDAStream& waiter, const CUDAStream& on) {
  at::cuda::CUDAEvent done;
  done.record(on);
  done.block(waiter);
}

// While alive, the caching allocator serves `stream`'s allocations from graph pool `pool`
// (as the capture itself does; torch.cuda.use_mem_pool is the Python form). The pool's
// use count taken by beginAllocateToPool is given back by releasePool.
class AllocateToPool {
 public:
  AllocateToPool(const CUDAStream& stream, c10::MempoolId_t pool) : device_(stream.device_index()), pool_(pool) {
    const cudaStream_t s = stream.stream();
    c10::cuda::CUDACachingAllocator::beginAllocateToPool(device_, pool_, [s](cudaStream_t x) { return x == s; });
  }
  ~AllocateToPool() {
    c10::cuda::CUDACachingAllocator::endAllocateToPool(device_, pool_);
    c10::cuda::CUDACachingAllocator::releasePool(device_, pool_);
  }
  AllocateToPool(const AllocateToPool&) = delete;
  AllocateToPool& operator=(const AllocateToPool&) = delete;

 private:
  c10::DeviceIndex device_;
  c10::MempoolId_t pool_;
};

class CudaStepGraph final : public StepGraph {
 public:
  CudaStepGraph(torch::Device device, std::vector<torch::Tensor> params, const ObjectiveSpec& objective)
      : params_(std::move(params)),
        objective_(objective),
        stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index())) {}

  torch::Tensor accumulate(Gpt& model, const std::vector<Batch>& micro, const Precision& precision,
                           int64_t total_targets) override {
    if (eager_steps_ < kWarmupSteps) {
      ++eager_steps_;
      return on_capture_stream([&] {
        return accumulate_gradients(model, micro, &precision, {total_targets, nullptr, {}, &objective_});
      });
    }
    const double inv_total = inverse_unit_count(objective_, micro, total_targets);
    if (!graph_) capture(model, micro, precision);
    load(micro, inv_total);
    graph_->replay();
    ++replays_;
    return loss_.clone();  // loss_ itself is overwritten by the next replay
  }

  bool keeps_gradients() const override { return graph_ != nullptr; }

  void run_in_graph_memory(const std::function<void()>& f) override {
    if (!graph_) return f();
    // On the capture stream: the pool's free blocks belong to it (the allocator reuses a
    // block only on the stream it was allocated on).
    on_capture_stream([&] {
      AllocateToPool in_pool(stream_, graph_->pool());
      f();
      return torch::Tensor();
    });
  }

  nlohmann::ordered_json report() const override {
    nlohmann::ordered_json j;
    j["warmup_steps"] = eager_steps_;
    j["captured"] = graph_ != nullptr;
    j["replayed_steps"] = replays_;
    j["micro_batches"] = static_.size();
    return j;
  }

 private:
  // Runs f on the capture stream, ordered after the current stream's work and before its later work.
  template <class F>
  torch::Tensor on_capture_stream(F&& f) {
    const CUDAStream current = c10::cuda::getCurrentCUDAStream(stream_.device_index());
    wait_for(stream_, current);
    torch::Tensor out;
    {
      c10::cuda::CUDAStreamGuard guard(stream_);
      out = f();
    }
    wait_for(current, stream_);
    return out;
  }

  void capture(Gpt& model, const std::vector<Batch>& micro, const Precision& precision) {
    // The static inputs: allocated outside the graph, refilled before every replay.
    for (const Batch& b : micro) {
      Batch fixed{torch::empty_like(b.input), torch::empty_like(b.target), 0};
      // Packed documents: their positions alone (how many documents a batch holds varies), from
      // which the captured attention builds its mask (model/attention.h).
      if (b.token_layout.defined()) fixed.token_layout.positions = torch::empty_like(b.token_layout.positions);
      static_.push_back(std::move(fixed));
    }
    inv_total_ = torch::empty({}, micro.front().input.options().dtype(torch::kFloat));
    c10::cuda::device_synchronize();
    // Freed here, the gradients are allocated by the captured backward in the graph's pool.
    for (auto& p : params_) p.mutable_grad() = torch::Tensor();
    // The eager steps' cached activation blocks would otherwise stay reserved beside the
    // graph's own pool (torch.cuda.graph empties the cache before capturing too).
    release_cached_memory(stream_.device());
    graph_ = std::make_unique<at::cuda::CUDAGraph>();
    try {
      // Thread-local capture mode: the data loader's worker threads may allocate pinned
      // host memory meanwhile, which the global mode would refuse (and fail the capture).
      on_capture_stream([&] {
        graph_->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
        loss_ =
            accumulate_gradients(model, static_, &precision, AccumulateOptions{0, nullptr, inv_total_, &objective_});
        graph_->capture_end();
        return loss_;
      });
    } catch (const std::exception& e) {
      abandon_capture();
      throw runtime_error(std::string("kernels.cuda_graphs: capturing the training step failed: ") + e.what() +
                          "\n    fix: set kernels.cuda_graphs: false (and report the message)");
    }
  }

  // Leaves capture mode after a failure inside it, so the error can be reported.
  void abandon_capture() {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream_.stream(), &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
      cudaGraph_t partial = nullptr;
      if (cudaStreamEndCapture(stream_.stream(), &partial) == cudaSuccess && partial) cudaGraphDestroy(partial);
    }
    (void)cudaGetLastError();  // the failed capture's error, which the next CUDA call would report otherwise
    graph_.reset();
    loss_ = torch::Tensor();
  }

  // This step's micro-batches into the static inputs (asynchronous device copies on the current stream).
  void load(const std::vector<Batch>& micro, double inv_total) {
    if (micro.size() != static_.size())
      throw runtime_error(
          fmt::format("kernels.cuda_graphs: a step of {} micro-batches, but the graph was captured with {}",
                      micro.size(), static_.size()));
    for (size_t i = 0; i < micro.size(); ++i) {
      for (const auto& [now, fixed] :
           {std::pair{micro[i].input, static_[i].input}, {micro[i].target, static_[i].target}})
        if (!now.sizes().equals(fixed.sizes()))
          throw runtime_error(fmt::format(
              "kernels.cuda_graphs: micro-batch {} has shape {}, but the graph was captured with {} (a graph replays "
              "fixed shapes)\n    fix: set kernels.cuda_graphs: false for data whose batches change shape",
              i, shape_str(now), shape_str(fixed)));
      static_[i].input.copy_(micro[i].input, /*non_blocking=*/true);
      static_[i].target.copy_(micro[i].target, /*non_blocking=*/true);
      if (static_[i].token_layout.defined())
        static_[i].token_layout.positions.copy_(micro[i].token_layout.positions, /*non_blocking=*/true);
    }
    inv_total_.fill_(inv_total);
  }

  std::vector<torch::Tensor> params_;
  const ObjectiveSpec& objective_;
  CUDAStream stream_;
  int64_t eager_steps_ = 0, replays_ = 0;
  std::unique_ptr<at::cuda::CUDAGraph> graph_;
  std::vector<Batch> static_;
  torch::Tensor inv_total_;  // 0-dim float32: 1 / the step's unit count
  torch::Tensor loss_;       // the graph's output: the step's mean loss
};

}  // namespace

std::unique_ptr<StepGraph> make_step_graph(torch::Device device, std::vector<torch::Tensor> params,
                                           const ObjectiveSpec& objective) {
  if (!device.is_cuda()) throw config_error("kernels.cuda_graphs needs a CUDA device, not " + device.str());
  return std::make_unique<CudaStepGraph>(device, std::move(params), objective);
}

}  // namespace gputrain

#include "parallel/pipeline.h"

#include <algorithm>

#include "objective/objectives.h"
#include "util/error.h"

namespace gputrain {
namespace {

constexpr int kActivationTag = 21, kGradientTag = 22;

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// A tensor of the residual stream's dtype and device: the first norm the stage runs. (The final norm
// is the last stage's: under ZeRO-3 the other stages leave theirs on the host, in the weights' dtype.)
const torch::Tensor& stream_like(Gpt& model, const StageLayers& stage) {
  return (*model->transformer->h)[static_cast<size_t>(stage.first)]->as<Block>()->ln_1->weight;
}

// The residual stream and its gradient between neighbouring stages, through
// the communicator's device (the CPU for Gloo when the model is on a GPU).
// Sends never wait: their tensors stay alive until finish().
class StageLink {
 public:
  explicit StageLink(Communicator& pp) : pp_(pp) {}

  void send(torch::Tensor t, int dst, int tag, const std::string& what) {
    const torch::Device wire = pp_.tensor_device();
    if (t.device() != wire) t = t.to(wire);
    sent_.push_back(t);
    sends_.push_back(
        pp_.send(sent_.back(), dst, tag, "pipeline stage " + std::to_string(pp_.rank()) + " sending " + what));
  }
  void receive(torch::Tensor& into, int src, int tag, const std::string& what) {
    const torch::Device wire = pp_.tensor_device();
    torch::Tensor buf = into.device() == wire ? into : torch::empty_like(into, torch::TensorOptions().device(wire));
    pp_.recv(buf, src, tag, "pipeline stage " + std::to_string(pp_.rank()) + " receiving " + what).wait();
    if (!buf.is_same(into)) into.copy_(buf);
  }
  void finish() {
    for (auto& s : sends_) s.wait();
    sends_.clear();
    sent_.clear();
  }

 private:
  Communicator& pp_;
  std::vector<torch::Tensor> sent_;
  std::vector<PendingCollective> sends_;
};

// One micro-batch's tensors between its forward and its backward.
struct InFlight {
  torch::Tensor input;   // the received stream (requires grad), undefined on the first stage
  torch::Tensor output;  // the stream sent on, or the scaled loss on the last stage
};

// A micro-batch's stream through this stage's blocks: embedded on the first stage, else received
// from the previous one into `received` (made to require grad when `grad`). The one stage forward of
// training and evaluation.
torch::Tensor stage_forward(Gpt& model, StageLink& link, const Batch& b, const StageLayers& stage, int rank,
                            const torch::TensorOptions& stream, bool grad, torch::Tensor& received,
                            const std::string& what) {
  const DocumentLayout documents = b.token_layout.to(stream.device());
  torch::Tensor x;
  if (rank == 0) {
    x = model->embed(b.input.to(stream.device()), documents);
  } else {
    received = torch::empty({b.input.size(0), b.input.size(1), model->cfg.d_model}, stream);
    link.receive(received, rank - 1, kActivationTag, what);
    if (grad) received.requires_grad_(true);
    x = received;
  }
  return model->run_blocks(x, stage.first, stage.last, documents);
}

class StageRunner {
 public:
  StageRunner(Gpt& model, Communicator& pp, const std::vector<Batch>& micro, const PipelineStepOptions& o)
      : model_(model), link_(pp), micro_(micro), o_(o), held_(micro.size()) {
    stage_ = pp.rank();
    stages_ = pp.size();
    dtype_ = stream_like(model, o.stage).scalar_type();  // the residual stream's (autocast keeps it)
    device_ = stream_like(model, o.stage).device();
    if (o.memory_in_use) memory_start_ = o.memory_in_use();
  }

  bool first() const { return stage_ == 0; }
  bool last() const { return stage_ == stages_ - 1; }

  void forward(size_t m) {
    const Batch& b = micro_[m];
    InFlight f;
    {
      AutocastGuard autocast = autocast_for(o_.precision);
      const std::string what = "activations of micro-batch " + std::to_string(m);
      torch::Tensor x =
          stage_forward(model_, link_, b, o_.stage, stage_, torch::TensorOptions().dtype(dtype_).device(device_),
                        /*grad=*/true, f.input, what);
      if (last()) {
        torch::Tensor loss = o_.objective->stream_loss_sum(model_, x, b);
        loss_sum_ = loss_sum_.defined() ? loss_sum_ + loss.detach() : loss.detach();
        f.output = loss * inv_total();
      } else {
        f.output = x;
        link_.send(x.detach().contiguous(), stage_ + 1, kActivationTag, what);
      }
    }
    held_[m] = std::move(f);
    ++in_flight_;
    stats_.peak_micro_batches_held = std::max(stats_.peak_micro_batches_held, in_flight_);
    if (o_.memory_in_use)
      stats_.peak_memory_bytes = std::max(stats_.peak_memory_bytes, o_.memory_in_use() - memory_start_);
  }

  void backward(size_t m) {
    InFlight& f = held_[m];
    if (o_.before_backward) o_.before_backward(m + 1 == micro_.size());
    if (last()) {
      (o_.precision ? o_.precision->for_backward(f.output) : f.output).backward();
    } else {
      torch::Tensor grad = torch::empty_like(f.output);
      link_.receive(grad, stage_ + 1, kGradientTag, "gradient of micro-batch " + std::to_string(m));
      f.output.backward(grad);
    }
    if (!first())
      link_.send(f.input.grad().contiguous(), stage_ - 1, kGradientTag, "gradient of micro-batch " + std::to_string(m));
    f = InFlight{};
    --in_flight_;
  }

  torch::Tensor finish() {
    link_.finish();
    return last() ? loss_sum_ * inv_total() : torch::zeros({}, torch::TensorOptions().device(device_));
  }

  const PipelineStepStats& stats() const { return stats_; }

 private:
  double inv_total() const { return inverse_unit_count(*o_.objective, micro_, o_.total_targets); }

  Gpt& model_;
  StageLink link_;
  const std::vector<Batch>& micro_;
  const PipelineStepOptions& o_;
  std::vector<InFlight> held_;
  torch::Tensor loss_sum_;
  int stage_ = 0, stages_ = 1;
  c10::ScalarType dtype_;
  torch::Device device_ = torch::kCPU;
  int64_t in_flight_ = 0, memory_start_ = 0;
  PipelineStepStats stats_;
};

}  // namespace

bool stage_holds(const std::string& name, const StageLayers& stage, bool tie_embeddings) {
  if (name == "transformer.wte.weight") return stage.embeds || (stage.has_head && tie_embeddings);
  if (starts_with(name, "transformer.wpe.")) return stage.embeds;
  if (starts_with(name, "transformer.ln_f.") || starts_with(name, "lm_head.")) return stage.has_head;
  const std::string blocks = "transformer.h.";
  if (starts_with(name, blocks)) {
    const int64_t i = std::stoll(name.substr(blocks.size()));
    return i >= stage.first && i < stage.last;
  }
  throw std::logic_error("stage_holds: unknown parameter " + name);
}

std::vector<std::string> keep_stage(Gpt& model, const StageLayers& stage) {
  std::vector<std::string> kept;
  torch::NoGradGuard no_grad;
  for (auto& item : model->named_parameters()) {
    if (stage_holds(item.key(), stage, model->cfg.tie_embeddings)) {
      kept.push_back(item.key());
    } else {
      item.value().set_data(torch::empty({0}, item.value().options()));
    }
  }
  return kept;
}

torch::Tensor pipeline_train_step(Gpt& model, Communicator& pp, const std::vector<Batch>& micro,
                                  const PipelineStepOptions& options, PipelineStepStats* stats) {
  // A step of prompts only (chat data, every target masked) adds nothing to the gradients: normalized by 1.
  StageRunner run(model, pp, micro, options);
  const size_t m = micro.size();
  if (options.schedule == PipelineSchedule::kGpipe) {
    for (size_t i = 0; i < m; ++i) run.forward(i);
    for (size_t i = 0; i < m; ++i) run.backward(i);
  } else {
    const size_t warmup = std::min(static_cast<size_t>(pp.size() - pp.rank() - 1), m);
    for (size_t i = 0; i < warmup; ++i) run.forward(i);
    for (size_t i = 0; i + warmup < m; ++i) {
      run.forward(i + warmup);
      run.backward(i);
    }
    for (size_t i = m - warmup; i < m; ++i) run.backward(i);
  }
  torch::Tensor loss = run.finish();
  if (stats) *stats = run.stats();
  return loss;
}

void sum_tied_embedding_grads(torch::Tensor weight, Communicator& ends) {
  if (!weight.grad().defined()) weight.mutable_grad() = torch::zeros_like(weight);
  const torch::Device wire = ends.tensor_device();
  torch::Tensor g = weight.grad().device() == wire ? weight.grad() : weight.grad().to(wire);
  ends.all_reduce_sum_now(g, "sum of the tied embedding's gradients (first and last pipeline stage)");
  if (!g.is_same(weight.grad())) weight.mutable_grad().copy_(g);
}

void pipeline_forward_only(Gpt& model, Communicator& pp, std::vector<Batch>& batches, const StageLayers& stage,
                           const Precision* precision,
                           const std::function<void(const torch::Tensor& stream, Batch& b)>& at_head) {
  torch::NoGradGuard no_grad;
  AutocastGuard autocast = autocast_for(precision);
  const bool was_training = model->is_training();
  model->eval();
  const bool last = pp.rank() == pp.size() - 1;
  const torch::TensorOptions stream = stream_like(model, stage).options();
  StageLink link(pp);
  for (size_t i = 0; i < batches.size(); ++i) {
    const std::string what = "forward-only activations of batch " + std::to_string(i);
    torch::Tensor received;
    const torch::Tensor x = stage_forward(model, link, batches[i], stage, pp.rank(), stream, false, received, what);
    if (last) at_head(x, batches[i]);
    else link.send(x.contiguous(), pp.rank() + 1, kActivationTag, what);
  }
  link.finish();
  model->train(was_training);
}

double pipeline_eval_loss_sum(Gpt& model, Communicator& pp, const std::vector<Batch>& batches, const StageLayers& stage,
                              const Precision* precision, const ObjectiveSpec& objective) {
  std::vector<Batch> held = batches;  // (the same tensors: an objective's metric sums land in the caller's)
  torch::Tensor loss_sum;             // on the device: one read at the end
  pipeline_forward_only(model, pp, held, stage, precision, [&](const torch::Tensor& x, Batch& b) {
    const torch::Tensor loss = objective.stream_loss_sum(model, x, b).to(torch::kDouble);
    loss_sum = loss_sum.defined() ? loss_sum + loss : loss;
  });
  return loss_sum.defined() ? loss_sum.item<double>() : 0.0;
}

void check_micro_batch_split(int64_t sequences, int64_t parts) {
  if (parts >= 1 && sequences % parts == 0) return;
  throw config_error("parallel.pp_microbatches (" + std::to_string(parts) + ") must divide the " +
                     std::to_string(sequences) +
                     " sequences of a step (train.grad_accum_steps x "
                     "per_device_batch_size, as run)\n    fix: set parallel.pp_microbatches: 0 (one micro-batch per "
                     "grad_accum_steps) or a divisor of " +
                     std::to_string(sequences));
}

std::vector<Batch> split_micro_batches(const std::vector<Batch>& micro, int64_t parts) {
  std::vector<torch::Tensor> inputs, targets, positions;
  for (const auto& b : micro) {
    inputs.push_back(b.input);
    targets.push_back(b.target);
    if (b.token_layout.defined()) positions.push_back(b.token_layout.positions);
  }
  const torch::Tensor input = torch::cat(inputs), target = torch::cat(targets);
  const torch::Tensor position = positions.empty() ? torch::Tensor() : torch::cat(positions);
  const int64_t sequences = input.size(0);
  check_micro_batch_split(sequences, parts);
  std::vector<Batch> out;
  const int64_t rows = sequences / parts;
  for (int64_t i = 0; i < parts; ++i) {
    Batch b;
    b.input = input.narrow(0, i * rows, rows);
    b.target = target.narrow(0, i * rows, rows);
    b.target_count = b.target.ne(kIgnoreIndex).sum().item<int64_t>();
    if (position.defined()) b.token_layout = document_layout(position.narrow(0, i * rows, rows));
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace gputrain

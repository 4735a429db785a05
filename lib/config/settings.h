// The typed recipe. YAML becomes these structs once, in config/ (DESIGN rule 2);
// nothing outside config/ looks a key up by string. Every field's YAML name,
// default, allowed range and documentation live in config/schema.cpp.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace gputrain {

struct RunSettings {
  std::string name = "gputrain";
  std::string output_dir;  // empty = runs/<name>
  int64_t seed = 1337;
  std::string device = "auto";   // auto | cpu | cuda | cuda:N
  int64_t threads = 0;           // 0 = auto (the cores this process may use)
  int64_t memory_budget_mb = 0;  // CPU batch size auto: memory a run may use; 0 = 80% of available RAM
  bool cpu_malloc_cache = true;  // keep freed large CPU tensor blocks for reuse (util/host_allocator.h)
};

// model.arch. Each architecture (its norm, MLP, positions, defaults and Hugging Face
// mapping) lives in one file of model/ (model/architecture.h); config/ only names it.
enum class ModelArch { kGpt, kLlama, kQwen2, kMistral };
enum class AttentionImpl { kSdpa, kMath };

// LoRA (model/lora.h): which Linear layers of each block get adapters.
enum class LoraTarget { kQkv, kProj, kMlpUp, kMlpDown };
// What a LoRA run's checkpoints hold: the adapters alone (the frozen base comes
// from model.init_from, checked by fingerprint on resume) or every weight.
enum class LoraSave { kAdapters, kFull };

struct LoraSettings {
  int64_t rank = 0;      // 0 = no LoRA (every parameter trains)
  double alpha = 16.0;   // the update is scaled by alpha / rank
  double dropout = 0.0;  // on the adapters' input, training only
  std::vector<LoraTarget> targets = {LoraTarget::kQkv, LoraTarget::kProj};
  LoraSave save = LoraSave::kAdapters;
};

// QLoRA (model/quantized_weight.h): the frozen base's block Linears stored in 4 bits as
// bitsandbytes stores them (precision/quantize_4bit.h), dequantized per layer for the product.
enum class QuantBase { kNone, kNf4, kFp4 };
struct QuantizeSettings {
  QuantBase base = QuantBase::kNone;
  bool double_quant = true;  // the per-block absmax quantized again to 8 bits (blocks of 256)
  int64_t block_size = 64;   // weights per absmax

  bool enabled() const { return base != QuantBase::kNone; }
};

// How a mixture's experts are kept evenly loaded: Switch Transformer's balancing loss, or DeepSeek-V3's
// per-expert routing bias moved after each step by the sign of each expert's load error (no loss).
enum class MoeBalance { kAuxLoss, kBias };

// Mixture of experts (model/moe.h): every `every`-th block's MLP becomes
// `experts` MLPs behind a top-k softmax router.
struct MoeSettings {
  int64_t experts = 0;  // 0 = dense MLPs
  int64_t top_k = 2;
  int64_t every = 1;              // blocks every-1, 2 every-1, ... are mixtures (1 = all)
  double capacity_factor = 1.25;  // tokens per expert = ceil(factor x tokens x top_k / experts); 0 = no limit
  double aux_loss_coef = 0.01;    // weight of the load-balancing loss (Switch Transformer's)
  MoeBalance balance = MoeBalance::kAuxLoss;
  double bias_rate = 0.001;  // balance: bias: each step's move of an expert's bias (DeepSeek-V3's gamma)

  bool enabled() const { return experts > 0; }
  bool is_moe_block(int64_t i) const { return enabled() && (i + 1) % every == 0; }
};

// Rotary position scaling for contexts past the pretraining length (model/rope_scaling.h), as
// Hugging Face's rope_scaling / rope_parameters spell it.
enum class RopeScalingType { kNone, kLinear, kDynamic, kLlama3, kYarn };
// A switch that follows another key unless the recipe sets it.
enum class Toggle { kAuto, kOn, kOff };

struct RopeScalingSettings {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;
  int64_t original_max_positions = 0;  // the pretraining context (llama3, yarn; dynamic: model.max_positions)
  double low_freq_factor = 1.0;        // llama3
  double high_freq_factor = 4.0;       // llama3
  double beta_fast = 32.0;             // yarn
  double beta_slow = 1.0;              // yarn
  double attention_factor = 0.0;       // yarn: scale of cos/sin; 0 = 0.1 ln(factor) + 1
  bool truncate = true;                // yarn: round the correction range to whole dimensions

  bool enabled() const { return type != RopeScalingType::kNone; }
};

struct ModelSettings {
  ModelArch arch = ModelArch::kGpt;
  int64_t vocab_size = 50304;
  int64_t seq_len = 1024;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t d_model = 768;
  int64_t n_kv_head = 0;  // key/value heads (grouped-query attention); 0 = n_head
  double mlp_ratio = 4.0;
  int64_t mlp_width = 0;        // MLP hidden size; 0 = auto from mlp_ratio (model/architecture.h mlp_hidden)
  double norm_eps = 1e-5;       // LayerNorm / RMSNorm epsilon
  double rope_theta = 10000.0;  // rotary positions: base of their frequencies
  RopeScalingSettings rope_scaling;
  int64_t head_dim = 0;        // per-head width; 0 = d_model / n_head
  int64_t max_positions = 0;   // rotary: the position limit (config.json max_position_embeddings); 0 = seq_len
  int64_t sliding_window = 0;  // attention sees the last this many positions; 0 = all (causal)
  double dropout = 0.0;
  bool bias = true;
  Toggle attention_bias = Toggle::kAuto;  // q/k/v and output projections; auto = bias (model/architecture.h biases())
  Toggle mlp_bias = Toggle::kAuto;        // the MLP's Linear layers; auto = bias
  bool tie_embeddings = true;
  AttentionImpl attention = AttentionImpl::kSdpa;
  int64_t pad_vocab_to_multiple_of = 0;  // 0 = no padding
  // Weights to start from (checkpoint/model_files.h): a safetensors file, a
  // directory holding model.safetensors (the Hugging Face layout of model.arch),
  // or a gputrain checkpoint directory. Empty = random initialization.
  std::string init_from;
  LoraSettings lora;
  QuantizeSettings quantize;
  MoeSettings moe;

  int64_t kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int64_t kv_width() const { return kv_heads() * head_width(); }  // k (and v) columns of attn.c_attn
  // Embedding rows: vocab_size rounded up for tensor-core-friendly shapes.
  // The extra rows are never targets; their logits learn to stay low.
  int64_t padded_vocab() const {
    const int64_t m = pad_vocab_to_multiple_of;
    return m > 1 ? (vocab_size + m - 1) / m * m : vocab_size;
  }
  int64_t head_width() const { return head_dim > 0 ? head_dim : d_model / n_head; }
  int64_t q_width() const { return n_head * head_width(); }  // q columns of attn.c_attn, c_proj's input
  bool attention_biased() const { return attention_bias == Toggle::kAuto ? bias : attention_bias == Toggle::kOn; }
  bool mlp_biased() const { return mlp_bias == Toggle::kAuto ? bias : mlp_bias == Toggle::kOn; }
  int64_t position_limit() const { return max_positions > 0 ? max_positions : seq_len; }
};

// preference: pairs from `data prepare --format preference` (data/preference_pairs.h).
enum class DataFormat { kNone, kSynthetic, kTokens, kText, kPreference };
enum class TokenDtype { kAuto, kUint16, kUint32 };
// How windows are cut from a token stream (data/token_windows.h).
enum class Packing { kStream, kDocuments, kPadded };
enum class SyntheticKind { kMarkov, kUniform };

// A learnable synthetic language: an order-n Markov chain over the vocabulary
// whose entropy rate is computed exactly (data/synthetic_language.h).
struct SyntheticSettings {
  SyntheticKind kind = SyntheticKind::kMarkov;
  int64_t vocab = 0;      // tokens the language uses; 0 = model.vocab_size
  int64_t order = 2;      // context length of the chain
  int64_t branching = 4;  // successors per context
  int64_t seed = 0;       // the language itself (which successors, which probabilities)
};

// One source of a mixture (data.*.mixture): its files and its share of the samples.
struct MixtureSourceSettings {
  std::vector<std::string> paths;  // absolute after loading, like DataSourceSettings::paths
  double weight = 1.0;
};

struct DataSourceSettings {
  DataFormat format = DataFormat::kNone;
  // tokens / text: files or glob patterns, absolute after loading (YAML key
  // `path`: one string or a list).
  std::vector<std::string> paths;
  TokenDtype dtype = TokenDtype::kAuto;     // tokens: width of one id; auto = from the llm.c header or sidecar
  std::array<double, 2> span = {0.0, 1.0};  // fraction of the windows used: [start, end)
  Packing packing = Packing::kStream;
  bool mask_document_boundaries = false;  // no loss on a prediction made from an end-of-document input
  bool document_attention = false;        // attention and positions stay inside each document
  bool shared_prompt = true;              // preference: one row a pair, the prompt computed once
  bool pack_pairs = false;                // preference: pairs one after another in rows, no padding between
  int64_t eot_token = -1;                 // end-of-document id; -1 = auto (from the shards' sidecar)
  SyntheticSettings synthetic;
  // tokens: several sources sampled in proportion to their weights (instead of `paths`); the other
  // keys apply to every source (data/mixture.h).
  std::vector<MixtureSourceSettings> mixture;
};

struct DataSettings {
  DataSourceSettings train;  // format none until a recipe names its data
  DataSourceSettings eval;   // format none = no evaluation
  int64_t num_workers = 1;   // background threads preparing batches; 0 = in the training thread
  int64_t prefetch = 4;      // batches prepared ahead
  bool pin_memory = true;    // page-locked host batches for async copies (CUDA only)
};

enum class CheckpointingPolicy { kNone, kFull, kSelective };
// What a step with a non-finite loss or gradient norm does (train/nan_guard.h).
enum class NanPolicy { kAbort, kSkip, kWarn };
// What a finite loss spike does (train/spike_guard.h).
enum class SpikePolicy { kOff, kSkip, kRollback };
// What the step minimizes: one spec per value (objective/objectives.h).
enum class TrainObjective { kCausalLm, kDpo, kOrpo, kSimpo };
// DPO's loss of the reward margin (TRL's loss_type): sigmoid (DPO), ipo, hinge (SLiC), robust (rDPO).
enum class PreferenceLoss { kSigmoid, kIpo, kHinge, kRobust };
// Where DPO's reference log-probabilities come from: auto = the base with LoRA's adapters off under
// model.lora, else a frozen copy of the starting weights; model = that frozen copy even under LoRA;
// precomputed = auto's, for every pair once before training, stored beside the run (the copy freed).
enum class PreferenceReference { kAuto, kModel, kPrecomputed };

// train.preference: the preference objectives' settings (objective/preference_loss.h), TRL's
// meanings; each objective reads only its own (objective/objectives.h says which).
struct PreferenceSettings {
  double beta = 0.1;
  PreferenceLoss loss = PreferenceLoss::kSigmoid;
  double label_smoothing = 0.0;
  PreferenceReference reference = PreferenceReference::kAuto;
  double simpo_gamma = 0.5;
  double sft_weight = 0.0;  // simpo: TRL CPO's cpo_alpha, the NLL of the chosen completions
};

struct TrainSettings {
  TrainObjective objective = TrainObjective::kCausalLm;
  PreferenceSettings preference;
  int64_t per_device_batch_size = 8;  // 0 = auto (train/batch_finder.h)
  int64_t global_batch_size = 0;      // sequences per optimizer step; needed by batch size auto
  int64_t grad_accum_steps = 1;
  int64_t max_steps = 1000;
  int64_t log_every = 10;
  int64_t eval_every = 0;  // 0 = evaluate only at the end (when data.eval is set)
  int64_t eval_steps = 20;
  bool eval_full = false;      // evaluate every window of data.eval once instead of eval_steps batches
  double max_grad_norm = 1.0;  // 0 = no clipping (the norm is still reported)
  CheckpointingPolicy gradient_checkpointing = CheckpointingPolicy::kNone;
  int64_t checkpoint_every = 2;   // selective: blocks 0, k, 2k, ... are recomputed
  int64_t empty_cache_steps = 0;  // release cached allocator memory every N steps; 0 = never
  NanPolicy nan_policy = NanPolicy::kAbort;
  SpikePolicy spike_policy = SpikePolicy::kOff;
  int64_t spike_window = 100;       // accepted steps the mean and deviation are taken over
  double spike_threshold = 6.0;     // standard deviations above the mean that make a spike
  int64_t spike_max_rollbacks = 3;  // rollback: more spikes than this stop the run
};

enum class PrecisionMode { kFp32, kTf32, kBf16, kFp16, kBf16Pure };

// fp16's loss scaling (precision/loss_scaler.h); the defaults are PyTorch GradScaler's.
struct PrecisionSettings {
  PrecisionMode mode = PrecisionMode::kFp32;
  double loss_scale = 0;  // fp16: 0 = dynamic, > 0 = this fixed scale
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

// How a CUDA training step runs (train/step_graph.h).
struct KernelsSettings {
  // Capture the forward and backward of a step's micro-batches as one CUDA
  // graph after a few eager steps, and replay it every step after.
  bool cuda_graphs = false;
};

enum class OptimName { kAdamW, kAdamW8bit, kAdafactor, kLion, kSgd, kMuon };
// auto = fused where we have kernels for the optimizer (adamw, adamw8bit), else foreach.
enum class OptimImpl { kAuto, kForeach, kFused };
enum class ScheduleName { kConstant, kCosine, kLinear };

struct ScheduleSettings {
  ScheduleName name = ScheduleName::kCosine;
  int64_t warmup_steps = 0;
  double min_lr_ratio = 0.1;  // final lr = lr * min_lr_ratio (cosine, linear)
  int64_t decay_steps = 0;    // 0 = train.max_steps
};

// 8-bit AdamW: which tensors keep 32-bit moments (bitsandbytes' rule).
struct AdamW8bitSettings {
  int64_t min_8bit_size = 4096;   // tensors with fewer elements stay 32-bit
  bool embeddings_32bit = false;  // true = token/position embeddings stay 32-bit (bnb's StableEmbedding advice)
};

// Adafactor (Shazeer & Stern 2018; the defaults of transformers' Adafactor
// except relative_step and scale_parameter, which are off so optim.lr and the
// schedule drive it like any other optimizer).
struct AdafactorSettings {
  double beta1 = 0.0;                         // first-moment decay; 0 = no momentum (no state for it)
  double decay_rate = -0.8;                   // second moment decay: beta2_t = 1 - t^decay_rate
  double clip_threshold = 1.0;                // the update's RMS is clipped to this
  std::array<double, 2> eps = {1e-30, 1e-3};  // added to grad^2; floor of the parameter RMS scale
  bool scale_parameter = false;               // lr *= max(eps[1], RMS(param))
  bool relative_step = false;                 // lr = min(1e-2, 1/sqrt(step)) instead of optim.lr
};

struct LionSettings {
  std::array<double, 2> betas = {0.9, 0.99};
};

struct SgdSettings {
  double momentum = 0.9;
  double dampening = 0.0;
  bool nesterov = false;
};

// Muon's lr adjustment per matrix [A, B] (torch.optim.Muon's adjust_lr_fn): original = Keller Jordan's
// sqrt(max(1, A/B)); match_rms_adamw = Moonlight's 0.2 sqrt(max(A, B)), for an AdamW-tuned lr.
enum class MuonAdjustLr { kOriginal, kMatchRmsAdamW };
enum class MuonIterationDtype { kBf16, kFp32 };

// torch.optim.AdamW's defaults: Muon's AdamW for what is not a hidden matrix.
struct MuonAdamWSettings {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.01;
};

// torch.optim.Muon's defaults (optim/muon.h); optim.lr and optim.weight_decay are Muon's own.
struct MuonSettings {
  double momentum = 0.95;
  bool nesterov = true;
  int64_t ns_steps = 5;
  std::array<double, 3> ns_coefficients = {3.4445, -4.7750, 2.0315};
  double eps = 1e-7;
  MuonAdjustLr adjust_lr = MuonAdjustLr::kOriginal;
  MuonIterationDtype ns_dtype = MuonIterationDtype::kBf16;
  MuonAdamWSettings adamw;
};

struct OptimSettings {
  OptimName name = OptimName::kAdamW;
  OptimImpl impl = OptimImpl::kAuto;
  double lr = 6e-4;
  std::array<double, 2> betas = {0.9, 0.95};  // adamw, adamw8bit
  double eps = 1e-8;                          // adamw, adamw8bit
  double weight_decay = 0.1;
  bool decay_embeddings = false;
  AdamW8bitSettings adamw8bit;
  AdafactorSettings adafactor;
  LionSettings lion;
  SgdSettings sgd;
  MuonSettings muon;
  ScheduleSettings schedule;
};

enum class CommBackend { kAuto, kNccl, kGloo };
// ZeRO-3's units gathered (and computed) in: auto = bf16 under precision.mode bf16, else the weights' dtype.
enum class GatherDtype { kAuto, kWeights, kBf16 };
enum class PipelineSchedule { kOneFOneB, kGpipe };
// Where the optimizer state lives: with the shards; host memory (CUDA runs); files (zero 3).
enum class OptimizerOffload { kNone, kCpu, kNvme };
// How context-parallel attention meets the other ranks' keys and values.
enum class ContextMethod { kAllGather, kRing };

// How the processes of a run share the work (parallel/). The world itself
// (rank, size, rendezvous) comes from the environment (parallel/world.h).
struct ParallelSettings {
  int64_t dp = 0;  // data-parallel degree; 0 = auto (all processes)
  int64_t tp = 1;  // tensor-parallel degree: each layer's heads and MLP columns split over tp processes
  int64_t pp = 1;  // pipeline-parallel degree: the layer stack split into pp stages
  PipelineSchedule pp_schedule = PipelineSchedule::kOneFOneB;
  int64_t pp_microbatches = 0;  // 0 = train.grad_accum_steps micro-batches per step
  int64_t ep = 1;  // expert-parallel degree: each mixture layer's experts split over ep data-parallel ranks
  int64_t cp = 1;  // context-parallel degree: each sequence split over cp ranks (parallel/context_parallel.h)
  ContextMethod cp_method = ContextMethod::kAllGather;
  CommBackend backend = CommBackend::kAuto;  // auto = NCCL on CUDA, Gloo on the CPU
  double bucket_mb = 25;                     // gradients are all-reduced in buckets of about this size, during backward
  int64_t zero = 0;                   // 0 = replicated; 1 = shard optimizer state; 2 = also gradients; 3 = also weights
  bool reshard_after_forward = true;  // zero 3: free a unit's gathered weights after its forward
  GatherDtype gather_dtype = GatherDtype::kAuto;  // zero 3: the dtype units are gathered in (fp32 shards stay)
  OptimizerOffload offload_optimizer = OptimizerOffload::kNone;  // cpu: state and update on the host (CUDA runs)
  std::string offload_dir;      // offload_optimizer nvme: where the state files go (a local disk); empty = output_dir
  bool offload_params = false;  // zero 3 on CUDA: shards, their gradients and the optimizer state in host memory
  double timeout_s = 300;       // a collective (or the rendezvous) that takes longer ends the run
};

// Saving and resuming (checkpoint/, train/run_checkpoints.h).
struct CheckpointSettings {
  int64_t every = 0;            // save every N steps; 0 = only when the run stops (at_end)
  int64_t keep_last = 3;        // complete checkpoints kept; 0 = all
  std::string dir;              // empty = <output_dir>/checkpoints
  std::string resume = "auto";  // auto | never | a checkpoint directory (absolute after loading)
  bool at_end = true;           // save when max_steps is reached (preemption, SIGINT and max_wall_time always save)
  bool async = false;  // write checkpoints on a background thread from a host copy (checkpoint/background_saver.h)
  double max_wall_time = 0;  // seconds: save and stop before this much time has passed; 0 = no limit
  std::vector<std::string> preempt_signals = {"SIGTERM", "SIGUSR1"};  // finish the step, save, exit 143
};

enum class ProgressStyle { kAuto, kBar, kLines, kOff };

struct MetricsSettings {
  ProgressStyle progress = ProgressStyle::kAuto;
  // Profile steps [profile_at, profile_at + profile_steps) with the PyTorch
  // profiler (metrics/step_profiler.h); 0 = off.
  int64_t profile_at = 0;
  int64_t profile_steps = 3;
  bool tensorboard = true;  // event files under <output_dir>/tensorboard/ (metrics/tensorboard_writer.h)
};

struct Settings {
  RunSettings run;
  ModelSettings model;
  DataSettings data;
  TrainSettings train;
  PrecisionSettings precision;
  KernelsSettings kernels;
  OptimSettings optim;
  ParallelSettings parallel;
  CheckpointSettings checkpoint;
  MetricsSettings metrics;

  // Derived values every consumer agrees on.
  int64_t tokens_per_step() const { return train.per_device_batch_size * train.grad_accum_steps * model.seq_len; }
  std::string resolved_output_dir() const { return run.output_dir.empty() ? "runs/" + run.name : run.output_dir; }
  std::string resolved_checkpoint_dir() const {
    return checkpoint.dir.empty() ? resolved_output_dir() + "/checkpoints" : checkpoint.dir;
  }
  // parallel.gather_dtype auto: bf16 under bf16 autocast, else the weights' dtype.
  GatherDtype resolved_gather_dtype() const {
    if (parallel.gather_dtype != GatherDtype::kAuto) return parallel.gather_dtype;
    return precision.mode == PrecisionMode::kBf16 ? GatherDtype::kBf16 : GatherDtype::kWeights;
  }
};

}  // namespace gputrain

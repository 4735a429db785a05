// The decoder every architecture builds: pre-norm blocks of causal attention
// (scaled_dot_product_attention, grouped-query when model.n_kv_head is set) and
// an MLP, with the norm, MLP and positions model.arch's architecture names
// (model/architecture.h: GPT-2's LayerNorm, GELU and learned positions; Llama's
// RMSNorm, SwiGLU and rotary positions). Submodules carry GPT-2's checkpoint
// names (transformer.h.0.attn.c_attn, ...) for all: each architecture's file
// maps them to its Hugging Face names. The model knows nothing of ranks or
// devices (DESIGN rule 1).
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "config/settings.h"
#include "model/attention.h"
#include "model/linear.h"
#include "model/moe.h"
#include "model/norm.h"
#include "model/rotary.h"
#include "util/document_layout.h"
#include "util/ignore_index.h"

namespace gputrain {

// Generation: the keys and values of the tokens seen so far, per block, so that each new token
// attends to them without recomputing them (GptImpl::forward_cached).
struct KvCache {
  std::vector<torch::Tensor> keys, values;  // per block: [B, n_kv_head, length, D]
  int64_t length = 0;                       // positions cached
};

// Called around each unit of a training or evaluation forward pass, in order: the embeddings
// (unit 0), each block (1..n_layer), the head (n_layer + 1, ln_f and lm_head). Whoever keeps the
// weights elsewhere between uses installs them (parallel/fully_sharded.h); the model knows not why.
// Unit 0's backward reads none of its weights (an embedding lookup's gradient needs only the token
// ids), so its weights need not be there for it; a tied head's backward does read the embedding.
struct UnitHooks {
  virtual ~UnitHooks() = default;
  virtual void before_forward(int64_t unit) = 0;
  // The unit's outputs (some may be undefined); returns them, maybe rerouted through autograd so
  // that backward can ask for the weights again.
  virtual std::vector<torch::Tensor> after_forward(int64_t unit, std::vector<torch::Tensor> outputs) = 0;
  // Whoever keeps a vocabulary table in parts (its rows spread over ranks) may use it from them, never
  // installing it whole (between before_forward and after_forward of its unit): the embedding of
  // tokens [B, T] -> [B, T, d_model]; the head's loss per target of y = ln_f(stream) [N, d_model]
  // against targets [N] (-log-probability, 0 where ignored); the head's logits [N, padded vocab]
  // (without gradients: throws under them). Undefined: the model uses the installed weights.
  virtual torch::Tensor embedding_lookup(const torch::Tensor& /*tokens*/) { return {}; }
  virtual torch::Tensor head_token_losses(const torch::Tensor& /*y*/, const torch::Tensor& /*targets*/) { return {}; }
  virtual torch::Tensor head_logits(const torch::Tensor& /*y*/) { return {}; }
};

struct CausalSelfAttentionImpl : torch::nn::Module {
  // `rotary` (rotary positions) is shared by all blocks; null for learned positions.
  CausalSelfAttentionImpl(const ModelSettings& cfg, std::shared_ptr<RotaryEmbedding> rotary);
  // `documents` (packed documents; null: one sequence per row): attention stays inside each
  // document and rotary positions restart at each.
  torch::Tensor forward(const torch::Tensor& x, const DocumentAttention* documents = nullptr);
  // Inference on new tokens x at positions offset.. attending to themselves and to `keys`/`values`
  // (undefined when empty), which get the new keys and values appended.
  torch::Tensor forward_cached(const torch::Tensor& x, torch::Tensor& keys, torch::Tensor& values, int64_t offset);

  // Heads this module computes (tensor parallelism gives each rank a share):
  // queries, and keys/values (fewer under grouped-query attention).
  int64_t n_head, n_kv_head;
  int64_t sliding_window;  // model.sliding_window; 0 = plain causal
  double dropout;
  AttentionImpl impl;
  std::shared_ptr<RotaryEmbedding> rotary;
  // Where set, computes attention instead (context parallelism's gathering attention,
  // parallel/context_parallel.h): q, k, v of this module's tokens, which `layout`'s positions place.
  using AttentionTap =
      std::function<torch::Tensor(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  const DocumentLayout& layout, int64_t window, double dropout_p)>;
  AttentionTap attention_tap;
  // c_attn's rows are [q (n_head x D); k (n_kv_head x D); v (n_kv_head x D)].
  Linear c_attn{nullptr}, c_proj{nullptr};
  torch::nn::Dropout resid_dropout{nullptr};

 private:
  // q, k and v [B, H, T, D] of x (rotated for positions offset.., or `positions` [B, T] where
  // defined, with rotary positions), and the query width n_head x D.
  struct Heads {
    torch::Tensor q, k, v;
    int64_t width;
  };
  Heads project(const torch::Tensor& x, int64_t offset, const torch::Tensor& positions = {});
};
TORCH_MODULE(CausalSelfAttention);

struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(const ModelSettings& cfg);
  torch::Tensor forward(const torch::Tensor& x);

  // GELU: c_proj(gelu(c_fc x)). SwiGLU: c_fc's rows are [gate; up] and the
  // MLP is c_proj(silu(gate x) * up x), Llama's gate_proj/up_proj/down_proj.
  bool swiglu;
  Linear c_fc{nullptr}, c_proj{nullptr};
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(Mlp);

struct BlockImpl : torch::nn::Module {
  // `moe`: this block's MLP is a mixture of experts sharing that context (null: dense).
  BlockImpl(const ModelSettings& cfg, std::shared_ptr<RotaryEmbedding> rotary, std::shared_ptr<MoeContext> moe);
  torch::Tensor forward(const torch::Tensor& x, const DocumentAttention* documents = nullptr);
  // The same block with its last residual add left to the caller: given the
  // stream as x + pending (pending undefined: x), returns {h, branch} whose
  // sum is forward(x + pending). The caller fuses that add with the next
  // norm (NormImpl::add_forward), as this block fuses its own adds with ln_1
  // and ln_2.
  std::pair<torch::Tensor, torch::Tensor> forward_deferred(const torch::Tensor& x, const torch::Tensor& pending,
                                                           const DocumentAttention* documents = nullptr);
  // Inference with block `layer`'s keys and values in `cache` (KvCache).
  torch::Tensor forward_cached(const torch::Tensor& x, KvCache& cache, size_t layer);

  Norm ln_1{nullptr}, ln_2{nullptr};
  CausalSelfAttention attn{nullptr};
  // One of the two, registered as "mlp" either way.
  Mlp mlp{nullptr};
  MoeMlp moe{nullptr};
  bool checkpoint = false;  // set by apply_activation_checkpointing (model/activation_checkpointing.h)
};
TORCH_MODULE(Block);

// The "transformer." prefix of GPT-2's parameter names.
struct GptBodyImpl : torch::nn::Module {
  GptBodyImpl(const ModelSettings& cfg, const std::shared_ptr<MoeContext>& moe);

  torch::nn::Embedding wte{nullptr};
  torch::nn::Embedding wpe{nullptr};  // learned positions only
  torch::nn::Dropout drop{nullptr};
  torch::nn::ModuleList h{nullptr};
  Norm ln_f{nullptr};
};
TORCH_MODULE(GptBody);

struct GptImpl : torch::nn::Module {
  explicit GptImpl(const ModelSettings& cfg);

  // tokens [B, T] int64 -> logits [B, T, padded_vocab()]. With `documents` (a packed batch's layout,
  // data.*.document_attention) each token sees only its own document, at positions counted from
  // that document's start: the logits each document would have alone.
  torch::Tensor forward(const torch::Tensor& tokens, const DocumentLayout& documents = {});
  // Sum (not mean) of the cross-entropy over targets != kIgnoreIndex, so that
  // callers can normalize by the token count of a whole accumulated step.
  torch::Tensor loss_sum(const torch::Tensor& tokens, const torch::Tensor& targets,
                         const DocumentLayout& documents = {});
  // The log-probabilities of targets [N] at `positions` [N] (flat indices into tokens' B x T; one
  // may repeat) summed over consecutive `segments` (their counts, summing to N): [segments] fp32 with
  // gradients. ln_f and the output head run at those positions alone (a preference loss reads each
  // sequence's completion, a few tokens after a long prompt).
  torch::Tensor logp_sums(const torch::Tensor& tokens, const torch::Tensor& positions, const torch::Tensor& targets,
                          const std::vector<int64_t>& segments, const DocumentLayout& documents = {});
  // Inference (no dropout, no gradients needed): logits [B, T, padded_vocab()] of tokens [B, T] at
  // positions cache.length.., seeing the earlier tokens through `cache`, which then holds these too.
  torch::Tensor forward_cached(const torch::Tensor& tokens, KvCache& cache);
  // How many positions the model can take: model.seq_len with learned positions (its table's
  // rows), else model.max_positions (model.seq_len when that is auto); no limit under dynamic rope scaling.
  int64_t context_length() const;

  // The three parts forward and loss_sum are made of, for running the model
  // in pieces (pipeline stages, parallel/pipeline.h): the residual stream
  // [B, T, d_model] from tokens, through blocks [first, last), and from the
  // stream to the loss sum (ln_f, the output head, cross-entropy). Each stage of a packed batch
  // takes its layout.
  torch::Tensor embed(const torch::Tensor& tokens, const DocumentLayout& documents = {});
  torch::Tensor run_blocks(torch::Tensor x, int64_t first, int64_t last, const DocumentLayout& documents = {});
  torch::Tensor head_loss_sum(const torch::Tensor& x, const torch::Tensor& targets);
  // logp_sums from the last block's stream [B, T, d_model] (a pipeline's last stage).
  torch::Tensor head_logp_sums(const torch::Tensor& x, const torch::Tensor& positions, const torch::Tensor& targets,
                               const std::vector<int64_t>& segments);

  // Every parameter (LoRA's adapters included) to its initial value under init_seed
  // (model/initial_values.h): the same numbers any part of it gets where a process keeps only that part.
  void reset_parameters();

  // Whether the parameters were made on the meta device (model/meta_build.h): shapes, no storage yet.
  bool built_on_meta() const;
  int64_t parameter_count() const;  // unique parameters (tied weights once), frozen ones included
  // The mixture-of-experts layers, by block index (a pipeline stage's blocks keep theirs).
  std::map<int64_t, MoeMlp> mixture_layers() const;
  // The parameter names of each unit of UnitHooks (a tied head's weight is unit 0's wte).
  std::vector<std::vector<std::string>> unit_parameter_names() const;

  ModelSettings cfg;
  // The global torch seed when the model was built (torch::manual_seed): what its initial weights
  // are a function of, with each parameter's name and shape.
  uint64_t init_seed = 0;
  GptBody transformer{nullptr};
  Linear lm_head{nullptr};  // only when embeddings are untied
  // Tied embeddings: the output head's bf16 copy of wte's weight, as LinearImpl::weight_copy.
  torch::Tensor head_weight_copy;
  std::shared_ptr<MoeContext> moe;        // shared by the mixture layers; null without model.moe
  std::shared_ptr<UnitHooks> unit_hooks;  // null: the weights stay where they are
  // Where set, completes logp_sums' per-sequence sums of this process's tokens into the whole
  // sequences' (context parallelism splits each sequence over processes: parallel/context_parallel.h);
  // the gradient reaches each part unchanged. Null: the sequences are whole here.
  std::function<torch::Tensor(const torch::Tensor& part_sums)> sequence_sums_tap;
  torch::Tensor whole_sequence_sums(const torch::Tensor& part_sums) const {
    return sequence_sums_tap ? sequence_sums_tap(part_sums) : part_sums;
  }
};
TORCH_MODULE(Gpt);

}  // namespace gputrain

#include "model/gpt.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <limits>

#include "model/activation_checkpointing.h"
#include "model/architecture.h"
#include "model/cross_entropy.h"
#include "model/fused_bias_gelu.h"
#include "model/gpt_shapes.h"
#include "model/initial_values.h"
#include "model/lora.h"
#include "model/meta_build.h"
#include "model/weight_copy.h"

namespace gputrain {

namespace nn = torch::nn;

// Dropout with p = 0 still runs an op and records an autograd node in
// training mode; skip it. One rule for every dropout site in the model.
static torch::Tensor apply_dropout(nn::Dropout& d, const torch::Tensor& x) { return d->options.p() > 0 ? d(x) : x; }

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const ModelSettings& cfg, std::shared_ptr<RotaryEmbedding> r)
    : n_head(cfg.n_head),
      n_kv_head(cfg.kv_heads()),
      sliding_window(cfg.sliding_window),
      dropout(cfg.dropout),
      impl(cfg.attention),
      rotary(std::move(r)) {
  const LinearBiases biases = linear_biases(cfg);
  c_attn = register_module("c_attn", Linear(cfg.d_model, cfg.q_width() + 2 * cfg.kv_width(), biases.qkv));
  c_proj = register_module("c_proj", Linear(cfg.q_width(), cfg.d_model, biases.out));
  resid_dropout = register_module("resid_dropout", nn::Dropout(cfg.dropout));
}

CausalSelfAttentionImpl::Heads CausalSelfAttentionImpl::project(const torch::Tensor& x, int64_t offset,
                                                                const torch::Tensor& positions) {
  const int64_t B = x.size(0), T = x.size(1);
  auto qkv = c_attn(x);
  // This module's share of the columns: n_head (n_kv_head) heads of D each.
  const int64_t D = qkv.size(-1) / (n_head + 2 * n_kv_head), width = n_head * D, kv = n_kv_head * D;
  // q, k and v as [B, H, T, D] views of one split of the columns. A split's
  // backward is one concatenation of the three gradients; indexing a permuted
  // [3, B, H, T, D] view (or narrowing) instead gives, per slice, a zeroed
  // full-size buffer, a strided copy and an add: 36 more kernels per step in GPT-2 124M.
  const std::vector<torch::Tensor> parts = qkv.split_with_sizes({width, kv, kv}, -1);
  auto heads = [&](const torch::Tensor& t, int64_t h) { return t.view({B, T, h, D}).transpose(1, 2); };
  Heads out{heads(parts[0], n_head), heads(parts[1], n_kv_head), heads(parts[2], n_kv_head), width};
  if (rotary) {
    auto rotated = [&](const torch::Tensor& t) {
      return positions.defined() ? rotary->apply(t, positions) : rotary->apply(t, offset);
    };
    out.q = rotated(out.q);
    out.k = rotated(out.k);
  }
  return out;
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x, const DocumentAttention* documents) {
  const int64_t B = x.size(0), T = x.size(1);
  auto [q, k, v, width] = project(x, 0, documents ? documents->layout().positions : torch::Tensor());
  const double p = is_training() ? dropout : 0.0;
  if (attention_tap && !documents)
    throw std::logic_error("an attention tap (context parallelism) needs the batch's positions");
  const torch::Tensor y = attention_tap ? attention_tap(q, k, v, documents->layout(), sliding_window, p)
                          : documents   ? attend_documents(q, k, v, *documents, sliding_window, p, impl)
                                        : causal_attention(q, k, v, sliding_window, p, impl);
  return apply_dropout(resid_dropout, c_proj(y.transpose(1, 2).reshape({B, T, width})));
}

torch::Tensor CausalSelfAttentionImpl::forward_cached(const torch::Tensor& x, torch::Tensor& keys,
                                                      torch::Tensor& values, int64_t offset) {
  const int64_t B = x.size(0), T = x.size(1);
  auto [q, k, v, width] = project(x, offset);
  keys = keys.defined() ? at::cat({keys, k}, 2) : k.contiguous();
  values = values.defined() ? at::cat({values, v}, 2) : v.contiguous();
  // Query i (position offset + i) sees the keys at positions <= its own, within the window if any.
  const auto long_opts = x.options().dtype(at::kLong);
  const torch::Tensor query_pos = at::arange(offset, offset + T, long_opts).unsqueeze(1);
  const torch::Tensor key_pos = at::arange(keys.size(2), long_opts).unsqueeze(0);
  torch::Tensor allowed = key_pos <= query_pos;
  if (sliding_window > 0) allowed = allowed.logical_and(key_pos > query_pos - sliding_window);
  auto y = impl == AttentionImpl::kSdpa
               ? at::scaled_dot_product_attention(q, keys, values, allowed, 0.0, /*is_causal=*/false,
                                                  /*scale=*/std::nullopt, /*enable_gqa=*/n_kv_head != n_head)
               : math_attention(q, keys, values, 0.0, allowed);
  return c_proj(y.transpose(1, 2).reshape({B, T, width}));
}

MlpImpl::MlpImpl(const ModelSettings& cfg) : swiglu(architecture(cfg).mlp == MlpKind::kSwiGlu) {
  const int64_t h = mlp_hidden(cfg);
  const bool bias = linear_biases(cfg).mlp;
  c_fc = register_module("c_fc", Linear(cfg.d_model, architecture(cfg).mlp_fc_rows(h), bias));
  c_proj = register_module("c_proj", Linear(h, cfg.d_model, bias));
  dropout = register_module("dropout", nn::Dropout(cfg.dropout));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  torch::Tensor a;
  if (swiglu) {
    const std::vector<torch::Tensor> gate_up = c_fc(x).chunk(2, -1);  // this rank's share of each, under tp
    a = at::silu(gate_up[0]) * gate_up[1];
  } else if (x.is_cuda() && !c_fc->quantized && c_fc->bias.defined() && c_fc->weight.size(0) % 8 == 0 &&
             !c_fc->input_tap && !c_fc->output_tap && !c_fc->lora_A.defined()) {
    // A plain c_fc on CUDA: its bias goes into the activation kernel, whose
    // backward then reduces the bias gradient in the same pass.
    torch::Tensor y = at::linear(x, c_fc->product_weight());
    a = fused_bias_gelu_available(y, c_fc->bias) ? fused_bias_gelu(y, c_fc->bias)
                                                 : at::gelu((y + c_fc->bias).to(y.scalar_type()), "tanh");
  } else {
    a = at::gelu(c_fc(x), "tanh");
  }
  return apply_dropout(dropout, c_proj(a));
}

static Norm make_norm(const ModelSettings& cfg) { return Norm(architecture(cfg).norm, cfg.d_model, cfg.norm_eps); }

BlockImpl::BlockImpl(const ModelSettings& cfg, std::shared_ptr<RotaryEmbedding> rotary,
                     std::shared_ptr<MoeContext> moe_context) {
  ln_1 = register_module("ln_1", make_norm(cfg));
  attn = register_module("attn", CausalSelfAttention(cfg, std::move(rotary)));
  ln_2 = register_module("ln_2", make_norm(cfg));
  if (moe_context) moe = register_module("mlp", MoeMlp(cfg, std::move(moe_context)));
  else mlp = register_module("mlp", Mlp(cfg));
}

std::pair<torch::Tensor, torch::Tensor> BlockImpl::forward_deferred(const torch::Tensor& x,
                                                                    const torch::Tensor& pending,
                                                                    const DocumentAttention* documents) {
  auto [stream, normed] = ln_1->add_forward(x, pending);
  auto [h, normed_h] = ln_2->add_forward(stream, attn->forward(normed, documents));
  return {h, moe ? moe(normed_h) : mlp(normed_h)};
}

torch::Tensor BlockImpl::forward_cached(const torch::Tensor& x, KvCache& cache, size_t layer) {
  auto h = x + attn->forward_cached(ln_1(x), cache.keys[layer], cache.values[layer], cache.length);
  auto normed = ln_2(h);
  return h + (moe ? moe(normed) : mlp(normed));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x, const DocumentAttention* documents) {
  auto [h, branch] = forward_deferred(x, {}, documents);
  return h + branch;
}

// An embedding table whose weight is made as the model's other parameters are (model/meta_build.h),
// left for GptImpl::reset_parameters to fill.
static nn::Embedding make_embedding(int64_t rows, int64_t width) {
  return nn::Embedding(nn::EmbeddingOptions(rows, width)._weight(torch::empty({rows, width}, parameter_options())));
}

GptBodyImpl::GptBodyImpl(const ModelSettings& cfg, const std::shared_ptr<MoeContext>& moe) {
  wte = register_module("wte", make_embedding(cfg.padded_vocab(), cfg.d_model));
  const bool rotary = architecture(cfg).positions == PositionKind::kRotary;
  if (!rotary) wpe = register_module("wpe", make_embedding(cfg.seq_len, cfg.d_model));
  drop = register_module("drop", nn::Dropout(cfg.dropout));
  h = register_module("h", nn::ModuleList());
  auto rotation = rotary ? std::make_shared<RotaryEmbedding>(cfg) : nullptr;
  for (int64_t i = 0; i < cfg.n_layer; ++i) h->push_back(Block(cfg, rotation, cfg.moe.is_moe_block(i) ? moe : nullptr));
  ln_f = register_module("ln_f", make_norm(cfg));
}

GptImpl::GptImpl(const ModelSettings& c) : cfg(c), init_seed(at::detail::getDefaultCPUGenerator().current_seed()) {
  if (cfg.moe.enabled()) moe = std::make_shared<MoeContext>();
  transformer = register_module("transformer", GptBody(cfg, moe));
  if (!cfg.tie_embeddings) lm_head = register_module("lm_head", Linear(cfg.d_model, cfg.padded_vocab(), false));
  if (cfg.lora.rank > 0) add_lora_adapters(*this, cfg.lora);
  if (!built_on_meta()) reset_parameters();  // built on meta: filled where kept
}

torch::Tensor GptImpl::embed(const torch::Tensor& tokens, const DocumentLayout& documents) {
  const int64_t T = tokens.size(1);
  TORCH_CHECK(T <= cfg.seq_len, "sequence of ", T, " tokens exceeds model.seq_len ", cfg.seq_len);
  if (unit_hooks) unit_hooks->before_forward(0);
  torch::Tensor x = unit_hooks ? unit_hooks->embedding_lookup(tokens) : torch::Tensor();
  if (!x.defined()) x = transformer->wte(tokens);
  if (transformer->wpe)
    x = x +
        transformer->wpe(documents.defined() ? documents.positions : at::arange(T, tokens.options().dtype(at::kLong)));
  x = apply_dropout(transformer->drop, x);
  return unit_hooks ? unit_hooks->after_forward(0, {x})[0] : x;
}

// Blocks [first, last) with each block's last residual add deferred into the
// next one's ln_1: returns {x, pending}, the stream being x + pending.
// A checkpointed block takes (and gives) the stream whole: its recomputation
// replays BlockImpl::forward (with the documents, which it keeps until then).
static std::pair<torch::Tensor, torch::Tensor> run_blocks_deferred(GptImpl& m, torch::Tensor x, int64_t first,
                                                                   int64_t last, const DocumentLayout& layout) {
  // The documents' form attention reads, made once for all the blocks.
  const auto documents = layout.defined() ? std::make_shared<const DocumentAttention>(layout) : nullptr;
  torch::Tensor pending;
  for (int64_t i = first; i < last; ++i) {
    auto* block = (*m.transformer->h)[static_cast<size_t>(i)]->as<Block>();
    if (m.unit_hooks) m.unit_hooks->before_forward(i + 1);
    if (block->checkpoint) {
      if (pending.defined()) x = x + pending;
      x = checkpointed_block_forward(*block, x, documents);
      pending = torch::Tensor();
    } else {
      std::tie(x, pending) = block->forward_deferred(x, pending, documents.get());
    }
    if (m.unit_hooks) {
      auto out = m.unit_hooks->after_forward(i + 1, {x, pending});
      x = out[0], pending = out[1];
    }
  }
  return {x, pending};
}

torch::Tensor GptImpl::run_blocks(torch::Tensor x, int64_t first, int64_t last, const DocumentLayout& documents) {
  auto [stream, pending] = run_blocks_deferred(*this, std::move(x), first, last, documents);
  return pending.defined() ? stream + pending : stream;
}

// The whole head's logits of y = ln_f(stream).
static torch::Tensor head_product(GptImpl& m, const torch::Tensor& y) {
  return m.cfg.tie_embeddings ? at::linear(y, autocast_weight(m.transformer->wte->weight, m.head_weight_copy))
                              : m.lm_head(y);
}

// ln_f of the stream x + pending, then the output head.
static torch::Tensor logits_of(GptImpl& m, const torch::Tensor& x, const torch::Tensor& pending = {}) {
  const int64_t unit = m.cfg.n_layer + 1;
  if (m.unit_hooks) m.unit_hooks->before_forward(unit);
  auto y = m.transformer->ln_f->add_forward(x, pending).second;
  torch::Tensor logits;
  if (m.unit_hooks) {
    logits = m.unit_hooks->head_logits(y.reshape({-1, y.size(-1)}));
    if (logits.defined()) {
      std::vector<int64_t> shape = y.sizes().vec();
      shape.back() = logits.size(-1);
      logits = logits.view(shape);
    }
  }
  if (!logits.defined()) logits = head_product(m, y);
  return m.unit_hooks ? m.unit_hooks->after_forward(unit, {logits})[0] : logits;
}

static torch::Tensor loss_of_logits(const torch::Tensor& logits, const torch::Tensor& targets) {
  // fp32 arithmetic whatever the logits' dtype (model/cross_entropy.h); fused on CUDA, where the
  // gradient is written over the logits (nothing else reads them: the head's backward needs its
  // input and weight, not its output).
  return cross_entropy_sum(logits.view({-1, logits.size(-1)}), targets.reshape({-1}), kIgnoreIndex,
                           LogitsAfterLoss::kReuseForGradient);
}

// ln_f of the stream x + pending, the output head and the loss sum against targets: computed by the
// unit hooks where they keep the head's weight in parts, else from the whole head's logits.
static torch::Tensor head_loss(GptImpl& m, const torch::Tensor& x, const torch::Tensor& pending,
                               const torch::Tensor& targets) {
  const int64_t unit = m.cfg.n_layer + 1;
  if (m.unit_hooks) m.unit_hooks->before_forward(unit);
  auto y = m.transformer->ln_f->add_forward(x, pending).second;
  torch::Tensor loss;
  if (m.unit_hooks) loss = m.unit_hooks->head_token_losses(y.reshape({-1, y.size(-1)}), targets.reshape({-1}));
  loss = loss.defined() ? loss.sum() : loss_of_logits(head_product(m, y), targets);
  return m.unit_hooks ? m.unit_hooks->after_forward(unit, {loss})[0] : loss;
}

// ln_f of the stream x + pending at flat positions [N] alone, the output head there, and the
// log-probabilities of targets [N] summed over consecutive `segments` (their counts): each segment's
// sum through the training loss's cross-entropy (fused on CUDA: no float32 copy of the logits), or
// the vocabulary parts' losses per target where the unit hooks keep the head in parts.
static torch::Tensor head_logp_sums_at(GptImpl& m, const torch::Tensor& x, const torch::Tensor& pending,
                                       const torch::Tensor& positions, const torch::Tensor& targets,
                                       const std::vector<int64_t>& segments) {
  const int64_t unit = m.cfg.n_layer + 1;
  if (m.unit_hooks) m.unit_hooks->before_forward(unit);
  const auto pick = [&](const torch::Tensor& t) {
    return t.defined() ? t.reshape({-1, t.size(-1)}).index_select(0, positions) : t;
  };
  const torch::Tensor y = m.transformer->ln_f->add_forward(pick(x), pick(pending)).second;
  const torch::Tensor losses = m.unit_hooks ? m.unit_hooks->head_token_losses(y, targets) : torch::Tensor();
  const torch::Tensor logits = losses.defined() ? torch::Tensor() : head_product(m, y);
  std::vector<torch::Tensor> sums;
  int64_t first = 0;
  for (const int64_t count : segments) {
    // (An empty segment's zero stays in the graph: a context-parallel part without targets still
    // runs the backward its attention's collectives need.)
    if (count == 0) sums.push_back(y.narrow(0, 0, 0).sum().to(torch::kFloat));
    else if (losses.defined()) sums.push_back(-losses.narrow(0, first, count).sum());
    else
      sums.push_back(-cross_entropy_sum(logits.narrow(0, first, count), targets.narrow(0, first, count), kIgnoreIndex));
    first += count;
  }
  const torch::Tensor out = torch::stack(sums);
  return m.whole_sequence_sums(m.unit_hooks ? m.unit_hooks->after_forward(unit, {out})[0] : out);
}

torch::Tensor GptImpl::forward(const torch::Tensor& tokens, const DocumentLayout& documents) {
  auto [x, pending] = run_blocks_deferred(*this, embed(tokens, documents), 0, cfg.n_layer, documents);
  return logits_of(*this, x, pending);
}

torch::Tensor GptImpl::forward_cached(const torch::Tensor& tokens, KvCache& cache) {
  const int64_t T = tokens.size(1);
  TORCH_CHECK(cache.length + T <= context_length(), "positions up to ", cache.length + T,
              " exceed the model's context of ", context_length());
  const size_t blocks = transformer->h->size();
  cache.keys.resize(blocks);
  cache.values.resize(blocks);
  torch::Tensor x = transformer->wte(tokens);
  if (transformer->wpe)
    x = x + transformer->wpe(at::arange(cache.length, cache.length + T, tokens.options().dtype(at::kLong)));
  for (size_t i = 0; i < blocks; ++i) x = (*transformer->h)[i]->as<Block>()->forward_cached(x, cache, i);
  cache.length += T;
  return logits_of(*this, x);
}

int64_t GptImpl::context_length() const {
  if (transformer->wpe) return cfg.seq_len;
  // Dynamic scaling stretches the rotary frequencies past max_positions as the input grows: no limit.
  if (cfg.rope_scaling.type == RopeScalingType::kDynamic) return std::numeric_limits<int32_t>::max();
  return cfg.position_limit();
}

torch::Tensor GptImpl::head_loss_sum(const torch::Tensor& x, const torch::Tensor& targets) {
  return head_loss(*this, x, {}, targets);
}

torch::Tensor GptImpl::head_logp_sums(const torch::Tensor& x, const torch::Tensor& positions,
                                      const torch::Tensor& targets, const std::vector<int64_t>& segments) {
  return head_logp_sums_at(*this, x, {}, positions, targets, segments);
}

torch::Tensor GptImpl::logp_sums(const torch::Tensor& tokens, const torch::Tensor& positions,
                                 const torch::Tensor& targets, const std::vector<int64_t>& segments,
                                 const DocumentLayout& documents) {
  auto [x, pending] = run_blocks_deferred(*this, embed(tokens, documents), 0, cfg.n_layer, documents);
  return head_logp_sums_at(*this, x, pending, positions, targets, segments);
}

torch::Tensor GptImpl::loss_sum(const torch::Tensor& tokens, const torch::Tensor& targets,
                                const DocumentLayout& documents) {
  auto [x, pending] = run_blocks_deferred(*this, embed(tokens, documents), 0, cfg.n_layer, documents);
  return head_loss(*this, x, pending, targets);
}

void GptImpl::reset_parameters() {
  for (const auto& item : named_parameters(/*recurse=*/true)) {
    const torch::Tensor& p = item.value();
    fill_initial(p.detach(), item.key(), initial_distribution(item.key(), p.sizes(), cfg), init_seed,
                 whole_index(p.sizes()));
  }
}

std::vector<std::vector<std::string>> GptImpl::unit_parameter_names() const {
  std::vector<std::vector<std::string>> units(static_cast<size_t>(cfg.n_layer + 2));
  for (const auto& item : named_parameters(/*recurse=*/true))
    units[static_cast<size_t>(unit_of_parameter(item.key(), cfg.n_layer))].push_back(item.key());
  return units;
}

bool GptImpl::built_on_meta() const { return transformer->wte->weight.is_meta(); }

std::map<int64_t, MoeMlp> GptImpl::mixture_layers() const {
  std::map<int64_t, MoeMlp> out;
  const auto& blocks = *transformer->h;
  for (size_t i = 0; i < blocks.size(); ++i)
    if (const MoeMlp& moe = blocks[i]->as<Block>()->moe) out.emplace(static_cast<int64_t>(i), moe);
  return out;
}

int64_t GptImpl::parameter_count() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

}  // namespace gputrain

// Every optim.name against a float64 reference written out here from the
// published algorithm, for each update kernel, and AdamW, SGD and Adafactor
// against PyTorch's and transformers' own (tests/reference/optim_reference.py);
// the 8-bit quantizer's error bounds; bf16 parameters; the ATen op count of a
// step (launches on a GPU); state save/restore; state-size estimates.
#include <catch2/catch.hpp>
#include <ATen/ATen.h>
#include <ATen/record_function.h>

#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "checkpoint/safetensors.h"
#include "model/gpt.h"
#include "model/gpt_shapes.h"
#include "optim/adamw8bit.h"
#include "optim/make_optimizer.h"
#include "optim/quantization.h"
#include "test_util.h"
#include "util/error.h"

using namespace gputrain;
using Catch::Matchers::Contains;

namespace {

// Two groups as the trainer makes them: decayed matrices (incl. one large
// enough for 8-bit moments) and undecayed vectors at half the lr (lr_scale).
struct Problem {
  std::vector<std::string> names = {"w", "big", "t3", "b"};
  std::vector<std::vector<int64_t>> shapes = {{5, 7}, {64, 80}, {3, 2, 4}, {7}};
  std::vector<bool> decayed = {true, true, true, false};
  std::set<std::pair<int, size_t>> no_grad;  // (step, index): that parameter gets no gradient then
  double wd = 0.1;
  double scale_of(size_t i) const { return decayed[i] ? 1.0 : 0.5; }
  double wd_of(size_t i) const { return decayed[i] ? wd : 0.0; }

  std::vector<at::Tensor> initial() const {
    at::manual_seed(11);
    std::vector<at::Tensor> out;
    for (const auto& s : shapes) out.push_back(at::randn(s));
    return out;
  }
  double grad_scale = 1.0;  // tiny gradients make eps matter (Adam's sqrt(v) comes near it)
  std::vector<at::Tensor> grads(int step) const {
    at::manual_seed(100 + step);
    std::vector<at::Tensor> out;
    for (const auto& s : shapes) out.push_back(at::randn(s) * grad_scale);
    return out;
  }
  std::vector<ParamGroup> groups(const std::vector<at::Tensor>& params) const {
    ParamGroup decay{"decay", {}, {}, wd, 1.0}, no_decay{"no_decay", {}, {}, 0.0, 0.5};
    for (size_t i = 0; i < params.size(); ++i) {
      ParamGroup& g = decayed[i] ? decay : no_decay;
      g.names.push_back(names[i]);
      g.params.push_back(params[i]);
    }
    return {decay, no_decay};
  }
};

// Runs `steps` steps of `o` and of `reference` (float64, same grads) and
// returns the largest |difference| relative to (1 + |reference|). `t` is the
// parameter's own step count (it skips the steps without a gradient).
using Reference = std::function<void(size_t index, at::Tensor& p, const at::Tensor& g, double lr, double wd, int t)>;

double max_difference(const OptimSettings& o, const Reference& reference, int steps = 6, double lr = 1e-2,
                      std::unique_ptr<Optimizer>* keep = nullptr, const Problem& pr = Problem{}) {
  std::vector<int> counts(pr.shapes.size(), 0);
  std::vector<at::Tensor> ours, ref;
  for (const auto& t : pr.initial()) {
    ours.push_back(t.clone());
    ref.push_back(t.to(at::kDouble));
  }
  auto opt = make_optimizer(pr.groups(ours), o);
  for (int step = 1; step <= steps; ++step) {
    auto g = pr.grads(step);
    for (size_t i = 0; i < ours.size(); ++i) {
      if (pr.no_grad.count({step, i})) continue;
      ours[i].mutable_grad() = g[i].clone();
      reference(i, ref[i], g[i].to(at::kDouble), lr * pr.scale_of(i), pr.wd_of(i), ++counts[i]);
    }
    opt->step(lr);
    opt->zero_grad();
  }
  double worst = 0;
  for (size_t i = 0; i < ours.size(); ++i)
    worst = std::max(worst, ((ours[i].to(at::kDouble) - ref[i]).abs() / (1 + ref[i].abs())).max().item<double>());
  if (keep) *keep = std::move(opt);
  return worst;
}

// As max_difference, against an optimizer of PyTorch or transformers (tests/reference/optim_reference.py,
// float64): `options` names it and gives its arguments; the per-parameter lr and weight decay are added here.
double external_difference(const OptimSettings& o, nlohmann::json options, const Problem& pr = Problem{}, int steps = 6,
                           double lr = 1e-2) {
  test::TempDir dir;
  std::vector<NamedTensor> problem;
  std::vector<at::Tensor> ours;
  for (const auto& t : pr.initial()) {
    problem.push_back({"param." + std::to_string(ours.size()), t.to(at::kDouble)});
    ours.push_back(t.clone());
  }
  for (size_t i = 0; i < ours.size(); ++i) {
    options["lr"].push_back(lr * pr.scale_of(i));
    options["weight_decay"].push_back(pr.wd_of(i));
  }
  options["steps"] = steps;
  auto opt = make_optimizer(pr.groups(ours), o);
  for (int step = 1; step <= steps; ++step) {
    const auto g = pr.grads(step);
    for (size_t i = 0; i < ours.size(); ++i) {
      if (pr.no_grad.count({step, i})) continue;
      ours[i].mutable_grad() = g[i].clone();
      problem.push_back({"grad." + std::to_string(step) + "." + std::to_string(i), g[i].to(at::kDouble)});
    }
    opt->step(lr);
    opt->zero_grad();
  }
  write_safetensors(dir.file("problem.safetensors"), problem);
  const auto r = test::run_python({std::string(GPUTRAIN_SOURCE_DIR) + "/tests/reference/optim_reference.py",
                                   dir.file("problem.safetensors"), options.dump(), dir.file("out.safetensors")});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const SafetensorsFile theirs = read_safetensors(dir.file("out.safetensors"));
  double worst = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    const at::Tensor* ref = theirs.find("param." + std::to_string(i));
    REQUIRE(ref != nullptr);
    REQUIRE(ref->sizes() == ours[i].sizes());
    worst = std::max(worst, ((ours[i].to(at::kDouble) - *ref).abs() / (1 + ref->abs())).max().item<double>());
  }
  return worst;
}

struct AdamRef {
  double b1 = 0.9, b2 = 0.95, eps = 1e-8;
  std::map<size_t, at::Tensor> m, v;
  void operator()(size_t i, at::Tensor& p, const at::Tensor& g, double lr, double wd, int t) {
    if (!m.count(i)) m[i] = at::zeros_like(p), v[i] = at::zeros_like(p);
    p.mul_(1 - lr * wd);
    m[i] = b1 * m[i] + (1 - b1) * g;
    v[i] = b2 * v[i] + (1 - b2) * g * g;
    const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    p.sub_(lr / bc1 * m[i] / (v[i].sqrt() / std::sqrt(bc2) + eps));
  }
};

OptimSettings settings_for(OptimName name, OptimImpl impl = OptimImpl::kAuto) {
  OptimSettings o;
  o.name = name;
  o.impl = impl;
  return o;
}

}  // namespace

TEST_CASE("adamw, foreach and fused, equals float64 AdamW over 6 steps", "[optim]") {
  for (OptimImpl impl : {OptimImpl::kForeach, OptimImpl::kFused}) {
    INFO("impl " << static_cast<int>(impl));
    AdamRef ref;
    // fp32 arithmetic against fp64: ~1e-6 relative after 6 steps.
    CHECK(max_difference(settings_for(OptimName::kAdamW, impl), std::ref(ref)) < 2e-6);
  }
}

TEST_CASE("adamw, foreach and fused, equals torch.optim.AdamW, also where eps matters", "[optim][python]") {
  Problem tiny;
  tiny.grad_scale = 1e-8;  // sqrt(v) near eps: where eps sits in the denominator changes the update by ~2x
  for (OptimImpl impl : {OptimImpl::kForeach, OptimImpl::kFused}) {
    INFO("impl " << static_cast<int>(impl));
    const OptimSettings o = settings_for(OptimName::kAdamW, impl);
    const nlohmann::json options = {{"optimizer", "adamw"}, {"betas", o.betas}, {"eps", o.eps}};
    CHECK(external_difference(o, options) < 2e-6);
    CHECK(external_difference(o, options, tiny) < 2e-6);
  }
}

TEST_CASE("lion equals float64 Lion over 6 steps", "[optim]") {
  OptimSettings o = settings_for(OptimName::kLion);
  std::map<size_t, at::Tensor> m;
  auto ref = [&](size_t i, at::Tensor& p, const at::Tensor& g, double lr, double wd, int) {
    if (!m.count(i)) m[i] = at::zeros_like(p);
    const at::Tensor c = 0.9 * m[i] + 0.1 * g;
    p.mul_(1 - lr * wd).sub_(lr * c.sign());
    m[i] = 0.99 * m[i] + 0.01 * g;
  };
  CHECK(max_difference(o, ref) < 1e-6);
}

TEST_CASE("sgd with momentum, dampening and nesterov equals float64 torch.optim.SGD", "[optim]") {
  for (bool nesterov : {false, true}) {
    for (double momentum : {0.0, 0.9}) {
      if (nesterov && momentum == 0) continue;
      OptimSettings o = settings_for(OptimName::kSgd);
      o.sgd = {momentum, nesterov ? 0.0 : 0.1, nesterov};
      std::map<size_t, at::Tensor> buf;
      auto ref = [&](size_t i, at::Tensor& p, const at::Tensor& grad, double lr, double wd, int t) {
        at::Tensor d = grad + wd * p;  // L2, as torch's SGD
        if (o.sgd.momentum > 0) {
          buf[i] = t == 1 ? d.clone() : o.sgd.momentum * buf[i] + (1 - o.sgd.dampening) * d;
          d = o.sgd.nesterov ? d + o.sgd.momentum * buf[i] : buf[i];
        }
        p.sub_(lr * d);
      };
      INFO("momentum " << momentum << " nesterov " << nesterov);
      CHECK(max_difference(o, ref) < 1e-6);
      // And torch.optim.SGD itself.
      CHECK(external_difference(o, {{"optimizer", "sgd"},
                                    {"momentum", momentum},
                                    {"dampening", o.sgd.dampening},
                                    {"nesterov", nesterov}}) < 1e-6);
    }
  }
}

TEST_CASE("adafactor equals float64 Adafactor (transformers' algorithm), every option", "[optim]") {
  struct Case {
    double beta1;
    bool scale_parameter, relative_step;
  };
  for (Case c : {Case{0.0, false, false}, Case{0.9, false, false}, Case{0.0, true, false}, Case{0.9, true, true}}) {
    OptimSettings o = settings_for(OptimName::kAdafactor);
    o.adafactor.beta1 = c.beta1;
    o.adafactor.scale_parameter = c.scale_parameter;
    o.adafactor.relative_step = c.relative_step;
    const AdafactorSettings& a = o.adafactor;
    std::map<size_t, at::Tensor> row, col, vsq, m;
    auto rms = [](const at::Tensor& x) { return x.norm().item<double>() / std::sqrt(static_cast<double>(x.numel())); };
    auto ref = [&](size_t i, at::Tensor& p, const at::Tensor& g, double lr, double wd, int t) {
      double step_lr = a.relative_step ? std::min(1e-2, 1.0 / std::sqrt(t)) : lr;
      if (a.scale_parameter) step_lr *= std::max(a.eps[1], rms(p));
      const double beta2t = 1.0 - std::pow(t, a.decay_rate);
      const at::Tensor sq = g * g + a.eps[0];
      at::Tensor update;
      if (p.dim() >= 2) {
        if (!row.count(i)) row[i] = at::zeros_like(sq.mean(-1)), col[i] = at::zeros_like(sq.mean(-2));
        row[i] = beta2t * row[i] + (1 - beta2t) * sq.mean(-1);
        col[i] = beta2t * col[i] + (1 - beta2t) * sq.mean(-2);
        const at::Tensor r = (row[i] / row[i].mean(-1, true)).rsqrt().unsqueeze(-1);
        update = r * col[i].unsqueeze(-2).rsqrt() * g;
      } else {
        if (!vsq.count(i)) vsq[i] = at::zeros_like(p);
        vsq[i] = beta2t * vsq[i] + (1 - beta2t) * sq;
        update = vsq[i].rsqrt() * g;
      }
      update = update / std::max(1.0, rms(update) / a.clip_threshold) * step_lr;
      if (a.beta1 > 0) {
        if (!m.count(i)) m[i] = at::zeros_like(p);
        m[i] = a.beta1 * m[i] + (1 - a.beta1) * update;
        update = m[i];
      }
      p.add_(p, -wd * step_lr).sub_(update);
    };
    INFO("beta1 " << c.beta1 << " scale_parameter " << c.scale_parameter << " relative_step " << c.relative_step);
    CHECK(max_difference(o, ref) < 2e-6);
    // And transformers' Adafactor itself, its arguments set to ours (its defaults differ: docs/training.md, adafactor).
    CHECK(external_difference(o, {{"optimizer", "adafactor"},
                                  {"eps", a.eps},
                                  {"clip_threshold", a.clip_threshold},
                                  {"decay_rate", a.decay_rate},
                                  {"beta1", a.beta1},
                                  {"scale_parameter", a.scale_parameter},
                                  {"relative_step", a.relative_step}}) < 2e-6);
    // Matrices of one shape are updated as a stack (optim/adafactor.cpp): three
    // of 2^19 elements (a batch holds at most 2^20 here, so two and one),
    // three small ones, two 3-d tensors, and vectors; one matrix and one vector
    // miss a gradient on some steps, so their step counts (and beta2t) lag.
    Problem batched;
    batched.names = {"a0", "m0", "a1", "m1", "t0", "v0", "a2", "m2", "t1", "v1", "s"};
    batched.shapes = {{512, 1024}, {6, 5}, {512, 1024}, {6, 5}, {3, 2, 4}, {7},
                      {512, 1024}, {6, 5}, {3, 2, 4},   {7},    {}};
    batched.decayed = {true, true, true, true, true, false, true, true, true, false, false};
    batched.no_grad = {{2, 3}, {3, 3}, {3, 5}};
    row.clear(), col.clear(), vsq.clear(), m.clear();
    CHECK(max_difference(o, ref, 6, 1e-2, nullptr, batched) < 2e-6);
  }
}

namespace {

// ATen ops called directly by the code under test (not those they call in turn),
// views excepted: on a GPU each is a launch or a few.
thread_local int64_t top_level_ops = 0, op_depth = 0;

std::unique_ptr<at::ObserverContext> on_op_start(const at::RecordFunction& op) {
  static const std::set<std::string> views = {"aten::unsqueeze", "aten::unbind", "aten::view",    "aten::narrow",
                                              "aten::select",    "aten::slice",  "aten::squeeze", "aten::as_strided"};
  if (op_depth++ == 0 && !views.count(op.name())) ++top_level_ops;
  return nullptr;
}
void on_op_end(const at::RecordFunction&, at::ObserverContext*) { --op_depth; }

// Top-level ATen ops in the second step of `o` on a GPT of `layers` blocks
// (d 32) with `dtype` weights, grouped as the trainer groups them.
int64_t step_ops(const OptimSettings& o, int layers, at::ScalarType dtype) {
  Gpt model(test::model_settings(64, 16, layers, 2, 32));
  model->to(dtype);
  auto opt = make_optimizer(*model, o);
  auto set_grads = [&] {
    for (auto& p : model->parameters()) p.mutable_grad() = at::randn(p.sizes(), dtype);
  };
  set_grads();
  opt->step(1e-3);
  set_grads();
  top_level_ops = op_depth = 0;
  const at::CallbackHandle handle = at::addThreadLocalCallback(at::RecordFunctionCallback(on_op_start, on_op_end));
  opt->step(1e-3);
  at::removeCallback(handle);
  return top_level_ops;
}

}  // namespace

// The foreach optimizers run multi-tensor ops over a group (Adafactor: one
// stack per shape of matrix, optim/adafactor.cpp; bf16 weights: working sets,
// optim/optimizer.h), so a deeper model adds no ops to a step: on a GPU, a
// fixed number of launches instead of several per tensor.
TEST_CASE("foreach optimizers: a step's ATen op count does not grow with the number of layers", "[optim]") {
  for (OptimName name : {OptimName::kAdamW, OptimName::kAdafactor, OptimName::kLion, OptimName::kSgd})
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      OptimSettings o = settings_for(name, OptimImpl::kForeach);
      o.adafactor.beta1 = 0.9;
      const int64_t two = step_ops(o, 2, dtype), twelve = step_ops(o, 12, dtype);
      INFO(optim_name(name) << ", " << at::toString(dtype) << ": top-level ATen ops, 2 layers " << two << ", 12 layers "
                            << twelve);
      CHECK(twelve == two);
      // When written: adamw 15, lion 9, sgd 7; adafactor 129 (6 matrix shapes x 19, 15 for the rest);
      // bf16 weights 24 more (the working set's copies and rounding).
      CHECK(twelve < 200);
    }
}

TEST_CASE("adafactor factors the second moment of matrices into rows and columns", "[optim]") {
  Problem pr;
  auto params = pr.initial();
  auto opt = make_optimizer(pr.groups(params), settings_for(OptimName::kAdafactor));
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& e : opt->state()) shapes[e.name] = e.tensor.sizes().vec();
  CHECK(shapes.at("big.exp_avg_sq_row") == std::vector<int64_t>{64});
  CHECK(shapes.at("big.exp_avg_sq_col") == std::vector<int64_t>{80});
  CHECK(shapes.at("t3.exp_avg_sq_row") == std::vector<int64_t>{3, 2});
  CHECK(shapes.at("t3.exp_avg_sq_col") == std::vector<int64_t>{3, 4});
  CHECK(shapes.at("b.exp_avg_sq") == std::vector<int64_t>{7});
  CHECK_FALSE(shapes.count("big.exp_avg"));  // beta1 0: no momentum state
}

// --- 8-bit -----------------------------------------------------------------------

TEST_CASE("dynamic quantization maps: 256 sorted codes with exact 0 and 1", "[optim][8bit]") {
  for (bool is_signed : {true, false}) {
    at::Tensor map = dynamic_quant_map(is_signed);
    REQUIRE(map.numel() == 256);
    CHECK(torch::equal(map, std::get<0>(map.sort())));
    CHECK(map[255].item<float>() == 1.0f);
    CHECK(map[zero_code(map)].item<float>() == 0.0f);
    CHECK((map.slice(0, 1) > map.slice(0, 0, 255)).all().item<bool>());  // strictly increasing
    // The smallest non-zero magnitude is 10^-6 x the first decade's midpoint.
    CHECK(map.abs().masked_fill(map == 0, 1).min().item<double>() ==
          Approx(is_signed ? 0.55e-6 : 0.325e-6).epsilon(1e-3));
    if (is_signed) CHECK(map[0].item<double>() == Approx(-(0.1 + 0.9 * 63 / 64.0 + 1.0) / 2).epsilon(1e-6));
    else CHECK(map[0].item<float>() == 0.0f);
  }
}

TEST_CASE("8-bit block quantization: nearest code, exact absmax, error within half the widest gap", "[optim][8bit]") {
  at::manual_seed(3);
  // Blocks of very different scales (as Adam moments have), a zero block and a ragged tail.
  at::Tensor x = at::randn({5 * 256 + 77});
  x.slice(0, 256, 512).mul_(1e-5);
  x.slice(0, 512, 768).zero_();
  x.slice(0, 768, 1024).mul_(300);
  for (bool is_signed : {true, false}) {
    const at::Tensor v = is_signed ? x : x.abs();
    const at::Tensor map = dynamic_quant_map(is_signed);
    const BlockQuantized q = quantize_blockwise(v, map);
    const at::Tensor back = dequantize_blockwise(q, map);
    REQUIRE(q.absmax.numel() == 6);
    const at::Tensor md = map.to(at::kDouble);
    // The widest gap between neighbouring codes (and, signed, from -1 to the lowest code).
    double half_gap = ((md.slice(0, 1) - md.slice(0, 0, 255)).max().item<double>()) / 2;
    if (is_signed) half_gap = std::max(half_gap, 1.0 + md[0].item<double>());
    CHECK(half_gap < (is_signed ? 0.0075 : 0.0036));  // docs/training.md's stated bounds
    for (int64_t b = 0; b < 6; ++b) {
      const at::Tensor blk = v.slice(0, b * 256, std::min<int64_t>(v.numel(), (b + 1) * 256)).to(at::kDouble);
      const double absmax = q.absmax[b].item<double>();
      INFO("block " << b << (is_signed ? " signed" : " unsigned"));
      CHECK(absmax == blk.abs().max().item<double>());
      const at::Tensor err = (back.slice(0, b * 256, b * 256 + blk.numel()).to(at::kDouble) - blk).abs();
      CHECK(err.max().item<double>() <= half_gap * absmax * (1 + 1e-6));
      if (absmax == 0) continue;
      // Each code is the nearest (ties within float rounding).
      const at::Tensor normalized = blk / absmax;
      const at::Tensor dist = (normalized.unsqueeze(1) - md.unsqueeze(0)).abs();
      const at::Tensor best = std::get<0>(dist.min(1));
      const at::Tensor chosen =
          dist.gather(1, q.codes.view({-1}).slice(0, b * 256, b * 256 + blk.numel()).to(at::kLong).unsqueeze(1))
              .squeeze(1);
      CHECK((chosen - best).max().item<double>() < 1e-7);
      CHECK(back[b * 256 + blk.abs().argmax().item<int64_t>()].abs().item<double>() ==
            Approx(absmax * (is_signed && blk[blk.abs().argmax()].item<double>() < 0 ? -md[0].item<double>() : 1.0)));
    }
  }
}

TEST_CASE("adamw8bit equals a float64 block-quantized AdamW, and stays near 32-bit AdamW", "[optim][8bit]") {
  OptimSettings o = settings_for(OptimName::kAdamW8bit);
  const at::Tensor sm = dynamic_quant_map(true).to(at::kDouble), um = dynamic_quant_map(false).to(at::kDouble);
  auto nearest = [](const at::Tensor& x, const at::Tensor& map) {
    return std::get<1>((x.unsqueeze(-1) - map).abs().min(-1));
  };
  // State per tensor: codes and absmax (quantized) or plain moments (small tensors).
  std::map<size_t, at::Tensor> qm, qv, am, av, m32, v32;
  AdamRef plain;
  auto ref = [&](size_t i, at::Tensor& p, const at::Tensor& g, double lr, double wd, int t) {
    if (p.numel() < o.adamw8bit.min_8bit_size) return plain(i, p, g, lr, wd, t);
    const int64_t n = p.numel(), blocks = (n + 255) / 256;
    if (!qm.count(i)) {
      qm[i] = at::full({n}, zero_code(dynamic_quant_map(true)), at::kLong);
      qv[i] = at::zeros({n}, at::kLong);
      am[i] = at::zeros({blocks}, at::kDouble);
      av[i] = at::zeros({blocks}, at::kDouble);
    }
    const at::Tensor scale_m = am[i].repeat_interleave(256).slice(0, 0, n);
    const at::Tensor scale_v = av[i].repeat_interleave(256).slice(0, 0, n);
    at::Tensor m = sm.index_select(0, qm[i]) * scale_m, v = um.index_select(0, qv[i]) * scale_v;
    const at::Tensor gf = g.reshape({-1});
    m = 0.9 * m + 0.1 * gf;
    v = 0.95 * v + 0.05 * gf * gf;
    const double bc1 = 1 - std::pow(0.9, t), bc2 = 1 - std::pow(0.95, t);
    p.mul_(1 - lr * wd).sub_((lr / bc1 * m / (v.sqrt() / std::sqrt(bc2) + 1e-8)).view(p.sizes()));
    const at::Tensor padded_m = at::constant_pad_nd(m, {0, blocks * 256 - n}).view({blocks, 256});
    const at::Tensor padded_v = at::constant_pad_nd(v, {0, blocks * 256 - n}).view({blocks, 256});
    am[i] = std::get<0>(padded_m.abs().max(1));
    av[i] = std::get<0>(padded_v.max(1));
    const at::Tensor sa = am[i].repeat_interleave(256).slice(0, 0, n), sv = av[i].repeat_interleave(256).slice(0, 0, n);
    qm[i] = nearest(at::where(sa > 0, m / sa, at::zeros_like(m)), sm);
    qv[i] = nearest(at::where(sv > 0, v / sv, at::zeros_like(v)), um);
  };
  std::unique_ptr<Optimizer> opt;
  // A moment near a decision boundary may round to the neighbouring code in
  // fp32 but not in fp64; the parameters still agree closely.
  CHECK(max_difference(o, ref, 6, 1e-2, &opt) < 1e-5);
  // Only "big" (5120 elements >= min_8bit_size 4096) is quantized.
  std::map<std::string, at::ScalarType> types;
  for (const auto& e : opt->state()) types[e.name] = e.tensor.scalar_type();
  CHECK(types.at("big.exp_avg_8bit") == at::kByte);
  CHECK(types.at("big.exp_avg_sq_absmax") == at::kFloat);
  CHECK(types.at("w.exp_avg") == at::kFloat);
  CHECK(types.at("b.exp_avg_sq") == at::kFloat);
  CHECK_THAT(opt->describe(), Contains("8-bit moments for 1 of 4 tensors"));

  // Against 32-bit AdamW: after 6 steps at lr 1e-2 the quantization noise
  // moves parameters by a small fraction of the 6e-2 they travelled.
  AdamRef full;
  CHECK(max_difference(o, std::ref(full)) < 2e-3);
}

// --- bf16 parameters (precision.mode: bf16-pure) ---------------------------------

TEST_CASE("bf16 parameters: updates below bf16's resolution survive on average (every optimizer and kernel)",
          "[optim]") {
  struct Case {
    OptimName name;
    OptimImpl impl;
  };
  for (Case c : {Case{OptimName::kAdamW, OptimImpl::kFused}, Case{OptimName::kAdamW, OptimImpl::kForeach},
                 Case{OptimName::kAdamW8bit, OptimImpl::kFused}, Case{OptimName::kLion, OptimImpl::kForeach},
                 Case{OptimName::kSgd, OptimImpl::kForeach}}) {
    OptimSettings o = settings_for(c.name, c.impl);
    o.sgd.momentum = 0;
    // bf16 spacing at 1.0 is 2^-7 = 0.0078; each step moves by lr = 1e-4
    // (Adam's and Lion's first steps move by lr x sign(g); SGD by lr x g, g = 1).
    const int64_t n = 1 << 16;
    at::Tensor p = at::ones({n}, at::kBFloat16);
    auto opt = make_optimizer({ParamGroup{"g", {"p"}, {p}, 0.0, 1.0}}, o);
    p.mutable_grad() = at::ones({n}, at::kBFloat16);
    opt->step(1e-4);
    const double mean = p.to(at::kDouble).mean().item<double>();
    INFO(opt->describe());
    // Round-to-nearest would leave every value at 1.0. Stochastic rounding: the
    // mean moves by 1e-4 (std of the mean ~ 0.0078 * 0.11 / 256 = 3.4e-6).
    CHECK(std::fabs(mean - (1.0 - 1e-4)) < 2e-5);
    CHECK(p.scalar_type() == at::kBFloat16);
  }
}

// The foreach optimizers update bf16 parameters in fp32 working sets of
// several tensors (optim/optimizer.h): each stored value must be the same
// optimizer's fp32 update of the same values, stochastically rounded.
TEST_CASE("bf16 parameters in foreach working sets: each value is its fp32 update, stochastically rounded", "[optim]") {
  CHECK(test::bf16_working_set_mismatch(torch::kCPU) == "");
}

// --- state hooks -------------------------------------------------------------------

TEST_CASE("optimizer state saves and restores: a restored optimizer continues bit for bit", "[optim][state]") {
  for (OptimName name :
       {OptimName::kAdamW, OptimName::kAdamW8bit, OptimName::kAdafactor, OptimName::kLion, OptimName::kSgd}) {
    Problem pr;
    OptimSettings o = settings_for(name);
    o.adafactor.beta1 = 0.9;
    auto a_params = pr.initial();
    auto a = make_optimizer(pr.groups(a_params), o);
    auto run = [&](std::vector<at::Tensor>& params, Optimizer& opt, int from, int to) {
      for (int step = from; step < to; ++step) {
        auto g = pr.grads(step);
        for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = g[i];
        opt.step(1e-2);
        opt.zero_grad();
      }
    };
    run(a_params, *a, 1, 4);
    std::map<std::string, at::Tensor> saved;
    for (const auto& e : a->state()) saved[e.name] = e.tensor.clone();
    std::vector<at::Tensor> b_params;
    for (const auto& p : a_params) b_params.push_back(p.clone());
    auto b = make_optimizer(pr.groups(b_params), o);
    b->load_state(saved);
    run(a_params, *a, 4, 7);
    run(b_params, *b, 4, 7);
    INFO(a->describe());
    for (size_t i = 0; i < a_params.size(); ++i) CHECK(torch::equal(a_params[i], b_params[i]));
    CHECK(saved.at("w.step").item<int64_t>() == 3);
  }
}

TEST_CASE("optimizer state from another optimizer or model is refused, naming the entry", "[optim][state]") {
  Problem pr;
  auto params = pr.initial();
  auto adamw = make_optimizer(pr.groups(params), settings_for(OptimName::kAdamW));
  std::map<std::string, at::Tensor> saved;
  for (const auto& e : adamw->state()) saved[e.name] = e.tensor.clone();

  auto lion = make_optimizer(pr.groups(params), settings_for(OptimName::kLion));
  CHECK_THROWS_WITH(lion->load_state(saved), Contains("'b.exp_avg_sq', which lion") && Contains("fix:"));

  auto other = saved;
  other["big.exp_avg"] = at::zeros({80, 64});
  CHECK_THROWS_WITH(adamw->load_state(other),
                    Contains("'big.exp_avg' is [80, 64] Float in the saved state but [64, 80]"));
  other = saved;
  other.erase("t3.step");
  CHECK_THROWS_WITH(adamw->load_state(other), Contains("has no 't3.step'"));
  try {
    adamw->load_state(other);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kData);
  }
}

// --- kernels, estimates --------------------------------------------------------------

TEST_CASE("optim.impl: fused where a kernel exists, foreach otherwise, with a notice when overridden", "[optim]") {
  const torch::Device cpu = torch::kCPU;
  CHECK(choose_kernel(OptimName::kAdamW, OptimImpl::kAuto, cpu).kernel == UpdateKernel::kFused);
  CHECK(choose_kernel(OptimName::kAdamW, OptimImpl::kForeach, cpu).kernel == UpdateKernel::kForeach);
  CHECK(choose_kernel(OptimName::kAdamW, OptimImpl::kAuto, cpu).notice.empty());
  CHECK(choose_kernel(OptimName::kLion, OptimImpl::kAuto, cpu).kernel == UpdateKernel::kForeach);
  CHECK(choose_kernel(OptimName::kLion, OptimImpl::kAuto, cpu).notice.empty());
  const KernelChoice lion = choose_kernel(OptimName::kLion, OptimImpl::kFused, cpu);
  CHECK(lion.kernel == UpdateKernel::kForeach);
  CHECK_THAT(lion.notice, Contains("lion has no fused kernel; using foreach"));
  const KernelChoice q = choose_kernel(OptimName::kAdamW8bit, OptimImpl::kForeach, cpu);
  CHECK(q.kernel == UpdateKernel::kFused);
  CHECK_THAT(q.notice, Contains("adamw8bit has no foreach implementation"));
}

TEST_CASE("the state-size estimate equals the real optimizer's state, and GPT shapes match the model", "[optim]") {
  ModelSettings m = test::model_settings(300, 16, 2, 2, 64);
  Gpt model(m);
  const auto shapes = gpt_parameter_shapes(m);
  CHECK(test::shape_list_mismatch(m, *model).empty());
  for (OptimName name :
       {OptimName::kAdamW, OptimName::kAdamW8bit, OptimName::kAdafactor, OptimName::kLion, OptimName::kSgd}) {
    for (bool variant : {false, true}) {
      OptimSettings o = settings_for(name);
      o.adamw8bit.embeddings_32bit = variant;
      o.adafactor.beta1 = variant ? 0.9 : 0.0;
      o.sgd.momentum = variant ? 0.9 : 0.0;
      o.adamw8bit.min_8bit_size = 1000;
      auto opt = make_optimizer(*model, o);
      INFO(opt->describe() << " variant " << variant);
      CHECK(estimate_state_bytes(o, shapes) == opt->state_bytes());
    }
  }
}

TEST_CASE("the CPU nearest-code table gives exactly the binary search's code", "[optim][8bit]") {
  for (bool is_signed : {true, false}) {
    const at::Tensor map = dynamic_quant_map(is_signed);
    const float* code = map.data_ptr<float>();
    const NearestCodeTable table(map);
    std::vector<float> xs = {0.0f, -0.0f, 1.0f, -1.0f, 1e-30f, -1e-30f, 1e-7f};
    for (int i = 0; i < 256; ++i) {
      xs.push_back(code[i]);  // every code, its float neighbours and the midpoints to the next
      xs.push_back(std::nextafter(code[i], 2.0f));
      xs.push_back(std::nextafter(code[i], -2.0f));
      if (i < 255) xs.push_back((code[i] + code[i + 1]) / 2);
    }
    at::manual_seed(5);
    const at::Tensor r = at::rand({200000}) * 2 - 1, e = at::pow(10.0, at::rand({200000}) * -8);
    const at::Tensor random = at::cat({r, r * e});
    xs.insert(xs.end(), random.data_ptr<float>(), random.data_ptr<float>() + random.numel());
    int64_t mismatches = 0;
    for (float x : xs) {
      if (!is_signed && x < 0) continue;
      if (table(x) != kernels::quantize_nearest(code, x)) ++mismatches;
    }
    CHECK(mismatches == 0);
  }
}

#include "parallel/expert_parallel.h"

#include <torch/autograd.h>

#include <numeric>

#include "parallel/group_handle.h"
#include "parallel/rank_layout.h"
#include "util/error.h"

namespace gputrain {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t total(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

// One blocking all-to-all of rows, on the wire device and back.
torch::Tensor exchange_rows(const torch::Tensor& x, const std::vector<int64_t>& send, const std::vector<int64_t>& recv,
                            Communicator& group, const char* what) {
  torch::Tensor in = x.contiguous().to(group.tensor_device());  // .to: no copy when it is there already
  std::vector<int64_t> shape = in.sizes().vec();
  shape[0] = total(recv);
  torch::Tensor out = torch::empty(shape, in.options());
  group.all_to_all(out, in, recv, send, what).wait();
  return out.to(x.device());
}

struct AllToAllRows : torch::autograd::Function<AllToAllRows> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, std::vector<int64_t> send,
                               std::vector<int64_t> recv, int64_t group) {
    ctx->saved_data["send"] = send;
    ctx->saved_data["recv"] = recv;
    ctx->saved_data["group"] = group;
    return exchange_rows(x, send, recv, group_from_handle(group), "expert-parallel exchange of routed tokens");
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    Communicator& group = group_from_handle(ctx->saved_data["group"].toInt());
    // The gradient of each received row goes back to the rank it came from.
    const torch::Tensor dx =
        exchange_rows(g[0], ctx->saved_data["recv"].toIntVector(), ctx->saved_data["send"].toIntVector(), group,
                      "expert-parallel exchange of routed tokens' gradients");
    return {dx, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// A mixture layer's exchange over its ep group: `local` experts per rank.
class ExpertAllToAll : public ExpertExchange {
 public:
  ExpertAllToAll(Communicator& group, int64_t local) : group_(group), local_(local) {}

  torch::Tensor run(const torch::Tensor& rows, const std::vector<int64_t>& sizes, const RunExpert& expert) override {
    const int64_t P = group_.size(), L = local_, me = group_.rank();
    // What each rank sends each other rank, per expert: rank r's experts are
    // contiguous, and the rows are grouped by expert, so rank r's rows are too.
    torch::Tensor counts = torch::tensor(sizes, torch::kLong).to(group_.tensor_device());
    torch::Tensor got = torch::empty({P * L}, counts.options());
    const std::vector<int64_t> per_rank(static_cast<size_t>(P), L);
    group_.all_to_all(got, counts, per_rank, per_rank, "expert-parallel exchange of routed token counts").wait();
    got = got.cpu();
    const std::vector<int64_t> from(got.data_ptr<int64_t>(),
                                    got.data_ptr<int64_t>() + P * L);  // [source][local expert]
    std::vector<int64_t> send(static_cast<size_t>(P), 0), recv(static_cast<size_t>(P), 0);
    for (int64_t r = 0; r < P; ++r)
      for (int64_t l = 0; l < L; ++l) {
        send[static_cast<size_t>(r)] += sizes[static_cast<size_t>(r * L + l)];
        recv[static_cast<size_t>(r)] += from[static_cast<size_t>(r * L + l)];
      }
    const torch::Tensor arrived = AllToAllRows::apply(rows, send, recv, group_handle(group_));
    // Arrived rows are source-major; each local expert takes its rows from every source at once.
    const std::vector<torch::Tensor> pieces = arrived.split_with_sizes(from, 0);
    std::vector<torch::Tensor> back(pieces.size());
    for (int64_t l = 0; l < L; ++l) {
      std::vector<torch::Tensor> mine;
      std::vector<int64_t> lengths;
      for (int64_t s = 0; s < P; ++s) {
        mine.push_back(pieces[static_cast<size_t>(s * L + l)]);
        lengths.push_back(from[static_cast<size_t>(s * L + l)]);
      }
      const torch::Tensor y = expert(me * L + l, at::cat(mine, 0));
      const std::vector<torch::Tensor> parts = y.split_with_sizes(lengths, 0);
      for (int64_t s = 0; s < P; ++s) back[static_cast<size_t>(s * L + l)] = parts[static_cast<size_t>(s)];
    }
    return AllToAllRows::apply(at::cat(back, 0), recv, send, group_handle(group_));
  }

 private:
  Communicator& group_;
  int64_t local_;
};

}  // namespace

bool is_expert_parameter(const std::string& name) { return expert_of(name) >= 0; }

torch::Tensor all_to_all_rows(const torch::Tensor& x, const std::vector<int64_t>& send,
                              const std::vector<int64_t>& recv, Communicator& group) {
  return AllToAllRows::apply(x, send, recv, group_handle(group));
}

bool ep_splits(const ProcessGroups& groups, const std::string& name) {
  return groups.ep() && is_expert_parameter(name);
}

std::set<std::string> parallelize_experts(Gpt& model, Communicator& ep) {
  const int64_t E = model->cfg.moe.experts, P = ep.size();
  if (!model->cfg.moe.enabled() || E % P != 0)  // validate refuses these first; this guards other callers
    throw config_error("parallel.ep (" + std::to_string(P) + ") must divide model.moe.experts (" + std::to_string(E) +
                       ")");
  const int64_t L = E / P, first = ep.rank() * L;
  std::set<std::string> emptied;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < model->transformer->h->size(); ++i) {
    auto* block = (*model->transformer->h)[i]->as<Block>();
    if (!block->moe) continue;
    block->moe->exchange = std::make_shared<ExpertAllToAll>(ep, L);
    for (int64_t e = 0; e < E; ++e) {
      if (e >= first && e < first + L) continue;
      const std::string prefix = "transformer.h." + std::to_string(i) + ".mlp.experts." + std::to_string(e) + ".";
      for (auto& p : (*block->moe->experts)[static_cast<size_t>(e)]->named_parameters()) {
        p.value().set_data(torch::empty({0}, p.value().options()));
        emptied.insert(prefix + p.key());
      }
    }
  }
  return emptied;
}

}  // namespace gputrain

#include "parallel/context_layout.h"

#include <ATen/ATen.h>

#include <vector>

#include "parallel/through_wire.h"
#include "util/document_layout.h"
#include "util/sequence_chunks.h"

namespace gputrain {

torch::Tensor context_places(int64_t T, int place, int size, torch::Device device) {
  const SequenceChunks c = sequence_chunks(T, size, place);
  const auto opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  auto chunk = [&](int64_t i) { return torch::arange(i * c.length, (i + 1) * c.length, opts); };
  return c.second < 0 ? chunk(c.first) : torch::cat({chunk(c.first), chunk(c.second)});
}

torch::Tensor ContextLayout::visible(int64_t queries, int64_t keys, int64_t first_row, int64_t rows) const {
  torch::NoGradGuard no_grad;
  if (rows < 0) rows = places.size(1) - first_row;
  const torch::Tensor query_places = places[queries].narrow(0, first_row, rows);
  const torch::Tensor distance = query_places.unsqueeze(1) - places[keys].unsqueeze(0);  // [rows, Tl]
  torch::Tensor seen = distance >= 0;
  if (window > 0) seen = seen.logical_and(distance < window);
  torch::Tensor same_document =
      documents[queries].narrow(1, first_row, rows).unsqueeze(2) == documents[keys].unsqueeze(1);
  if (branches.defined()) {  // a key in the trunk, or in the query's branch
    const torch::Tensor key_branch = branches[keys].unsqueeze(1);
    same_document = same_document.logical_and(
        key_branch.eq(0).logical_or(branches[queries].narrow(1, first_row, rows).unsqueeze(2) == key_branch));
  }
  return same_document.logical_and(seen.unsqueeze(0)).unsqueeze(1);
}

torch::Tensor ContextLayout::visible_all(int64_t queries) const {
  std::vector<torch::Tensor> each;
  for (int64_t r = 0; r < places.size(0); ++r) each.push_back(visible(queries, r));
  return torch::cat(each, -1);
}

ContextLayout context_layout(const torch::Tensor& positions, const torch::Tensor& branches, int64_t window,
                             Communicator& cp) {
  torch::NoGradGuard no_grad;
  const int n = cp.size();
  const int64_t B = positions.size(0), Tl = positions.size(1), T = Tl * n;
  const torch::Device home = positions.device();
  // Positions and branches travel together: [n, 1 or 2, B, Tl].
  const torch::Tensor mine =
      branches.defined() ? torch::stack({positions, branches.to(positions.device())}) : positions.unsqueeze(0);
  const torch::Tensor gathered = through_wire(
      cp, mine.to(torch::kLong), {n, mine.size(0), B, Tl},
      [&](torch::Tensor& out, torch::Tensor& in) { return cp.all_gather(out, in, "context-parallel positions"); });
  const torch::Tensor all = gathered.select(1, 0);
  ContextLayout out;
  std::vector<torch::Tensor> each;
  for (int r = 0; r < n; ++r) each.push_back(context_places(T, r, n, home));
  out.places = torch::stack(each);
  // The window in order of places, where a document starts at each position 0.
  torch::Tensor in_window = torch::empty({B, T}, positions.options().dtype(torch::kLong));
  in_window.index_copy_(1, out.places.view({-1}), all.movedim(0, 1).reshape({B, T}));
  const torch::Tensor document = document_ids(in_window);
  out.documents = document.index_select(1, out.places.view({-1})).view({B, n, Tl}).movedim(1, 0).contiguous();
  out.window = window;
  if (branches.defined()) out.branches = gathered.select(1, 1).to(home).contiguous();
  return out;
}

}  // namespace gputrain

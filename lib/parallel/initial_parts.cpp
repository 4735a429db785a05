#include "parallel/initial_parts.h"

#include <ATen/ATen.h>

#include <set>
#include <stdexcept>

#include "util/replace_data.h"

namespace gputrain {

InitialParts::InitialParts(const Gpt& model, const PartReader* files) : seed_(model->init_seed), files_(files) {
  for (const auto& item : model->named_parameters(/*recurse=*/true)) {
    const at::IntArrayRef shape = item.value().sizes();
    params_[item.key()] = {initial_distribution(item.key(), shape, model->cfg), whole_index(shape)};
  }
}

void InitialParts::set_tensor_split(const std::vector<TensorShard>& split, int rank, int size) {
  for (const TensorShard& s : split) {
    if (s.dim < 0) continue;
    Parameter& p = params_.at(s.name);
    p.index = shard_index(p.index, s, rank, size);
    p.sliced = size > 1;
  }
}

const InitialParts::Parameter& InitialParts::parameter(const std::string& name) const {
  const auto it = params_.find(name);
  if (it == params_.end()) throw std::logic_error("InitialParts: no parameter " + name);
  return it->second;
}

void InitialParts::fill(torch::Tensor& out, const std::string& name, const WholeIndex& at) const {
  const PartReader::Coverage from_files = files_ ? files_->covers(name) : PartReader::Coverage::kNone;
  if (from_files != PartReader::Coverage::kAll) fill_initial(out, name, parameter(name).distribution, seed_, at);
  if (from_files != PartReader::Coverage::kNone) files_->read(out, name, at);
}

void InitialParts::fill_rows(const std::string& name, torch::Tensor& out, int64_t first, int64_t count) const {
  const Parameter& p = parameter(name);
  const int64_t rows = out.dim() == 0 ? 1 : out.size(0);
  WholeIndex index = p.index;
  index.rows = at::cat({p.index.rows.narrow(0, first, count), at::full({rows - count}, -1, at::kLong)});
  fill(out, name, index);
}

std::optional<Quantized4bit> InitialParts::stored_4bit(const std::string& name, int64_t first, int64_t count) const {
  if (!files_ || parameter(name).sliced) return std::nullopt;
  return files_->stored_4bit(name, first, count);
}

std::optional<Quantized4bit> InitialParts::whole_stored_4bit(const std::string& name, int64_t first,
                                                             int64_t count) const {
  return files_ ? files_->stored_4bit(name, first, count) : std::nullopt;
}

int64_t InitialParts::materialize(Gpt& model, const std::vector<NamedTensor>& held, torch::Device device) const {
  torch::NoGradGuard no_grad;
  int64_t bytes = 0;
  std::set<std::string> filled;
  for (const auto& h : held) {
    if (!h.tensor.is_meta()) continue;
    // Filled on the host a piece at a time, so a device parameter needs no whole host copy.
    torch::Tensor data = torch::empty(h.tensor.sizes(), h.tensor.options().device(device));
    fill(data, h.name, parameter(h.name).index);
    replace_data(h.tensor, data);
    filled.insert(h.name);
  }
  for (const auto& h : held) bytes += static_cast<int64_t>(h.tensor.nbytes());
  for (auto& item : model->named_parameters(/*recurse=*/true))
    if (item.value().is_meta() && !filled.count(item.key()))
      replace_data(item.value(), torch::empty({0}, item.value().options().device(device)));
  return bytes;
}

InitialParts InitialParts::with_files(const PartReader* files) const {
  InitialParts parts = *this;
  parts.files_ = files;
  return parts;
}

void InitialParts::refill(const std::vector<NamedTensor>& held) const {
  torch::NoGradGuard no_grad;
  for (const auto& h : held) {
    torch::Tensor out = h.tensor.detach();
    fill(out, h.name, parameter(h.name).index);
  }
}

}  // namespace gputrain

#include "model/hf_mapping.h"

#include <ATen/ATen.h>

#include "model/architecture.h"
#include "util/error.h"
#include "util/tensor_text.h"

namespace gputrain {
namespace {

bool is_vocab_matrix(const std::string& name) { return name == "transformer.wte.weight" || name == "lm_head.weight"; }

// The config.json fields behind each shape key, for the fix of a shape error.
std::string shape_fix(const Architecture& a) {
  return std::string("\n    fix: init from a ") + a.hf.family +
         " checkpoint whose config.json matches its weights, with a recipe that leaves the model.* shape keys to "
         "that config.json";
}

}  // namespace

std::vector<NamedTensor> to_hf_tensors(const std::vector<NamedTensor>& ours, const ModelSettings& m,
                                       torch::ScalarType dtype) {
  std::map<std::string, torch::Tensor> by_name;
  for (const auto& [name, t] : ours) by_name[name] = t;
  std::vector<NamedTensor> out;
  for (const HfTensor& e : architecture(m).hf.tensors(m)) {
    if (e.ours.empty()) {
      out.push_back({e.hf, torch::zeros(e.zero_shape, torch::TensorOptions().dtype(dtype))});
      continue;
    }
    torch::Tensor w = by_name.at(e.ours).detach().to(torch::kCPU);
    if (is_vocab_matrix(e.ours)) w = w.narrow(0, 0, m.vocab_size);  // padding rows are ours alone
    if (e.rows > 0) w = w.narrow(0, e.row_offset, e.rows);
    if (e.transposed) w = w.t();
    out.push_back({e.hf, w.to(dtype).contiguous()});
  }
  return out;
}

HfWeightImport::HfWeightImport(const ModelSettings& m, std::map<std::string, std::vector<int64_t>> targets,
                               std::string source)
    : m_(m), targets_(std::move(targets)), source_(std::move(source)) {
  const Architecture& a = architecture(m);
  family_ = a.hf.family;
  fix_ = shape_fix(a);
  for (HfTensor& e : a.hf.tensors(m)) table_[e.hf] = std::move(e);
}

std::optional<HfPlacement> HfWeightImport::place(const std::string& file_name, at::IntArrayRef shape,
                                                 const std::string& file, bool& must_be_zero) {
  must_be_zero = false;
  const Architecture& a = architecture(m_);
  const std::string name = a.hf.canonical_name(file_name);
  if (name.empty()) return std::nullopt;  // a buffer, not a weight
  auto it = table_.find(name);
  if (it == table_.end()) {
    if (name == "lm_head.weight" && m_.tie_embeddings)
      return std::nullopt;  // a tied head written out: the embedding is it
    throw data_error(source_ + ": '" + file + "' holds " + file_name + ", which this " + family_ +
                     " model does not have" + fix_);
  }
  const HfTensor& e = it->second;
  if (!done_.insert(name).second)
    throw data_error(source_ + ": " + name + " is in more than one file ('" + file + "' again)" +
                     "\n    fix: use a checkpoint whose shards hold each tensor once");
  if (e.ours.empty()) {
    if (shape != c10::IntArrayRef(e.zero_shape))
      throw data_error(source_ + ": '" + file + "' holds " + name + " (" + shape_str(shape) +
                       "), but this model has no such bias\n    fix: set model.bias: true");
    must_be_zero = true;
    return std::nullopt;
  }
  auto target_it = targets_.find(e.ours);
  if (target_it == targets_.end()) throw runtime_error("HfWeightImport: no parameter " + e.ours);
  std::vector<int64_t> target = target_it->second;  // the part of ours it fills, in its stored orientation
  if (e.rows > 0) target.at(0) = e.rows;
  if (e.transposed) std::swap(target.at(0), target.at(1));
  std::vector<int64_t> source = shape.vec();
  HfPlacement out{e.ours, e.row_offset, target.at(0), e.transposed};
  const bool positions = e.ours == "transformer.wpe.weight";
  if (is_vocab_matrix(e.ours) && shape.size() == 2 && shape[0] == m_.vocab_size && shape[1] == target.at(1)) {
    target.at(0) = out.rows = m_.vocab_size;  // our padding rows keep their initialization
  } else if (positions && shape.size() == 2 && shape[0] >= target.at(0) && shape[1] == target.at(1)) {
    source.at(0) = target.at(0);  // a shorter context: the first model.seq_len positions
  }
  if (e.transposed) out.rows = e.rows > 0 ? e.rows : target_it->second.at(0);
  if (source != target)
    throw data_error(source_ + ": '" + file + "' holds " + name + " as " + shape_str(shape) + ", but this model's is " +
                     shape_str(target) +
                     (is_vocab_matrix(e.ours) ? " (model.vocab_size rows)"
                      : positions             ? " (at least model.seq_len positions)"
                                              : "") +
                     fix_);
  return out;
}

void HfWeightImport::check_zero(const std::string& name, const torch::Tensor& t, const std::string& file) const {
  if (at::any(t != 0).item<bool>())
    throw data_error(source_ + ": '" + file + "' holds " + name + " (" + shape_str(t) +
                     ") with values other than zero, but this model has no such bias" +
                     "\n    fix: set model.bias: true");
}

void HfWeightImport::finish() const {
  for (const auto& [name, e] : table_)
    if (!e.ours.empty() && !done_.count(name))
      throw data_error(source_ + ": has no " + name + " (is it a " + family_ + " checkpoint of this shape?)" + fix_);
}

nlohmann::ordered_json gpt2_eot_id(const ModelSettings& m) {
  return m.vocab_size > 50256 ? nlohmann::ordered_json(50256) : nlohmann::ordered_json(nullptr);
}

}  // namespace gputrain

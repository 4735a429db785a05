#include "optim/streamed_optimizer.h"

#include <fmt/format.h>

#include <map>
#include <set>

namespace gputrain {
namespace {

constexpr uint64_t kAlign = 64;  // each tensor of a region starts on a cache line

uint64_t aligned(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// `groups` cut to the parameters named in `names` (groups left empty are dropped).
std::vector<ParamGroup> groups_of(const std::vector<ParamGroup>& groups, const std::set<std::string>& names) {
  std::vector<ParamGroup> out;
  for (const ParamGroup& g : groups) {
    ParamGroup cut = g;
    cut.names.clear(), cut.params.clear();
    for (size_t i = 0; i < g.params.size(); ++i)
      if (names.count(g.names[i])) cut.names.push_back(g.names[i]), cut.params.push_back(g.params[i]);
    if (!cut.params.empty()) out.push_back(std::move(cut));
  }
  return out;
}

}  // namespace

StreamedOptimizer::StreamedOptimizer(std::vector<ParamGroup> groups, const std::vector<std::vector<std::string>>& units,
                                     const MakeOptimizer& make, std::unique_ptr<OffloadFile> file,
                                     const std::map<std::string, torch::Tensor>& copies)
    : Optimizer(std::move(groups)), file_(std::move(file)) {
  torch::NoGradGuard no_grad;
  std::vector<std::set<std::string>> sets;
  std::set<std::string> placed;
  for (const auto& u : units) {
    sets.emplace_back(u.begin(), u.end());
    placed.insert(u.begin(), u.end());
  }
  // The rest in units of about kRestUnitBytes of parameters, in the groups' order.
  int64_t filling = kRestUnitBytes;
  for (const ParamGroup& g : groups_)
    for (size_t i = 0; i < g.names.size(); ++i) {
      if (placed.count(g.names[i])) continue;
      if (filling >= kRestUnitBytes) sets.emplace_back(), filling = 0;
      sets.back().insert(g.names[i]);
      filling += static_cast<int64_t>(g.params[i].nbytes());
    }
  // One unit at a time: its state is built in memory, written to the file, and let go before the next.
  std::map<std::string, std::vector<StateEntry>> by_parameter;
  for (const auto& names : sets) {
    std::vector<ParamGroup> mine = groups_of(groups_, names);
    if (mine.empty()) continue;
    Unit u{make(mine), {}};
    // What goes to the file: the state tensors (step counters stay in memory), then the parameters with copies.
    std::vector<Streamed> filed;
    for (const StateEntry& e : u.optimizer->state()) {
      by_parameter[e.name.substr(0, e.name.rfind('.'))].push_back(e);
      if (e.tensor.dim() > 0) filed.push_back({e.tensor, {}, 0, {}});
    }
    for (const ParamGroup& g : mine)
      for (size_t i = 0; i < g.params.size(); ++i)
        if (const auto c = copies.find(g.names[i]); c != copies.end()) {
          if (c->second.sizes() != g.params[i].sizes())
            throw std::invalid_argument("StreamedOptimizer: the copy of '" + g.names[i] + "' is not shaped as it");
          filed.push_back({g.params[i], {}, 0, c->second});
        }
    uint64_t bytes = 0;
    for (const Streamed& s : filed) bytes = aligned(bytes) + s.live.nbytes();
    uint64_t at = file_->add_region(bytes);
    for (Streamed& s : filed) {
      s.offset = at = aligned(at);
      const torch::Tensor values = s.live.contiguous();
      file_->write(at, values.data_ptr(), values.nbytes());  // not through the mapping: no page of it stays resident
      s.view = file_->view(at, s.live.sizes(), s.live.scalar_type());
      s.live.set_(s.view);
      at += values.nbytes();
    }
    u.state = std::move(filed);
    units_.push_back(std::move(u));
  }
  if (units_.empty()) throw std::invalid_argument("StreamedOptimizer: no parameters");
  // What one optimizer over every parameter would say (8-bit AdamW counts its tensors): built on meta.
  std::vector<ParamGroup> shapes = groups_;
  for (ParamGroup& g : shapes)
    for (torch::Tensor& p : g.params) p = torch::empty(p.sizes(), p.options().device(torch::kMeta));
  description_ = make(std::move(shapes))->describe();
  // Listed in the groups' order, as one optimizer over them all lists its state: checkpoints are the same.
  for (const ParamGroup& g : groups_)
    for (const auto& n : g.names)
      for (const StateEntry& e : by_parameter[n]) add_state(n, e.name.substr(n.size() + 1), e.tensor, e.layout);
}

StreamedOptimizer::~StreamedOptimizer() = default;

std::string StreamedOptimizer::describe() const {
  return description_;  // as in memory: the checkpoints say the same (the log says where the state is)
}

std::string StreamedOptimizer::placement() const {
  auto mib = [](auto bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); };
  return fmt::format(
      "the state{} in a {:.1f} MiB file in {} (reserved at start, gone at exit), streamed through each update a "
      "unit at a time ({} units, the largest {:.1f} MiB)",
      filed_parameter_bytes() > 0
          ? fmt::format(" and the fp32 weight shards ({:.1f} MiB; memory keeps their bf16 copies for the gathers)",
                        mib(filed_parameter_bytes()))
          : "",
      mib(file_bytes()), dir(), units(), mib(largest_unit_bytes()));
}

int64_t StreamedOptimizer::resident_state_bytes() const {
  int64_t n = 0;
  for (const StateEntry& e : state())
    if (e.tensor.dim() == 0) n += static_cast<int64_t>(e.tensor.nbytes());
  return n;
}

int64_t StreamedOptimizer::filed_parameter_bytes() const {
  int64_t n = 0;
  for (const Unit& u : units_)
    for (const Streamed& s : u.state)
      if (s.copy.defined()) n += static_cast<int64_t>(s.view.nbytes());
  return n;
}

int64_t StreamedOptimizer::resident_parameter_bytes(int64_t held) const {
  for (const Unit& u : units_)
    for (const Streamed& s : u.state)
      if (s.copy.defined()) held += static_cast<int64_t>(s.copy.nbytes()) - static_cast<int64_t>(s.view.nbytes());
  return held;
}

uint64_t StreamedOptimizer::largest_unit_bytes() const {
  uint64_t most = 0;
  for (const Unit& u : units_) {
    uint64_t n = 0;
    for (const Streamed& s : u.state) n += s.view.nbytes();
    most = std::max(most, n);
  }
  return most;
}

std::future<void> StreamedOptimizer::start_reading(size_t k, std::vector<torch::Tensor>& buffers) {
  for (const Streamed& s : units_[k].state) buffers.push_back(torch::empty(s.view.sizes(), s.view.options()));
  return file_->submit([this, k, bufs = buffers] {
    for (size_t i = 0; i < bufs.size(); ++i)
      file_->read(units_[k].state[i].offset, bufs[i].data_ptr(), bufs[i].nbytes());
  });
}

void StreamedOptimizer::step(double lr) {
  torch::NoGradGuard no_grad;
  const size_t n = units_.size();
  std::vector<std::vector<torch::Tensor>> buffers(n);
  std::future<void> reading = start_reading(0, buffers[0]), writing;
  try {
    for (size_t k = 0; k < n; ++k) {
      reading.get();
      Unit& u = units_[k];
      for (size_t i = 0; i < u.state.size(); ++i) u.state[i].live.set_(buffers[k][i]);
      if (writing.valid()) writing.get();  // unit k-1's state is back in the file, its buffers let go
      if (k + 1 < n) reading = start_reading(k + 1, buffers[k + 1]);
      u.optimizer->set_grad_scale(grad_scale_);
      u.optimizer->step(lr);
      for (Streamed& s : u.state) {
        if (s.copy.defined()) s.copy.copy_(s.live);  // rounded to nearest, as a cast of it would be
        s.live.set_(s.view);                         // current once the write below has run
      }
      writing = file_->submit([this, k, bufs = std::move(buffers[k])] {
        for (size_t i = 0; i < bufs.size(); ++i)
          file_->write(units_[k].state[i].offset, bufs[i].data_ptr(), bufs[i].nbytes());
      });
    }
    writing.get();
  } catch (...) {
    // The I/O thread may still be filling a buffer: wait for it before they go.
    if (reading.valid()) reading.wait();
    if (writing.valid()) writing.wait();
    throw;
  }
  file_->drop_mapped_pages();  // pages a checkpoint or a resume touched through the views leave the resident set
}

}  // namespace gputrain

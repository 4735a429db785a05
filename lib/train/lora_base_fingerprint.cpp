#include "train/lora_base_fingerprint.h"

#include <algorithm>
#include <stdexcept>

#include "model/lora.h"
#include "model/quantized_weight.h"
#include "util/crc32c.h"
#include "util/named_tensor.h"

namespace gputrain {
namespace {

constexpr int64_t kPieceBytes = 4 << 20;  // filled and checksummed at a time

struct Share {
  int64_t first = 0, count = 0;
};

// Rank r's contiguous share of `rows` rows over n ranks (the first rows % n ranks get one more).
Share share_of(int64_t rows, int64_t r, int64_t n) {
  const int64_t base = rows / n, extra = rows % n;
  return {r * base + std::min(r, extra), base + (r < extra ? 1 : 0)};
}

// The bytes of one row of `w` as float32, as the fingerprint reads them.
int64_t float_row_bytes(const torch::Tensor& w) { return w.size(0) > 0 ? w.numel() / w.size(0) * 4 : 0; }

}  // namespace

std::string lora_base_fingerprint_by_parts(const Gpt& model, const InitialParts& parts, Communicator* world) {
  torch::NoGradGuard no_grad;
  const int64_t n = world ? world->size() : 1, me = world ? world->rank() : 0;
  std::vector<NamedTensor> base;
  for (auto& w : module_weights(*model))
    if (!is_lora_parameter(w.name)) base.push_back(std::move(w));
  torch::Tensor mine = torch::zeros({static_cast<int64_t>(base.size())}, torch::kLong);
  for (size_t i = 0; i < base.size(); ++i) {
    const torch::Tensor& w = base[i].tensor;
    if (w.dim() == 0) throw std::logic_error("LoRA base fingerprint: '" + base[i].name + "' is a scalar");
    const Share s = share_of(w.size(0), me, n);
    const int64_t at_once = std::max<int64_t>(1, kPieceBytes / std::max<int64_t>(1, float_row_bytes(w)));
    Crc32c crc;
    for (int64_t r = s.first; r < s.first + s.count; r += at_once) {
      std::vector<int64_t> shape = w.sizes().vec();
      shape[0] = std::min(at_once, s.first + s.count - r);
      torch::Tensor piece = torch::empty(shape, w.options().device(torch::kCPU));
      parts.fill_rows(base[i].name, piece, r, shape[0]);
      const torch::Tensor bytes = piece.to(torch::kFloat).contiguous();  // as the whole's fingerprint reads them
      crc.update(bytes.data_ptr(), bytes.nbytes());
    }
    mine[static_cast<int64_t>(i)] = static_cast<int64_t>(crc.value());
  }
  torch::Tensor all = mine.view({1, -1});
  if (world) {
    torch::Tensor in = mine.to(world->tensor_device());
    torch::Tensor out = torch::empty({n * in.numel()}, in.options());
    world->all_gather(out, in, "joining the LoRA base's fingerprint").wait();
    all = out.to(torch::kCPU).view({n, -1});
  }
  // Joined as one pass over every name and tensor in order would have read them.
  const auto crcs = all.accessor<int64_t, 2>();
  uint32_t whole = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    const std::string& name = base[i].name;
    Crc32c name_crc;
    name_crc.update(name.data(), name.size());
    whole = crc32c_combine(whole, name_crc.value(), name.size());
    const torch::Tensor& w = base[i].tensor;
    for (int64_t r = 0; r < n; ++r)
      whole = crc32c_combine(whole, static_cast<uint32_t>(crcs[r][static_cast<int64_t>(i)]),
                             static_cast<uint64_t>(share_of(w.size(0), r, n).count * float_row_bytes(w)));
  }
  return with_base_quantization("crc32c:" + crc32c_hex(whole), model->cfg.quantize);
}

}  // namespace gputrain

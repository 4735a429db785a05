#include "precision/quantize_4bit.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace gputrain {

std::string quant4_type_name(Quant4Type t) { return t == Quant4Type::kNf4 ? "nf4" : "fp4"; }

bool is_quant4_block_size(int64_t block_size) {
  for (int64_t b : {32, 64, 128, 256, 512, 1024, 2048, 4096})
    if (block_size == b) return true;
  return false;
}

torch::Tensor quant4_code(Quant4Type t) {
  // bitsandbytes' get_4bit_type tables, normalized by their largest magnitude as it does (in float32).
  static const std::vector<float> nf4 = {-1.0f,
                                         -0.6961928009986877f,
                                         -0.5250730514526367f,
                                         -0.39491748809814453f,
                                         -0.28444138169288635f,
                                         -0.18477343022823334f,
                                         -0.09105003625154495f,
                                         0.0f,
                                         0.07958029955625534f,
                                         0.16093020141124725f,
                                         0.24611230194568634f,
                                         0.33791524171829224f,
                                         0.44070982933044434f,
                                         0.5626170039176941f,
                                         0.7229568362236023f,
                                         1.0f};
  static const std::vector<float> fp4 = {0.0f,  0.0625f,  8.0f,  12.0f,  4.0f,  6.0f,  2.0f,  3.0f,
                                         -0.0f, -0.0625f, -8.0f, -12.0f, -4.0f, -6.0f, -2.0f, -3.0f};
  torch::Tensor code = torch::tensor(t == Quant4Type::kNf4 ? nf4 : fp4, torch::kFloat);
  return code.div_(code.abs().max());
}

torch::Tensor dynamic_map_8bit() {
  // create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8): for each exponent i, the
  // midpoints of 2^i + 1 points in [0.1, 1] scaled by 10^(i - 6), both signs; then 0 and 1.
  std::vector<float> data;
  for (int i = 0; i < 7; ++i) {
    const torch::Tensor bounds = torch::linspace(0.1, 1.0, (1 << i) + 1, torch::kFloat);
    const torch::Tensor means = (bounds.slice(0, 0, -1) + bounds.slice(0, 1)) / 2.0;
    const double scale = std::pow(10.0, i - 6);
    const torch::Tensor pos = means * scale, neg = means * -scale;
    for (const torch::Tensor& part : {pos, neg})
      for (int64_t k = 0; k < part.numel(); ++k) data.push_back(part[k].item<float>());
  }
  data.push_back(0.0f);
  data.push_back(1.0f);
  std::sort(data.begin(), data.end());
  return torch::tensor(data, torch::kFloat);
}

namespace {

// bitsandbytes' CPU kernel (0.50) does not search the code: it maps [-1, 1] onto 65536 bins, each
// holding the nearest code of its centre, and looks the scaled value up. Built here the same way.
constexpr int kLutBins = 65536;

std::vector<uint8_t> nearest_code_lut(const float* code, int64_t levels) {
  std::vector<float> midpoints(levels - 1);
  for (int64_t i = 0; i + 1 < levels; ++i) midpoints[i] = 0.5f * (code[i] + code[i + 1]);
  std::vector<uint8_t> lut(kLutBins);
  int64_t idx = 0;
  for (int i = 0; i < kLutBins; ++i) {
    const float val = -1.0f + (2.0f * static_cast<float>(i)) / static_cast<float>(kLutBins - 1);
    while (idx < levels - 1 && midpoints[idx] < val) ++idx;
    lut[i] = static_cast<uint8_t>(idx);
  }
  return lut;
}

int lut_bin(float normed) {
  const float v = std::clamp(normed, -1.0f, 1.0f);
  return static_cast<int>((v + 1.0f) * 0.5f * static_cast<float>(kLutBins - 1) + 0.5f);
}

}  // namespace

Quantized8bit quantize_blockwise_8bit(const torch::Tensor& values, const torch::Tensor& code, int64_t block_size) {
  const torch::Tensor a = values.reshape(-1).to(torch::kFloat).contiguous();
  const torch::Tensor c = code.to(torch::kFloat).contiguous();
  const int64_t n = a.numel(), blocks = (n + block_size - 1) / block_size;
  const std::vector<uint8_t> lut = nearest_code_lut(c.data_ptr<float>(), c.numel());
  Quantized8bit q{torch::empty({n}, torch::kUInt8), torch::empty({blocks}, torch::kFloat)};
  const float* in = a.data_ptr<float>();
  uint8_t* out = q.codes.data_ptr<uint8_t>();
  float* absmax = q.absmax.data_ptr<float>();
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t first = blk * block_size, last = std::min(n, first + block_size);
    float m = 0.0f;
    for (int64_t i = first; i < last; ++i) m = std::max(m, std::fabs(in[i]));
    absmax[blk] = m;
    const float inv = m == 0.0f ? 0.0f : 1.0f / m;  // a block of zeros is all code 0, as bitsandbytes has it
    for (int64_t i = first; i < last; ++i) out[i] = m == 0.0f ? 0 : lut[lut_bin(in[i] * inv)];
  }
  return q;
}

torch::Tensor dequantize_blockwise_8bit(const Quantized8bit& q, const torch::Tensor& code, int64_t block_size) {
  const torch::Tensor values = code.to(torch::kFloat).index({q.codes.reshape(-1).to(torch::kLong)});
  const torch::Tensor scale = q.absmax.repeat_interleave(block_size).slice(0, 0, values.numel());
  return values * scale;
}

int64_t Quantized4bit::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t Quantized4bit::storage_bytes() const {
  auto bytes = [](const torch::Tensor& t) {
    return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
  };
  return bytes(codes) + bytes(absmax) + bytes(nested_absmax) + bytes(nested_code) + (nested ? 4 : 0);
}

int64_t quant4_storage_bytes(int64_t numel, int64_t block_size, bool double_quant) {
  const int64_t blocks = (numel + block_size - 1) / block_size, codes = (numel + 1) / 2;
  if (!double_quant) return codes + 4 * blocks;
  // 8-bit absmax, a float32 scale per 256 of them, the 256-entry map and the offset.
  return codes + blocks + 4 * ((blocks + 255) / 256) + 4 * 256 + 4;
}

Quantized4bit quantize_4bit(const torch::Tensor& w, Quant4Type type, int64_t block_size, bool double_quant) {
  if (!is_quant4_block_size(block_size))
    throw std::invalid_argument("block size " + std::to_string(block_size) +
                                " is not one bitsandbytes has (32, 64, 128, ..., 4096)");
  const auto dtype = w.scalar_type();
  if (dtype != torch::kFloat && dtype != torch::kBFloat16 && dtype != torch::kHalf)
    throw std::invalid_argument(std::string("4-bit quantization takes float32, bfloat16 or float16, not ") +
                                c10::toString(dtype));
  Quantized4bit q;
  q.type = type, q.block_size = block_size, q.dtype = dtype, q.shape = w.sizes().vec();
  // bitsandbytes' quantize_4bit as its CPU backend runs it: whole blocks scaled by the reciprocal of
  // their absmax, the last partial block divided by its own; each value to the nearest code.
  const torch::Tensor flat = w.reshape(-1).to(torch::kFloat);
  const int64_t n = flat.numel(), rem = n % block_size, full = n - rem;
  const torch::Tensor whole = flat.slice(0, 0, full).reshape({full / block_size, block_size});
  torch::Tensor absmax = std::get<0>(whole.abs().max(-1));
  torch::Tensor scaled = torch::clamp(whole * absmax.clamp_min(1e-38).reciprocal().view({-1, 1}), -1, 1).reshape(-1);
  if (rem) {
    const torch::Tensor tail = flat.slice(0, full);
    const torch::Tensor am = tail.abs().max().clamp_min(1e-38);
    absmax = torch::cat({absmax, am.unsqueeze(0)});
    scaled = torch::cat({scaled, torch::clamp(tail / am, -1, 1)});
  }
  if (scaled.numel() % 2) scaled = torch::constant_pad_nd(scaled, {0, 1});
  const torch::Tensor code = quant4_code(type);
  const torch::Tensor order = torch::argsort(code);
  const torch::Tensor sorted = code.index({order});
  const torch::Tensor midpoints = (sorted.slice(0, 0, -1) + sorted.slice(0, 1)) / 2;
  torch::Tensor idx = torch::bucketize(scaled, midpoints, /*out_int32=*/true);
  if (type != Quant4Type::kNf4) idx = order.index({idx.to(torch::kLong)});
  const torch::Tensor nibbles = idx.to(torch::kUInt8);
  q.codes = torch::bitwise_or(torch::bitwise_left_shift(nibbles.slice(0, 0, {}, 2), 4), nibbles.slice(0, 1, {}, 2))
                .unsqueeze(1);
  if (double_quant) nest_absmax(q, absmax);
  else q.absmax = absmax;
  return q;
}

void nest_absmax(Quantized4bit& q, const torch::Tensor& absmax) {
  // Double quantization: the absmax less their mean, in 8 bits per 256 blocks.
  const torch::Tensor offset = absmax.mean();
  q.nested = true;
  q.offset = offset.item<float>();
  q.nested_code = dynamic_map_8bit();
  Quantized8bit second = quantize_blockwise_8bit(absmax - offset, q.nested_code, q.nested_block_size);
  q.absmax = second.codes;
  q.nested_absmax = second.absmax;
}

torch::Tensor block_absmax(const Quantized4bit& q) {
  if (!q.nested) return q.absmax.to(torch::kFloat);
  torch::Tensor absmax =
      dequantize_blockwise_8bit(Quantized8bit{q.absmax, q.nested_absmax}, q.nested_code, q.nested_block_size);
  return absmax.add_(q.offset);
}

namespace {

// The CPU path: one pass over the codes, each block's absmax decoded once, code x absmax in float32
// rounded once to the output's dtype (the same numbers as the tensor ops below), blocks in parallel.
template <typename T>
void dequantize_blocks_cpu(const Quantized4bit& q, T* out) {
  const int64_t n = q.numel(), block = q.block_size;
  const torch::Tensor code = quant4_code(q.type);
  float lut[16];
  std::copy(code.data_ptr<float>(), code.data_ptr<float>() + 16, lut);
  const torch::Tensor absmax = q.absmax.contiguous();
  const uint8_t* codes = q.codes.data_ptr<uint8_t>();
  const torch::Tensor nested_code = q.nested ? q.nested_code.contiguous() : torch::Tensor();
  const torch::Tensor nested_absmax = q.nested ? q.nested_absmax.contiguous() : torch::Tensor();
  at::parallel_for(0, q.blocks(), 16, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      const float scale = q.nested ? nested_code.data_ptr<float>()[absmax.data_ptr<uint8_t>()[b]] *
                                             nested_absmax.data_ptr<float>()[b / q.nested_block_size] +
                                         q.offset
                                   : absmax.data_ptr<float>()[b];
      const int64_t end = std::min(n, (b + 1) * block);  // blocks start on a byte (even block sizes)
      int64_t i = b * block;
      for (; i + 1 < end; i += 2) {
        const uint8_t byte = codes[i / 2];
        out[i] = static_cast<T>(lut[byte >> 4] * scale);
        out[i + 1] = static_cast<T>(lut[byte & 0x0F] * scale);
      }
      if (i < end) out[i] = static_cast<T>(lut[codes[i / 2] >> 4] * scale);
    }
  });
}

// Any device and dtype: the same numbers by tensor ops (fp32 temporaries).
torch::Tensor dequantize_with_ops(const Quantized4bit& q, torch::ScalarType dtype) {
  const int64_t n = q.numel();
  const torch::Tensor bytes = q.codes.reshape(-1);
  const torch::Tensor nibbles =
      torch::stack({torch::bitwise_right_shift(bytes, 4), torch::bitwise_and(bytes, 0x0F)}, 1).reshape(-1);
  const torch::Tensor values = quant4_code(q.type).to(bytes.device()).index({nibbles.slice(0, 0, n).to(torch::kLong)});
  const torch::Tensor scale = block_absmax(q).repeat_interleave(q.block_size).slice(0, 0, n);
  return (values * scale).reshape(q.shape).to(dtype);
}

}  // namespace

void dequantize_4bit_into(const Quantized4bit& q, torch::Tensor& out) {
  const auto t = out.scalar_type();
  const bool fast_type = t == torch::kFloat || t == torch::kBFloat16 || t == torch::kHalf;
#ifdef GPUTRAIN_WITH_CUDA
  if (fast_type && q.codes.is_cuda() && out.is_cuda() && out.is_contiguous()) return dequantize_4bit_cuda(q, out);
#endif
  if (!fast_type || !q.codes.is_cpu() || !out.is_cpu() || !out.is_contiguous() || q.block_size % 2) {
    out.copy_(dequantize_with_ops(q, t).view(out.sizes()));
    return;
  }
  if (t == torch::kFloat) dequantize_blocks_cpu(q, out.data_ptr<float>());
  else if (t == torch::kBFloat16) dequantize_blocks_cpu(q, out.data_ptr<c10::BFloat16>());
  else dequantize_blocks_cpu(q, out.data_ptr<c10::Half>());
}

torch::Tensor dequantize_4bit(const Quantized4bit& q, torch::ScalarType dtype) {
  torch::Tensor out = torch::empty(q.shape, q.codes.options().dtype(dtype));
  dequantize_4bit_into(q, out);
  return out;
}

}  // namespace gputrain

#include "dequant_4bit.cuh"
#include "float_convert.cuh"
#include "multi_tensor.cuh"

namespace gputrain::kernels {
namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void __launch_bounds__(kThreads) dequantize_4bit_kernel(Dequant4bitArgs a, T* out) {
  const int64_t byte = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x, first = 2 * byte;
  if (first >= a.n) return;
  const int64_t b = first / a.block;  // blocks hold whole bytes (even block sizes)
  // Rounded after the product and again after the sum, as the CPU path and bitsandbytes (a product, then
  // `absmax += offset`) do: nvcc would otherwise fuse them into one FMA, 1 ulp off in some blocks.
  const float scale =
      a.absmax_codes
          ? __fadd_rn(__fmul_rn(a.nested_code[a.absmax_codes[b]], a.nested_absmax[b / a.nested_block]), a.offset)
          : a.absmax[b];
  const uint8_t packed = a.codes[byte];
  out[first] = from_float<T>(a.code[packed >> 4] * scale);
  if (first + 1 < a.n) out[first + 1] = from_float<T>(a.code[packed & 0x0F] * scale);
}

}  // namespace

void launch_dequantize_4bit(const Dequant4bitArgs& a, void* out, FloatType type, cudaStream_t stream) {
  if (a.n <= 0) return;
  if (!a.codes || !out || a.block % 2 || (!a.absmax && !(a.absmax_codes && a.nested_code && a.nested_absmax)))
    throw std::runtime_error("launch_dequantize_4bit: bad arguments");
  const int64_t bytes = (a.n + 1) / 2;
  by_type(type, [&](auto zero) {
    using T = decltype(zero);
    dequantize_4bit_kernel<T>
        <<<grid_for((bytes + kThreads - 1) / kThreads), kThreads, 0, stream>>>(a, static_cast<T*>(out));
  });
  check_cuda(cudaGetLastError(), "launch_dequantize_4bit");
}

}  // namespace gputrain::kernels

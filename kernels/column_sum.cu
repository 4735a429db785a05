#include "column_sum.cuh"
#include "multi_tensor.cuh"

namespace gputrain::kernels {
namespace {

constexpr int kColumns = 32, kRowThreads = 32;

// Block b sums columns [32 b, 32 b + 32): thread (x, y) adds rows y, y + 32, ...
// of column 32 b + x (a warp reads 32 consecutive floats), then the 32
// partial sums of each column are added in shared memory in order of y.
__global__ void __launch_bounds__(kColumns * kRowThreads)
    column_sum_kernel(const float* partial, int64_t rows, int64_t cols, float* out) {
  __shared__ float staged[kRowThreads][kColumns];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColumns + threadIdx.x;
  float acc = 0.0f;
  if (c < cols) {
    // Four independent sums keep four loads in flight; combined in a fixed order.
    float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int64_t r = threadIdx.y;
    for (; r + 3 * kRowThreads < rows; r += 4 * kRowThreads) {
#pragma unroll
      for (int k = 0; k < 4; ++k) part[k] += partial[(r + k * kRowThreads) * cols + c];
    }
    for (; r < rows; r += kRowThreads) part[0] += partial[r * cols + c];
    acc = (part[0] + part[1]) + (part[2] + part[3]);
  }
  staged[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float t = 0.0f;
#pragma unroll
    for (int y = 0; y < kRowThreads; ++y) t += staged[y][threadIdx.x];
    out[c] = t;
  }
}

}  // namespace

void launch_column_sum(const float* partial, int64_t rows, int64_t cols, float* out, cudaStream_t stream) {
  if (cols <= 0) return;
  if (rows < 0 || !out || (rows > 0 && !partial)) throw std::runtime_error("launch_column_sum: bad arguments");
  column_sum_kernel<<<grid_for((cols + kColumns - 1) / kColumns), dim3(kColumns, kRowThreads), 0, stream>>>(
      partial, rows, cols, out);
  check_cuda(cudaGetLastError(), "launch_column_sum");
}

}  // namespace gputrain::kernels

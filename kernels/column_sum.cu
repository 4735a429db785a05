#include "column_sum.cuh"
#include "float_convert.cuh"
#include "multi_tensor.cuh"

namespace gputrain::kernels {
namespace {

constexpr int kColumns = 32, kRowThreads = 32;
constexpr int kPartialThreads = 128, kRowsInFlight = 4;
constexpr int64_t kChunks = 256;

// Thread x of block (bx, chunk) sums the 16 / sizeof(T) columns starting at
// (bx * 128 + x) * kN over the chunk's rows, four rows' loads in flight.
template <class T>
__global__ void __launch_bounds__(kPartialThreads)
    column_partial_sums_kernel(const T* m, int64_t rows, int64_t cols, int64_t rows_per_chunk, float* partial) {
  constexpr int kN = 16 / sizeof(T);
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * kPartialThreads + threadIdx.x) * kN;
  if (col >= cols) return;
  const int64_t chunk = blockIdx.y, end = min(rows, (chunk + 1) * rows_per_chunk);
  float acc[kN];
#pragma unroll
  for (int k = 0; k < kN; ++k) acc[k] = 0.0f;
  for (int64_t r0 = chunk * rows_per_chunk; r0 < end; r0 += kRowsInFlight) {
    uint4 bits[kRowsInFlight];
#pragma unroll
    for (int i = 0; i < kRowsInFlight; ++i)
      if (r0 + i < end) bits[i] = *reinterpret_cast<const uint4*>(m + (r0 + i) * cols + col);
#pragma unroll
    for (int i = 0; i < kRowsInFlight; ++i) {
      if (r0 + i >= end) break;
      const T* v = reinterpret_cast<const T*>(&bits[i]);
#pragma unroll
      for (int k = 0; k < kN; ++k) acc[k] += to_float(v[k]);
    }
  }
#pragma unroll
  for (int k = 0; k < kN; ++k) partial[chunk * cols + col + k] = acc[k];
}

// Block b sums columns [32 b, 32 b + 32): thread (x, y) adds rows y, y + 32, ...
// of column 32 b + x (a warp reads 32 consecutive floats), then the 32
// partial sums of each column are added in shared memory in order of y.
__global__ void __launch_bounds__(kColumns* kRowThreads)
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

int64_t column_partial_rows(int64_t rows) { return rows < kChunks ? rows : kChunks; }

bool column_partial_sums_supported(FloatType type, int64_t cols) {
  return cols > 0 && cols % (type == FloatType::kFloat32 ? 4 : 8) == 0;
}

void launch_column_partial_sums(const void* m, FloatType type, int64_t rows, int64_t cols, float* partial,
                                cudaStream_t stream) {
  if (rows <= 0) return;
  if (!column_partial_sums_supported(type, cols) || !m || !partial || reinterpret_cast<uintptr_t>(m) % 16 != 0)
    throw std::runtime_error("launch_column_partial_sums: bad arguments");
  const int64_t chunks = column_partial_rows(rows), per_chunk = (rows + chunks - 1) / chunks;
  by_type(type, [&](auto zero) {
    using T = decltype(zero);
    const int64_t vectors = cols / (16 / static_cast<int64_t>(sizeof(T)));
    const dim3 grid(static_cast<unsigned>((vectors + kPartialThreads - 1) / kPartialThreads),
                    static_cast<unsigned>(chunks));
    column_partial_sums_kernel<T>
        <<<grid, kPartialThreads, 0, stream>>>(static_cast<const T*>(m), rows, cols, per_chunk, partial);
  });
  check_cuda(cudaGetLastError(), "launch_column_partial_sums");
}

void launch_column_sum(const float* partial, int64_t rows, int64_t cols, float* out, cudaStream_t stream) {
  if (cols <= 0) return;
  if (rows < 0 || !out || (rows > 0 && !partial)) throw std::runtime_error("launch_column_sum: bad arguments");
  column_sum_kernel<<<grid_for((cols + kColumns - 1) / kColumns), dim3(kColumns, kRowThreads), 0, stream>>>(
      partial, rows, cols, out);
  check_cuda(cudaGetLastError(), "launch_column_sum");
}

}  // namespace gputrain::kernels

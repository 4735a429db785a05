// The host allocator (run.cpu_malloc_cache): LibTorch's CPU allocator becomes a cache of large
// blocks. Each block of 128 KiB or more is its own mapping, kept when freed and handed to the next
// request it fits (best fit, at most a quarter larger), so a step does not fault its pages in again
// (glibc unmaps such blocks on free: ~20% of a CPU step in the kernel). Three rules keep it lean:
//  - before a new mapping, the blocks freed longest ago go back until what is mapped fits in the
//    most ever in use: the cache never raises the resident peak (glibc's kept heap, fragmented,
//    held ZeRO-3's gathered units 3x);
//  - a block no request took during a whole step goes back at that step's end;
//  - at a step's end, what is mapped comes down to the most that step had in use (oldest freed first):
//    a rare step's extra blocks go back even when later steps take them in turn with their twins.
#pragma once
#include <cstddef>
#include <cstdint>

namespace gputrain {

struct HostCacheStats {
  int64_t in_use_bytes = 0;       // blocks held by tensors
  int64_t cached_bytes = 0;       // freed blocks kept for reuse
  int64_t peak_in_use_bytes = 0;  // the most ever held by tensors at once
  int64_t reused = 0;             // requests a cached block served
  int64_t mapped = 0;             // requests that mapped a new block
  int64_t unmapped = 0;           // blocks given back to the OS
};

// Makes the cache LibTorch's CPU allocator (idempotent; blocks below 128 KiB go to malloc as before).
// keep_freed false: every large block is unmapped when freed (resident memory follows what is in use).
void install_host_block_cache(bool keep_freed);
// A step ended: cached blocks no request took since the previous call go back to the OS, then the
// oldest cached ones until what is mapped is at most what was in use at once since the previous call.
void end_host_cache_step();
// Gives every cached block back to the OS (train.empty_cache_steps).
void release_host_block_cache();
HostCacheStats host_cache_stats();
// The peak in use starts again from what is in use now (as torch.cuda.reset_peak_memory_stats).
void reset_host_cache_peak();

// The smallest request the cache serves; smaller ones go to malloc.
inline constexpr std::size_t kHostCacheMinBytes = 128 * 1024;

}  // namespace gputrain

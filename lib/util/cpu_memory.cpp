#include "util/cpu_memory.h"

#include <malloc.h>

namespace gputrain {

void keep_freed_cpu_memory_for_reuse() {
  mallopt(M_MMAP_MAX, 0);                 // no mmap per large block: heap blocks are reused
  mallopt(M_TRIM_THRESHOLD, 0x7fffffff);  // never give the freed heap top back (largest value mallopt takes)
}

void return_freed_cpu_memory() {
  // glibc maps large blocks on their own and unmaps them on free, but after each such free raises its
  // threshold to that block's size (up to 32 MiB): later blocks come from the heap, which keeps what they
  // leave behind (ZeRO-3's gathered weights held 3x their size resident). A fixed threshold stops that.
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
}

}  // namespace gputrain

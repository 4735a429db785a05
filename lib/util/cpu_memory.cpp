#include "util/cpu_memory.h"

#include <malloc.h>

namespace gputrain {

void keep_freed_cpu_memory_for_reuse() {
  mallopt(M_MMAP_MAX, 0);                 // no mmap per large block: heap blocks are reused
  mallopt(M_TRIM_THRESHOLD, 0x7fffffff);  // never give the freed heap top back (largest value mallopt takes)
}

}  // namespace gputrain

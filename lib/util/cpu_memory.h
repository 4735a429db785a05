// CPU training allocates and frees the same large buffers (activations,
// logits, gradients) every step. glibc serves blocks above 32 MiB with mmap
// and unmaps them on free, so every step page-faults gigabytes of fresh,
// zeroed pages (measured: ~20% of step time in the kernel for a 30M GPT).
// Keeping freed memory in the heap for reuse removes that cost at the price
// of a higher resident peak (run.cpu_malloc_cache; docs/benchmarks.md).
#pragma once

namespace gputrain {

// Tells glibc malloc to serve large blocks from the heap and not to return
// freed memory to the OS. Call before the large allocations start.
void keep_freed_cpu_memory_for_reuse();
// The opposite (run.cpu_malloc_cache: false): blocks of 128 KiB and more are mapped on their own and
// given back to the OS when freed, so the resident memory follows what is in use.
void return_freed_cpu_memory();

}  // namespace gputrain

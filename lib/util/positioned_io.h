// Whole transfers at byte offsets (pread/pwrite until done, through EINTR and short counts): what the
// readers and writers of files at offsets share; each turns a failure into its own typed error.
#pragma once
#include <cstddef>
#include <cstdint>

namespace gputrain {

struct IoFailure {
  int error = 0;    // errno, or 0: the file ended first (a read)
  uint64_t at = 0;  // the offset where it stopped
};

// Exactly n bytes at `offset` into `to` / from `from`; false with `failed` set if not.
bool pread_all(int fd, void* to, size_t n, uint64_t offset, IoFailure& failed);
bool pwrite_all(int fd, const void* from, size_t n, uint64_t offset, IoFailure& failed);

}  // namespace gputrain

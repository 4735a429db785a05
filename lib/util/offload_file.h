// parallel.offload_optimizer nvme's store: one unnamed file in a directory, gone when the process
// ends however it ends (never linked into the directory, or unlinked at once). Space is reserved as
// regions are added (posix_fallocate), so a full disk is an error while the run builds, never in the
// middle of a step. A region's bytes are reached two ways: mapped (tensor views that always hold the
// current values, for checkpoints and loading) and by pread/pwrite on the file's I/O thread (the
// streaming of a unit's state through the update, which keeps it out of the resident set).
#pragma once
#include <torch/types.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gputrain {

class OffloadFile {
 public:
  // `key`: the setting that named `dir`, for errors ("parallel.offload_dir").
  OffloadFile(std::string dir, std::string key);
  ~OffloadFile();
  OffloadFile(const OffloadFile&) = delete;
  OffloadFile& operator=(const OffloadFile&) = delete;

  // Adds a region of `bytes` at the end of the file, reserved on the disk and mapped; returns its offset.
  // A full disk is a runtime error naming the directory, the bytes needed and those free.
  uint64_t add_region(uint64_t bytes);
  // A view of `sizes` x `dtype` at `offset` of a region (the mapping lives as long as any view).
  torch::Tensor view(uint64_t offset, at::IntArrayRef sizes, at::ScalarType dtype) const;
  // Unmaps the pages reading or writing the views brought in (they stay in the file and the page
  // cache): what a checkpoint read through the views leaves the resident set.
  void drop_mapped_pages() const;
  uint64_t size() const { return size_; }
  const std::string& dir() const { return dir_; }

  // Exactly n bytes at `offset` of the file, into `to` / from `from` (runtime errors naming the file).
  void read(uint64_t offset, void* to, size_t n) const;
  void write(uint64_t offset, const void* from, size_t n) const;
  // Runs `job` on the file's I/O thread, in the order submitted; the future carries its exception.
  std::future<void> submit(std::function<void()> job);

 private:
  struct Region {
    uint64_t offset = 0, bytes = 0;
    std::shared_ptr<void> base;  // the mapping; unmapped with its last view
  };
  void io_loop();

  std::string dir_, key_;
  int fd_ = -1;
  uint64_t size_ = 0;
  std::vector<Region> regions_;
  std::mutex lock_;
  std::condition_variable wake_;
  std::deque<std::packaged_task<void()>> jobs_;
  bool stop_ = false;
  std::thread io_;
};

}  // namespace gputrain

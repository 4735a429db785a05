#include "util/host_allocator.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace gputrain {
namespace {

struct Block {
  std::size_t bytes = 0;
  int64_t freed_in_step = 0;  // when cached: the step (end_step's count) it was freed in
  uint64_t freed_at = 0;      // when cached: the count of frees when it was freed (oldest goes first)
};

class HostBlockCache final : public c10::Allocator {
 public:
  c10::DataPtr allocate(std::size_t n) override {
    void* p = n < kHostCacheMinBytes ? c10::alloc_cpu(n) : take(round_to_pages(n));
    return {p, p, &HostBlockCache::release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &HostBlockCache::release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }

  void set_keep_freed(bool keep) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      keep_freed_ = keep;
    }
    if (!keep) release_all();
  }

  void end_step() {
    std::vector<std::pair<void*, std::size_t>> old;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = free_by_size_.begin(); it != free_by_size_.end();) {
        Block& b = blocks_.at(it->second);
        if (b.freed_in_step < step_) {
          old.emplace_back(it->second, b.bytes);
          forget(it->second, b);
          it = free_by_size_.erase(it);
        } else {
          ++it;
        }
      }
      // What the step had in use at most is all the next one needs mapped: what a rare step (a rollback's
      // two copies of the state) held besides goes back, though later steps would take it now and then.
      evict_oldest_until(step_peak_in_use_, old);
      step_peak_in_use_ = stats_.in_use_bytes;
      ++step_;
    }
    unmap(old);
  }

  void release_all() {
    std::vector<std::pair<void*, std::size_t>> all;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& [bytes, p] : free_by_size_) {
        all.emplace_back(p, bytes);
        forget(p, blocks_.at(p));
      }
      free_by_size_.clear();
    }
    unmap(all);
  }

  HostCacheStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak_in_use_bytes = stats_.in_use_bytes;
  }

  static HostBlockCache& instance() {
    static HostBlockCache* cache = new HostBlockCache();  // never destroyed: tensors may outlive main()
    return *cache;
  }

 private:
  static std::size_t round_to_pages(std::size_t n) {
    static const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    return (n + page - 1) / page * page;
  }

  // The smallest cached block that fits, if it is at most a quarter larger; else a new mapping.
  void* take(std::size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_by_size_.lower_bound(bytes);
      if (it != free_by_size_.end() && it->first <= bytes + bytes / 4) {
        void* p = it->second;
        Block& b = blocks_.at(p);
        free_by_size_.erase(it);
        stats_.cached_bytes -= static_cast<int64_t>(b.bytes);
        ++stats_.reused;
        note_in_use(static_cast<int64_t>(b.bytes));
        return p;
      }
    }
    make_room(bytes);
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {  // what the cache holds may be what is missing
      release_all();
      p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    TORCH_CHECK_WITH(OutOfMemoryError, p != MAP_FAILED, "host memory exhausted: could not map ", bytes,
                     " bytes for a CPU tensor");
    std::lock_guard<std::mutex> lock(mutex_);
    blocks_[p].bytes = bytes;
    ++stats_.mapped;
    note_in_use(static_cast<int64_t>(bytes));
    return p;
  }

  // Before a new mapping of `bytes`: the blocks freed longest ago go back until what is mapped (in use
  // and cached) fits in the most ever in use, so the cache never raises the resident peak.
  void make_room(std::size_t bytes) {
    std::vector<std::pair<void*, std::size_t>> evicted;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const int64_t needed = stats_.in_use_bytes + static_cast<int64_t>(bytes);
      evict_oldest_until(std::max(stats_.peak_in_use_bytes, needed) - static_cast<int64_t>(bytes), evicted);
    }
    unmap(evicted);
  }

  // Under the lock: the cached blocks freed longest ago leave the books (into `evicted`, to unmap
  // outside the lock) until what is mapped, in use and cached, is at most `limit` bytes.
  void evict_oldest_until(int64_t limit, std::vector<std::pair<void*, std::size_t>>& evicted) {
    while (stats_.cached_bytes > 0 && stats_.in_use_bytes + stats_.cached_bytes > limit) {
      auto oldest = free_by_size_.begin();
      for (auto it = free_by_size_.begin(); it != free_by_size_.end(); ++it)
        if (blocks_.at(it->second).freed_at < blocks_.at(oldest->second).freed_at) oldest = it;
      evicted.emplace_back(oldest->second, oldest->first);
      forget(oldest->second, blocks_.at(oldest->second));
      free_by_size_.erase(oldest);
    }
  }

  static void release(void* p) { instance().give_back(p); }

  void give_back(void* p) {
    std::size_t unmap_bytes = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = blocks_.find(p);
      if (it == blocks_.end()) {  // a small block, from malloc
        c10::free_cpu(p);
        return;
      }
      Block& b = it->second;
      stats_.in_use_bytes -= static_cast<int64_t>(b.bytes);
      if (keep_freed_) {
        b.freed_in_step = step_;
        b.freed_at = ++frees_;
        free_by_size_.emplace(b.bytes, p);
        stats_.cached_bytes += static_cast<int64_t>(b.bytes);
        return;
      }
      unmap_bytes = b.bytes;
      blocks_.erase(it);
      ++stats_.unmapped;
    }
    munmap(p, unmap_bytes);
  }

  // Under the lock: a cached block leaves the books (its free-list entry is the caller's to erase).
  void forget(void* p, const Block& b) {
    stats_.cached_bytes -= static_cast<int64_t>(b.bytes);
    ++stats_.unmapped;
    blocks_.erase(p);
  }

  static void unmap(const std::vector<std::pair<void*, std::size_t>>& blocks) {
    for (const auto& [p, bytes] : blocks) munmap(p, bytes);
  }

  void note_in_use(int64_t bytes) {
    stats_.in_use_bytes += bytes;
    stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
    step_peak_in_use_ = std::max(step_peak_in_use_, stats_.in_use_bytes);
  }

  std::mutex mutex_;
  std::unordered_map<void*, Block> blocks_;         // every large block, in use or cached
  std::multimap<std::size_t, void*> free_by_size_;  // the cached ones, by size
  bool keep_freed_ = true;
  int64_t step_ = 0;
  int64_t step_peak_in_use_ = 0;  // the most in use since the last step ended
  uint64_t frees_ = 0;
  HostCacheStats stats_;
};

}  // namespace

void install_host_block_cache(bool keep_freed) {
  // Large blocks that are not tensors (Gloo's, the loader's) are mapped on their own and unmapped when
  // freed: glibc's default raises this threshold after each such free (up to 32 MiB), and then serves
  // them from its heap, which keeps what they leave behind.
  mallopt(M_MMAP_THRESHOLD, static_cast<int>(kHostCacheMinBytes));
  HostBlockCache& cache = HostBlockCache::instance();
  cache.set_keep_freed(keep_freed);
  c10::SetCPUAllocator(&cache, /*priority=*/100);
}

void end_host_cache_step() { HostBlockCache::instance().end_step(); }

void release_host_block_cache() { HostBlockCache::instance().release_all(); }

HostCacheStats host_cache_stats() { return HostBlockCache::instance().stats(); }

void reset_host_cache_peak() { HostBlockCache::instance().reset_peak(); }

}  // namespace gputrain

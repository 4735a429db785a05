#include "util/offload_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "util/error.h"
#include "util/positioned_io.h"

namespace gputrain {
namespace {

constexpr uint64_t kPage = 4096;

std::string size_text(uint64_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  for (; v >= 1024 && u < 4; ++u) v /= 1024;
  char out[32];
  std::snprintf(out, sizeof out, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return out;
}

// An unnamed file in `dir` (O_TMPFILE), or, where the filesystem has none, a named one unlinked at once.
int open_unnamed(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)) return fd;
  std::string name = dir + "/gputrain-offload-XXXXXX";
  fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd >= 0) ::unlink(name.c_str());
  return fd;
}

}  // namespace

OffloadFile::OffloadFile(std::string dir, std::string key) : dir_(std::move(dir)), key_(std::move(key)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  fd_ = ec ? -1 : open_unnamed(dir_);
  if (fd_ < 0)
    throw runtime_error(key_ + ": cannot create a file in '" + dir_ +
                        "': " + (ec ? ec.message() : std::string(std::strerror(errno))) +
                        "\n    fix: point it at a writable directory on a local disk");
  io_ = std::thread([this] { io_loop(); });
}

OffloadFile::~OffloadFile() {
  {
    std::lock_guard<std::mutex> guard(lock_);
    stop_ = true;
  }
  wake_.notify_all();
  io_.join();
  ::close(fd_);  // the mappings keep the pages until their last view goes; the file goes with them
}

uint64_t OffloadFile::add_region(uint64_t bytes) {
  const uint64_t offset = size_, padded = (bytes + kPage - 1) / kPage * kPage;
  if (padded == 0) return offset;
  if (const int err = ::posix_fallocate(fd_, static_cast<off_t>(offset), static_cast<off_t>(padded)); err != 0) {
    struct statvfs fs {};
    const std::string free =
        ::statvfs(dir_.c_str(), &fs) == 0 ? size_text(uint64_t{fs.f_bavail} * fs.f_frsize) : "unknown";
    const std::string sizes =
        size_text(offset) + " reserved, " + size_text(padded) + " more needed for the next unit, " + free + " free";
    throw runtime_error(key_ + " '" + dir_ + "': cannot reserve the optimizer state's file: " + std::strerror(err) +
                        " (" + sizes +
                        ")\n    fix: point it at a local disk with room for each rank's optimizer state on this "
                        "machine (`gputrain plan` says how much a rank holds), or use more ranks");
  }
  void* base = ::mmap(nullptr, padded, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, static_cast<off_t>(offset));
  if (base == MAP_FAILED)
    throw runtime_error(key_ + " '" + dir_ + "': cannot map the optimizer state's file: " + std::strerror(errno));
  regions_.push_back({offset, padded, std::shared_ptr<void>(base, [padded](void* p) { ::munmap(p, padded); })});
  size_ += padded;
  return offset;
}

torch::Tensor OffloadFile::view(uint64_t offset, at::IntArrayRef sizes, at::ScalarType dtype) const {
  for (const Region& r : regions_)
    if (offset >= r.offset && offset < r.offset + r.bytes) {
      char* at = static_cast<char*>(r.base.get()) + (offset - r.offset);
      return torch::from_blob(
          at, sizes, [keep = r.base](void*) {}, torch::TensorOptions().dtype(dtype));
    }
  throw std::logic_error("OffloadFile::view: offset " + std::to_string(offset) + " is in no region");
}

void OffloadFile::drop_mapped_pages() const {
  for (const Region& r : regions_) ::madvise(r.base.get(), r.bytes, MADV_DONTNEED);
}

void OffloadFile::read(uint64_t offset, void* to, size_t n) const {
  IoFailure failed;
  if (!pread_all(fd_, to, n, offset, failed))
    throw runtime_error(key_ + " '" + dir_ + "': cannot read the optimizer state's file at byte " +
                        std::to_string(failed.at) + ": " +
                        (failed.error == 0 ? "it ends there" : std::strerror(failed.error)));
}

void OffloadFile::write(uint64_t offset, const void* from, size_t n) const {
  IoFailure failed;
  if (!pwrite_all(fd_, from, n, offset, failed))
    throw runtime_error(key_ + " '" + dir_ + "': cannot write the optimizer state's file at byte " +
                        std::to_string(failed.at) + ": " + std::strerror(failed.error) +
                        "\n    fix: check the disk (its space was reserved when the run started)");
}

std::future<void> OffloadFile::submit(std::function<void()> job) {
  std::packaged_task<void()> task(std::move(job));
  std::future<void> done = task.get_future();
  {
    std::lock_guard<std::mutex> guard(lock_);
    jobs_.push_back(std::move(task));
  }
  wake_.notify_one();
  return done;
}

void OffloadFile::io_loop() {
  for (;;) {
    std::packaged_task<void()> job;
    {
      std::unique_lock<std::mutex> guard(lock_);
      wake_.wait(guard, [this] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, and nothing left to do
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace gputrain

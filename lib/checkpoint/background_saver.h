// checkpoint.async: a checkpoint is written on a thread of its own while training goes on. One save
// is in flight at a time: the next one, a rollback and the end of the run wait for it, and its error
// (a full disk, a rank that never wrote its part) comes out there.
#pragma once
#include <atomic>
#include <exception>
#include <functional>
#include <thread>

namespace gputrain {

class BackgroundSaver {
 public:
  BackgroundSaver() = default;
  // A save still in flight is told to stop waiting for other ranks, and joined (its error dropped:
  // the run is failing already). Its temporary directory is removed, never a complete checkpoint.
  ~BackgroundSaver();
  BackgroundSaver(const BackgroundSaver&) = delete;
  BackgroundSaver& operator=(const BackgroundSaver&) = delete;

  // Waits for the save in flight, then runs `save` on a new thread.
  void start(std::function<void()> save);
  // Waits for the save in flight; rethrows the error it ended with.
  void wait();
  // Set when the saver is destroyed with a save in flight (checkpoint/checkpoint_dir.h CheckpointJoin).
  const std::atomic<bool>* cancelled() const { return &cancelled_; }

 private:
  std::thread thread_;
  std::exception_ptr error_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace gputrain

#include "checkpoint/background_saver.h"

#include <utility>

namespace gputrain {

BackgroundSaver::~BackgroundSaver() {
  cancelled_ = true;
  if (thread_.joinable()) thread_.join();
}

void BackgroundSaver::start(std::function<void()> save) {
  wait();
  thread_ = std::thread([this, save = std::move(save)] {
    try {
      save();
    } catch (...) {
      error_ = std::current_exception();
    }
  });
}

void BackgroundSaver::wait() {
  if (thread_.joinable()) thread_.join();
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

}  // namespace gputrain

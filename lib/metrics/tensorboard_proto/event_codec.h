// TensorBoard's Event messages to and from bytes, with no protobuf type in sight: this folder is
// its own target, compiled without LibTorch's include path (the pip torch ships an older protobuf's
// headers there, which would shadow Debian's).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gputrain::tensorboard_proto {

struct Scalar {
  std::string tag;
  float value = 0;
};

std::string file_version_event(double wall_time);  // "brain.Event:2", every file's first record
std::string scalars_event(double wall_time, int64_t step, const std::vector<Scalar>& scalars);
// Markdown for TensorBoard's text plugin: a string tensor under `tag`.
std::string text_event(double wall_time, int64_t step, const std::string& tag, const std::string& markdown);

// What a continued run needs to know of an earlier event; nullopt when the bytes are no Event.
struct EventHead {
  int64_t step = 0;
  bool summary = false;  // scalars or texts (not a file version)
  bool text = false;     // a tensor value among them
};
std::optional<EventHead> read_event_head(const std::string& bytes);

}  // namespace gputrain::tensorboard_proto

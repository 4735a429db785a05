// TensorBoard's Event messages to and from bytes: the protobuf wire format of the few fields of
// TensorBoard's event.proto, summary.proto and tensor.proto that gputrain writes (field numbers in
// tensorboard_event.cpp). Written by hand rather than with Debian's libprotobuf: linking a second
// user of protobuf-lite into the binary beside SentencePiece's made SentencePiece crash in
// protobuf's arena (the executable's copies of protobuf's globals), and these messages need only
// varints, fixed-width numbers and length-delimited fields. Tests compare the bytes with the
// tensorboard package's own serialization and read the files back with its loader.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gputrain::tensorboard_event {

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

}  // namespace gputrain::tensorboard_event

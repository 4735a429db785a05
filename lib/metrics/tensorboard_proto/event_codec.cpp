#include "metrics/tensorboard_proto/event_codec.h"

#include <algorithm>

#include "metrics/tensorboard_proto/tensorboard_event.pb.h"

namespace gputrain::tensorboard_proto {

std::string file_version_event(double wall_time) {
  tensorboard::Event e;
  e.set_wall_time(wall_time);
  e.set_file_version("brain.Event:2");
  return e.SerializeAsString();
}

std::string scalars_event(double wall_time, int64_t step, const std::vector<Scalar>& scalars) {
  tensorboard::Event e;
  e.set_wall_time(wall_time);
  e.set_step(step);
  tensorboard::Summary* s = e.mutable_summary();
  for (const Scalar& x : scalars) {
    auto* value = s->add_value();
    value->set_tag(x.tag);
    value->set_simple_value(x.value);
  }
  return e.SerializeAsString();
}

std::string text_event(double wall_time, int64_t step, const std::string& tag, const std::string& markdown) {
  tensorboard::Event e;
  e.set_wall_time(wall_time);
  e.set_step(step);
  auto* value = e.mutable_summary()->add_value();
  value->set_tag(tag);
  auto* meta = value->mutable_metadata();
  meta->mutable_plugin_data()->set_plugin_name("text");
  meta->set_data_class(tensorboard::DATA_CLASS_TENSOR);
  auto* tensor = value->mutable_tensor();
  tensor->set_dtype(tensorboard::DT_STRING);
  tensor->mutable_tensor_shape();  // a scalar: no dims
  tensor->add_string_val(markdown);
  return e.SerializeAsString();
}

std::optional<EventHead> read_event_head(const std::string& bytes) {
  tensorboard::Event e;
  if (!e.ParseFromString(bytes)) return std::nullopt;
  EventHead h;
  h.step = e.step();
  h.summary = e.has_summary();
  h.text =
      std::any_of(e.summary().value().begin(), e.summary().value().end(), [](const auto& v) { return v.has_tensor(); });
  return h;
}

}  // namespace gputrain::tensorboard_proto

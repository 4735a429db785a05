#include "metrics/tensorboard_event.h"

#include <cstring>

namespace gputrain::tensorboard_event {
namespace {

// Wire types.
constexpr int kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5;
// Field numbers, as TensorBoard's .proto files give them.
constexpr int kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5;
constexpr int kSummaryValue = 1;
constexpr int kValueTag = 1, kValueSimpleValue = 2, kValueTensor = 8, kValueMetadata = 9;
constexpr int kMetadataPluginData = 1, kMetadataDataClass = 4, kPluginName = 1;
constexpr int kTensorDtype = 1, kTensorShape = 2, kTensorStringVal = 8;
constexpr uint64_t kDataClassTensor = 2, kDtString = 7;

void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void key(std::string& out, int field, int wire) { varint(out, static_cast<uint64_t>(field) << 3 | wire); }

void bytes_field(std::string& out, int field, const std::string& bytes) {
  key(out, field, kBytes);
  varint(out, bytes.size());
  out += bytes;
}

template <typename T>
void fixed_field(std::string& out, int field, T v) {
  key(out, field, sizeof(T) == 8 ? kFixed64 : kFixed32);
  char raw[sizeof(T)];
  std::memcpy(raw, &v, sizeof(T));  // little-endian, as the wire format (x86-64, ARM64)
  out.append(raw, sizeof(T));
}

void varint_field(std::string& out, int field, uint64_t v) {
  key(out, field, kVarint);
  varint(out, v);
}

// The Event's wall_time and step, then its payload fields.
std::string event(double wall_time, int64_t step, const std::string& rest) {
  std::string e;
  fixed_field(e, kEventWallTime, wall_time);
  if (step != 0) varint_field(e, kEventStep, static_cast<uint64_t>(step));  // proto3 leaves out zeros
  return e + rest;
}

// A reader of one message's fields: calls `on(field, wire, varint value, bytes)`; false when malformed.
template <typename F>
bool for_each_field(const std::string& m, F on) {
  size_t at = 0;
  auto read_varint = [&](uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64 && at < m.size(); shift += 7) {
      const auto b = static_cast<unsigned char>(m[at++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  };
  while (at < m.size()) {
    uint64_t k = 0, v = 0;
    if (!read_varint(k)) return false;
    const int wire = static_cast<int>(k & 7), field = static_cast<int>(k >> 3);
    std::string bytes;
    if (wire == kVarint) {
      if (!read_varint(v)) return false;
    } else if (wire == kFixed64 || wire == kFixed32) {
      const size_t n = wire == kFixed64 ? 8 : 4;
      if (m.size() - at < n) return false;
      at += n;
    } else if (wire == kBytes) {
      if (!read_varint(v) || m.size() - at < v) return false;
      bytes = m.substr(at, v);
      at += v;
    } else {
      return false;
    }
    if (!on(field, wire, v, bytes)) return false;
  }
  return true;
}

}  // namespace

std::string file_version_event(double wall_time) {
  std::string rest;
  bytes_field(rest, kEventFileVersion, "brain.Event:2");
  return event(wall_time, 0, rest);
}

std::string scalars_event(double wall_time, int64_t step, const std::vector<Scalar>& scalars) {
  std::string summary;
  for (const Scalar& s : scalars) {
    std::string value;
    bytes_field(value, kValueTag, s.tag);
    fixed_field(value, kValueSimpleValue, s.value);
    bytes_field(summary, kSummaryValue, value);
  }
  std::string rest;
  bytes_field(rest, kEventSummary, summary);
  return event(wall_time, step, rest);
}

std::string text_event(double wall_time, int64_t step, const std::string& tag, const std::string& markdown) {
  std::string tensor, plugin, metadata, value, summary, rest;
  varint_field(tensor, kTensorDtype, kDtString);
  bytes_field(tensor, kTensorShape, "");  // a scalar: a shape without dims
  bytes_field(tensor, kTensorStringVal, markdown);
  bytes_field(plugin, kPluginName, "text");
  bytes_field(metadata, kMetadataPluginData, plugin);
  varint_field(metadata, kMetadataDataClass, kDataClassTensor);
  bytes_field(value, kValueTag, tag);
  bytes_field(value, kValueTensor, tensor);
  bytes_field(value, kValueMetadata, metadata);
  bytes_field(summary, kSummaryValue, value);
  bytes_field(rest, kEventSummary, summary);
  return event(wall_time, step, rest);
}

std::optional<EventHead> read_event_head(const std::string& bytes) {
  EventHead h;
  const bool ok = for_each_field(bytes, [&](int field, int wire, uint64_t v, const std::string& sub) {
    if (field == kEventStep && wire == kVarint) h.step = static_cast<int64_t>(v);
    if (field != kEventSummary || wire != kBytes) return true;
    h.summary = true;
    return for_each_field(sub, [&](int f, int w, uint64_t, const std::string& value) {
      if (f != kSummaryValue || w != kBytes) return true;
      return for_each_field(value, [&](int vf, int vw, uint64_t, const std::string&) {
        if (vf == kValueTensor && vw == kBytes) h.text = true;
        return true;
      });
    });
  });
  if (!ok) return std::nullopt;
  return h;
}

}  // namespace gputrain::tensorboard_event

#include "metrics/tfrecord.h"

#include <cstring>

#include "util/crc32c.h"
#include "util/error.h"
#include "util/text_file.h"

namespace gputrain {
namespace {

void append_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t read_le(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

}  // namespace

uint32_t masked_crc32c(std::string_view bytes) {
  Crc32c crc;
  crc.update(bytes.data(), bytes.size());
  const uint32_t c = crc.value();
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string frame_tfrecord(std::string_view payload) {
  std::string out, length;
  append_le(length, payload.size(), 8);
  out.reserve(payload.size() + 16);
  out += length;
  append_le(out, masked_crc32c(length), 4);
  out += payload;
  append_le(out, masked_crc32c(payload), 4);
  return out;
}

std::vector<std::string> read_tfrecords(const std::string& path) {
  const std::string data = read_text_file(path);
  std::vector<std::string> records;
  size_t at = 0;
  auto corrupt = [&](const std::string& what) {
    return runtime_error("'" + path + "' is not a readable TensorBoard event file: " + what + " at byte " +
                         std::to_string(at) + "\n    fix: delete it (TensorBoard's curves of that run restart)");
  };
  while (data.size() - at >= 12) {
    const std::string_view length(data.data() + at, 8);
    if (read_le(data.data() + at + 8, 4) != masked_crc32c(length)) throw corrupt("a record length's checksum fails");
    const uint64_t n = read_le(data.data() + at, 8);
    if (n > data.size() - at - 12 || data.size() - at - 12 - n < 4) break;  // the torn last record
    const std::string_view payload(data.data() + at + 12, n);
    if (read_le(data.data() + at + 12 + n, 4) != masked_crc32c(payload)) throw corrupt("a record's checksum fails");
    records.emplace_back(payload);
    at += 16 + n;
  }
  return records;
}

}  // namespace gputrain

// TFRecord framing, the container of TensorBoard's event files: each record is its length (uint64,
// little-endian), a masked CRC-32C of the length, the bytes, and a masked CRC-32C of the bytes.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gputrain {

// The record as it goes into the file.
std::string frame_tfrecord(std::string_view payload);

// Every record of a file, checked. A file cut short after its last whole record (a crash while
// writing) yields the whole ones; a wrong checksum or a torn length throws a runtime Error
// naming the file and the byte offset.
std::vector<std::string> read_tfrecords(const std::string& path);

// TensorFlow's masking of a CRC-32C (so a CRC stored in data does not checksum to itself).
uint32_t masked_crc32c(std::string_view bytes);

}  // namespace gputrain

#include "metrics/metrics_writer.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "util/error.h"

namespace gputrain {

MetricsWriter::MetricsWriter(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "w");
  if (file_ == nullptr) throw runtime_error("cannot write '" + path + "': " + std::strerror(errno));
}

MetricsWriter::MetricsWriter(const std::string& path, int64_t keep_bytes) : path_(path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && static_cast<int64_t>(size) > keep_bytes)
    std::filesystem::resize_file(path, static_cast<uint64_t>(keep_bytes), ec);
  if (ec && std::filesystem::exists(path))
    throw runtime_error("cannot cut '" + path + "' back to the checkpoint's step: " + ec.message());
  file_ = std::fopen(path.c_str(), "a");
  if (file_ == nullptr) throw runtime_error("cannot write '" + path + "': " + std::strerror(errno));
  std::fseek(file_, 0, SEEK_END);  // so bytes() counts what is already there
}

int64_t MetricsWriter::bytes() const { return static_cast<int64_t>(std::ftell(file_)); }

MetricsWriter::~MetricsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void MetricsWriter::write(const nlohmann::ordered_json& record) {
  std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0)
    throw runtime_error("cannot write '" + path_ + "': " + std::strerror(errno));
}

}  // namespace gputrain

#include "data/document_stream.h"

#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "data/arrow_documents.h"
#include "data/jsonl_text.h"
#include "util/error.h"
#include "util/mapped_file.h"

namespace gputrain {
namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Decompressed bytes of a file, block by block.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual size_t read(char* buf, size_t n) = 0;  // 0 at the end
};

class GzipSource : public ByteSource {
 public:
  explicit GzipSource(const std::string& path) : path_(path), f_(gzopen(path.c_str(), "rb")) {
    if (!f_) throw data_error("cannot open '" + path + "': " + std::strerror(errno));
    gzbuffer(f_, 1 << 20);
  }
  ~GzipSource() override { gzclose(f_); }
  size_t read(char* buf, size_t n) override {
    const int got = gzread(f_, buf, static_cast<unsigned>(n));
    if (got < 0) {
      int code = 0;
      throw data_error("'" + path_ + "' is not a readable gzip file (" + gzerror(f_, &code) +
                       ")\n    fix: check the file; `gzip -t` tests it");
    }
    return static_cast<size_t>(got);
  }

 private:
  std::string path_;
  gzFile f_;
};

class ZstdSource : public ByteSource {
 public:
  explicit ZstdSource(const std::string& path)
      : path_(path), f_(std::fopen(path.c_str(), "rb")), ctx_(ZSTD_createDCtx()), in_buf_(ZSTD_DStreamInSize()) {
    if (!f_) throw data_error("cannot open '" + path + "': " + std::strerror(errno));
  }
  ~ZstdSource() override {
    ZSTD_freeDCtx(ctx_);
    std::fclose(f_);
  }
  size_t read(char* buf, size_t n) override {
    ZSTD_outBuffer out{buf, n, 0};
    while (out.pos == 0) {
      if (in_.pos == in_.size) {
        in_.size = std::fread(in_buf_.data(), 1, in_buf_.size(), f_);
        in_ = {in_buf_.data(), in_.size, 0};
        if (in_.size == 0) {
          if (!frame_done_)
            throw data_error("'" + path_ +
                             "' ends inside a zstd frame (truncated)\n    fix: check the file; `zstd -t` tests it");
          return 0;
        }
      }
      const size_t rc = ZSTD_decompressStream(ctx_, &out, &in_);
      if (ZSTD_isError(rc))
        throw data_error("'" + path_ + "' is not a readable zstd file (" + ZSTD_getErrorName(rc) +
                         ")\n    fix: check the file; `zstd -t` tests it");
      frame_done_ = rc == 0;
    }
    return out.pos;
  }

 private:
  std::string path_;
  std::FILE* f_;
  ZSTD_DCtx* ctx_;
  std::vector<char> in_buf_;
  ZSTD_inBuffer in_{nullptr, 0, 0};
  bool frame_done_ = true;
};

class MappedSource : public ByteSource {
 public:
  explicit MappedSource(const std::string& path) : file_(path) {}
  size_t read(char* buf, size_t n) override {
    n = std::min(n, file_.size() - pos_);
    std::memcpy(buf, file_.data() + pos_, n);
    pos_ += n;
    return n;
  }

 private:
  MappedFile file_;
  size_t pos_ = 0;
};

std::unique_ptr<ByteSource> open_bytes(const std::string& path) {
  if (ends_with(path, ".gz")) return std::make_unique<GzipSource>(path);
  if (ends_with(path, ".zst")) return std::make_unique<ZstdSource>(path);
  return std::make_unique<MappedSource>(path);
}

// The lines of a (decompressed) file, without their '\n'.
class LineReader {
 public:
  explicit LineReader(const std::string& path) : src_(open_bytes(path)) {}
  // The next line, valid until the next call; false at the end.
  bool next(std::string_view& line) {
    while (true) {
      const char* start = buf_.data() + begin_;
      if (const void* nl = std::memchr(start, '\n', end_ - begin_)) {
        const size_t len = static_cast<size_t>(static_cast<const char*>(nl) - start);
        line = std::string_view(start, len);
        begin_ += len + 1;
        return true;
      }
      if (eof_) {
        if (begin_ == end_) return false;
        line = std::string_view(start, end_ - begin_);
        begin_ = end_;
        return true;
      }
      // Keep the partial line (growing the buffer if one line fills it) and read more.
      std::memmove(buf_.data(), start, end_ - begin_);
      end_ -= begin_, begin_ = 0;
      if (end_ == buf_.size()) buf_.resize(buf_.size() * 2);
      const size_t got = src_->read(buf_.data() + end_, buf_.size() - end_);
      end_ += got;
      eof_ = got == 0;
    }
  }

 private:
  std::unique_ptr<ByteSource> src_;
  std::vector<char> buf_ = std::vector<char>(1 << 20);
  size_t begin_ = 0, end_ = 0;
  bool eof_ = false;
};

// JSONL, line by line; blank lines are not rows.
class JsonlStream : public DocumentStream {
 public:
  JsonlStream(std::string path, std::string key, RowKind kind)
      : path_(std::move(path)), key_(std::move(key)), kind_(kind), lines_(path_) {}
  size_t read(std::vector<std::string>& out, size_t max_rows) override {
    size_t n = 0;
    std::string_view line;
    while (n < max_rows && lines_.next(line)) {
      ++line_no_;
      if (is_blank_line(line)) continue;
      if (kind_ != RowKind::kText) {
        out.emplace_back(line);  // parsed, with its row's place, by data prepare
      } else {
        out.push_back(jsonl_text(line, key_, [&] { return path_ + ":" + std::to_string(line_no_); }));
      }
      ++n;
    }
    return n;
  }
  int64_t rows() override {
    if (rows_ < 0) {  // a first pass of its own
      LineReader lines(path_);
      std::string_view line;
      rows_ = 0;
      while (lines.next(line)) rows_ += !is_blank_line(line);
    }
    return rows_;
  }
  const std::string& path() const override { return path_; }

 private:
  std::string path_, key_;
  RowKind kind_;
  LineReader lines_;
  int64_t line_no_ = 0, rows_ = -1;
};

}  // namespace

bool is_streamed_input(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return true;  // a datasets folder (open_arrow checks it)
  return ends_with(path, ".gz") || ends_with(path, ".zst") || ends_with(path, ".parquet") || ends_with(path, ".arrow");
}

std::unique_ptr<DocumentStream> open_document_stream(const std::string& path, const std::string& text_key,
                                                     RowKind kind) {
  std::error_code ec;
  if (fs::is_directory(path, ec) || ends_with(path, ".arrow")) return open_arrow(path, text_key, kind);
  if (ends_with(path, ".parquet")) return open_parquet(path, text_key, kind);
  for (const char* ext : {".jsonl", ".json", ".jsonl.gz", ".json.gz", ".jsonl.zst", ".json.zst"})
    if (ends_with(path, ext)) return std::make_unique<JsonlStream>(path, text_key, kind);
  throw data_error("input '" + path +
                   "' is compressed or streamed but not JSONL, Parquet or Arrow\n    fix: compressed inputs must be "
                   "JSONL (.jsonl.gz, .jsonl.zst); decompress other text first");
}

}  // namespace gputrain

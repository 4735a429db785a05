#include "data/arrow_documents.h"

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <arrow/ipc/reader.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/schema.h>
#include <parquet/file_reader.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/text_file.h"

namespace gputrain {
namespace {

namespace fs = std::filesystem;

template <typename T>
T value_or_throw(arrow::Result<T> r, const std::string& what) {
  if (!r.ok()) throw data_error(what + ": " + r.status().ToString());
  return std::move(r).ValueOrDie();
}

std::string field_names(const arrow::Schema& schema) {
  std::string names;
  for (const auto& f : schema.fields())
    names += (names.empty() ? "" : ", ") + f->name() + " (" + f->type()->ToString() + ")";
  return names;
}

[[noreturn]] void no_text_column(const std::string& path, const std::string& key, const arrow::Schema& schema) {
  throw data_error("'" + path + "' has no column \"" + key + "\"; its columns are: " + field_names(schema) +
                   "\n    fix: name the text column with --text-key");
}

void check_text_type(const std::string& path, const std::string& key, const arrow::DataType& type) {
  const auto id = type.id();
  if (id != arrow::Type::STRING && id != arrow::Type::LARGE_STRING && id != arrow::Type::STRING_VIEW)
    throw data_error("'" + path + "': column \"" + key + "\" holds " + type.ToString() +
                     ", not text\n    fix: name a string column with --text-key");
}

// Rows [from, from + n) of a string column; nulls are empty documents (skipped).
void append_texts(const arrow::Array& a, int64_t from, int64_t n, std::vector<std::string>& out) {
  for (int64_t i = from; i < from + n; ++i) {
    if (a.IsNull(i)) {
      out.emplace_back();
    } else if (a.type_id() == arrow::Type::STRING) {
      out.emplace_back(static_cast<const arrow::StringArray&>(a).GetView(i));
    } else if (a.type_id() == arrow::Type::LARGE_STRING) {
      out.emplace_back(static_cast<const arrow::LargeStringArray&>(a).GetView(i));
    } else {
      out.emplace_back(static_cast<const arrow::StringViewArray&>(a).GetView(i));
    }
  }
}

// Hands out the rows of a sequence of column chunks (a row group's, a record batch's).
struct ChunkCursor {
  std::vector<std::shared_ptr<arrow::Array>> chunks;
  size_t chunk = 0;
  int64_t row = 0;
  size_t take(std::vector<std::string>& out, size_t max_rows) {
    size_t n = 0;
    while (n < max_rows && chunk < chunks.size()) {
      const int64_t k = std::min<int64_t>(static_cast<int64_t>(max_rows - n), chunks[chunk]->length() - row);
      append_texts(*chunks[chunk], row, k, out);
      n += static_cast<size_t>(k), row += k;
      if (row == chunks[chunk]->length()) ++chunk, row = 0;
    }
    return n;
  }
  bool done() const { return chunk >= chunks.size(); }
};

class ParquetStream : public DocumentStream {
 public:
  ParquetStream(std::string path, const std::string& key) : path_(std::move(path)) {
    // Read with pread, not mmap: mapped pages would count in the resident set.
    auto file = value_or_throw(arrow::io::ReadableFile::Open(path_), "cannot open '" + path_ + "'");
    auto opened = parquet::arrow::OpenFile(file, arrow::default_memory_pool());
    if (!opened.ok())
      throw data_error("'" + path_ + "' is not a readable Parquet file (" + opened.status().ToString() +
                       ")\n    fix: check the file (a Git LFS pointer is not the file)");
    reader_ = std::move(opened).ValueOrDie();
    std::shared_ptr<arrow::Schema> schema;
    const auto st = reader_->GetSchema(&schema);
    if (!st.ok()) throw data_error("'" + path_ + "': cannot read its schema: " + st.ToString());
    const int field = schema->GetFieldIndex(key);
    if (field < 0) no_text_column(path_, key, *schema);
    check_text_type(path_, key, *schema->field(field)->type());
    column_ = reader_->manifest().schema_fields[static_cast<size_t>(field)].column_index;
  }
  size_t read(std::vector<std::string>& out, size_t max_rows) override {
    size_t n = 0;
    while (n < max_rows) {
      if (cursor_.done()) {
        if (group_ == reader_->num_row_groups()) break;
        auto table = value_or_throw(reader_->ReadRowGroup(group_, {column_}),
                                    "'" + path_ + "': cannot read row group " + std::to_string(group_));
        cursor_ = ChunkCursor{table->column(0)->chunks()};
        ++group_;
      }
      n += cursor_.take(out, max_rows - n);
    }
    return n;
  }
  int64_t rows() override { return reader_->parquet_reader()->metadata()->num_rows(); }
  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  std::unique_ptr<parquet::arrow::FileReader> reader_;
  int column_ = 0, group_ = 0;
  ChunkCursor cursor_;
};

// Record batches of one Arrow IPC file, stream format (what `datasets` writes) or file format.
class BatchReader {
 public:
  BatchReader(const std::string& path, const std::string& key) : path_(path), key_(key) {
    auto file = value_or_throw(arrow::io::ReadableFile::Open(path), "cannot open '" + path + "'");
    auto stream = arrow::ipc::RecordBatchStreamReader::Open(file);
    if (stream.ok()) {
      stream_ = std::move(stream).ValueOrDie();
      check(*stream_->schema());
      return;
    }
    auto random = arrow::ipc::RecordBatchFileReader::Open(
        value_or_throw(arrow::io::ReadableFile::Open(path), "cannot open '" + path + "'"));
    if (!random.ok())
      throw data_error("'" + path + "' is not an Arrow IPC file (" + stream.status().ToString() +
                       ")\n    fix: pass the .arrow files `datasets` save_to_disk wrote, or their folder");
    file_ = std::move(random).ValueOrDie();
    check(*file_->schema());
  }
  // The text column of the next batch, nullptr at the end.
  std::shared_ptr<arrow::Array> next() {
    std::shared_ptr<arrow::RecordBatch> batch;
    if (stream_) {
      batch = value_or_throw(stream_->Next(), "'" + path_ + "': cannot read a record batch");
    } else if (next_batch_ < file_->num_record_batches()) {
      batch = value_or_throw(file_->ReadRecordBatch(next_batch_++), "'" + path_ + "': cannot read a record batch");
    }
    return batch ? batch->column(field_) : nullptr;
  }

 private:
  void check(const arrow::Schema& schema) {
    field_ = schema.GetFieldIndex(key_);
    if (field_ < 0) no_text_column(path_, key_, schema);
    check_text_type(path_, key_, *schema.field(field_)->type());
  }
  std::string path_, key_;
  std::shared_ptr<arrow::ipc::RecordBatchStreamReader> stream_;
  std::shared_ptr<arrow::ipc::RecordBatchFileReader> file_;
  int field_ = 0, next_batch_ = 0;
};

// The .arrow files of a datasets folder, in order.
std::vector<std::string> arrow_files(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return {path};
  if (fs::exists(fs::path(path) / "dataset_dict.json"))
    throw data_error(
        "'" + path +
        "' is a datasets DatasetDict (it holds dataset_dict.json)\n    fix: pass one split's folder, e.g. " +
        (fs::path(path) / "train").string());
  std::vector<std::string> files;
  const fs::path state = fs::path(path) / "state.json";
  if (fs::exists(state)) {
    try {
      const auto j = nlohmann::json::parse(read_text_file(state, "datasets state file"));
      for (const auto& f : j.at("_data_files"))
        files.push_back((fs::path(path) / f.at("filename").get<std::string>()).string());
    } catch (const nlohmann::json::exception& e) {
      throw data_error("'" + state.string() + "' does not list the data files (" + e.what() +
                       ")\n    fix: pass a folder `datasets` save_to_disk wrote");
    }
  } else {
    for (const auto& e : fs::directory_iterator(path))
      if (e.path().extension() == ".arrow") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
  }
  if (files.empty())
    throw data_error("input folder '" + path +
                     "' holds no .arrow files, so it is not a datasets folder\n    fix: pass " +
                     "the files themselves, e.g. " + (fs::path(path) / "*.jsonl").string() +
                     ", or a folder `datasets` save_to_disk wrote");
  return files;
}

class ArrowStream : public DocumentStream {
 public:
  ArrowStream(std::string path, std::string key)
      : path_(std::move(path)), key_(std::move(key)), files_(arrow_files(path_)) {
    reader_ = std::make_unique<BatchReader>(files_[0], key_);  // checks the first file's schema now
  }
  size_t read(std::vector<std::string>& out, size_t max_rows) override {
    size_t n = 0;
    while (n < max_rows) {
      if (cursor_.done()) {
        auto column = reader_ ? reader_->next() : nullptr;
        if (!column) {
          if (++file_ >= files_.size()) break;
          reader_ = std::make_unique<BatchReader>(files_[file_], key_);
          continue;
        }
        cursor_ = ChunkCursor{{column}};
      }
      n += cursor_.take(out, max_rows - n);
    }
    return n;
  }
  int64_t rows() override {
    if (rows_ < 0) {  // a pass over the batches (their text is read and dropped one batch at a time)
      rows_ = 0;
      for (const auto& f : files_) {
        BatchReader r(f, key_);
        while (auto column = r.next()) rows_ += column->length();
      }
    }
    return rows_;
  }
  const std::string& path() const override { return path_; }

 private:
  std::string path_, key_;
  std::vector<std::string> files_;
  size_t file_ = 0;
  std::unique_ptr<BatchReader> reader_;
  ChunkCursor cursor_;
  int64_t rows_ = -1;
};

}  // namespace

std::unique_ptr<DocumentStream> open_parquet(const std::string& path, const std::string& text_key) {
  return std::make_unique<ParquetStream>(path, text_key);
}

std::unique_ptr<DocumentStream> open_arrow(const std::string& path, const std::string& text_key) {
  return std::make_unique<ArrowStream>(path, text_key);
}

}  // namespace gputrain

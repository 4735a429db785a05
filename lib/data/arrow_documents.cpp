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

bool holds_text(const arrow::DataType& t) {
  return t.id() == arrow::Type::STRING || t.id() == arrow::Type::LARGE_STRING || t.id() == arrow::Type::STRING_VIEW;
}

std::string string_at(const arrow::Array& a, int64_t i) {
  if (a.IsNull(i)) return "";
  if (a.type_id() == arrow::Type::STRING) return std::string(static_cast<const arrow::StringArray&>(a).GetView(i));
  if (a.type_id() == arrow::Type::LARGE_STRING)
    return std::string(static_cast<const arrow::LargeStringArray&>(a).GetView(i));
  return std::string(static_cast<const arrow::StringViewArray&>(a).GetView(i));
}

// list<struct<role: string, content: string>>: a conversation.
bool holds_messages(const arrow::DataType& t) {
  const bool list = t.id() == arrow::Type::LIST || t.id() == arrow::Type::LARGE_LIST;
  const auto item = list ? static_cast<const arrow::BaseListType&>(t).value_type() : nullptr;
  const auto* st =
      item && item->id() == arrow::Type::STRUCT ? static_cast<const arrow::StructType*>(item.get()) : nullptr;
  return st && st->GetFieldByName("role") && st->GetFieldByName("content") &&
         holds_text(*st->GetFieldByName("role")->type()) && holds_text(*st->GetFieldByName("content")->type());
}

// Row i of a conversation column as [{role, content}, ...] (a null row: none).
nlohmann::json messages_at(const arrow::Array& column, int64_t i) {
  const bool large = column.type_id() == arrow::Type::LARGE_LIST;
  int64_t begin = 0, end = 0;
  std::shared_ptr<arrow::Array> items;
  if (large) {
    const auto& list = static_cast<const arrow::LargeListArray&>(column);
    begin = list.value_offset(i), end = list.value_offset(i + 1), items = list.values();
  } else {
    const auto& list = static_cast<const arrow::ListArray&>(column);
    begin = list.value_offset(i), end = list.value_offset(i + 1), items = list.values();
  }
  const auto values = std::static_pointer_cast<arrow::StructArray>(items);
  const auto role = values->GetFieldByName("role"), content = values->GetFieldByName("content");
  nlohmann::json messages = nlohmann::json::array();
  if (!column.IsNull(i))
    for (int64_t k = begin; k < end; ++k)
      messages.push_back({{"role", string_at(*role, k)}, {"content", string_at(*content, k)}});
  return messages;
}

// A string or conversation cell as JSON.
nlohmann::json cell_json(const arrow::Array& column, int64_t i) {
  if (holds_text(*column.type())) return string_at(column, i);
  return messages_at(column, i);
}

// What makes a row's document: the text column, or for chat rows (RowKind::kChat) the
// "messages" column (list<struct<role, content>>) or the "prompt" and "completion" columns,
// given on as a JSON row (data/chat_format.h parses it).
class RowReader {
 public:
  RowReader(const arrow::Schema& schema, const std::string& path, const std::string& text_key, RowKind kind) {
    auto type_of = [&](const std::string& name) -> std::shared_ptr<arrow::DataType> {
      const auto f = schema.GetFieldByName(name);
      return f ? f->type() : nullptr;
    };
    if (kind == RowKind::kText) {
      const auto t = type_of(text_key);
      if (!t)
        throw data_error("'" + path + "' has no column \"" + text_key + "\"; its columns are: " + field_names(schema) +
                         "\n    fix: name the text column with --text-key");
      if (!holds_text(*t))
        throw data_error("'" + path + "': column \"" + text_key + "\" holds " + t->ToString() +
                         ", not text\n    fix: name a string column with --text-key");
      fields_ = {text_key};
      return;
    }
    if (kind == RowKind::kPreference) {
      for (const char* name : {"prompt", "chosen", "rejected"}) {
        const auto t = type_of(name);
        if (!t && std::string(name) == "prompt") continue;  // implicit prompt
        if (!t || !(holds_text(*t) || holds_messages(*t)))
          throw data_error("'" + path + "': preference rows need a \"" + name +
                           "\" column of strings or of lists of {role, content}; its columns are: " +
                           field_names(schema) + "\n    fix: store prompt (optional), chosen and rejected");
        fields_.push_back(name);
      }
      preference_ = true;
      return;
    }
    if (const auto m = type_of("messages")) {
      if (!holds_messages(*m))
        throw data_error("'" + path + "': column \"messages\" holds " + m->ToString() +
                         ", not list<struct<role: string, content: string>>\n    fix: store each conversation as a "
                         "list of {role, content}");
      fields_ = {"messages"};
      return;
    }
    const auto p = type_of("prompt"), c = type_of("completion");
    if (!p || !c || !holds_text(*p) || !holds_text(*c))
      throw data_error("'" + path + "' has neither a \"messages\" column nor string \"prompt\" and \"completion\" " +
                       "columns; its columns are: " + field_names(schema) +
                       "\n    fix: chat rows need messages (list of {role, content}) or prompt/completion");
    fields_ = {"prompt", "completion"};
  }
  const std::vector<std::string>& fields() const { return fields_; }

  void append(const arrow::RecordBatch& b, int64_t from, int64_t n, std::vector<std::string>& out) const {
    if (preference_) {
      for (int64_t i = from; i < from + n; ++i) {
        nlohmann::json row = nlohmann::json::object();
        for (const auto& name : fields_) row[name] = cell_json(*b.GetColumnByName(name), i);
        out.push_back(row.dump());
      }
      return;
    }
    if (fields_.size() == 2) {
      const auto& p = *b.GetColumnByName("prompt");
      const auto& c = *b.GetColumnByName("completion");
      for (int64_t i = from; i < from + n; ++i)
        out.push_back(nlohmann::json{{"prompt", string_at(p, i)}, {"completion", string_at(c, i)}}.dump());
      return;
    }
    const auto column = b.GetColumnByName(fields_[0]);
    if (fields_[0] != "messages") {
      for (int64_t i = from; i < from + n; ++i) out.push_back(string_at(*column, i));
      return;
    }
    for (int64_t i = from; i < from + n; ++i)
      out.push_back(nlohmann::json{{"messages", messages_at(*column, i)}}.dump());
  }

 private:
  std::vector<std::string> fields_;
  bool preference_ = false;
};

// Hands out the rows of one record batch.
struct BatchCursor {
  std::shared_ptr<arrow::RecordBatch> batch;
  int64_t row = 0;
  size_t take(const RowReader& rows, std::vector<std::string>& out, size_t max_rows) {
    const int64_t k = std::min<int64_t>(static_cast<int64_t>(max_rows), batch->num_rows() - row);
    rows.append(*batch, row, k, out);
    row += k;
    return static_cast<size_t>(k);
  }
  bool done() const { return !batch || row >= batch->num_rows(); }
};

// The Parquet leaf columns under a top-level field (a nested one has several).
void leaf_columns(const parquet::arrow::SchemaField& f, std::vector<int>& out) {
  if (f.column_index >= 0) out.push_back(f.column_index);
  for (const auto& c : f.children) leaf_columns(c, out);
}

class ParquetStream : public DocumentStream {
 public:
  ParquetStream(std::string path, const std::string& key, RowKind kind) : path_(std::move(path)) {
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
    rows_ = std::make_unique<RowReader>(*schema, path_, key, kind);
    for (const auto& name : rows_->fields())
      leaf_columns(reader_->manifest().schema_fields[static_cast<size_t>(schema->GetFieldIndex(name))], columns_);
  }
  size_t read(std::vector<std::string>& out, size_t max_rows) override {
    size_t n = 0;
    while (n < max_rows) {
      if (cursor_.done()) {
        if (group_ == reader_->num_row_groups()) break;
        const std::string what = "'" + path_ + "': cannot read row group " + std::to_string(group_);
        auto table = value_or_throw(reader_->ReadRowGroup(group_, columns_), what);
        cursor_ = BatchCursor{value_or_throw(table->CombineChunksToBatch(), what)};
        ++group_;
      }
      n += cursor_.take(*rows_, out, max_rows - n);
    }
    return n;
  }
  int64_t rows() override { return reader_->parquet_reader()->metadata()->num_rows(); }
  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  std::unique_ptr<parquet::arrow::FileReader> reader_;
  std::unique_ptr<RowReader> rows_;
  std::vector<int> columns_;
  int group_ = 0;
  BatchCursor cursor_;
};

// Record batches of one Arrow IPC file, stream format (what `datasets` writes) or file format.
class BatchReader {
 public:
  BatchReader(const std::string& path, const std::string& key, RowKind kind) : path_(path) {
    auto file = value_or_throw(arrow::io::ReadableFile::Open(path), "cannot open '" + path + "'");
    auto stream = arrow::ipc::RecordBatchStreamReader::Open(file);
    if (stream.ok()) {
      stream_ = std::move(stream).ValueOrDie();
      rows_ = std::make_unique<RowReader>(*stream_->schema(), path_, key, kind);
      return;
    }
    auto random = arrow::ipc::RecordBatchFileReader::Open(
        value_or_throw(arrow::io::ReadableFile::Open(path), "cannot open '" + path + "'"));
    if (!random.ok())
      throw data_error("'" + path + "' is not an Arrow IPC file (" + stream.status().ToString() +
                       ")\n    fix: pass the .arrow files `datasets` save_to_disk wrote, or their folder");
    file_ = std::move(random).ValueOrDie();
    rows_ = std::make_unique<RowReader>(*file_->schema(), path_, key, kind);
  }
  // The next record batch, nullptr at the end.
  std::shared_ptr<arrow::RecordBatch> next() {
    if (stream_) return value_or_throw(stream_->Next(), "'" + path_ + "': cannot read a record batch");
    if (next_batch_ < file_->num_record_batches())
      return value_or_throw(file_->ReadRecordBatch(next_batch_++), "'" + path_ + "': cannot read a record batch");
    return nullptr;
  }
  const RowReader& rows() const { return *rows_; }

 private:
  std::string path_;
  std::shared_ptr<arrow::ipc::RecordBatchStreamReader> stream_;
  std::shared_ptr<arrow::ipc::RecordBatchFileReader> file_;
  std::unique_ptr<RowReader> rows_;
  int next_batch_ = 0;
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
  ArrowStream(std::string path, std::string key, RowKind kind)
      : path_(std::move(path)), key_(std::move(key)), kind_(kind), files_(arrow_files(path_)) {
    reader_ = std::make_unique<BatchReader>(files_[0], key_, kind_);  // checks the first file's schema now
  }
  size_t read(std::vector<std::string>& out, size_t max_rows) override {
    size_t n = 0;
    while (n < max_rows) {
      if (cursor_.done()) {
        auto batch = reader_ ? reader_->next() : nullptr;
        if (!batch) {
          if (++file_ >= files_.size()) break;
          reader_ = std::make_unique<BatchReader>(files_[file_], key_, kind_);
          continue;
        }
        cursor_ = BatchCursor{batch};
      }
      n += cursor_.take(reader_->rows(), out, max_rows - n);
    }
    return n;
  }
  int64_t rows() override {
    if (rows_ < 0) {  // a pass over the batches, one at a time
      rows_ = 0;
      for (const auto& f : files_) {
        BatchReader r(f, key_, kind_);
        while (auto batch = r.next()) rows_ += batch->num_rows();
      }
    }
    return rows_;
  }
  const std::string& path() const override { return path_; }

 private:
  std::string path_, key_;
  RowKind kind_;
  std::vector<std::string> files_;
  size_t file_ = 0;
  std::unique_ptr<BatchReader> reader_;
  BatchCursor cursor_;
  int64_t rows_ = -1;
};

}  // namespace

std::unique_ptr<DocumentStream> open_parquet(const std::string& path, const std::string& text_key, RowKind kind) {
  return std::make_unique<ParquetStream>(path, text_key, kind);
}

std::unique_ptr<DocumentStream> open_arrow(const std::string& path, const std::string& text_key, RowKind kind) {
  return std::make_unique<ArrowStream>(path, text_key, kind);
}

}  // namespace gputrain

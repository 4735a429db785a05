// Inputs of `data prepare` read front to back rather than memory-mapped:
// compressed JSONL (.jsonl.gz: zlib, .jsonl.zst: libzstd), Parquet files and
// Arrow data (a Hugging Face `datasets` folder from save_to_disk, or one
// .arrow file), through Apache Arrow's C++ libraries (arrow_documents.h).
// Each yields rows, one document text per row, in file order, holding at
// most one row group / record batch / buffer in memory.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gputrain {

// What a row yields: its text (--text-key), or for chat rows the row as JSON (data/chat_format.h):
// a JSONL line as it is; from Parquet/Arrow, {"messages": [...]} or {"prompt", "completion"}.
// Preference rows (data/preference_rows.h) the same way: from Parquet/Arrow {"prompt", "chosen",
// "rejected"}, each a string or a list of {role, content} (prompt optional).
enum class RowKind { kText, kChat, kPreference };

class DocumentStream {
 public:
  virtual ~DocumentStream() = default;
  // Appends the next rows' texts (at most `max_rows`) to `out`; returns how
  // many it appended, 0 at the end. Throws a data Error naming the file and row.
  virtual size_t read(std::vector<std::string>& out, size_t max_rows) = 0;
  // The number of rows, known before reading (metadata, or a first pass).
  virtual int64_t rows() = 0;
  virtual const std::string& path() const = 0;
};

// True for the inputs above (by name; a folder holding Arrow files counts).
bool is_streamed_input(const std::string& path);

// Plain .jsonl files are streamed too when they are read with streamed ones.
std::unique_ptr<DocumentStream> open_document_stream(const std::string& path, const std::string& text_key,
                                                     RowKind kind = RowKind::kText);

}  // namespace gputrain

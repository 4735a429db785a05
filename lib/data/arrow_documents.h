// Parquet and Arrow inputs (document_stream.h), read with Apache Arrow's C++
// libraries, which the pyarrow wheel ships as the torch wheel ships LibTorch.
#pragma once
#include <memory>
#include <string>

#include "data/document_stream.h"

namespace gputrain {

// A .parquet file, read one row group at a time (the text column only).
std::unique_ptr<DocumentStream> open_parquet(const std::string& path, const std::string& text_key, RowKind kind);
// A `datasets` save_to_disk folder (state.json's data files, or its *.arrow
// files in name order) or one .arrow file, in Arrow's IPC stream or file format.
std::unique_ptr<DocumentStream> open_arrow(const std::string& path, const std::string& text_key, RowKind kind);

}  // namespace gputrain

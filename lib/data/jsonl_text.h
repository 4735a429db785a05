// The document text of one JSONL line: the string under `text_key`. Shared
// by the memory-mapped and the streamed (compressed) JSONL readers.
#pragma once
#include <functional>
#include <string>
#include <string_view>

namespace gputrain {

// A line that holds no document: only white space (JSONL rows and text lines alike).
inline bool is_blank_line(std::string_view line) {
  return line.find_first_not_of(" \t\r\f\v") == std::string_view::npos;
}

// Throws a data Error "<place()>: why" with the fix for a line that is not a
// JSON object with a string under `text_key`; place() gives "file:line".
std::string jsonl_text(std::string_view line, const std::string& text_key, const std::function<std::string()>& place);

}  // namespace gputrain

// Reading a whole small file (a recipe copy, a JSON sidecar, a tokenizer
// file) with the project's error for a file that cannot be opened.
#pragma once
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace gputrain {

// The bytes of `path`. Throws DataError "cannot read the <what> '<path>'"
// with `fix` on the next line when it cannot be opened.
std::string read_text_file(const std::filesystem::path& path, const std::string& what = "file",
                           const std::string& fix = "check the path");

// The JSON document in `path`: a DataError "'<path>' is not valid JSON: ..." with `fix` when it
// is not, read_text_file's when it cannot be read.
nlohmann::json parse_json_file(const std::filesystem::path& path, const std::string& what, const std::string& fix);

}  // namespace gputrain

// Reading a whole small file (a recipe copy, a JSON sidecar, a tokenizer
// file) with the project's error for a file that cannot be opened.
#pragma once
#include <filesystem>
#include <string>

namespace gputrain {

// The bytes of `path`. Throws DataError "cannot read the <what> '<path>'"
// with `fix` on the next line when it cannot be opened.
std::string read_text_file(const std::filesystem::path& path, const std::string& what = "file",
                           const std::string& fix = "check the path");

}  // namespace gputrain

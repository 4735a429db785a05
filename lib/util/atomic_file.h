// Whole-file writes that readers never see half done.
#pragma once
#include <string>

namespace gputrain {

// Writes `content` to `path` through a temporary file and rename, so readers
// see the old file or the new one, never half of one.
void write_file_atomic(const std::string& path, const std::string& content);

}  // namespace gputrain

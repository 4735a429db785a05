// Small path facts shared by recipe validation and the data module.
#pragma once
#include <string>

namespace gputrain {

// A data path with glob characters is expanded when the data is opened,
// not checked for existence as a plain file.
inline bool is_glob_pattern(const std::string& p) { return p.find_first_of("*?[") != std::string::npos; }

}  // namespace gputrain

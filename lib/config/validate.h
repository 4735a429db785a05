// Cross-field rules, run once after every key has been typed (DESIGN rule 4).
#pragma once
#include <map>
#include <string>

#include "config/diagnostics.h"
#include "config/settings.h"

namespace gputrain {

void validate_settings(const Settings& s, const std::map<std::string, Origin>& origins, Diagnostics& diag);

}  // namespace gputrain

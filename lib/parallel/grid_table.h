// The plan printout's grid table (`gputrain plan`): every rank's coordinates and what it holds, as
// parallel/rank_layout.h says.
#pragma once
#include <string>

#include "config/settings.h"
#include "parallel/grid.h"

namespace gputrain {

std::string grid_table(const Settings& s, const Grid& g);

}  // namespace gputrain

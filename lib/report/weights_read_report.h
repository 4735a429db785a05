// The log line that says how much of the stored weights each rank read (model.init_from or a resumed
// checkpoint, read per rank: checkpoint/stored_weights.h), so a user sees no rank read them whole.
#pragma once
#include <cstdint>
#include <string>

namespace gputrain {

class ProcessGroups;

// Every rank's `bytes_read` of the `bytes_stored` in `where`, gathered to one line (a collective:
// every rank calls it). Up to 16 ranks are listed one by one, more as the least and the most.
std::string weights_read_line(const ProcessGroups& groups, uint64_t bytes_read, uint64_t bytes_stored,
                              const std::string& where);

}  // namespace gputrain

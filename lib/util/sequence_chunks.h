// Context parallelism's cut of a sequence (parallel.cp): T tokens in 2 cp equal chunks, cp rank c
// holding chunks c and 2 cp - 1 - c, so every rank gets the same causal work (an early chunk with a
// late one). The one statement of that rule: validate, the planners, the plan printout and the
// layout the model carries out (parallel/context_layout.h) all read it.
#pragma once
#include <cstdint>

namespace gputrain {

struct SequenceChunks {
  int64_t count = 1;               // chunks the sequence is cut into (2 cp; 1 without context parallelism)
  int64_t length = 0;              // tokens in each
  int64_t first = 0, second = -1;  // the two chunks this rank holds (second -1: only one, cp = 1)
  int64_t tokens() const { return second < 0 ? length : 2 * length; }  // this rank's tokens
};

// Whether `seq_len` tokens cut into cp's 2 cp equal chunks (cp 1 always does).
inline bool cuts_into_chunks(int64_t seq_len, int64_t cp) { return cp <= 1 || seq_len % (2 * cp) == 0; }

inline SequenceChunks sequence_chunks(int64_t seq_len, int64_t cp, int64_t cp_rank) {
  if (cp <= 1) return {1, seq_len, 0, -1};
  return {2 * cp, seq_len / (2 * cp), cp_rank, 2 * cp - 1 - cp_rank};
}

}  // namespace gputrain

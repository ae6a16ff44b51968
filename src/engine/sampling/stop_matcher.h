// StopMatcher: finds a request's stop strings in its streamed text and says what is safe to emit.
//
// The engine feeds it each decoded text piece as tokens arrive. Text that might be the start of a
// stop string is held back until the next pieces settle it: either a full stop string appears
// (generation ends; the text before it is emitted, the stop string and anything after it never
// are) or the held text can no longer start one (it is released). A stop string may span any
// number of pieces. When several stop strings could match, the first one to complete wins, and
// among those completing in the same piece the one starting earliest (then the lowest index).
// It also answers whether a token ends generation (the model's end-of-generation tokens plus any
// the request adds).
//
// Thread-safety: one per request, used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace pier::sampling {

struct StopResult {
  // Text that can be sent to the client now (possibly empty).
  std::string emit;
  // Index into the stop strings of the one that matched; set once generation must stop.
  std::optional<size_t> stop_index;
};

class StopMatcher {
 public:
  // INVALID_ARGUMENT when a stop string is empty.
  static Result<StopMatcher> Create(std::vector<std::string> stop_strings,
                                    std::vector<int32_t> end_of_generation_tokens);

  // Adds the next decoded piece. After a match every later call returns nothing.
  StopResult Feed(std::string_view piece);

  // Generation ended without a stop string (end-of-generation token, length limit): releases
  // the held-back text.
  std::string Flush();

  bool IsEndOfGeneration(int32_t token) const;
  bool stopped() const { return stopped_; }
  // Bytes currently held back.
  size_t held_bytes() const { return pending_.size(); }
  const std::vector<std::string>& stop_strings() const { return stop_strings_; }

 private:
  StopMatcher(std::vector<std::string> stop_strings, std::vector<int32_t> eog_tokens);

  std::vector<std::string> stop_strings_;
  std::vector<int32_t> eog_tokens_;  // sorted, unique
  std::string pending_;              // fed but not yet emitted
  bool stopped_ = false;
};

}  // namespace pier::sampling

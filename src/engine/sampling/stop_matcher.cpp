#include "engine/sampling/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace pier::sampling {

Result<StopMatcher> StopMatcher::Create(std::vector<std::string> stop_strings,
                                        std::vector<int32_t> end_of_generation_tokens) {
  for (size_t i = 0; i < stop_strings.size(); ++i) {
    if (stop_strings[i].empty()) {
      return InvalidArgumentError("stop strings must not be empty (stop[" + std::to_string(i) +
                                  "] is empty)");
    }
  }
  return StopMatcher(std::move(stop_strings), std::move(end_of_generation_tokens));
}

StopMatcher::StopMatcher(std::vector<std::string> stop_strings, std::vector<int32_t> eog_tokens)
    : stop_strings_(std::move(stop_strings)), eog_tokens_(std::move(eog_tokens)) {
  std::sort(eog_tokens_.begin(), eog_tokens_.end());
  eog_tokens_.erase(std::unique(eog_tokens_.begin(), eog_tokens_.end()), eog_tokens_.end());
}

bool StopMatcher::IsEndOfGeneration(int32_t token) const {
  return std::binary_search(eog_tokens_.begin(), eog_tokens_.end(), token);
}

StopResult StopMatcher::Feed(std::string_view piece) {
  StopResult result;
  if (stopped_) return result;
  const size_t old_size = pending_.size();
  pending_.append(piece);

  // A full match must end inside the new piece: the held text alone contained none. Pick the
  // earliest start among the stop strings found, then the lowest index.
  size_t best_pos = std::string::npos;
  for (size_t i = 0; i < stop_strings_.size(); ++i) {
    const std::string& stop = stop_strings_[i];
    const size_t from = old_size >= stop.size() ? old_size - stop.size() + 1 : 0;
    const size_t pos = pending_.find(stop, from);
    if (pos != std::string::npos && pos < best_pos) {
      best_pos = pos;
      result.stop_index = i;
    }
  }
  if (result.stop_index.has_value()) {
    stopped_ = true;
    result.emit = pending_.substr(0, best_pos);
    pending_.clear();
    return result;
  }

  // Hold back the longest tail of the text that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const std::string& stop : stop_strings_) {
    const size_t longest = std::min(stop.size() - 1, pending_.size());
    for (size_t len = longest; len > hold; --len) {
      if (std::string_view(pending_).substr(pending_.size() - len) ==
          std::string_view(stop).substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  result.emit = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return result;
}

std::string StopMatcher::Flush() {
  if (stopped_) return {};
  return std::exchange(pending_, std::string());
}

}  // namespace pier::sampling

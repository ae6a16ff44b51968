#include "engine/request.h"

#include <chrono>
#include <string>

namespace pier::engine {

Result<Priority> ParsePriority(std::string_view name) {
  if (name == "critical") return Priority::kCritical;
  if (name == "high") return Priority::kHigh;
  if (name == "normal") return Priority::kNormal;
  if (name == "low") return Priority::kLow;
  return InvalidArgumentError("unknown priority '" + std::string(name) +
                              "'; use critical, high, normal or low");
}

std::string_view PriorityName(Priority priority) {
  switch (priority) {
    case Priority::kCritical:
      return "critical";
    case Priority::kHigh:
      return "high";
    case Priority::kNormal:
      return "normal";
    case Priority::kLow:
      return "low";
  }
  return "unknown";
}

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
  }
  return "unknown";
}

TimestampUs NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace pier::engine

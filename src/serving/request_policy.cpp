#include "serving/request_policy.h"

#include <charconv>
#include <cstdint>
#include <utility>

namespace pier::serving {

std::optional<engine::Priority> ParsePriorityValue(std::string_view text) {
  if (text.size() == 1 && text[0] >= '0' && text[0] <= '3') {
    return static_cast<engine::Priority>(text[0] - '0');
  }
  Result<engine::Priority> named = engine::ParsePriority(text);
  if (!named.ok()) return std::nullopt;
  return *named;
}

engine::Priority ClampPriority(engine::Priority requested, engine::Priority ceiling) {
  // A lower value is served first: the ceiling is the smallest value allowed.
  return static_cast<uint8_t>(requested) < static_cast<uint8_t>(ceiling) ? ceiling : requested;
}

Result<RequestClass> ResolveRequestClass(std::optional<engine::Priority> body,
                                         std::optional<std::string_view> header, std::string tenant,
                                         engine::Priority ceiling) {
  RequestClass result;
  result.tenant = std::move(tenant);
  if (body.has_value()) {
    result.priority = *body;
  } else if (header.has_value()) {
    std::optional<engine::Priority> parsed = ParsePriorityValue(*header);
    if (!parsed.has_value()) {
      return InvalidArgumentError(
          "the X-Priority header must be critical, high, normal, low or 0..3");
    }
    result.priority = *parsed;
  }
  result.priority = ClampPriority(result.priority, ceiling);
  return result;
}

Result<ClassQueueLimits> ParseClassQueueLimits(std::string_view text) {
  ClassQueueLimits limits;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view part = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    const size_t equals = part.find('=');
    const std::string shown(part);
    if (equals == std::string_view::npos) {
      return InvalidArgumentError("class_max_queue_ms: '" + shown +
                                  "' is not CLASS=MILLISECONDS (e.g. normal=10000)");
    }
    const std::optional<engine::Priority> priority = ParsePriorityValue(part.substr(0, equals));
    if (!priority.has_value()) {
      return InvalidArgumentError("class_max_queue_ms: '" + shown +
                                  "' names no class (critical, high, normal, low)");
    }
    const std::string_view number = part.substr(equals + 1);
    int64_t ms = 0;
    const auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), ms);
    if (error != std::errc() || end != number.data() + number.size() || ms < 0 || ms > 3'600'000) {
      return InvalidArgumentError("class_max_queue_ms: '" + shown +
                                  "' needs 0..3600000 milliseconds (0: no limit)");
    }
    limits.max_queue_ms[static_cast<size_t>(*priority)] = ms;
  }
  return limits;
}

std::chrono::steady_clock::time_point QueueDeadline(const ClassQueueLimits& limits,
                                                    engine::Priority priority,
                                                    std::chrono::steady_clock::time_point now) {
  const int64_t ms = limits.max_queue_ms[static_cast<size_t>(priority)];
  if (ms <= 0) return std::chrono::steady_clock::time_point::max();
  return now + std::chrono::milliseconds(ms);
}

}  // namespace pier::serving

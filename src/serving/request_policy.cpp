#include "serving/request_policy.h"

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

}  // namespace pier::serving

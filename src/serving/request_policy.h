// Request policy: the class and tenant a request runs as, decided in one place for every
// front end (OpenAI routes today; KServe and the QoS issue's tenants later).
//
// A request may ask for a priority (the body's `priority`, else the X-Priority header); the
// caller's API key sets a ceiling, and a request asking for more runs at the ceiling. The
// tenant is the key's (the open API's is "default").
//
// Thread-safety: free functions over values.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "engine/scheduler/request.h"

namespace pier::serving {

// A priority written as a name ("critical", "high", "normal", "low") or a class number "0".."3"
// (the X-Priority header's forms); nullopt otherwise.
std::optional<engine::Priority> ParsePriorityValue(std::string_view text);

// The priority a request runs at: `requested` lowered to `ceiling` when it asks for more (a
// key with max_priority high asking for critical gets high).
engine::Priority ClampPriority(engine::Priority requested, engine::Priority ceiling);

struct RequestClass {
  engine::Priority priority = engine::Priority::kNormal;
  std::string tenant;
};

// The body's priority wins over the header's; neither: normal. Then the ceiling applies.
// INVALID_ARGUMENT when the header is not a priority.
[[nodiscard]] Result<RequestClass> ResolveRequestClass(std::optional<engine::Priority> body,
                                                       std::optional<std::string_view> header,
                                                       std::string tenant,
                                                       engine::Priority ceiling);

}  // namespace pier::serving

// Request policy: the class and tenant a request runs as, decided in one place for every
// front end (OpenAI routes today; KServe and the QoS issue's tenants later).
//
// A request may ask for a priority (the body's `priority`, else the X-Priority header); the
// caller's API key sets a ceiling, and a request asking for more runs at the ceiling. The
// tenant is the key's (the open API's is "default").
//
// Thread-safety: free functions over values.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
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

// The longest a request of each class may wait in a queue before its work starts; past it the
// request is refused (429) rather than served late. Index: engine::Priority (critical 0 ..
// low 3); 0: no limit. The `class_max_queue_ms` setting writes them as
// "critical=0,high=2000,normal=10000,low=30000" (classes left out keep no limit). Today the
// embedding batcher enforces them; the LLM scheduler's deadlines come with the QoS issue.
struct ClassQueueLimits {
  std::array<int64_t, 4> max_queue_ms = {0, 0, 0, 0};
};

// INVALID_ARGUMENT naming the part that is not CLASS=MILLISECONDS (a known class, 0..3600000).
[[nodiscard]] Result<ClassQueueLimits> ParseClassQueueLimits(std::string_view text);

// When a request of `priority` arriving at `now` must have started: now + its class's limit, or
// time_point::max() when the class has none.
std::chrono::steady_clock::time_point QueueDeadline(const ClassQueueLimits& limits,
                                                    engine::Priority priority,
                                                    std::chrono::steady_clock::time_point now);

}  // namespace pier::serving

// Request policy: the class and tenant a request runs as, decided in one place for every
// front end (the OpenAI, Responses, embeddings and KServe routes, over HTTP and gRPC).
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
#include "engine/core/engine.h"
#include "engine/request.h"

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
// request is refused (429) rather than served late, or, with the delay action, waits on behind
// every request still within its time (Triton's queue policy). Index: engine::Priority
// (critical 0 .. low 3); 0: no limit. The `class_max_queue_ms` setting writes them as
// "critical=0,high=2000,normal=10000,low=30000" (classes left out keep no limit), and
// `class_deadline_action` as "low=delay" (default reject). The LLM engine and the embedding
// batcher enforce them.
struct ClassQueueLimits {
  std::array<int64_t, 4> max_queue_ms = {0, 0, 0, 0};
  std::array<bool, 4> delay = {false, false, false, false};  // true: delay, false: reject
};

// Each class's latency targets (`class_ttft_ms`, `class_tpot_ms`; 0: none): the SLO
// attainment metrics count a request as meeting its class's SLO when its time to first token
// and its mean time per output token are within them.
struct ClassSloTargets {
  std::array<int64_t, 4> ttft_ms = {0, 0, 0, 0};
  std::array<int64_t, 4> tpot_ms = {0, 0, 0, 0};
};

// "CLASS=MILLISECONDS,..." for the setting `setting` (named in errors): INVALID_ARGUMENT
// naming the part that is not a known class with 0..3600000 ms. Classes left out: 0.
[[nodiscard]] Result<std::array<int64_t, 4>> ParseClassMilliseconds(std::string_view setting,
                                                                    std::string_view text);
[[nodiscard]] Result<ClassQueueLimits> ParseClassQueueLimits(std::string_view text);
// "CLASS=reject|delay,..." into `limits->delay`.
[[nodiscard]] Status ParseClassDeadlineActions(std::string_view text, ClassQueueLimits* limits);

// A client's own queue deadline, in milliseconds from now: the body's `deadline_ms` (already a
// number) wins over the X-Request-Deadline-Ms header. INVALID_ARGUMENT naming the source for a
// value that is not a whole number of milliseconds in 1..3600000 (a deadline already past, 0
// or negative, is refused too: it could never be met).
[[nodiscard]] Result<std::optional<int64_t>> ResolveClientDeadlineMs(
    std::optional<int64_t> body_ms, std::optional<std::string_view> header);

// A request's queue deadline: its class's max queue time, shortened by the client's own
// deadline (never lengthened); nullopt when neither sets one.
std::optional<std::chrono::steady_clock::time_point> RequestQueueDeadline(
    const ClassQueueLimits& limits, engine::Priority priority,
    std::optional<int64_t> client_deadline_ms, std::chrono::steady_clock::time_point now);

// How long a new request of `priority` from `tenant` would wait in this engine's queue before
// it starts, in milliseconds: the sequences ahead of it beyond the free slots (the top class's
// reserve is free only to it), over the measured drain rate. Ahead of it: every sequence
// waiting at a higher class, and of its own class at most what fair share puts ahead -- its
// tenant's own waiting sequences, and from each other tenant no more than that many again
// (scaled by their weights), so a tenant under its share is not refused for an abusive
// tenant's queue. Without a tenant (or tenant figures), the whole class counts. 0 when a slot
// is free for it now; nullopt while the drain rate is not measured (no evidence: nothing is
// refused).
std::optional<double> PredictQueueWaitMs(const engine::EngineStats& stats,
                                         engine::Priority priority, std::string_view tenant = {});

// When a request of `priority` arriving at `now` must have started: now + its class's limit, or
// time_point::max() when the class has none.
std::chrono::steady_clock::time_point QueueDeadline(const ClassQueueLimits& limits,
                                                    engine::Priority priority,
                                                    std::chrono::steady_clock::time_point now);

}  // namespace pier::serving

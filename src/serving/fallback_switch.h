// FallbackSwitch: when a model under load sends requests to its cheaper fallback model
// (issue #16, "Fallback model under load"), with hysteresis so it does not flap.
//
// A model's FallbackPolicy (models.yaml: `fallback` names the other model; `fallback_load`,
// `fallback_release`, `fallback_queue_ms`, `fallback_max_class`) engages the switch when the
// model's load -- (running + waiting sequences) / max_seqs -- goes above `load_above`, or when
// a normal request's predicted queue wait (request_policy.h) goes above `queue_ms_above`; it
// releases only once the load is below `load_below` and the predicted wait below half its
// threshold. While engaged, requests of classes at or below `max_class` (critical is the
// highest) go to the fallback; the front end answers them from it, names it in the response's
// `model` and adds `X-Pier-Fallback: <primary>`. A client that forbids it (X-Pier-No-Fallback:
// 1, or `fallback: false` in the body) keeps the primary's queueing.
//
// Thread-safety: Divert and Snapshot may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/mutex.h"
#include "engine/core/engine.h"
#include "engine/request.h"

namespace pier::serving {

struct FallbackPolicy {
  double load_above = 0.8;     // engage above this load (running + waiting) / max_seqs
  double load_below = 0.6;     // release below it (< load_above)
  int64_t queue_ms_above = 0;  // also engage above this predicted wait (0: no such trigger)
  // Classes at or below this one may be diverted (kCritical: every class).
  engine::Priority max_class = engine::Priority::kCritical;
  bool operator==(const FallbackPolicy&) const = default;
};

// A model's fallback: the other model's name and when requests go to it.
struct FallbackRoute {
  std::string model;
  FallbackPolicy when;
};

class FallbackSwitch {
 public:
  // Updates `primary`'s switch from its engine's `stats` and says whether a request of
  // `priority` goes to the fallback now: "load" or "queue" (the trigger that engaged it), or
  // nullopt.
  std::optional<std::string_view> Divert(const std::string& primary, const FallbackPolicy& policy,
                                         const engine::EngineStats& stats,
                                         engine::Priority priority);
  // The same from figures measured elsewhere: `load` as above, `wait_ms` the predicted queue
  // wait of a normal request (a tensor model: items waiting and running over max_batch_size
  // x instances, and the waiting batches times a batch's mean compute time).
  std::optional<std::string_view> Divert(const std::string& primary, const FallbackPolicy& policy,
                                         double load, double wait_ms, engine::Priority priority);
  // Each primary seen so far: whether its switch is engaged.
  std::map<std::string, bool> Snapshot() const;

 private:
  struct State {
    bool engaged = false;
    std::string_view reason;  // "load" or "queue" while engaged
  };
  mutable Mutex mutex_;
  std::map<std::string, State> states_ PIER_GUARDED_BY(mutex_);
};

}  // namespace pier::serving

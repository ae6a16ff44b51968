#include "serving/fallback_switch.h"

#include <algorithm>

#include "serving/request_policy.h"

namespace pier::serving {

std::optional<std::string_view> FallbackSwitch::Divert(const std::string& primary,
                                                       const FallbackPolicy& policy,
                                                       const engine::EngineStats& stats,
                                                       engine::Priority priority) {
  // max_seqs 0: the engine's figures are not known yet (a worker before its first heartbeat):
  // no load trigger.
  const double load = stats.max_seqs > 0 ? static_cast<double>(stats.running + stats.waiting) /
                                               static_cast<double>(stats.max_seqs)
                                         : 0.0;
  double wait_ms = 0;
  if (policy.queue_ms_above > 0) {
    wait_ms = PredictQueueWaitMs(stats, engine::Priority::kNormal).value_or(0);
  }
  return Divert(primary, policy, load, wait_ms, priority);
}

std::optional<std::string_view> FallbackSwitch::Divert(const std::string& primary,
                                                       const FallbackPolicy& policy, double load,
                                                       double wait_ms, engine::Priority priority) {
  const auto queue_limit = static_cast<double>(policy.queue_ms_above);
  MutexLock lock(mutex_);
  State& s = states_[primary];
  if (!s.engaged) {
    if (load > policy.load_above) {
      s = {true, "load"};
    } else if (policy.queue_ms_above > 0 && wait_ms > queue_limit) {
      s = {true, "queue"};
    }
  } else if (load < policy.load_below &&
             (policy.queue_ms_above <= 0 || wait_ms < queue_limit / 2)) {
    s = {};
  }
  // A lower Priority value is a higher class: `priority` must be `max_class` or below it.
  if (!s.engaged || priority < policy.max_class) return std::nullopt;
  return s.reason;
}

std::map<std::string, bool> FallbackSwitch::Snapshot() const {
  MutexLock lock(mutex_);
  std::map<std::string, bool> out;
  for (const auto& [primary, s] : states_) out[primary] = s.engaged;
  return out;
}

}  // namespace pier::serving

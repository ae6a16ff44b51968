#include "serving/live/event_watcher.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <set>
#include <utility>

#include "serving/worker_client.h"

namespace pier::serving {
namespace {

std::string MiB(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

std::string WithReason(std::string text, const std::string& reason) {
  return reason.empty() ? text : text + ": " + reason;
}

}  // namespace

EventWatcher::EventWatcher(EventWatcherOptions options, const ModelRegistry* registry,
                           EventLog* log, MemoryHistory* history)
    : options_(std::move(options)), registry_(registry), log_(log), history_(history) {}

void EventWatcher::Tick(std::chrono::steady_clock::time_point now) {
  const bool announce = started_;
  started_ = true;
  WatchModels(announce);
  std::vector<GovernorStats> stats;
  WatchGovernors(announce, now, &stats);
  WatchFallbacks(announce);
  if (history_ != nullptr && now >= next_sample_) {
    next_sample_ = now + options_.history_interval;
    MemorySample sample;
    sample.time =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    for (const GovernorStats& g : stats) sample.devices.push_back(SampleDevice(g));
    history_->Record(std::move(sample));
  }
  log_->Pulse();
}

void EventWatcher::WatchModels(bool announce) {
  std::set<std::string> present;
  for (const ModelEntry& entry : registry_->Snapshot()) {
    present.insert(entry.id);
    auto [it, added] = models_.try_emplace(entry.id);
    ModelSeen& seen = it->second;
    const std::string& id = entry.id;
    if (announce && !added) {
      if (entry.state != seen.state) {
        if (entry.state == ModelState::kLoading) {
          log_->Publish("model_loading", EventLevel::kInfo, id, id + " is loading");
        } else if (entry.state == ModelState::kDraining) {
          log_->Publish("model_unloading", EventLevel::kInfo, id,
                        WithReason(id + " is draining before it unloads", entry.reason));
        }
      }
      // An unload and a load within one tick (a reload, an unload then a load): the unload
      // happened first.
      if (entry.evictions > seen.evictions) {
        log_->Publish("model_evicted", EventLevel::kWarning, id,
                      WithReason(id + " was evicted to make room for another model", entry.reason));
      } else if (entry.idle_unloads > seen.idle_unloads) {
        log_->Publish("model_idle_unloaded", EventLevel::kInfo, id,
                      id + " was unloaded after staying idle");
      } else if (entry.unloads > seen.unloads) {
        log_->Publish("model_unloaded", EventLevel::kInfo, id, id + " was unloaded");
      }
      if (entry.loads > seen.loads) {
        char seconds[32];
        std::snprintf(seconds, sizeof(seconds), "%.2f", entry.last_load_seconds);
        log_->Publish("model_loaded", EventLevel::kInfo, id, id + " loaded in " + seconds + " s",
                      {{"load_seconds", entry.last_load_seconds}});
      }
      if (entry.load_failures > seen.load_failures) {
        const bool failed = entry.state == ModelState::kFailed;
        log_->Publish(
            "model_load_failed", failed ? EventLevel::kError : EventLevel::kWarning, id,
            WithReason(id + (failed ? " failed to load" : " was not loaded"), entry.reason),
            {{"reason", entry.reason}});
      }
    } else if (announce && added) {
      log_->Publish("model_added", EventLevel::kInfo, id,
                    id + " was added (" + std::string(ModelStateName(entry.state)) + ")");
    }
    seen.state = entry.state;
    seen.loads = entry.loads;
    seen.load_failures = entry.load_failures;
    seen.unloads = entry.unloads;
    seen.evictions = entry.evictions;
    seen.idle_unloads = entry.idle_unloads;
    if (entry.model != nullptr) {
      WatchWorkers(entry, seen, announce);
    } else {
      seen.workers.clear();
    }
  }
  for (auto it = models_.begin(); it != models_.end();) {
    if (present.contains(it->first)) {
      ++it;
      continue;
    }
    if (announce) {
      log_->Publish("model_removed", EventLevel::kInfo, it->first,
                    it->first + " was removed from the configuration");
    }
    it = models_.erase(it);
  }
}

void EventWatcher::WatchWorkers(const ModelEntry& entry, ModelSeen& seen, bool announce) {
  const std::vector<WorkerClient*>& workers = entry.model->workers;
  // A reloaded model's new version has new workers: compare by position only while the count
  // stays (a new set starts from what it is).
  if (seen.workers.size() != workers.size()) {
    seen.workers.assign(workers.size(), WorkerSeen{});
    announce = false;
  }
  for (size_t n = 0; n < workers.size(); ++n) {
    const WorkerHealth h = workers[n]->Health();
    WorkerSeen& was = seen.workers[n];
    const std::string instance = entry.id + " instance " + std::to_string(n + 1);
    const nlohmann::json details = {{"instance", n + 1},
                                    {"pid", h.pid},
                                    {"restarts", h.restarts},
                                    {"last_failure", h.last_failure}};
    if (announce && h.state != was.state && was.state == "ready") {
      if (h.state == "failed") {
        log_->Publish("worker_failed", EventLevel::kError, entry.id,
                      WithReason(instance + " failed and is quarantined", h.last_failure), details);
      } else {
        log_->Publish("worker_down", EventLevel::kWarning, entry.id,
                      WithReason(instance + " (pid " + std::to_string(was.pid) + ") is " + h.state,
                                 h.last_failure),
                      details);
      }
    }
    if (announce && h.restarts > was.restarts) {
      log_->Publish("worker_restarted", EventLevel::kWarning, entry.id,
                    WithReason(instance + " restarted (pid " + std::to_string(was.pid) + " -> " +
                                   std::to_string(h.pid) + ")",
                               h.last_failure),
                    details);
    }
    was.state = h.state;
    was.pid = h.pid;
    was.restarts = h.restarts;
  }
}

void EventWatcher::WatchGovernors(bool announce, std::chrono::steady_clock::time_point now,
                                  std::vector<GovernorStats>* stats) {
  if (!options_.governors) return;
  for (const MemoryGovernor* governor : options_.governors()) {
    if (governor == nullptr) continue;
    stats->push_back(governor->Stats());
    const GovernorStats& g = stats->back();
    GovernorSeen& seen = governors_[g.device];
    if (announce) {
      seen.pending_shrinks += g.shrink_requests - std::min(g.shrink_requests, seen.shrink_requests);
      seen.pending_failures += g.failure_count - std::min(g.failure_count, seen.failures);
      if (seen.pending_shrinks > 0 && now - seen.last_reclaim_event >= kGovernorEventInterval) {
        const uint64_t lent = LentBytes(g);
        log_->Publish("kv_reclaim", EventLevel::kInfo, "",
                      g.device + ": " + std::to_string(seen.pending_shrinks) +
                          " request(s) to models to give back lent KV memory (lent now " +
                          MiB(lent) + ")",
                      {{"device", g.device},
                       {"shrink_requests", seen.pending_shrinks},
                       {"lent_bytes", lent}});
        seen.pending_shrinks = 0;
        seen.last_reclaim_event = now;
      }
      if (g.deadline_misses > seen.deadline_misses) {
        log_->Publish("shrink_deadline_missed", EventLevel::kWarning, "",
                      g.device + ": " + std::to_string(g.deadline_misses - seen.deadline_misses) +
                          " owner(s) did not give memory back by the deadline",
                      {{"device", g.device}});
      }
      if (seen.pending_failures > 0 && now - seen.last_refusal_event >= kGovernorEventInterval) {
        // Mostly elastic KV that could not grow and waits for memory: the governor's normal
        // answer under contention, so a warning only in the sense of "memory is tight".
        log_->Publish("allocation_refused", EventLevel::kWarning, "",
                      g.device + ": " + std::to_string(seen.pending_failures) +
                          " allocation(s) refused for lack of memory (budget " +
                          MiB(g.budget_bytes) + ", committed " + MiB(g.committed_bytes) + ")",
                      {{"device", g.device}, {"refused", seen.pending_failures}});
        seen.pending_failures = 0;
        seen.last_refusal_event = now;
      }
    }
    seen.shrink_requests = g.shrink_requests;
    seen.deadline_misses = g.deadline_misses;
    seen.failures = g.failure_count;
  }
}

void EventWatcher::WatchFallbacks(bool announce) {
  for (const auto& source : options_.fallbacks) {
    if (!source) continue;
    for (const auto& [model, engaged] : source()) {
      auto [it, added] = fallbacks_.try_emplace(model, false);
      if (announce && it->second != engaged) {
        log_->Publish(engaged ? "fallback_on" : "fallback_off",
                      engaged ? EventLevel::kWarning : EventLevel::kInfo, model,
                      engaged ? model + " is overloaded: new requests go to its fallback"
                              : model + "'s load fell: requests go to it again");
      }
      it->second = engaged;
    }
  }
}

}  // namespace pier::serving

// EventWatcher: turns the server's state into events (EventLog) and memory samples
// (MemoryHistory) by comparing what it sees at each tick with what it saw at the last one:
// model states and lifecycle counters (loading, loaded, load failed, unloading, unloaded,
// evicted, idle-unloaded), worker processes (down, restarted, failed: pid and how the last one
// ended), the governors' reclaims of lent KV memory, refused allocations and missed shrink
// deadlines, and fallback switches engaging or releasing.
//
// Why watch instead of hooking every producer: the state it reads is what /admin/models shows
// (one source of truth, no second bookkeeping to drift), producers stay free of an event
// dependency, and a tick costs a few snapshots. The price is resolution: a state held for
// less than a tick (the server ticks every 250 ms) shows only through its counters (a worker
// that restarted between ticks appears as worker_restarted without worker_down).
//
// Thread-safety: Tick must not run concurrently with itself (the server's ticker calls it);
// the log and history it writes are thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "memory/memory_governor.h"
#include "serving/live/event_log.h"
#include "serving/live/memory_history.h"
#include "serving/model_registry.h"

namespace pier::serving {

struct EventWatcherOptions {
  // Every device's governor (null entries are skipped).
  std::function<std::vector<const MemoryGovernor*>()> governors = nullptr;
  // Fallback switches: each gives every primary model's switch (engaged or not).
  std::vector<std::function<std::map<std::string, bool>()>> fallbacks = {};
  // A memory sample is recorded every this often (at the first tick past it).
  std::chrono::milliseconds history_interval{2000};
};

class EventWatcher {
 public:
  // Borrows all three, which must outlive it.
  EventWatcher(EventWatcherOptions options, const ModelRegistry* registry, EventLog* log,
               MemoryHistory* history);

  // Compares the state now with the last tick's, publishes what changed, records a memory
  // sample when one is due, and pulses the log (followers' heartbeats). The first tick only
  // learns the state (the models already loaded are not news).
  void Tick(std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());

 private:
  struct WorkerSeen {
    std::string state;
    int64_t pid = 0;
    int64_t restarts = 0;
  };
  struct ModelSeen {
    ModelState state = ModelState::kUnloaded;
    int64_t loads = 0, load_failures = 0, unloads = 0, evictions = 0, idle_unloads = 0;
    std::vector<WorkerSeen> workers;
  };
  // A governor's counters as last seen, and the reclaims and refusals not yet published:
  // under contention they come every tick, so each device says them at most every
  // kGovernorEventInterval, summed (they would otherwise bury every other event).
  struct GovernorSeen {
    uint64_t shrink_requests = 0, deadline_misses = 0, failures = 0;
    uint64_t pending_shrinks = 0, pending_failures = 0;
    std::chrono::steady_clock::time_point last_reclaim_event{}, last_refusal_event{};
  };
  static constexpr std::chrono::seconds kGovernorEventInterval{5};

  void WatchModels(bool announce);
  void WatchWorkers(const ModelEntry& entry, ModelSeen& seen, bool announce);
  void WatchGovernors(bool announce, std::chrono::steady_clock::time_point now,
                      std::vector<GovernorStats>* stats);
  void WatchFallbacks(bool announce);

  const EventWatcherOptions options_;
  const ModelRegistry* const registry_;
  EventLog* const log_;
  MemoryHistory* const history_;
  bool started_ = false;
  std::chrono::steady_clock::time_point next_sample_{};
  std::map<std::string, ModelSeen> models_;
  std::map<std::string, GovernorSeen> governors_;
  std::map<std::string, bool> fallbacks_;
};

}  // namespace pier::serving

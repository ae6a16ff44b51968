// EventLog: what happened to the server lately (models loaded, unloaded, evicted, failed;
// worker processes that died and came back; KV memory reclaimed between models; requests
// refused with their reason; fallbacks switched on and off), for GET /admin/events and the web
// console. Producers call Publish; followers read by sequence number.
//
// Bounded: the ring keeps the latest `capacity` events. A follower that falls behind by more
// than that loses the oldest it had not read, and ReadAfter says how many (`dropped`): a slow
// reader never grows the server's memory and never slows a producer. Each event is rendered
// to its JSON text once, when published, and shared by every follower.
//
// Followers that wait (an SSE stream) register a wake callback with Follow: it is called after
// every Publish and every Pulse (the server's ticker calls Pulse so that followers can send
// heartbeats while nothing happens). Callbacks must be quick and must not call back into the
// log; they run without the log's lock held.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/mutex.h"

namespace pier::serving {

enum class EventLevel : uint8_t { kInfo, kWarning, kError };
std::string_view EventLevelName(EventLevel level);  // "info", "warning", "error"

struct ServerEvent {
  uint64_t seq = 0;  // 1, 2, ... in publication order
  double time = 0;   // Unix seconds
  std::string type;  // "model_loaded", "worker_restarted", ... (docs/api.md lists them)
  std::string json;  // {"seq", "time", "type", "level", "model", "message", ...details}
};

struct EventRead {
  std::vector<std::shared_ptr<const ServerEvent>> events;  // in order, seq > the cursor
  uint64_t dropped = 0;  // events after the cursor that the ring no longer holds
  uint64_t next = 0;     // the cursor to read from next (the last event's seq)
};

class EventLog {
 public:
  explicit EventLog(size_t capacity = 2048);

  // Records one event; `details` (an object, or null) adds fields beside the standard ones.
  // Returns its sequence number.
  uint64_t Publish(std::string_view type, EventLevel level, std::string_view model,
                   std::string_view message, const nlohmann::json& details = nullptr);

  // The events after `after` (at most `max`), and how many after it were lost.
  EventRead ReadAfter(uint64_t after, size_t max) const;
  // The sequence number of the latest event (0: none yet).
  uint64_t last_seq() const;
  size_t capacity() const { return capacity_; }

  // Followers' wake callbacks (see above). Unfollow waits for nothing: a callback running
  // concurrently may still finish.
  uint64_t Follow(std::function<void()> wake);
  void Unfollow(uint64_t id);
  // Wakes every follower without an event (heartbeats).
  void Pulse();

 private:
  void WakeFollowers();

  const size_t capacity_;
  mutable Mutex mutex_;
  std::deque<std::shared_ptr<const ServerEvent>> ring_ PIER_GUARDED_BY(mutex_);
  uint64_t last_seq_ PIER_GUARDED_BY(mutex_) = 0;
  Mutex followers_mutex_;
  uint64_t next_follower_ PIER_GUARDED_BY(followers_mutex_) = 1;
  std::map<uint64_t, std::shared_ptr<std::function<void()>>> followers_
      PIER_GUARDED_BY(followers_mutex_);
};

}  // namespace pier::serving

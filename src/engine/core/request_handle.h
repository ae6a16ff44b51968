// RequestHandle: the events of one submitted request, in order, as the engine produces them;
// read synchronously (Next, WaitAll) or asynchronously (SetListener + Drain) by the front end.
//
// Thread-safety: every method may be called from any thread (one mutex); the listener is
// called on the engine thread, outside the mutex.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "engine/request.h"

namespace pier::engine {

// The events of one request, in order. Written by the engine, read by any thread.
class RequestHandle {
 public:
  RequestHandle(std::string id, int32_t n) : id_(std::move(id)), choices_left_(n) {}

  const std::string& id() const { return id_; }
  // The next event; waits for one. nullopt once every choice has finished and all events
  // were read, or when `timeout` passes first.
  std::optional<Event> Next(std::chrono::milliseconds timeout = std::chrono::hours(24));
  // Every event until all choices have finished (waits).
  std::vector<Event> WaitAll();
  // Every event available now (does not wait).
  std::vector<Event> Drain();
  bool finished() const;
  // Events pushed and not yet read (a slow reader's backlog).
  size_t pending() const;
  // `on_event` is called after every Push (from the engine thread, without the handle's lock
  // held), and once at once when events are already pending: an asynchronous reader (the HTTP
  // server's event loop) uses it to wake up and Drain(). It must be quick and must not call
  // back into the engine. Replaces any earlier listener; an empty function removes it.
  void SetListener(std::function<void()> on_event);

  // Engine side.
  void Push(Event event);

 private:
  const std::string id_;
  mutable Mutex mutex_;
  std::condition_variable cv_;
  std::deque<Event> events_ PIER_GUARDED_BY(mutex_);
  int32_t choices_left_ PIER_GUARDED_BY(mutex_);
  std::shared_ptr<std::function<void()>> listener_ PIER_GUARDED_BY(mutex_);
};

}  // namespace pier::engine

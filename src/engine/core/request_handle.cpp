#include "engine/core/request_handle.h"

#include <iterator>
#include <utility>

namespace pier::engine {

std::optional<Event> RequestHandle::Next(std::chrono::milliseconds timeout) {
  MutexLock lock(mutex_);
  lock.WaitFor(cv_, timeout, [&] {
    mutex_.AssertHeld();
    return !events_.empty() || choices_left_ == 0;
  });
  if (events_.empty()) return std::nullopt;
  Event e = std::move(events_.front());
  events_.pop_front();
  return e;
}

std::vector<Event> RequestHandle::WaitAll() {
  std::vector<Event> all;
  while (std::optional<Event> e = Next()) all.push_back(std::move(*e));
  return all;
}

std::vector<Event> RequestHandle::Drain() {
  MutexLock lock(mutex_);
  std::vector<Event> all(std::make_move_iterator(events_.begin()),
                         std::make_move_iterator(events_.end()));
  events_.clear();
  return all;
}

bool RequestHandle::finished() const {
  MutexLock lock(mutex_);
  return choices_left_ == 0;
}

size_t RequestHandle::pending() const {
  MutexLock lock(mutex_);
  return events_.size();
}

void RequestHandle::SetListener(std::function<void()> on_event) {
  std::shared_ptr<std::function<void()>> listener;
  bool call_now = false;
  {
    MutexLock lock(mutex_);
    if (on_event) listener = std::make_shared<std::function<void()>>(std::move(on_event));
    listener_ = listener;
    call_now = listener && (!events_.empty() || choices_left_ == 0);
  }
  if (call_now) (*listener)();
}

void RequestHandle::Push(Event event) {
  std::shared_ptr<std::function<void()>> listener;
  {
    MutexLock lock(mutex_);
    if (event.finish.has_value()) {
      PIER_CHECK(choices_left_ > 0, "a choice finished twice");
      --choices_left_;
    }
    events_.push_back(std::move(event));
    listener = listener_;  // a copy: called without the lock, so it may read the handle
  }
  cv_.notify_all();
  if (listener) (*listener)();
}

}  // namespace pier::engine

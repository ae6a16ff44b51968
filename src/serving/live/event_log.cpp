#include "serving/live/event_log.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace pier::serving {

std::string_view EventLevelName(EventLevel level) {
  switch (level) {
    case EventLevel::kInfo:
      return "info";
    case EventLevel::kWarning:
      return "warning";
    case EventLevel::kError:
      return "error";
  }
  return "info";
}

EventLog::EventLog(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

uint64_t EventLog::Publish(std::string_view type, EventLevel level, std::string_view model,
                           std::string_view message, const nlohmann::json& details) {
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto event = std::make_shared<ServerEvent>();
  event->time = now;
  event->type = std::string(type);
  uint64_t seq = 0;
  {
    MutexLock lock(mutex_);
    seq = ++last_seq_;
    event->seq = seq;
    nlohmann::ordered_json body{{"seq", seq},     {"time", now},
                                {"type", type},   {"level", EventLevelName(level)},
                                {"model", model}, {"message", message}};
    if (details.is_object()) {
      for (const auto& [key, value] : details.items()) body[key] = value;
    }
    // Names and reasons may carry bytes that are not UTF-8 (a file name): replace them.
    event->json = body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    ring_.push_back(std::move(event));
    while (ring_.size() > capacity_) ring_.pop_front();
  }
  WakeFollowers();
  return seq;
}

EventRead EventLog::ReadAfter(uint64_t after, size_t max) const {
  EventRead read;
  MutexLock lock(mutex_);
  read.next = std::min(after, last_seq_);
  if (ring_.empty() || after >= last_seq_) return read;
  const uint64_t oldest = ring_.front()->seq;
  if (after + 1 < oldest) {
    read.dropped = oldest - after - 1;
    after = oldest - 1;
  }
  const size_t start = static_cast<size_t>(after + 1 - oldest);
  const size_t end = std::min(ring_.size(), start + max);
  for (size_t i = start; i < end; ++i) read.events.push_back(ring_[i]);
  read.next = read.events.empty() ? after : read.events.back()->seq;
  return read;
}

uint64_t EventLog::last_seq() const {
  MutexLock lock(mutex_);
  return last_seq_;
}

uint64_t EventLog::Follow(std::function<void()> wake) {
  MutexLock lock(followers_mutex_);
  const uint64_t id = next_follower_++;
  followers_[id] = std::make_shared<std::function<void()>>(std::move(wake));
  return id;
}

void EventLog::Unfollow(uint64_t id) {
  MutexLock lock(followers_mutex_);
  followers_.erase(id);
}

void EventLog::Pulse() { WakeFollowers(); }

void EventLog::WakeFollowers() {
  std::vector<std::shared_ptr<std::function<void()>>> wakes;
  {
    MutexLock lock(followers_mutex_);
    wakes.reserve(followers_.size());
    for (const auto& [id, wake] : followers_) wakes.push_back(wake);
  }
  for (const auto& wake : wakes) (*wake)();
}

}  // namespace pier::serving

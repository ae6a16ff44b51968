#include "serving/live/request_board.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace pier::serving {
namespace {

int64_t SteadyMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

RequestBoard::RequestBoard() = default;
RequestBoard::~RequestBoard() = default;

RequestBoard::Ticket::~Ticket() { board_->Close(key_); }

void RequestBoard::Ticket::Produced(int64_t count) {
  entry_->tokens.fetch_add(count, std::memory_order_relaxed);
  entry_->running.store(true, std::memory_order_relaxed);
}

void RequestBoard::Ticket::SetStage(std::string stage) {
  MutexLock lock(entry_->stage_mutex);
  entry_->stage = std::move(stage);
}

std::unique_ptr<RequestBoard::Ticket> RequestBoard::Open(LiveRequestInfo info) {
  auto entry = std::make_shared<Entry>();
  entry->info = std::move(info);
  entry->started_us = SteadyMicros();
  MutexLock lock(mutex_);
  const uint64_t key = next_key_++;
  entries_.emplace(key, entry);
  return std::unique_ptr<Ticket>(new Ticket(this, key, std::move(entry)));
}

void RequestBoard::Close(uint64_t key) {
  std::shared_ptr<Entry> gone;  // freed outside the lock
  MutexLock lock(mutex_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  gone = std::move(it->second);
  entries_.erase(it);
}

std::vector<LiveRequestRow> RequestBoard::Snapshot(size_t max, size_t* total) const {
  const int64_t now = SteadyMicros();
  std::vector<LiveRequestRow> rows;
  MutexLock lock(mutex_);
  if (total != nullptr) *total = entries_.size();
  // Keys grow with time: the map's order is the oldest first.
  for (const auto& [key, entry] : entries_) {
    if (rows.size() >= max) break;
    LiveRequestRow row;
    row.info = entry->info;
    row.age_seconds = static_cast<double>(now - entry->started_us) / 1e6;
    row.running = entry->running.load(std::memory_order_relaxed);
    row.tokens = entry->tokens.load(std::memory_order_relaxed);
    MutexLock stage_lock(entry->stage_mutex);
    row.stage = entry->stage;
    rows.push_back(std::move(row));
  }
  return rows;
}

size_t RequestBoard::size() const {
  MutexLock lock(mutex_);
  return entries_.size();
}

}  // namespace pier::serving

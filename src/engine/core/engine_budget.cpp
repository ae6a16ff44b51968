// The engine and its memory budget: what the elastic KV cache could ever hold (Submit's
// ceiling), the critical class's queue places, and the engine thread's wait between steps,
// which a stalled engine ends on memory given back rather than by polling (engine.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "engine/core/engine.h"
#include "engine/core/engine_state.h"

namespace pier::engine {

int64_t Engine::KvCeilingTokens() const {
  if (elastic_ == nullptr || !options_.check_kv_ceiling) return 0;
  const auto blocks =
      static_cast<int64_t>(elastic_->lease().AttainableChunks()) * elastic_->blocks_per_chunk();
  const int64_t groups = std::max<int64_t>(1, runner_->shape().kv_groups.n_groups());
  return std::min(max_request_tokens_, blocks / groups * blocks_.block_size());
}

int64_t Engine::ReservedQueuePlaces() const {
  const SchedulerOptions& s = options_.scheduler;
  if (!s.qos || s.reserved_share <= 0 || options_.max_waiting <= 1) return 0;
  const double share = std::min(s.reserved_share, 0.5);
  return std::max<int64_t>(
      1, static_cast<int64_t>(std::floor(static_cast<double>(options_.max_waiting) * share)));
}

int64_t Engine::KvChunkTokens() const {
  if (elastic_ == nullptr) return 0;
  const int64_t groups = std::max<int64_t>(1, runner_->shape().kv_groups.n_groups());
  return elastic_->blocks_per_chunk() / groups * blocks_.block_size();
}

int64_t Engine::KvBytesPerToken() const {
  const int64_t groups = std::max<int64_t>(1, runner_->shape().kv_groups.n_groups());
  const int64_t bytes_per_block = static_cast<int64_t>(kv_->layout().bytes_per_block());
  return bytes_per_block * groups / std::max<int64_t>(1, blocks_.block_size());
}

uint64_t Engine::MemoryReleases() const {
  return elastic_ != nullptr ? elastic_->lease().governor().release_epoch() : 0;
}

void Engine::OnMemoryReleased() {
  {
    MutexLock lock(mutex_);  // not to slip between the engine thread's check and its wait
  }
  cv_.notify_all();
}

std::optional<TimestampUs> Engine::NextTimedEvent() {
  std::optional<TimestampUs> next;
  auto earliest = [&](TimestampUs t) { next = next.has_value() ? std::min(*next, t) : t; };
  for (const auto& [id, live] : live_) {
    if (live->request.deadline_us.has_value() && live->scheduled_us == 0 && !live->demoted) {
      earliest(*live->request.deadline_us);
    }
  }
  if (elastic_kv_.has_value()) {
    const auto idle_us =
        std::chrono::duration_cast<std::chrono::microseconds>(options_.kv_idle_release).count();
    if (std::optional<int64_t> due = elastic_kv_->IdleReleaseDue(idle_us)) earliest(*due);
    if (stalled_) {
      if (std::optional<int64_t> ends = elastic_kv_->BackoffEndsUs()) earliest(*ends);
    }
  }
  return next;
}

void Engine::WaitForWork() {
  // Stalled: nothing could run though work waits, and only a change can make a step useful.
  // A heartbeat bounds the wait (a shrink deadline another owner missed is noticed by the
  // governor's next call, and the stats' heartbeat stays fresh), one wake a second, not a spin.
  constexpr int64_t kStalledHeartbeatUs = 1'000'000;
  std::optional<TimestampUs> wake = NextTimedEvent();
  if (stalled_) {
    const TimestampUs beat = NowUs() + kStalledHeartbeatUs;
    wake = wake.has_value() ? std::min(*wake, beat) : beat;
  }
  MutexLock lock(mutex_);
  auto ready = [&] {
    mutex_.AssertHeld();
    return stopping_ || !inbox_.empty() || !aborts_.empty() || abort_all_reason_ ||
           shrink_chunks_ > 0 ||
           (stalled_ ? MemoryReleases() != releases_at_plan_ : scheduler_.HasWork());
  };
  if (!wake.has_value()) {
    lock.Wait(cv_, ready);
    return;
  }
  const auto at = std::chrono::steady_clock::time_point(std::chrono::microseconds(*wake));
  lock.WaitUntil(cv_, at, ready);
}

}  // namespace pier::engine

#include "engine/core/elastic_kv.h"

#include <algorithm>

#include "common/check.h"

namespace pier::engine {

bool ElasticKvController::NeedsMoreBlocks(const StepPlan& plan) const {
  if (!plan.preempted.empty() || !plan.swapped_out.empty()) return true;
  int64_t admitted = 0;
  for (const ScheduledSequence& s : plan.sequences) admitted += s.admit ? 1 : 0;
  const int64_t running = scheduler_->Stats().running + admitted;
  return scheduler_->NumWaiting() > admitted && plan.num_tokens() < limits_.max_batched_tokens &&
         running < limits_.max_seqs;
}

bool ElasticKvController::TryGrow(uint64_t releases) {
  if (BackoffEndsUs().has_value()) return false;
  if (WaitingForRelease(releases)) return false;
  Lease& lease = store_->lease();
  if (lease.chunks() >= lease.max_chunks()) return false;
  GrowOptions options;
  const std::optional<Priority> waiting = scheduler_->MostUrgentWaiting();
  options.urgency = UrgencyOf(waiting.value_or(Priority::kNormal));
  // All the first waiting sequence lacks at once (at least a chunk), or nothing.
  const int64_t per_chunk = store_->blocks_per_chunk();
  const auto lacked =
      static_cast<size_t>((scheduler_->BlocksLackedByFirstWaiting() + per_chunk - 1) / per_chunk);
  const size_t chunks = std::min(std::max<size_t>(1, lacked), lease.max_chunks() - lease.chunks());
  MemoryStatus grown = lease.Grow(chunks, options);
  if (!grown.ok()) {
    refused_at_ = releases;
    return false;
  }
  refused_at_.reset();
  blocks_->SetCapacity(store_->usable_blocks());
  return true;
}

void ElasticKvController::SetWaitingForMemory(bool waiting) {
  if (waiting == waiting_for_memory_) return;
  store_->lease().SetWaitingForMemory(waiting);
  waiting_for_memory_ = waiting;
}

std::optional<int64_t> ElasticKvController::IdleReleaseDue(int64_t idle_release_us) const {
  if (!idle_ || idle_release_us <= 0) return std::nullopt;
  if (store_->lease().chunks() <= store_->min_chunks()) return std::nullopt;
  return idle_since_us_ + idle_release_us;
}

size_t ElasticKvController::ReleaseIdle(int64_t now_us, int64_t idle_release_us) {
  const std::optional<int64_t> due = IdleReleaseDue(idle_release_us);
  if (!due.has_value() || now_us < *due) return 0;
  const size_t chunks = store_->lease().chunks() - store_->min_chunks();
  return Shrink(chunks) ? chunks : 0;
}

bool ElasticKvController::Shrink(size_t chunks) {
  Lease& lease = store_->lease();
  chunks = std::min(chunks, lease.chunks());
  if (chunks == 0) return false;
  const int64_t limit = static_cast<int64_t>(lease.chunks() - chunks) * store_->blocks_per_chunk();
  scheduler_->PreemptHoldingBlocksFrom(static_cast<int32_t>(limit));
  blocks_->SetCapacity(limit);
  Status shrunk = lease.Shrink(chunks);
  PIER_CHECK(shrunk.ok(), shrunk.ToString());
  backoff_until_step_ = scheduler_->step() + kBackoffSteps;
  backoff_until_us_ = NowUs() + kBackoffUs;
  return true;
}

std::optional<int64_t> ElasticKvController::BackoffEndsUs() const {
  if (scheduler_->step() >= backoff_until_step_ || NowUs() >= backoff_until_us_) {
    return std::nullopt;
  }
  return backoff_until_us_;
}

void ElasticKvController::UpdateIdle() {
  const bool idle = !scheduler_->HasWork();
  if (idle != idle_) {
    store_->lease().SetIdle(idle);
    idle_ = idle;
    if (idle) idle_since_us_ = NowUs();
  }
  if (idle) SetWaitingForMemory(false);
  // The running sequences' class protects the lease; with none running, the waiting ones'
  // class does, marked as waiting only (it then yields to an earlier owner at that class, so
  // two models waiting for each other's chunks do not trade them back and forth).
  const std::optional<Priority> running = scheduler_->MostUrgentRunning();
  const std::optional<Priority> waiting =
      running.has_value() ? std::nullopt : scheduler_->MostUrgentWaiting();
  const int urgency = UrgencyOf(running.value_or(waiting.value_or(Priority::kLow)));
  if (urgency != urgency_) {
    store_->lease().SetUrgency(urgency);
    urgency_ = urgency;
  }
  const bool waiting_only = waiting.has_value();
  if (waiting_only != waiting_only_) {
    store_->lease().SetWaitingOnly(waiting_only);
    waiting_only_ = waiting_only;
  }
}

}  // namespace pier::engine

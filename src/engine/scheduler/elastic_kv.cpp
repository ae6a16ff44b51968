#include "engine/scheduler/elastic_kv.h"

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

bool ElasticKvController::TryGrow() {
  if (scheduler_->step() < backoff_until_step_) return false;
  Lease& lease = store_->lease();
  if (lease.chunks() >= lease.max_chunks()) return false;
  GrowOptions options;
  const std::optional<Priority> waiting = scheduler_->MostUrgentWaiting();
  options.urgency = UrgencyOf(waiting.value_or(Priority::kNormal));
  MemoryStatus grown = lease.Grow(1, options);
  if (!grown.ok()) {
    backoff_until_step_ = scheduler_->step() + kBackoffSteps;
    return false;
  }
  blocks_->SetCapacity(store_->usable_blocks());
  return true;
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
  return true;
}

void ElasticKvController::UpdateIdle() {
  const bool idle = !scheduler_->HasWork();
  if (idle != idle_) {
    store_->lease().SetIdle(idle);
    idle_ = idle;
  }
  // Waiting sequences hold no blocks: only the running ones' class protects the lease.
  const std::optional<Priority> running = scheduler_->MostUrgentRunning();
  const int urgency = UrgencyOf(running.value_or(Priority::kLow));
  if (urgency != urgency_) {
    store_->lease().SetUrgency(urgency);
    urgency_ = urgency;
  }
}

}  // namespace pier::engine

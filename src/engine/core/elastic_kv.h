// ElasticKvController: how an engine's block capacity follows its elastic KV lease
// (LeasedKvStore). Before a step whose plan leaves sequences waiting for blocks (or
// preempts), it grows the lease by a chunk. After a refusal it does not ask again until the
// governor has seen memory given back (its release epoch moved): asking again sooner could
// only be refused again, and an engine whose waiting work needs a grow waits for that release
// instead of spinning (the lease is marked waiting for memory meanwhile, which the pressure
// index counts). A shrink (asked by the governor or ShrinkKv) preempts by recompute the
// sequences holding blocks of the last chunks, takes those blocks out of the cache and returns
// the chunks; the lease is marked idle while nothing is live, so the governor reclaims it
// first, and once it has been idle for `idle_release` it gives every chunk above its minimum
// back on its own (ReleaseIdle), so a burst's memory returns to the device.
//
// Request classes reach the governor as urgency (UrgencyOf): a grow carries the most urgent
// waiting class (the work it makes room for), and the lease publishes the most urgent running
// class, so reclaim never preempts a request of a higher class than the one it makes room for.
//
// The policy (when to grow, how long to back off) lives here, apart from the engine loop, so
// that the multi-model memory work can change it in one place. Not thread-safe: the engine
// thread owns it; the engine keeps the cross-thread shrink requests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "engine/kv/block_manager.h"
#include "engine/kv/leased_kv_store.h"
#include "engine/scheduler/scheduler.h"

namespace pier::engine {

class ElasticKvController {
 public:
  // No growing after a shrink for this many steps or this long, whichever ends first (not to
  // grow straight back into what was just given away; the time bounds it when no step runs).
  static constexpr int64_t kBackoffSteps = 16;
  static constexpr int64_t kBackoffUs = 50'000;

  // All borrowed and outliving the controller.
  ElasticKvController(LeasedKvStore* store, BlockManager* blocks, Scheduler* scheduler,
                      const SchedulerOptions& limits)
      : store_(store), blocks_(blocks), scheduler_(scheduler), limits_(limits) {}

  // Whether `plan` would run better with more blocks: it preempts, or sequences wait while
  // the step has room for more tokens and sequences.
  bool NeedsMoreBlocks(const StepPlan& plan) const;
  // Grows the lease by the chunks the first waiting sequence lacks (at least one; all or
  // none) and the block capacity with it; false when refused, at the
  // lease's maximum, backing off, or refused before and no memory given back since
  // (`releases`: the governor's release epoch, read before the plan was made).
  bool TryGrow(uint64_t releases);
  // Whether the latest grow was refused and no memory has been given back since: work that
  // waits for blocks can only wait for a release.
  bool WaitingForRelease(uint64_t releases) const {
    return refused_at_.has_value() && *refused_at_ == releases;
  }
  // Marks the lease as waiting for memory (the pressure index counts it) or not.
  void SetWaitingForMemory(bool waiting);
  // When the back-off after a shrink ends by time (NowUs()), if it is on now.
  std::optional<int64_t> BackoffEndsUs() const;
  // Gives up to `chunks` chunks back; returns whether any were.
  bool Shrink(size_t chunks);
  // Marks the lease idle or busy, and its urgency, as the scheduler's work says.
  void UpdateIdle();
  // When an idle lease holding chunks above its minimum is due to give them back, after
  // `idle_release_us` of idleness (NowUs() time); nullopt when there is nothing to give back
  // or idle_release_us is 0.
  std::optional<int64_t> IdleReleaseDue(int64_t idle_release_us) const;
  // Gives every chunk above the lease's minimum back once it is due; how many it gave.
  size_t ReleaseIdle(int64_t now_us, int64_t idle_release_us);

  // A request class as the governor's urgency: critical 2, high 1, normal 0, low -1 (0 is
  // what reservations and plain allocations count as).
  static int UrgencyOf(Priority priority) { return 2 - static_cast<int>(priority); }

 private:
  LeasedKvStore* store_;
  BlockManager* blocks_;
  Scheduler* scheduler_;
  const SchedulerOptions limits_;
  int64_t backoff_until_step_ = 0;
  int64_t backoff_until_us_ = 0;
  std::optional<uint64_t> refused_at_;  // the release epoch of the latest refusal
  bool waiting_for_memory_ = false;     // as published to the lease
  bool idle_ = false;
  int64_t idle_since_us_ = 0;
  int urgency_ = 0;            // as published to the lease
  bool waiting_only_ = false;  // as published to the lease
};

}  // namespace pier::engine

// ElasticKvController: how an engine's block capacity follows its elastic KV lease
// (LeasedKvStore). Before a step whose plan leaves sequences waiting for blocks (or
// preempts), it grows the lease by a chunk, backing off for some steps after a refusal; a
// shrink (asked by the governor or ShrinkKv) preempts by recompute the sequences holding
// blocks of the last chunks, takes those blocks out of the cache and returns the chunks; the
// lease is marked idle while nothing is live, so the governor reclaims it first.
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

#include "engine/leased_kv_store.h"
#include "engine/scheduler/block_manager.h"
#include "engine/scheduler/scheduler.h"

namespace pier::engine {

class ElasticKvController {
 public:
  // Steps without growing after a refused grow or a shrink (not to grow straight back into
  // what was just given away).
  static constexpr int64_t kBackoffSteps = 16;

  // All borrowed and outliving the controller.
  ElasticKvController(LeasedKvStore* store, BlockManager* blocks, Scheduler* scheduler,
                      const SchedulerOptions& limits)
      : store_(store), blocks_(blocks), scheduler_(scheduler), limits_(limits) {}

  // Whether `plan` would run better with more blocks: it preempts, or sequences wait while
  // the step has room for more tokens and sequences.
  bool NeedsMoreBlocks(const StepPlan& plan) const;
  // Grows the lease by one chunk and the block capacity with it; false when refused, at the
  // lease's maximum, or backing off.
  bool TryGrow();
  // Gives up to `chunks` chunks back; returns whether any were.
  bool Shrink(size_t chunks);
  // Marks the lease idle or busy, and its urgency, as the scheduler's work says.
  void UpdateIdle();

  // A request class as the governor's urgency: critical 2, high 1, normal 0, low -1 (0 is
  // what reservations and plain allocations count as).
  static int UrgencyOf(Priority priority) { return 2 - static_cast<int>(priority); }

 private:
  LeasedKvStore* store_;
  BlockManager* blocks_;
  Scheduler* scheduler_;
  const SchedulerOptions limits_;
  int64_t backoff_until_step_ = 0;
  bool idle_ = false;
  int urgency_ = 0;  // as published to the lease
};

}  // namespace pier::engine

// Leases (elastic KV arenas), admission with reclaim, and shrink deadlines.
#include "memory/lease.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "memory/governor_internal.h"
#include "memory/reclaim_policy.h"

namespace pier {
namespace {
using Clock = std::chrono::steady_clock;
// How long a lease short of budget waits for its supervisor's answer before it is refused
// (and retries later).
constexpr std::chrono::milliseconds kBudgetAnswerWait{200};
size_t RoundUp(size_t x, size_t to) { return (x + to - 1) / to * to; }
}  // namespace

// ---- Deadlines and reclaim (MemoryGovernor, mutex_ held) -----------------------------------

void MemoryGovernor::CheckDeadlines() {
  MutexLock lock(mutex_);
  CheckDeadlinesLocked();
}

void MemoryGovernor::CheckDeadlinesLocked() {
  const auto now = Clock::now();
  for (auto& [id, lease] : leases_) {
    if (!lease->request || lease->unresponsive || now < lease->request->deadline) continue;
    lease->unresponsive = true;
    ++deadline_misses_;
    OwnerState* o = FindLocked(lease->owner);
    if (o != nullptr) ++o->deadline_misses;
    spdlog::warn(
        "memory: lease '{}' of owner '{}' missed its shrink deadline (asked for {} chunks by "
        "'{}'); it may not grow until it shrinks to {} chunks",
        lease->name, o != nullptr ? o->spec.name : "?", lease->request->chunks,
        lease->request->requester, lease->request->target_chunks);
    SignalReleaseLocked();  // wake growers waiting on it so they can give up
  }
}

bool MemoryGovernor::PlanReclaimLocked(const OwnerState& requester, uint64_t need, int urgency,
                                       uint64_t exclude_lease, Reclaim* reclaim) {
  // A snapshot of the other owners' leases; the choice itself is reclaim_policy.h's.
  std::vector<ReclaimCandidate> snapshot;
  for (auto& [id, lease] : leases_) {
    if (id == exclude_lease) continue;
    const OwnerState* o = FindLocked(lease->owner);
    if (o == nullptr) continue;
    snapshot.push_back({.lease_id = id,
                        .owner = lease->owner.value,
                        .idle = lease->idle,
                        .priority = o->spec.priority,
                        .urgency = lease->urgency,
                        .waiting_only = lease->waiting_only,
                        .shrink_pending = lease->request.has_value(),
                        .chunks = lease->chunks,
                        .min_chunks = lease->min_chunks,
                        .chunk_bytes = lease->chunk_bytes,
                        .owner_charged = o->charged,
                        .owner_keep = std::max(o->spec.guaranteed_bytes, o->floor)});
  }
  const ReclaimPlan plan =
      ChooseReclaim(snapshot, {requester.id.value, requester.spec.priority, urgency}, need);
  if (!plan.enough) return false;
  struct Planned {
    LeaseState* lease;
    size_t chunks;
  };
  std::vector<Planned> planned;
  for (const ReclaimTake& take : plan.takes)
    planned.push_back({leases_.at(take.lease_id).get(), take.chunks});
  const auto deadline = Clock::now() + options_.shrink_deadline;
  for (const Planned& p : planned) {
    ShrinkRequest request;
    request.id = next_request_++;
    request.chunks = p.chunks;
    request.target_chunks = p.lease->chunks - p.chunks;
    request.deadline = deadline;
    request.requester = requester.spec.name;
    p.lease->request = request;
    ++shrink_requests_;
    reclaim->request_ids.push_back(request.id);
    if (p.lease->handler) reclaim->calls.emplace_back(p.lease->handler, request);
    spdlog::info("memory: asking lease '{}' to give back {} chunks for '{}'", p.lease->name,
                 p.chunks, requester.spec.name);
  }
  return true;
}

MemoryStatus MemoryGovernor::AdmitLocked(MutexLock& lock, OwnerId owner, uint64_t bytes, bool wait,
                                         std::chrono::milliseconds timeout, uint64_t lease_id,
                                         int urgency) {
  const auto give_up_at = Clock::now() + timeout;
  std::vector<uint64_t> awaited;  // shrink requests we count on (ours or already in flight)
  bool asked_for_budget = false;  // SetBudgetShortHandler's handler, once per admission
  // Counted in waiting_allocations_ from the first time the headroom is short until this
  // returns (every return holds the lock, so the count changes under it).
  struct WaitingCount {
    uint64_t* count;
    bool counted = false;
    ~WaitingCount() {
      if (counted) --*count;
    }
  } waiting{&waiting_allocations_};
  while (true) {
    CheckDeadlinesLocked();
    const OwnerState* o = FindLocked(owner);
    if (o == nullptr) return UnknownOwner(owner, bytes);
    if (bytes > o->spec.max_bytes - o->charged) {
      return ErrorLocked(MemoryErrorKind::kOwnerQuota, *o, bytes);
    }
    const uint64_t headroom = HeadroomLocked(*o);
    if (bytes <= headroom) return MemoryOk{};
    if (!waiting.counted) {
      waiting.counted = true;
      ++waiting_allocations_;
    }

    // Did someone we are waiting for miss the deadline?
    for (const auto& [id, lease] : leases_) {
      if (lease->unresponsive && lease->request &&
          (lease->request->requester == o->spec.name ||
           std::find(awaited.begin(), awaited.end(), lease->request->id) != awaited.end())) {
        const OwnerState* slow = FindLocked(lease->owner);
        return ErrorLocked(MemoryErrorKind::kReclaimTimedOut, *o, bytes,
                           "owner '" + (slow ? slow->spec.name : std::string("?")) +
                               "' did not shrink lease '" + lease->name + "' in time");
      }
    }
    // Shrinks already asked for (and not overdue) count toward what we need.
    uint64_t incoming = 0;
    for (const auto& [id, lease] : leases_) {
      if (lease->request && !lease->unresponsive && lease->owner != owner) {
        if (std::find(awaited.begin(), awaited.end(), lease->request->id) == awaited.end()) {
          awaited.push_back(lease->request->id);
        }
        incoming += (lease->chunks - std::min(lease->chunks, lease->request->target_chunks)) *
                    lease->chunk_bytes;
      }
    }
    const uint64_t need = bytes - headroom;
    Reclaim reclaim;
    if (incoming < need && !PlanReclaimLocked(*o, need - incoming, urgency, lease_id, &reclaim)) {
      if (lease_id != 0 && budget_short_handler_ && !asked_for_budget) {
        // A worker's governor: its supervisor may grant more budget. Ask, wait a moment for
        // the answer (a SetBudget, normally within a millisecond), and look again.
        asked_for_budget = true;
        std::function<bool(uint64_t, int)> ask = budget_short_handler_;
        const uint64_t short_by = need - std::min(need, incoming);
        const uint64_t answers = budget_answers_;
        mutex_.Unlock();
        const bool asked = ask(short_by, urgency);
        mutex_.Lock();
        const auto answer_by = Clock::now() + (asked ? kBudgetAnswerWait : Clock::duration{});
        while (budget_answers_ == answers && Clock::now() < answer_by) {
          lock.WaitUntil(memory_freed_, answer_by);
        }
        continue;
      }
      if (asked_for_budget) {
        return ErrorLocked(MemoryErrorKind::kReclaimPending, *o, bytes,
                           "asked for more budget; retry");
      }
      return ErrorLocked(MemoryErrorKind::kBudget, *o, bytes,
                         incoming > 0 ? "not enough is reclaimable from other owners"
                                      : "nothing reclaimable from other owners");
    }
    awaited.insert(awaited.end(), reclaim.request_ids.begin(), reclaim.request_ids.end());
    if (!reclaim.calls.empty()) {
      // Handlers run without the lock (they may call back into the governor); `lock` still
      // wraps the mutex and finds it held again before it waits or is destroyed.
      mutex_.Unlock();
      for (auto& [handler, request] : reclaim.calls) handler(request);
      mutex_.Lock();
      continue;  // a cooperative handler may already have shrunk
    }
    if (!wait) {
      o = FindLocked(owner);
      if (o == nullptr) return UnknownOwner(owner, bytes);
      return ErrorLocked(MemoryErrorKind::kReclaimPending, *o, bytes,
                         "other owners were asked to shrink; retry");
    }
    // Wait for a shrink, a free, or the earliest deadline among the requests in flight.
    auto wake = give_up_at;
    for (const auto& [id, lease] : leases_) {
      if (lease->request && !lease->unresponsive) wake = std::min(wake, lease->request->deadline);
    }
    if (Clock::now() >= give_up_at) {
      o = FindLocked(owner);
      if (o == nullptr) return UnknownOwner(owner, bytes);
      return ErrorLocked(MemoryErrorKind::kReclaimTimedOut, *o, bytes,
                         "waited " + std::to_string(timeout.count()) + " ms");
    }
    lock.WaitUntil(memory_freed_, wake + std::chrono::milliseconds(1));
  }
}

MemoryStatus MemoryGovernor::MakeRoom(OwnerId owner, uint64_t bytes,
                                      std::chrono::milliseconds timeout) {
  MutexLock lock(mutex_);
  return AdmitLocked(lock, owner, bytes, /*wait=*/true, timeout, /*lease_id=*/0);
}

// ---- Lease creation (MemoryGovernor) -------------------------------------------------------

MemoryResult<std::unique_ptr<Lease>> MemoryGovernor::CreateLease(OwnerId owner,
                                                                 const LeaseOptions& options) {
  std::unique_ptr<Lease> lease;
  {
    MutexLock lock(mutex_);
    OwnerState* o = FindLocked(owner);
    if (o == nullptr) return UnknownOwner(owner, options.chunk_bytes);
    auto invalid = [&](const std::string& why) {
      mutex_.AssertHeld();  // called with `lock` held
      return ErrorLocked(MemoryErrorKind::kInvalidRequest, *o, options.chunk_bytes,
                         "lease '" + options.name + "': " + why);
    };
    if (options.chunk_bytes == 0 || options.chunk_bytes > kMaxByteSize) {
      return invalid("chunk size must be positive and sane");
    }
    if (options.max_chunks == 0) return invalid("max_chunks must be at least 1");
    if (options.min_chunks > options.max_chunks || options.initial_chunks > options.max_chunks) {
      return invalid("min_chunks and initial_chunks must not exceed max_chunks");
    }
    const bool vm =
        !options.accounting_only && options.use_virtual_memory && device_->SupportsVirtualMemory();
    const size_t granularity = vm ? device_->VmGranularity() : options_.pool.alignment;
    const size_t chunk_bytes = RoundUp(options.chunk_bytes, granularity);
    if (options.max_chunks > kMaxByteSize / chunk_bytes) return invalid("address range too large");
    auto state = std::make_unique<LeaseState>();
    state->id = next_lease_++;
    state->owner = owner;
    state->name = options.name.empty() ? o->spec.name : options.name;
    state->chunk_bytes = chunk_bytes;
    state->max_chunks = options.max_chunks;
    state->min_chunks = options.min_chunks;
    state->contiguous = vm;
    state->accounting_only = options.accounting_only;
    state->handler = options.on_shrink_request;
    if (vm) {
      Result<VirtualRange> range = device_->ReserveAddressRange(chunk_bytes * options.max_chunks);
      if (!range.ok()) {
        return ErrorLocked(MemoryErrorKind::kDeviceOutOfMemory, *o,
                           chunk_bytes * options.max_chunks, range.status().message());
      }
      state->range = *range;
    }
    lease.reset(new Lease(this, state->id, owner, chunk_bytes, options.max_chunks, vm,
                          vm ? state->range.base : nullptr));
    ++o->leases;
    leases_.emplace(state->id, std::move(state));
  }
  if (options.initial_chunks > 0) {
    MemoryStatus grown = lease->Grow(options.initial_chunks);
    if (!grown.ok()) return grown.error();
  }
  return lease;
}

// ---- Lease ---------------------------------------------------------------------------------

Lease::~Lease() {
  MemoryGovernor& g = *governor_;
  MutexLock lock(g.mutex_);
  auto it = g.leases_.find(id_);
  PIER_CHECK(it != g.leases_.end(), "lease state missing");
  MemoryGovernor::LeaseState& state = *it->second;
  MemoryGovernor::OwnerState* o = g.FindLocked(owner_);
  PIER_CHECK(o != nullptr, "a Lease outlived its owner");
  const uint64_t bytes = state.chunks * state.chunk_bytes;
  if (state.accounting_only) {
    g.external_bytes_ -= bytes;
  } else if (state.contiguous) {
    g.device_->ReleaseAddressRange(state.range);
    g.arena_bytes_ -= bytes;
  } else {
    for (void* chunk : state.chunk_blocks) {
      Result<FreedBlock> freed = g.pool_->Free(chunk);
      PIER_CHECK(freed.ok(), "a lease chunk could not be freed: " + freed.status().ToString());
    }
  }
  g.Uncharge(*o, bytes);
  o->lease_bytes -= bytes;
  --o->leases;
  g.leases_.erase(it);
  g.ApplyPendingBudgetLocked();
  g.SignalReleaseLocked();
}

size_t Lease::chunks() const {
  MutexLock lock(governor_->mutex_);
  return governor_->leases_.at(id_)->chunks;
}

void* Lease::ChunkAddress(size_t index) const {
  MutexLock lock(governor_->mutex_);
  const MemoryGovernor::LeaseState& state = *governor_->leases_.at(id_);
  PIER_CHECK(index < state.chunks, "chunk index " + std::to_string(index) + " of a lease with " +
                                       std::to_string(state.chunks) + " chunks");
  PIER_CHECK(!state.accounting_only, "an accounting-only lease has no chunk addresses");
  if (contiguous_) return static_cast<char*>(base_) + index * chunk_bytes_;
  return state.chunk_blocks[index];
}

std::optional<ShrinkRequest> Lease::pending_request() const {
  MutexLock lock(governor_->mutex_);
  return governor_->leases_.at(id_)->request;
}

void Lease::SetIdle(bool idle) {
  MutexLock lock(governor_->mutex_);
  MemoryGovernor::LeaseState& state = *governor_->leases_.at(id_);
  // An idle lease may be reclaimed by anyone: an owner waiting for memory may have it now.
  if (idle && !state.idle) governor_->SignalReleaseLocked();
  state.idle = idle;
}

size_t Lease::AttainableChunks() const {
  MemoryGovernor& g = *governor_;
  MutexLock lock(g.mutex_);
  const MemoryGovernor::LeaseState& state = *g.leases_.at(id_);
  const MemoryGovernor::OwnerState* o = g.FindLocked(owner_);
  PIER_CHECK(o != nullptr, "a Lease outlived its owner");
  const uint64_t attainable = g.AttainableLocked(*o);
  const uint64_t more = attainable > o->charged ? attainable - o->charged : 0;
  return std::min<size_t>(state.max_chunks,
                          state.chunks + static_cast<size_t>(more / state.chunk_bytes));
}

void Lease::SetWaitingOnly(bool waiting_only) {
  MutexLock lock(governor_->mutex_);
  governor_->leases_.at(id_)->waiting_only = waiting_only;
}

void Lease::SetWaitingForMemory(bool waiting) {
  MutexLock lock(governor_->mutex_);
  governor_->leases_.at(id_)->waiting_for_memory = waiting;
}

void Lease::SetUrgency(int urgency) {
  MutexLock lock(governor_->mutex_);
  // No release signal when it drops: a lease whose running work is preempted for a moment
  // reports low urgency, and waking every waiting owner then would reclaim from work that is
  // about to resume (an idle lease, SetIdle, is a real chance).
  governor_->leases_.at(id_)->urgency = urgency;
}

MemoryStatus Lease::Grow(size_t chunks, GrowOptions options) {
  MemoryGovernor& g = *governor_;
  MutexLock lock(g.mutex_);
  g.CheckDeadlinesLocked();
  MemoryGovernor::OwnerState* o = g.FindLocked(owner_);
  PIER_CHECK(o != nullptr, "a Lease outlived its owner");
  auto fail = [&](MemoryErrorKind kind, uint64_t bytes, std::string detail) -> MemoryStatus {
    g.mutex_.AssertHeld();  // called with `lock` held
    MemoryGovernor::OwnerState* owner = g.FindLocked(owner_);
    ++owner->failure_count;
    ++g.failure_count_;
    return g.ErrorLocked(kind, *owner, bytes, std::move(detail));
  };
  const uint64_t bytes = uint64_t{chunks} * chunk_bytes_;
  {
    const MemoryGovernor::LeaseState& state = *g.leases_.at(id_);
    if (chunks == 0) return fail(MemoryErrorKind::kInvalidRequest, 0, "grow by 0 chunks");
    if (state.unresponsive) {
      return fail(MemoryErrorKind::kOwnerUnresponsive, bytes,
                  "lease '" + state.name + "' must first shrink to " +
                      std::to_string(state.request->target_chunks) + " chunks");
    }
    if (state.request) {
      return fail(MemoryErrorKind::kReclaimPending, bytes,
                  "lease '" + state.name + "' has been asked to shrink by " +
                      std::to_string(state.request->chunks) + " chunks");
    }
    if (chunks > max_chunks_ - state.chunks) {
      return fail(
          MemoryErrorKind::kOwnerQuota, bytes,
          "lease '" + state.name + "' is limited to " + std::to_string(max_chunks_) + " chunks");
    }
  }
  MemoryStatus admitted =
      g.AdmitLocked(lock, owner_, bytes, options.wait, options.timeout, id_, options.urgency);
  if (!admitted.ok()) {
    o = g.FindLocked(owner_);
    ++o->failure_count;
    ++g.failure_count_;
    return admitted;
  }
  MemoryGovernor::LeaseState& state = *g.leases_.at(id_);
  if (chunks > max_chunks_ - state.chunks) {  // grew concurrently while we waited
    return fail(MemoryErrorKind::kOwnerQuota, bytes, "lease is at its maximum");
  }
  if (state.accounting_only) {
    if (g.PhysicalLocked() + bytes > g.LimitLocked()) g.pool_->Trim();
    if (g.PhysicalLocked() + bytes > g.LimitLocked()) {
      return fail(MemoryErrorKind::kDeviceOutOfMemory, bytes,
                  "cached pool segments leave too little of the budget");
    }
    g.external_bytes_ += bytes;
  } else if (state.contiguous) {
    if (g.PhysicalLocked() + bytes > g.LimitLocked()) g.pool_->Trim();
    if (g.PhysicalLocked() + bytes > g.LimitLocked()) {
      return fail(MemoryErrorKind::kDeviceOutOfMemory, bytes,
                  "cached pool segments leave too little of the budget");
    }
    Status mapped = g.device_->MapChunk(state.range, state.chunks * chunk_bytes_, bytes);
    if (!mapped.ok()) {
      g.pool_->Trim();
      mapped = g.device_->MapChunk(state.range, state.chunks * chunk_bytes_, bytes);
    }
    if (!mapped.ok()) return fail(MemoryErrorKind::kDeviceOutOfMemory, bytes, mapped.message());
    g.arena_bytes_ += bytes;
  } else {
    std::vector<void*> fresh;
    for (size_t i = 0; i < chunks; ++i) {
      Result<AllocatedBlock> block = g.pool_->Allocate(chunk_bytes_, Stream{}, owner_.value);
      if (!block.ok()) {
        for (void* p : fresh) (void)g.pool_->Free(p);
        return fail(MemoryErrorKind::kDeviceOutOfMemory, bytes, block.status().message());
      }
      fresh.push_back(block->ptr);
    }
    state.chunk_blocks.insert(state.chunk_blocks.end(), fresh.begin(), fresh.end());
  }
  state.chunks += chunks;
  o = g.FindLocked(owner_);
  g.Charge(*o, bytes);
  o->lease_bytes += bytes;
  return MemoryOk{};
}

Status Lease::Shrink(size_t chunks) {
  MemoryGovernor& g = *governor_;
  MutexLock lock(g.mutex_);
  MemoryGovernor::LeaseState& state = *g.leases_.at(id_);
  if (chunks == 0) return Status::Ok();
  if (chunks > state.chunks) {
    return InvalidArgumentError("lease '" + state.name + "' has " + std::to_string(state.chunks) +
                                " chunks; cannot give back " + std::to_string(chunks));
  }
  const size_t keep = state.chunks - chunks;
  const uint64_t bytes = uint64_t{chunks} * chunk_bytes_;
  if (state.accounting_only) {
    g.external_bytes_ -= bytes;
  } else if (state.contiguous) {
    PIER_RETURN_IF_ERROR(g.device_->UnmapChunk(state.range, keep * chunk_bytes_, bytes));
    g.arena_bytes_ -= bytes;
  } else {
    for (size_t i = keep; i < state.chunks; ++i) {
      Result<FreedBlock> freed = g.pool_->Free(state.chunk_blocks[i]);
      PIER_CHECK(freed.ok(), "a lease chunk could not be freed: " + freed.status().ToString());
    }
    state.chunk_blocks.resize(keep);
  }
  state.chunks = keep;
  MemoryGovernor::OwnerState* o = g.FindLocked(owner_);
  g.Uncharge(*o, bytes);
  o->lease_bytes -= bytes;
  if (state.request && state.chunks <= state.request->target_chunks) {
    if (state.unresponsive) {
      spdlog::info("memory: lease '{}' complied late; it may grow again", state.name);
    }
    state.request.reset();
    state.unresponsive = false;
  }
  g.ApplyPendingBudgetLocked();
  g.SignalReleaseLocked();
  return Status::Ok();
}

}  // namespace pier

#include "memory/memory_governor.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "memory/governor_internal.h"
#include "memory/lease.h"

namespace pier {

// ---- Handles -------------------------------------------------------------------------------

Block& Block::operator=(Block&& other) noexcept {
  if (this != &other) {
    Reset();
    governor_ = std::exchange(other.governor_, nullptr);
    ptr_ = std::exchange(other.ptr_, nullptr);
    size_ = std::exchange(other.size_, 0);
    charged_ = std::exchange(other.charged_, 0);
    owner_ = std::exchange(other.owner_, OwnerId{});
  }
  return *this;
}

void Block::Reset() {
  if (ptr_ == nullptr) return;
  Status status = governor_->FreeAddress(ptr_);
  PIER_CHECK(status.ok(), "a Block handle could not free its memory: " + status.ToString());
  ptr_ = nullptr;
  governor_ = nullptr;
}

Status Block::RecordStream(Stream stream) {
  if (ptr_ == nullptr) return FailedPreconditionError("RecordStream on an empty Block");
  MutexLock lock(governor_->mutex_);
  return governor_->pool_->RecordStream(ptr_, stream);
}

Reservation& Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    Release();
    governor_ = std::exchange(other.governor_, nullptr);
    owner_ = std::exchange(other.owner_, OwnerId{});
    bytes_ = std::exchange(other.bytes_, 0);
    floor_delta_ = std::exchange(other.floor_delta_, 0);
  }
  return *this;
}

void Reservation::Release() {
  if (governor_ == nullptr) return;
  governor_->ReleaseReservation(owner_, floor_delta_);
  governor_ = nullptr;
  bytes_ = 0;
}

ExternalCharge& ExternalCharge::operator=(ExternalCharge&& other) noexcept {
  if (this != &other) {
    Release();
    governor_ = std::exchange(other.governor_, nullptr);
    owner_ = std::exchange(other.owner_, OwnerId{});
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void ExternalCharge::Release() {
  if (governor_ == nullptr) return;
  governor_->ReleaseExternal(owner_, bytes_);
  governor_ = nullptr;
  bytes_ = 0;
}

// ---- Backend (called with the governor's mutex held, from the pool) ------------------------

Result<void*> MemoryGovernor::Backend::AllocateSegment(size_t bytes) {
  governor_->mutex_.AssertHeld();
  const uint64_t physical = governor_->PhysicalLocked();
  if (physical + bytes > governor_->LimitLocked()) {
    return ResourceExhaustedError("a segment of " + FormatBytes(bytes) + " would hold " +
                                  FormatBytes(physical + bytes) + " of the device, over the " +
                                  FormatBytes(governor_->LimitLocked()) + " budget");
  }
  return governor_->device_->AllocateRaw(bytes, governor_->options_.pool.alignment);
}

void MemoryGovernor::Backend::FreeSegment(void* ptr, size_t bytes) {
  governor_->device_->FreeRaw(ptr, bytes);
}

Result<Event> MemoryGovernor::Backend::RecordEvent(Stream stream) {
  PIER_ASSIGN_OR_RETURN(Event event, governor_->device_->CreateEvent());
  Status recorded = governor_->device_->RecordEvent(event, stream);
  if (!recorded.ok()) {
    governor_->device_->DestroyEvent(event);
    return recorded;
  }
  return event;
}

bool MemoryGovernor::Backend::EventDone(Event event) {
  Result<bool> done = governor_->device_->EventDone(event);
  // A failed query means the stream is gone: nothing can still be using the block.
  return !done.ok() || *done;
}

void MemoryGovernor::Backend::DestroyEvent(Event event) { governor_->device_->DestroyEvent(event); }

// ---- Governor ------------------------------------------------------------------------------

Result<std::unique_ptr<MemoryGovernor>> MemoryGovernor::Create(Device* device,
                                                               GovernorOptions options) {
  PIER_CHECK(device != nullptr, "MemoryGovernor needs a device");
  PIER_ASSIGN_OR_RETURN(uint64_t budget, options.budget.Resolve(device->TotalBytes()));
  if (options.reserve_bytes >= budget) {
    return InvalidArgumentError("memory reserve " + FormatBytes(options.reserve_bytes) +
                                " leaves nothing of the " + FormatBytes(budget) + " budget on " +
                                device->name());
  }
  budget -= options.reserve_bytes;
  return std::unique_ptr<MemoryGovernor>(new MemoryGovernor(device, options, budget));
}

MemoryGovernor::MemoryGovernor(Device* device, GovernorOptions options, uint64_t budget_bytes)
    : device_(device),
      options_(std::move(options)),
      budget_bytes_(budget_bytes),
      backend_(std::make_unique<Backend>(this)),
      pool_(std::make_unique<CachingAllocator>(backend_.get(), options_.pool)) {}

MemoryGovernor::~MemoryGovernor() {
  {
    MutexLock lock(mutex_);
    notifier_stop_ = true;
  }
  memory_freed_.notify_all();
  if (notifier_.joinable()) notifier_.join();
  MutexLock lock(mutex_);
  PIER_CHECK(leases_.empty(), "MemoryGovernor destroyed while a Lease is alive");
  for (const auto& [id, owner] : owners_) {
    PIER_CHECK(owner->charged == 0 && owner->reservations == 0,
               "MemoryGovernor destroyed while owner '" + owner->spec.name + "' holds " +
                   FormatBytes(owner->charged));
  }
  pool_.reset();  // checks that no block is live and returns every segment
}

MemoryGovernor::OwnerState* MemoryGovernor::FindLocked(OwnerId owner) {
  auto it = owners_.find(owner);
  return it == owners_.end() ? nullptr : it->second.get();
}

const MemoryGovernor::OwnerState* MemoryGovernor::FindLocked(OwnerId owner) const {
  auto it = owners_.find(owner);
  return it == owners_.end() ? nullptr : it->second.get();
}

uint64_t MemoryGovernor::Committed(const OwnerState& o) {
  return std::max({o.charged, o.spec.guaranteed_bytes, o.floor});
}

uint64_t MemoryGovernor::HeadroomLocked(const OwnerState& o) const {
  const uint64_t others = committed_bytes_ - Committed(o);
  const uint64_t budget = LimitLocked();
  const uint64_t limit = budget > others ? budget - others : 0;
  return limit > o.charged ? limit - o.charged : 0;
}

uint64_t MemoryGovernor::AttainableLocked(const OwnerState& o) const {
  // What every other owner keeps once reclaim has taken all it may: its charges less its
  // leases' chunks above their minimums, and never less than its guarantee or reservations.
  uint64_t others = 0;
  for (const auto& [id, other] : owners_) {
    if (other.get() == &o) continue;
    uint64_t reclaimable = 0;
    for (const auto& [lid, lease] : leases_) {
      if (lease->owner != id) continue;
      reclaimable +=
          uint64_t{lease->chunks - std::min(lease->chunks, lease->min_chunks)} * lease->chunk_bytes;
    }
    const uint64_t keeps = other->charged - std::min(other->charged, reclaimable);
    others += std::max({keeps, other->spec.guaranteed_bytes, other->floor});
  }
  const uint64_t limit = LimitLocked();
  return std::min(o.spec.max_bytes, limit > others ? limit - others : 0);
}

uint64_t MemoryGovernor::AttainableBytes(OwnerId owner) const {
  MutexLock lock(mutex_);
  const OwnerState* o = FindLocked(owner);
  return o == nullptr ? 0 : AttainableLocked(*o);
}

void MemoryGovernor::SignalReleaseLocked() {
  ++release_epoch_;
  memory_freed_.notify_all();
}

uint64_t MemoryGovernor::release_epoch() const {
  MutexLock lock(mutex_);
  return release_epoch_;
}

uint64_t MemoryGovernor::AddReleaseListener(std::function<void()> listener) {
  MutexLock lock(mutex_);
  const uint64_t id = next_listener_++;
  release_listeners_.emplace(id, std::make_shared<std::function<void()>>(std::move(listener)));
  // The thread starts from the epoch now: a release before it first takes the lock is heard.
  if (!notifier_.joinable()) {
    notifier_ = std::thread([this, from = release_epoch_] { NotifierLoop(from); });
  }
  return id;
}

void MemoryGovernor::RemoveReleaseListener(uint64_t id) {
  MutexLock lock(mutex_);
  release_listeners_.erase(id);
  lock.Wait(listener_done_, [&] {
    mutex_.AssertHeld();
    return calling_listener_ != id;
  });
}

void MemoryGovernor::NotifierLoop(uint64_t seen) {
  MutexLock lock(mutex_);
  while (true) {
    lock.Wait(memory_freed_, [&] {
      mutex_.AssertHeld();
      return notifier_stop_ || release_epoch_ != seen;
    });
    if (notifier_stop_) return;
    seen = release_epoch_;
    // A copy: a listener removed while another is being called is skipped.
    const auto listeners = release_listeners_;
    for (const auto& [id, listener] : listeners) {
      if (!release_listeners_.contains(id)) continue;
      calling_listener_ = id;
      lock.Unlock();
      (*listener)();
      lock.Lock();
      calling_listener_ = 0;
      listener_done_.notify_all();
    }
  }
}

uint64_t MemoryGovernor::LimitLocked() const {
  return pending_budget_ ? std::min(budget_bytes_, *pending_budget_) : budget_bytes_;
}

void MemoryGovernor::ApplyPendingBudgetLocked() {
  if (!pending_budget_ || committed_bytes_ > *pending_budget_) return;
  if (PhysicalLocked() > *pending_budget_) pool_->Trim();
  if (PhysicalLocked() > *pending_budget_) return;
  spdlog::info("memory: {} budget lowered to {}", device_->name(), FormatBytes(*pending_budget_));
  budget_bytes_ = *pending_budget_;
  pending_budget_.reset();
}

uint64_t MemoryGovernor::budget_bytes() const {
  MutexLock lock(mutex_);
  return budget_bytes_;
}

std::optional<uint64_t> MemoryGovernor::pending_budget() const {
  MutexLock lock(mutex_);
  return pending_budget_;
}

void MemoryGovernor::SetBudgetShortHandler(std::function<bool(uint64_t, int)> handler) {
  MutexLock lock(mutex_);
  budget_short_handler_ = std::move(handler);
}

Status MemoryGovernor::SetBudget(uint64_t bytes) {
  Reclaim reclaim;
  {
    MutexLock lock(mutex_);
    ++budget_answers_;
    memory_freed_.notify_all();  // a grower waiting for this answer looks again
    const uint64_t capacity = device_->TotalBytes();
    const uint64_t most = capacity > options_.reserve_bytes ? capacity - options_.reserve_bytes : 0;
    if (bytes > most) {
      return InvalidArgumentError("a budget of " + FormatBytes(bytes) + " is more than " +
                                  device_->name() + " has (" + FormatBytes(most) +
                                  " after the reserve)");
    }
    if (bytes >= budget_bytes_) {  // also replaces a lowering still pending
      // Only more room is a release: a worker waiting for memory that hears the same budget
      // back must not wake and ask again in a loop.
      const bool more = bytes > LimitLocked();
      budget_bytes_ = bytes;
      pending_budget_.reset();
      if (more) SignalReleaseLocked();  // growers waiting for room may have it now
      return Status::Ok();
    }
    // Shrinks already asked for count toward the lowering.
    uint64_t incoming = 0;
    for (const auto& [id, lease] : leases_) {
      if (lease->request && !lease->unresponsive) {
        incoming += (lease->chunks - std::min(lease->chunks, lease->request->target_chunks)) *
                    lease->chunk_bytes;
      }
    }
    const uint64_t expected = committed_bytes_ - std::min(committed_bytes_, incoming);
    if (expected > bytes) {
      OwnerState budget;  // the requester: outranks every owner, as the supervisor decided
      budget.spec.name = "the budget";
      budget.spec.priority = std::numeric_limits<int>::max();
      if (!PlanReclaimLocked(budget, expected - bytes, std::numeric_limits<int>::max(), 0,
                             &reclaim)) {
        return FailedPreconditionError("cannot lower the " + device_->name() + " budget to " +
                                       FormatBytes(bytes) + ": " + FormatBytes(committed_bytes_) +
                                       " is committed and the leases cannot give back " +
                                       FormatBytes(expected - bytes) + " more");
      }
    }
    pending_budget_ = bytes;
    ApplyPendingBudgetLocked();
  }
  for (auto& [handler, request] : reclaim.calls) handler(request);
  return Status::Ok();
}

uint64_t MemoryGovernor::PhysicalLocked() const {
  return pool_->reserved_bytes() + arena_bytes_ + external_bytes_;
}

MemoryError MemoryGovernor::ErrorLocked(MemoryErrorKind kind, const OwnerState& o,
                                        uint64_t requested, std::string detail) const {
  MemoryError error;
  error.kind = kind;
  error.owner = o.spec.name;
  error.requested_bytes = requested;
  error.used_bytes = o.charged;
  error.quota_bytes = o.spec.max_bytes;
  error.free_bytes = std::min(HeadroomLocked(o), o.spec.max_bytes - o.charged);
  error.budget_bytes = LimitLocked();
  error.detail = std::move(detail);
  return error;
}

void MemoryGovernor::Charge(OwnerState& o, uint64_t bytes) {
  const uint64_t before = Committed(o);
  o.charged += bytes;
  o.peak = std::max(o.peak, o.charged);
  committed_bytes_ += Committed(o) - before;
  allocated_bytes_ += bytes;
  peak_allocated_bytes_ = std::max(peak_allocated_bytes_, allocated_bytes_);
  peak_reserved_bytes_ = std::max(peak_reserved_bytes_, PhysicalLocked());
  ++o.alloc_count;
  ++alloc_count_;
}

void MemoryGovernor::Uncharge(OwnerState& o, uint64_t bytes) {
  PIER_CHECK(o.charged >= bytes, "uncharging more than owner '" + o.spec.name + "' holds");
  const uint64_t before = Committed(o);
  o.charged -= bytes;
  committed_bytes_ -= before - Committed(o);
  allocated_bytes_ -= bytes;
}

Result<OwnerId> MemoryGovernor::AddOwner(OwnerSpec spec) {
  if (spec.name.empty()) return InvalidArgumentError("a memory owner needs a name");
  if (spec.max_bytes == 0) {
    return InvalidArgumentError("owner '" + spec.name + "': a maximum of 0 bytes");
  }
  if (spec.guaranteed_bytes > spec.max_bytes) {
    return InvalidArgumentError("owner '" + spec.name + "': guaranteed " +
                                FormatBytes(spec.guaranteed_bytes) + " is more than its maximum " +
                                FormatBytes(spec.max_bytes));
  }
  MutexLock lock(mutex_);
  uint64_t guaranteed = 0;
  for (const auto& [id, o] : owners_) {
    if (o->spec.name == spec.name) {
      return InvalidArgumentError("memory owner '" + spec.name + "' already exists");
    }
    guaranteed += o->spec.guaranteed_bytes;
  }
  // Guarantees must fit together; and the new one must fit beside what others hold now.
  const uint64_t committed_after = committed_bytes_ + spec.guaranteed_bytes;
  if (guaranteed + spec.guaranteed_bytes > LimitLocked() || committed_after > LimitLocked()) {
    return InvalidArgumentError(
        "owner '" + spec.name + "': guaranteed " + FormatBytes(spec.guaranteed_bytes) +
        " does not fit: " + FormatBytes(std::max(guaranteed, committed_bytes_)) + " of the " +
        FormatBytes(LimitLocked()) + " budget is already guaranteed or in use");
  }
  auto state = std::make_unique<OwnerState>();
  state->id = OwnerId{next_owner_++};
  state->spec = std::move(spec);
  committed_bytes_ += Committed(*state);
  OwnerId id = state->id;
  owners_.emplace(id, std::move(state));
  return id;
}

Status MemoryGovernor::RemoveOwner(OwnerId owner) {
  MutexLock lock(mutex_);
  OwnerState* o = FindLocked(owner);
  if (o == nullptr) return NotFoundError("no memory owner #" + std::to_string(owner.value));
  if (o->charged != 0 || o->leases != 0 || o->reservations != 0) {
    return FailedPreconditionError("owner '" + o->spec.name + "' still holds " +
                                   FormatBytes(o->charged) + " (" + std::to_string(o->blocks) +
                                   " blocks, " + std::to_string(o->leases) + " leases)");
  }
  committed_bytes_ -= Committed(*o);
  owners_.erase(owner);
  ApplyPendingBudgetLocked();
  return Status::Ok();
}

Result<OwnerId> MemoryGovernor::FindOwner(const std::string& name) const {
  MutexLock lock(mutex_);
  for (const auto& [id, o] : owners_) {
    if (o->spec.name == name) return id;
  }
  return NotFoundError("no memory owner named '" + name + "'");
}

MemoryStatus MemoryGovernor::CheckChargeLocked(const OwnerState& o, uint64_t bytes) const {
  if (bytes > o.spec.max_bytes - o.charged) {
    return ErrorLocked(MemoryErrorKind::kOwnerQuota, o, bytes);
  }
  if (bytes > HeadroomLocked(o)) return ErrorLocked(MemoryErrorKind::kBudget, o, bytes);
  return MemoryOk{};
}

MemoryStatus MemoryGovernor::CanCharge(OwnerId owner, uint64_t bytes) const {
  MutexLock lock(mutex_);
  const OwnerState* o = FindLocked(owner);
  if (o == nullptr) return UnknownOwner(owner, bytes);
  return CheckChargeLocked(*o, bytes);
}

MemoryResult<Block> MemoryGovernor::Allocate(OwnerId owner, size_t bytes, AllocateOptions options) {
  MutexLock lock(mutex_);
  OwnerState* o = FindLocked(owner);
  if (o == nullptr) return UnknownOwner(owner, bytes);
  if (bytes == 0 || bytes > kMaxByteSize) {
    ++o->failure_count;
    ++failure_count_;
    return ErrorLocked(MemoryErrorKind::kInvalidRequest, *o, bytes,
                       bytes == 0 ? "a size of 0 bytes" : "an absurd size");
  }
  const uint64_t charged = pool_->RoundedBytes(bytes);
  MemoryStatus admitted =
      AdmitLocked(lock, owner, charged, options.wait_for_reclaim, options.timeout, 0);
  o = FindLocked(owner);
  if (o == nullptr) return UnknownOwner(owner, bytes);
  if (!admitted.ok()) {
    ++o->failure_count;
    ++failure_count_;
    MemoryError error = admitted.error();
    error.requested_bytes = bytes;  // as the caller asked, not rounded
    return error;
  }
  Result<AllocatedBlock> block = pool_->Allocate(bytes, options.stream, owner.value);
  if (!block.ok()) {
    ++o->failure_count;
    ++failure_count_;
    return ErrorLocked(MemoryErrorKind::kDeviceOutOfMemory, *o, bytes, block.status().message());
  }
  Charge(*o, charged);
  o->block_bytes += charged;
  ++o->blocks;
  return Block(this, block->ptr, bytes, charged, owner);
}

Status MemoryGovernor::FreeAddress(void* ptr) {
  MutexLock lock(mutex_);
  Result<FreedBlock> freed = pool_->Free(ptr);
  if (!freed.ok()) return freed.status();
  OwnerState* o = FindLocked(OwnerId{freed->tag});
  PIER_CHECK(o != nullptr, "a live block belongs to a removed owner");
  const uint64_t charged = pool_->RoundedBytes(freed->requested);
  Uncharge(*o, charged);
  o->block_bytes -= charged;
  --o->blocks;
  ApplyPendingBudgetLocked();
  SignalReleaseLocked();
  return Status::Ok();
}

MemoryResult<Reservation> MemoryGovernor::Reserve(OwnerId owner, uint64_t bytes) {
  MutexLock lock(mutex_);
  OwnerState* o = FindLocked(owner);
  if (o == nullptr) return UnknownOwner(owner, bytes);
  if (bytes == 0 || bytes > kMaxByteSize) {
    return ErrorLocked(MemoryErrorKind::kInvalidRequest, *o, bytes, "reservation size");
  }
  const uint64_t base = std::max(o->charged, o->floor);
  if (bytes > o->spec.max_bytes || base > o->spec.max_bytes - bytes) {
    ++o->failure_count;
    ++failure_count_;
    return ErrorLocked(MemoryErrorKind::kOwnerQuota, *o, bytes);
  }
  const uint64_t new_floor = base + bytes;
  const uint64_t before = Committed(*o);
  const uint64_t after = std::max({o->charged, o->spec.guaranteed_bytes, new_floor});
  if (committed_bytes_ - before + after > LimitLocked()) {
    ++o->failure_count;
    ++failure_count_;
    return ErrorLocked(MemoryErrorKind::kBudget, *o, bytes,
                       "reservation; " + FormatBytes(committed_bytes_) +
                           " of the budget is "
                           "committed to owners");
  }
  const uint64_t delta = new_floor - o->floor;
  o->floor = new_floor;
  committed_bytes_ += after - before;
  ++o->reservations;
  return Reservation(this, owner, bytes, delta);
}

void MemoryGovernor::ReleaseReservation(OwnerId owner, uint64_t floor_delta) {
  MutexLock lock(mutex_);
  OwnerState* o = FindLocked(owner);
  PIER_CHECK(o != nullptr, "a Reservation outlived its owner");
  const uint64_t before = Committed(*o);
  o->floor -= std::min(o->floor, floor_delta);
  committed_bytes_ -= before - Committed(*o);
  --o->reservations;
  ApplyPendingBudgetLocked();
  SignalReleaseLocked();
}

MemoryResult<ExternalCharge> MemoryGovernor::ChargeExternal(OwnerId owner, uint64_t bytes) {
  MutexLock lock(mutex_);
  OwnerState* o = FindLocked(owner);
  if (o == nullptr) return UnknownOwner(owner, bytes);
  if (bytes == 0 || bytes > kMaxByteSize) {
    return ErrorLocked(MemoryErrorKind::kInvalidRequest, *o, bytes, "external charge size");
  }
  MemoryStatus admitted = AdmitLocked(lock, owner, bytes, false, {}, 0);
  o = FindLocked(owner);
  if (o == nullptr) return UnknownOwner(owner, bytes);
  if (admitted.ok() && PhysicalLocked() + bytes > LimitLocked()) pool_->Trim();
  if (admitted.ok() && PhysicalLocked() + bytes > LimitLocked()) {
    admitted = ErrorLocked(MemoryErrorKind::kDeviceOutOfMemory, *o, bytes,
                           "the pool's segments leave too little of the budget");
  }
  if (!admitted.ok()) {
    ++o->failure_count;
    ++failure_count_;
    return admitted.error();
  }
  external_bytes_ += bytes;
  Charge(*o, bytes);
  o->external_bytes += bytes;
  ++o->externals;
  return ExternalCharge(this, owner, bytes);
}

void MemoryGovernor::ReleaseExternal(OwnerId owner, uint64_t bytes) {
  MutexLock lock(mutex_);
  OwnerState* o = FindLocked(owner);
  PIER_CHECK(o != nullptr, "an ExternalCharge outlived its owner");
  Uncharge(*o, bytes);
  o->external_bytes -= bytes;
  --o->externals;
  external_bytes_ -= bytes;
  ApplyPendingBudgetLocked();
  SignalReleaseLocked();
}

size_t MemoryGovernor::Trim() {
  MutexLock lock(mutex_);
  const size_t trimmed = pool_->Trim();
  ApplyPendingBudgetLocked();
  return trimmed;
}

GovernorStats MemoryGovernor::Stats() const {
  MutexLock lock(mutex_);
  GovernorStats stats;
  stats.device = device_->name();
  stats.capacity_bytes = device_->TotalBytes();
  stats.budget_bytes = budget_bytes_;
  stats.reserve_bytes = options_.reserve_bytes;
  stats.committed_bytes = committed_bytes_;
  stats.reserved_bytes = PhysicalLocked();
  stats.peak_reserved_bytes = std::max(peak_reserved_bytes_, stats.reserved_bytes);
  stats.allocated_bytes = allocated_bytes_;
  stats.active_bytes = allocated_bytes_ + pool_->pending_bytes();
  stats.peak_allocated_bytes = peak_allocated_bytes_;
  stats.arena_bytes = arena_bytes_;
  stats.external_bytes = external_bytes_;
  stats.pool = pool_->Stats();
  stats.alloc_count = alloc_count_;
  stats.failure_count = failure_count_;
  stats.shrink_requests = shrink_requests_;
  stats.deadline_misses = deadline_misses_;
  stats.waiting_allocations = waiting_allocations_;
  stats.releases = release_epoch_;
  stats.pending_budget_bytes = pending_budget_;
  for (const auto& [lid, lease] : leases_) {
    stats.leases.push_back({.name = lease->name,
                            .owner = lease->owner,
                            .chunk_bytes = lease->chunk_bytes,
                            .chunks = lease->chunks,
                            .min_chunks = lease->min_chunks,
                            .max_chunks = lease->max_chunks,
                            .idle = lease->idle,
                            .urgency = lease->urgency,
                            .shrink_pending = lease->request.has_value(),
                            .unresponsive = lease->unresponsive,
                            .waiting_for_memory = lease->waiting_for_memory,
                            .waiting_only = lease->waiting_only});
    if (lease->waiting_for_memory) ++stats.waiting_allocations;
  }
  for (const auto& [id, o] : owners_) {
    OwnerStats s;
    s.id = id;
    s.name = o->spec.name;
    s.priority = o->spec.priority;
    s.guaranteed_bytes = o->spec.guaranteed_bytes;
    s.max_bytes = o->spec.max_bytes;
    s.allocated_bytes = o->charged;
    s.reserved_bytes = o->floor;
    s.committed_bytes = Committed(*o);
    s.peak_allocated_bytes = o->peak;
    s.block_bytes = o->block_bytes;
    s.external_bytes = o->external_bytes;
    s.lease_bytes = o->lease_bytes;
    s.blocks = o->blocks;
    s.leases = o->leases;
    s.alloc_count = o->alloc_count;
    s.failure_count = o->failure_count;
    s.deadline_misses = o->deadline_misses;
    for (const auto& [lid, lease] : leases_) {
      if (lease->owner == id && lease->unresponsive) s.unresponsive = true;
    }
    stats.owners.push_back(std::move(s));
  }
  return stats;
}

Result<OwnerStats> MemoryGovernor::StatsFor(OwnerId owner) const {
  GovernorStats stats = Stats();
  for (OwnerStats& s : stats.owners) {
    if (s.id == owner) return std::move(s);
  }
  return NotFoundError("no memory owner #" + std::to_string(owner.value));
}

nlohmann::json MemoryGovernor::Snapshot() const {
  GovernorStats stats = Stats();
  nlohmann::json owners = nlohmann::json::array();
  for (const OwnerStats& s : stats.owners) {
    owners.push_back({{"id", s.id.value},
                      {"name", s.name},
                      {"priority", s.priority},
                      {"guaranteed_bytes", s.guaranteed_bytes},
                      {"max_bytes", s.max_bytes},
                      {"allocated_bytes", s.allocated_bytes},
                      {"reserved_bytes", s.reserved_bytes},
                      {"committed_bytes", s.committed_bytes},
                      {"peak_allocated_bytes", s.peak_allocated_bytes},
                      {"block_bytes", s.block_bytes},
                      {"external_bytes", s.external_bytes},
                      {"lease_bytes", s.lease_bytes},
                      {"blocks", s.blocks},
                      {"alloc_count", s.alloc_count},
                      {"failure_count", s.failure_count},
                      {"deadline_misses", s.deadline_misses},
                      {"unresponsive", s.unresponsive}});
  }
  MutexLock lock(mutex_);
  nlohmann::json leases = nlohmann::json::array();
  for (const auto& [id, l] : leases_) {
    nlohmann::json lease = {{"id", id},
                            {"name", l->name},
                            {"owner", l->owner.value},
                            {"chunk_bytes", l->chunk_bytes},
                            {"chunks", l->chunks},
                            {"max_chunks", l->max_chunks},
                            {"min_chunks", l->min_chunks},
                            {"contiguous", l->contiguous},
                            {"accounting_only", l->accounting_only},
                            {"idle", l->idle},
                            {"urgency", l->urgency},
                            {"unresponsive", l->unresponsive}};
    if (l->request) {
      lease["pending_shrink"] = {{"id", l->request->id},
                                 {"chunks", l->request->chunks},
                                 {"requester", l->request->requester}};
    }
    leases.push_back(std::move(lease));
  }
  const AllocatorStats& pool = stats.pool;
  return {{"device", stats.device},
          {"capacity_bytes", stats.capacity_bytes},
          {"budget_bytes", stats.budget_bytes},
          {"pending_budget_bytes", stats.pending_budget_bytes
                                       ? nlohmann::json(*stats.pending_budget_bytes)
                                       : nlohmann::json(nullptr)},
          {"reserve_bytes", stats.reserve_bytes},
          {"committed_bytes", stats.committed_bytes},
          {"reserved_bytes", stats.reserved_bytes},
          {"peak_reserved_bytes", stats.peak_reserved_bytes},
          {"allocated_bytes", stats.allocated_bytes},
          {"active_bytes", stats.active_bytes},
          {"peak_allocated_bytes", stats.peak_allocated_bytes},
          {"arena_bytes", stats.arena_bytes},
          {"external_bytes", stats.external_bytes},
          {"alloc_count", stats.alloc_count},
          {"failure_count", stats.failure_count},
          {"shrink_requests", stats.shrink_requests},
          {"deadline_misses", stats.deadline_misses},
          {"pool",
           {{"reserved_bytes", pool.reserved_bytes},
            {"allocated_bytes", pool.allocated_bytes},
            {"largest_free_block_bytes", pool.largest_free_block_bytes},
            {"external_fragmentation", pool.external_fragmentation},
            {"segment_count", pool.segments},
            {"segments", pool_->Snapshot()["segments"]}}},
          {"owners", std::move(owners)},
          {"leases", std::move(leases)}};
}

Status MemoryGovernor::CheckInvariants() const {
  MutexLock lock(mutex_);
  PIER_RETURN_IF_ERROR(pool_->CheckInvariants());
  uint64_t charged = 0, committed = 0, block_bytes = 0, lease_bytes = 0;
  for (const auto& [id, o] : owners_) {
    if (o->charged > o->spec.max_bytes) {
      return InternalError("owner '" + o->spec.name + "' is over its maximum");
    }
    if (o->charged != o->block_bytes + o->external_bytes + o->lease_bytes) {
      return InternalError("owner '" + o->spec.name + "' charge does not add up");
    }
    charged += o->charged;
    committed += Committed(*o);
    block_bytes += o->block_bytes;
    lease_bytes += o->lease_bytes;
  }
  if (charged != allocated_bytes_) return InternalError("owner charges != allocated bytes");
  if (committed != committed_bytes_) return InternalError("owner commitments != committed");
  if (committed_bytes_ > budget_bytes_) return InternalError("committed over the budget");
  if (PhysicalLocked() > budget_bytes_) return InternalError("device memory over the budget");
  uint64_t lease_block_bytes = 0;
  for (const auto& [id, l] : leases_) {
    if (!l->contiguous)
      lease_block_bytes += l->chunk_blocks.size() * pool_->RoundedBytes(l->chunk_bytes);
  }
  if (block_bytes + lease_block_bytes != pool_->charged_bytes()) {
    return InternalError("owner block bytes != pool allocated bytes");
  }
  return Status::Ok();
}

}  // namespace pier

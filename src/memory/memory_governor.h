// MemoryGovernor: one per device; every byte Pier places on the device is charged through it.
//
// The governor holds the device's budget (a byte limit or a percentage of its capacity,
// minus a reserve kept free for the unexpected), the owners that may use it (a model's
// weights, its workspace, its KV cache; later tenants) with their quotas (a guaranteed
// minimum and a maximum), and a caching pool (caching_allocator.h) that carves blocks out
// of device segments. Memory reaches callers in four shapes, each an RAII handle that gives
// it back when destroyed:
//   - Block: pool memory for a weight tensor or a workspace buffer (Allocate);
//   - Reservation: admission, bytes set aside for an owner before it loads or grows (Reserve);
//   - ExternalCharge: memory the governor does not hand out but must count, such as a
//     memory-mapped weight file used in place (ChargeExternal);
//   - Lease: an elastic KV arena that grows and shrinks in chunks (lease.h).
//
// Accounting. An owner is "charged" for its blocks (rounded sizes), external charges and
// lease chunks. It "commits" max(charged, guaranteed minimum, reservations) of the budget;
// the sum of commitments never exceeds the budget, so a guarantee is always honoured and a
// reservation cannot be taken by someone else. Separately, the bytes physically held from
// the device (pool segments + mapped arena chunks + external charges) never exceed the
// budget either: when the cache would push past it, cached segments are trimmed first.
// A refusal is a MemoryError with owner, requested, used, quota and free bytes.
//
// Reclaim. When an owner cannot grow within the budget, the governor asks leases of other
// owners to shrink: idle leases first, then leases of owners with a lower priority than the
// requester (lowest first), never below a lease's minimum or its owner's guarantee. The ask
// is asynchronous (a ShrinkRequest with a deadline delivered to the lease's handler); an
// owner that misses the deadline is marked unresponsive, may not grow until it complies, and
// the miss is counted and logged. The grower is refused at once (kReclaimPending) unless it
// asked to wait; a waiting grower is refused (kReclaimTimedOut) when a deadline passes.
//
// Lifetime: the governor must outlive every handle it gave out (a PIER_CHECK enforces it
// when it is destroyed). It does not own the Device.
//
// Thread-safety: every public method may be called from any thread. One mutex (`mutex_`)
// guards all state: the pool, the owners, the leases and the counters. Shrink handlers are
// called without the mutex held, on the thread of the grower that triggered them.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "device/device.h"
#include "memory/byte_size.h"
#include "memory/caching_allocator.h"
#include "memory/memory_error.h"

namespace pier {

class MemoryGovernor;
class Lease;
struct LeaseOptions;

struct OwnerId {
  uint32_t value = 0;  // 0 = none
  friend bool operator==(OwnerId, OwnerId) = default;
  friend auto operator<=>(OwnerId, OwnerId) = default;
};

struct OwnerSpec {
  std::string name;               // unique per governor, e.g. "smollm2/kv"
  uint64_t guaranteed_bytes = 0;  // always available to this owner
  uint64_t max_bytes = std::numeric_limits<uint64_t>::max();  // never exceeded
  int priority = 0;  // higher keeps its memory longer under reclaim
};

struct GovernorOptions {
  BudgetSpec budget = BudgetSpec::Percent(100);
  uint64_t reserve_bytes = 0;  // subtracted from the budget, never handed out
  CachingAllocatorOptions pool;
  std::chrono::milliseconds shrink_deadline{2000};  // given to owners asked to shrink
};

struct AllocateOptions {
  Stream stream;  // the stream the block is first used on
  bool wait_for_reclaim = false;
  std::chrono::milliseconds timeout{5000};  // when waiting
};

// Pool memory charged to an owner. Move-only; frees itself when destroyed or Reset().
//   data(): [size()] bytes, 256-byte aligned, on the governor's device.
class Block {
 public:
  Block() = default;
  ~Block() { Reset(); }
  Block(Block&& other) noexcept { *this = std::move(other); }
  Block& operator=(Block&& other) noexcept;
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;

  explicit operator bool() const { return ptr_ != nullptr; }
  void* data() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t size() const { return size_; }              // as requested
  size_t charged_bytes() const { return charged_; }  // rounded, what the owner pays
  OwnerId owner() const { return owner_; }
  // Marks the block as used on `stream` too: when freed it is not reused before that work.
  [[nodiscard]] Status RecordStream(Stream stream);
  // Returns the memory now (no-op on an empty block).
  void Reset();

 private:
  friend class MemoryGovernor;
  Block(MemoryGovernor* governor, void* ptr, size_t size, size_t charged, OwnerId owner)
      : governor_(governor), ptr_(ptr), size_(size), charged_(charged), owner_(owner) {}
  MemoryGovernor* governor_ = nullptr;  // not owned; outlives the block
  void* ptr_ = nullptr;
  size_t size_ = 0;
  size_t charged_ = 0;
  OwnerId owner_;
};

// Budget set aside for an owner (admission). Move-only; released when destroyed.
class Reservation {
 public:
  Reservation() = default;
  ~Reservation() { Release(); }
  Reservation(Reservation&& other) noexcept { *this = std::move(other); }
  Reservation& operator=(Reservation&& other) noexcept;
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;

  uint64_t bytes() const { return bytes_; }
  OwnerId owner() const { return owner_; }
  void Release();

 private:
  friend class MemoryGovernor;
  Reservation(MemoryGovernor* governor, OwnerId owner, uint64_t bytes, uint64_t floor_delta)
      : governor_(governor), owner_(owner), bytes_(bytes), floor_delta_(floor_delta) {}
  MemoryGovernor* governor_ = nullptr;
  OwnerId owner_;
  uint64_t bytes_ = 0;
  uint64_t floor_delta_ = 0;  // what this reservation added to the owner's floor
};

// Bytes counted against an owner and the budget for memory the governor did not allocate
// (a weight file mapped and used in place). Move-only; uncharged when destroyed.
class ExternalCharge {
 public:
  ExternalCharge() = default;
  ~ExternalCharge() { Release(); }
  ExternalCharge(ExternalCharge&& other) noexcept { *this = std::move(other); }
  ExternalCharge& operator=(ExternalCharge&& other) noexcept;
  ExternalCharge(const ExternalCharge&) = delete;
  ExternalCharge& operator=(const ExternalCharge&) = delete;

  uint64_t bytes() const { return bytes_; }
  OwnerId owner() const { return owner_; }
  void Release();

 private:
  friend class MemoryGovernor;
  ExternalCharge(MemoryGovernor* governor, OwnerId owner, uint64_t bytes)
      : governor_(governor), owner_(owner), bytes_(bytes) {}
  MemoryGovernor* governor_ = nullptr;
  OwnerId owner_;
  uint64_t bytes_ = 0;
};

struct OwnerStats {
  OwnerId id;
  std::string name;
  int priority = 0;
  uint64_t guaranteed_bytes = 0;
  uint64_t max_bytes = 0;
  uint64_t allocated_bytes = 0;  // charged: blocks + external + lease chunks
  uint64_t reserved_bytes = 0;   // outstanding reservations (floor)
  uint64_t committed_bytes = 0;  // max(allocated, guaranteed, reserved): its share of the budget
  uint64_t peak_allocated_bytes = 0;
  uint64_t block_bytes = 0;
  uint64_t external_bytes = 0;
  uint64_t lease_bytes = 0;
  size_t blocks = 0;
  size_t leases = 0;
  uint64_t alloc_count = 0;
  uint64_t failure_count = 0;
  uint64_t deadline_misses = 0;
  bool unresponsive = false;
};

struct LeaseStats {
  std::string name;
  OwnerId owner;
  size_t chunk_bytes = 0;
  size_t chunks = 0;
  size_t min_chunks = 0;
  size_t max_chunks = 0;
  bool idle = false;
  int urgency = 0;
  bool shrink_pending = false;
  bool unresponsive = false;
  bool waiting_for_memory = false;  // Lease::SetWaitingForMemory
  bool waiting_only = false;        // Lease::SetWaitingOnly
};

struct GovernorStats {
  std::string device;
  uint64_t capacity_bytes = 0;
  uint64_t budget_bytes = 0;  // after the reserve
  uint64_t reserve_bytes = 0;
  uint64_t committed_bytes = 0;
  uint64_t reserved_bytes = 0;  // physically held: pool segments + arena chunks + external
  uint64_t peak_reserved_bytes = 0;
  uint64_t allocated_bytes = 0;  // charged to owners
  uint64_t active_bytes = 0;     // allocated + pool blocks waiting on other streams
  uint64_t peak_allocated_bytes = 0;
  uint64_t arena_bytes = 0;  // mapped lease chunks
  uint64_t external_bytes = 0;
  AllocatorStats pool;  // segments, largest free block, fragmentation, counts
  uint64_t alloc_count = 0;
  uint64_t failure_count = 0;
  uint64_t shrink_requests = 0;
  uint64_t deadline_misses = 0;
  // Allocations (and lease growths) short of budget right now, waiting on a reclaim, and
  // leases whose owner waits for memory to be given back (Lease::SetWaitingForMemory): with
  // used / capacity, the memory pressure index (pier_memory_pressure_index).
  uint64_t waiting_allocations = 0;
  uint64_t releases = 0;                         // memory given back so far (release_epoch)
  std::optional<uint64_t> pending_budget_bytes;  // a lowering on its way (SetBudget)
  std::vector<OwnerStats> owners;
  std::vector<LeaseStats> leases;
};

class MemoryGovernor {
 public:
  // kInvalidArgument for a budget larger than the device, or a reserve that leaves nothing.
  [[nodiscard]] static Result<std::unique_ptr<MemoryGovernor>> Create(Device* device,
                                                                      GovernorOptions options = {});
  ~MemoryGovernor();
  MemoryGovernor(const MemoryGovernor&) = delete;
  MemoryGovernor& operator=(const MemoryGovernor&) = delete;

  Device& device() const { return *device_; }
  // The budget now, after the reserve (SetBudget changes it).
  uint64_t budget_bytes() const;
  // The budget as it was given (bytes or a percentage of the capacity), for messages.
  const BudgetSpec& budget_spec() const { return options_.budget; }

  // Registers an owner. kInvalidArgument for an empty or duplicate name, a guarantee above
  // the maximum, or guarantees that together exceed the budget.
  [[nodiscard]] Result<OwnerId> AddOwner(OwnerSpec spec);
  // kFailedPrecondition while it holds blocks, leases, charges or reservations.
  [[nodiscard]] Status RemoveOwner(OwnerId owner);
  [[nodiscard]] Result<OwnerId> FindOwner(const std::string& name) const;

  // Pool memory of `bytes` charged to `owner`.
  [[nodiscard]] MemoryResult<Block> Allocate(OwnerId owner, size_t bytes,
                                             AllocateOptions options = {});
  // Sets `bytes` aside for the owner: its later allocations up to that amount cannot be
  // refused for budget reasons while the Reservation lives. Refuses (with the numbers) what
  // would not fit, before anything is allocated.
  [[nodiscard]] MemoryResult<Reservation> Reserve(OwnerId owner, uint64_t bytes);
  // Would `bytes` more fit for `owner` now? No state changes.
  [[nodiscard]] MemoryStatus CanCharge(OwnerId owner, uint64_t bytes) const;
  // Makes room for `bytes` more to be committed to `owner` (a model about to reserve its
  // weights): when the budget's free bytes are short, other owners' leases are asked to give
  // back what reclaim_policy.h lets `owner` take (chunks lent beyond their minimum, idle leases
  // first) and this waits up to `timeout` for them to shrink. Reserves nothing: the caller's
  // Reserve follows, and is refused if a lease grew back meanwhile. kBudget at once when
  // reclaim cannot make enough room; kReclaimTimedOut when a lease did not shrink in time.
  [[nodiscard]] MemoryStatus MakeRoom(OwnerId owner, uint64_t bytes,
                                      std::chrono::milliseconds timeout);
  [[nodiscard]] MemoryResult<ExternalCharge> ChargeExternal(OwnerId owner, uint64_t bytes);
  // An elastic arena for `owner` (see lease.h); it starts with options.initial_chunks.
  [[nodiscard]] MemoryResult<std::unique_ptr<Lease>> CreateLease(OwnerId owner,
                                                                 const LeaseOptions& options);

  // Frees a block by address. Block handles call this; it is public so that misuse can be
  // tested: kInvalidArgument for a foreign pointer, kFailedPrecondition for a double free,
  // and the pool is unchanged either way.
  [[nodiscard]] Status FreeAddress(void* ptr);

  // Changes the budget: a worker process's governor, as its supervisor grants it more or asks
  // some back. Raising applies at once. Lowering applies at once when what is committed and
  // held fits; otherwise leases are asked to shrink (requester "the budget", in the reclaim
  // order, by the shrink deadline), growth beyond the new budget is refused meanwhile, and the
  // budget drops once they have shrunk (and the device memory held fits: with pool-block
  // leases a half-used segment can hold a lowering up; virtual-memory arenas, which the CPU
  // and CUDA devices have, unmap exactly). A later call replaces a lowering still pending.
  // kInvalidArgument above the device's capacity less the reserve; kFailedPrecondition (and
  // the budget unchanged) when the leases cannot give back enough.
  [[nodiscard]] Status SetBudget(uint64_t bytes);
  // The budget a lowering is on its way to, if one is pending.
  std::optional<uint64_t> pending_budget() const;
  // Called (without locks held) when a lease cannot grow within the budget and nothing here
  // can be reclaimed for it: a worker asks its supervisor for `bytes` more budget for work of
  // `urgency`; it returns whether it asked (a question may already be on its way). When it
  // did, the grower waits up to 200 ms for the next SetBudget (the answer) and looks again;
  // still short, it is refused with kReclaimPending (and retries later).
  void SetBudgetShortHandler(std::function<bool(uint64_t bytes, int urgency)> handler);

  // What `owner` could hold in all (charged bytes) if every other owner gave back all that
  // reclaim can take from it: each of their leases down to its minimum chunks, no owner below
  // its guarantee or reservations; capped by the owner's own maximum and the budget (or a
  // lowering on its way). Work that needs more than this can never run under this budget and
  // is refused instead of waiting (Lease::AttainableChunks).
  uint64_t AttainableBytes(OwnerId owner) const;

  // Memory given back (a free, a shrink, a released reservation or charge, a raised budget, a
  // missed shrink deadline) or made reclaimable by anyone (a lease turning idle) bumps
  // release_epoch(); listeners hear of it on the governor's
  // notifier thread (started with the first listener), without its lock, so that an owner
  // waiting for room (an engine whose KV lease could not grow) is woken by a release instead
  // of polling. Several releases may reach a listener as one call. A listener must not block
  // or add or remove listeners. RemoveReleaseListener waits for a call in progress to end, so
  // the listener's captures may be destroyed once it returns.
  uint64_t AddReleaseListener(std::function<void()> listener);
  void RemoveReleaseListener(uint64_t id);
  uint64_t release_epoch() const;

  // Returns cached free segments to the device; the bytes returned.
  size_t Trim();
  // Marks owners past a shrink deadline unresponsive (also done on every lease call).
  void CheckDeadlines();

  GovernorStats Stats() const;
  [[nodiscard]] Result<OwnerStats> StatsFor(OwnerId owner) const;
  // {"device", "budget", ..., "owners": [...], "leases": [...], "pool": {"segments": [...]}}
  nlohmann::json Snapshot() const;
  // Pool invariants plus owner sums (tests). O(blocks).
  [[nodiscard]] Status CheckInvariants() const;

 private:
  friend class Block;
  friend class Reservation;
  friend class ExternalCharge;
  friend class Lease;
  class Backend;
  struct OwnerState;
  struct LeaseState;
  struct Reclaim;

  MemoryGovernor(Device* device, GovernorOptions options, uint64_t budget_bytes);

  OwnerState* FindLocked(OwnerId owner) PIER_REQUIRES(mutex_);
  const OwnerState* FindLocked(OwnerId owner) const PIER_REQUIRES(mutex_);
  static uint64_t Committed(const OwnerState& o);
  uint64_t HeadroomLocked(const OwnerState& o) const PIER_REQUIRES(mutex_);
  uint64_t AttainableLocked(const OwnerState& o) const PIER_REQUIRES(mutex_);
  // Memory was given back: release_epoch_ moves and waiters (growers, the notifier) wake.
  void SignalReleaseLocked() PIER_REQUIRES(mutex_);
  // Calls the listeners once for every change of release_epoch_ past `seen`.
  void NotifierLoop(uint64_t seen);
  // What may be committed and held now: the budget, or a lower one on its way.
  uint64_t LimitLocked() const PIER_REQUIRES(mutex_);
  // Applies a pending lowering once what is committed and held fits under it.
  void ApplyPendingBudgetLocked() PIER_REQUIRES(mutex_);
  uint64_t PhysicalLocked() const PIER_REQUIRES(mutex_);
  MemoryError ErrorLocked(MemoryErrorKind kind, const OwnerState& o, uint64_t requested,
                          std::string detail = {}) const PIER_REQUIRES(mutex_);
  // Checks quota and budget for `bytes` more; on a budget shortfall plans a reclaim.
  MemoryStatus CheckChargeLocked(const OwnerState& o, uint64_t bytes) const PIER_REQUIRES(mutex_);
  // Quota and budget check with reclaim and optional waiting. Returns with `lock` held.
  // `urgency`: of the work that needs the bytes (GrowOptions::urgency; 0 ordinary).
  MemoryStatus AdmitLocked(MutexLock& lock, OwnerId owner, uint64_t bytes, bool wait,
                           std::chrono::milliseconds timeout, uint64_t lease_id, int urgency = 0)
      PIER_REQUIRES(mutex_);
  // Plans shrink requests for `need` bytes on behalf of `requester`; false if impossible.
  bool PlanReclaimLocked(const OwnerState& requester, uint64_t need, int urgency,
                         uint64_t exclude_lease, Reclaim* reclaim) PIER_REQUIRES(mutex_);
  void CheckDeadlinesLocked() PIER_REQUIRES(mutex_);
  void Charge(OwnerState& o, uint64_t bytes) PIER_REQUIRES(mutex_);
  void Uncharge(OwnerState& o, uint64_t bytes) PIER_REQUIRES(mutex_);
  void ReleaseReservation(OwnerId owner, uint64_t floor_delta);
  void ReleaseExternal(OwnerId owner, uint64_t bytes);

  Device* const device_;
  const GovernorOptions options_;
  uint64_t budget_bytes_ PIER_GUARDED_BY(mutex_);
  std::optional<uint64_t> pending_budget_ PIER_GUARDED_BY(mutex_);
  std::function<bool(uint64_t, int)> budget_short_handler_ PIER_GUARDED_BY(mutex_);
  uint64_t budget_answers_ PIER_GUARDED_BY(mutex_) = 0;  // SetBudget calls (growers wait on it)
  std::unique_ptr<Backend> backend_;

  mutable Mutex mutex_;
  std::condition_variable memory_freed_;  // notified on every free, shrink and release
  std::unique_ptr<CachingAllocator> pool_ PIER_GUARDED_BY(mutex_);
  std::map<OwnerId, std::unique_ptr<OwnerState>> owners_ PIER_GUARDED_BY(mutex_);
  std::map<uint64_t, std::unique_ptr<LeaseState>> leases_ PIER_GUARDED_BY(mutex_);
  uint32_t next_owner_ PIER_GUARDED_BY(mutex_) = 1;
  uint64_t next_lease_ PIER_GUARDED_BY(mutex_) = 1;
  uint64_t next_request_ PIER_GUARDED_BY(mutex_) = 1;
  uint64_t committed_bytes_ PIER_GUARDED_BY(mutex_) = 0;
  uint64_t arena_bytes_ PIER_GUARDED_BY(mutex_) = 0;
  uint64_t external_bytes_ PIER_GUARDED_BY(mutex_) = 0;
  uint64_t allocated_bytes_ PIER_GUARDED_BY(mutex_) = 0;
  uint64_t peak_allocated_bytes_ PIER_GUARDED_BY(mutex_) = 0;
  uint64_t peak_reserved_bytes_ PIER_GUARDED_BY(mutex_) = 0;
  uint64_t alloc_count_ PIER_GUARDED_BY(mutex_) = 0;
  uint64_t failure_count_ PIER_GUARDED_BY(mutex_) = 0;
  uint64_t shrink_requests_ PIER_GUARDED_BY(mutex_) = 0;
  uint64_t deadline_misses_ PIER_GUARDED_BY(mutex_) = 0;
  uint64_t waiting_allocations_ PIER_GUARDED_BY(mutex_) = 0;  // inside AdmitLocked, short
  uint64_t release_epoch_ PIER_GUARDED_BY(mutex_) = 0;
  // Release listeners, called by notifier_ in id order.
  std::map<uint64_t, std::shared_ptr<std::function<void()>>> release_listeners_
      PIER_GUARDED_BY(mutex_);
  uint64_t next_listener_ PIER_GUARDED_BY(mutex_) = 1;
  uint64_t calling_listener_ PIER_GUARDED_BY(mutex_) = 0;  // the notifier is in its call
  bool notifier_stop_ PIER_GUARDED_BY(mutex_) = false;
  std::condition_variable listener_done_;
  std::thread notifier_;  // started by the first AddReleaseListener (under mutex_)
};

}  // namespace pier

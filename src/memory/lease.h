// Lease: an elastic KV arena that grows and shrinks in chunks under the memory governor.
//
// A KV cache asks its governor for a Lease, then grows it chunk by chunk as sequences need
// blocks while the budget allows, and shrinks it when they finish. Chunk i lives at
// ChunkAddress(i): with a device that supports virtual memory the chunks are one contiguous
// range starting at base() (address space for max_chunks is reserved up front and physical
// chunks are mapped into it), otherwise each chunk is a pool block. Shrink always removes the
// last chunks: the KV cache first moves or preempts whatever uses them.
//
// The governor may ask the lease to shrink so that a higher-priority owner can grow: it
// calls `on_shrink_request` with a ShrinkRequest (how many chunks, by when). The handler must
// not block; the owner is expected to call Shrink() before the deadline (from any thread,
// possibly from inside the handler). If it does not, the owner is marked unresponsive and
// Grow() is refused until it has shrunk to the requested size.
//
// Ownership: the Lease is owned by its creator (std::unique_ptr); destroying it returns every
// chunk and the address range. It must not outlive its governor.
//
// Thread-safety: all methods may be called from any thread; they take the governor's mutex.
// ChunkAddress()/base() of chunks that are mapped stay valid until they are shrunk away.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "memory/memory_error.h"
#include "memory/memory_governor.h"

namespace pier {

struct ShrinkRequest {
  uint64_t id = 0;
  size_t chunks = 0;         // how many chunks to give back (from the end)
  size_t target_chunks = 0;  // the lease's size once it complies
  std::chrono::steady_clock::time_point deadline;
  std::string requester;  // the owner that needs the memory
};

struct LeaseOptions {
  std::string name;        // for logs and snapshots, e.g. "smollm2/kv"
  size_t chunk_bytes = 0;  // rounded up to the device's VM granularity (or 256)
  size_t max_chunks = 0;   // address space reserved for this many
  size_t min_chunks = 0;   // never reclaimed below this
  size_t initial_chunks = 0;
  bool use_virtual_memory = true;  // when the device supports it
  // The chunks are counted against the budget and never allocated: the lease stands for
  // memory another process holds (a worker's KV cache, in its supervisor's ledger). There
  // is no ChunkAddress.
  bool accounting_only = false;
  // Called (without locks held) when the governor asks this lease to shrink.
  std::function<void(const ShrinkRequest&)> on_shrink_request;
};

struct GrowOptions {
  bool wait = false;  // wait for other owners to shrink instead of failing at once
  std::chrono::milliseconds timeout{5000};
  // How urgent the work is that needs the chunks (higher: more urgent; 0: ordinary): a busy
  // lease is reclaimed for it only if it holds less urgent work (reclaim_policy.h).
  int urgency = 0;
};

class Lease {
 public:
  ~Lease();
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;

  OwnerId owner() const { return owner_; }
  MemoryGovernor& governor() const { return *governor_; }
  size_t chunk_bytes() const { return chunk_bytes_; }
  size_t max_chunks() const { return max_chunks_; }
  bool contiguous() const { return contiguous_; }
  // First chunk's address when contiguous(), else nullptr.
  void* base() const { return base_; }

  size_t chunks() const;
  void* ChunkAddress(size_t index) const;

  // Adds `chunks` chunks (all or none). Errors: kOwnerQuota (owner max or max_chunks),
  // kBudget (nothing reclaimable), kReclaimPending (others asked to shrink; retry),
  // kReclaimTimedOut (waited; they missed the deadline), kOwnerUnresponsive (this owner
  // missed a deadline), kDeviceOutOfMemory.
  [[nodiscard]] MemoryStatus Grow(size_t chunks, GrowOptions options = {});
  // Removes the last `chunks` chunks. kInvalidArgument when it has fewer.
  [[nodiscard]] Status Shrink(size_t chunks);
  // The request this lease has not complied with yet, if any.
  std::optional<ShrinkRequest> pending_request() const;
  // An idle lease (no running sequences) is reclaimed first, whatever its priority.
  void SetIdle(bool idle);
  // The most chunks this lease could ever have under the budget: its maximum, or fewer when
  // the owner's MemoryGovernor::AttainableBytes (every other owner yielding what reclaim can
  // take) leaves room for fewer. A sequence that needs more KV than this can never run.
  size_t AttainableChunks() const;
  // All the work the owner has for this lease waits to start (nothing runs on its chunks): at
  // equal urgency and priority it yields to an earlier owner (reclaim_policy.h).
  void SetWaitingOnly(bool waiting_only);
  // The owner has work waiting for this lease to grow and nothing left to try but waiting
  // for memory to be given back: counted in the governor's waiting_allocations (the pressure
  // index) while set.
  void SetWaitingForMemory(bool waiting);
  // The urgency of the most urgent work its chunks hold (the engine: its running requests'
  // top priority class; 0 ordinary): it yields only to more urgent work, or to as urgent
  // work of a higher-priority owner.
  void SetUrgency(int urgency);

 private:
  friend class MemoryGovernor;
  Lease(MemoryGovernor* governor, uint64_t id, OwnerId owner, size_t chunk_bytes, size_t max_chunks,
        bool contiguous, void* base)
      : governor_(governor),
        id_(id),
        owner_(owner),
        chunk_bytes_(chunk_bytes),
        max_chunks_(max_chunks),
        contiguous_(contiguous),
        base_(base) {}

  MemoryGovernor* const governor_;  // not owned
  const uint64_t id_;
  const OwnerId owner_;
  const size_t chunk_bytes_;
  const size_t max_chunks_;
  const bool contiguous_;
  void* const base_;
};

}  // namespace pier

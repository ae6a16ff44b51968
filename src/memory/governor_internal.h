// Internal state of MemoryGovernor shared by memory_governor.cpp and lease.cpp.
// Not a public header: nothing outside src/memory/ includes it.
//
// Thread-safety: every field is guarded by MemoryGovernor::mutex_.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "memory/lease.h"
#include "memory/memory_governor.h"

namespace pier {

// The error for an owner id that is not (or no longer) registered.
inline MemoryError UnknownOwner(OwnerId owner, uint64_t requested) {
  MemoryError error;
  error.kind = MemoryErrorKind::kInvalidRequest;
  error.owner = "#" + std::to_string(owner.value);
  error.requested_bytes = requested;
  error.detail = "no such owner";
  return error;
}

struct MemoryGovernor::OwnerState {
  OwnerId id;
  OwnerSpec spec;
  uint64_t charged = 0;  // blocks + external + lease chunks
  uint64_t floor = 0;    // outstanding reservations
  uint64_t peak = 0;
  uint64_t block_bytes = 0;
  uint64_t external_bytes = 0;
  uint64_t lease_bytes = 0;
  size_t blocks = 0;
  size_t leases = 0;
  size_t reservations = 0;
  size_t externals = 0;
  uint64_t alloc_count = 0;
  uint64_t failure_count = 0;
  uint64_t deadline_misses = 0;
};

struct MemoryGovernor::LeaseState {
  uint64_t id = 0;
  OwnerId owner;
  std::string name;
  size_t chunk_bytes = 0;
  size_t max_chunks = 0;
  size_t min_chunks = 0;
  bool contiguous = false;
  bool accounting_only = false;     // counted in external_bytes_, nothing allocated
  VirtualRange range;               // when contiguous
  std::vector<void*> chunk_blocks;  // pool blocks, when not contiguous
  size_t chunks = 0;
  bool idle = false;
  bool waiting_for_memory = false;  // Lease::SetWaitingForMemory
  bool waiting_only = false;        // Lease::SetWaitingOnly
  int urgency = 0;
  std::optional<ShrinkRequest> request;  // not yet complied with
  bool unresponsive = false;             // missed the deadline of `request`
  std::function<void(const ShrinkRequest&)> handler;
};

// Shrink requests planned under the lock, delivered after it is released.
struct MemoryGovernor::Reclaim {
  std::vector<std::pair<std::function<void(const ShrinkRequest&)>, ShrinkRequest>> calls;
  std::vector<uint64_t> request_ids;
};

// Segments for the pool: from the device, within the budget.
class MemoryGovernor::Backend final : public AllocatorBackend {
 public:
  explicit Backend(MemoryGovernor* governor) : governor_(governor) {}
  Result<void*> AllocateSegment(size_t bytes) override;
  void FreeSegment(void* ptr, size_t bytes) override;
  Result<Event> RecordEvent(Stream stream) override;
  bool EventDone(Event event) override;
  void DestroyEvent(Event event) override;

 private:
  MemoryGovernor* const governor_;
};

}  // namespace pier

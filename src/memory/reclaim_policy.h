// The governor's reclaim choice as a pure function: given a snapshot of the leases other
// owners hold, which of them give back how many chunks so that a requester gets `need` bytes.
// The governor takes the snapshot under its lock, calls this, and turns the answer into shrink
// requests; the QoS work changes the policy here without touching the locking around it.
//
// Policy: idle leases first, then busy ones by the urgency of the work they hold (the engine's
// request priority class: a lease running only bulk work yields before one running urgent
// work), then by owner priority (a lower value yields first); among equals, the snapshot's
// order. A busy lease yields only to a requester whose work is more urgent than the most
// urgent work the lease holds, or as urgent and of a higher owner priority (or, when all its
// work waits to start, of the same priority and an earlier owner: two models each holding part
// of what their waiting work needs would otherwise take chunks from each other in turn, and
// neither would start): reclaim never
// preempts a request of a higher class than the one it makes room for, and model priority
// breaks ties. No owner goes below what it must keep (its guarantee, or what it has
// reserved), no lease below its minimum chunks, and a lease already asked to shrink is not
// asked again.
//
// Thread-safety: a pure function over values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pier {

struct ReclaimCandidate {
  uint64_t lease_id = 0;
  uint64_t owner = 0;           // OwnerId::value
  bool idle = false;            // the lease's owner marked it idle (no live work)
  int priority = 0;             // the owner's; a lower value yields first
  int urgency = 0;              // of the most urgent work it holds (Lease::SetUrgency)
  bool waiting_only = false;    // its work all waits to start (Lease::SetWaitingOnly)
  bool shrink_pending = false;  // already asked to shrink
  size_t chunks = 0;
  size_t min_chunks = 0;
  uint64_t chunk_bytes = 0;
  uint64_t owner_charged = 0;  // everything charged to the owner
  uint64_t owner_keep = 0;     // what the owner may not go below (guarantee, reservations)
};

struct ReclaimTake {
  uint64_t lease_id = 0;
  size_t chunks = 0;
};

struct ReclaimPlan {
  std::vector<ReclaimTake> takes;  // in the order the leases are asked
  uint64_t bytes = 0;              // what the takes give back
  bool enough = false;             // bytes >= need
};

// Who needs the memory: its owner and priority, and how urgent the work it needs it for is
// (GrowOptions::urgency; 0 for ordinary work and for reservations and allocations).
struct ReclaimRequester {
  uint64_t owner = 0;  // OwnerId::value
  int priority = 0;
  int urgency = 0;
};

ReclaimPlan ChooseReclaim(const std::vector<ReclaimCandidate>& leases,
                          const ReclaimRequester& requester, uint64_t need);

}  // namespace pier

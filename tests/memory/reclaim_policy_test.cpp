// The reclaim choice alone, over hand-made snapshots (no governor, no locking).
#include "memory/reclaim_policy.h"

#include <gtest/gtest.h>

#include <vector>

namespace pier {
namespace {

constexpr uint64_t kChunk = 1024;

ReclaimCandidate Lease(uint64_t id, uint64_t owner, bool idle, int priority, size_t chunks) {
  return {.lease_id = id,
          .owner = owner,
          .idle = idle,
          .priority = priority,
          .shrink_pending = false,
          .chunks = chunks,
          .min_chunks = 0,
          .chunk_bytes = kChunk,
          .owner_charged = chunks * kChunk,
          .owner_keep = 0};
}

TEST(ReclaimPolicyTest, IdleLeasesYieldFirstThenTheLowestPriority) {
  // Requester: owner 9 at priority 5. Busy owners of priority 1 and 3 yield (weaker); a busy
  // owner of priority 7 does not; the idle one (priority 8) yields first anyway.
  const std::vector<ReclaimCandidate> leases = {Lease(1, 1, false, 3, 4), Lease(2, 2, false, 7, 4),
                                                Lease(3, 3, true, 8, 2), Lease(4, 4, false, 1, 4)};
  const ReclaimPlan plan = ChooseReclaim(leases, {9, 5, 0}, 5 * kChunk);
  ASSERT_TRUE(plan.enough);
  ASSERT_EQ(plan.takes.size(), 2u);
  EXPECT_EQ(plan.takes[0].lease_id, 3u);  // idle: all 2 chunks
  EXPECT_EQ(plan.takes[0].chunks, 2u);
  EXPECT_EQ(plan.takes[1].lease_id, 4u);  // then priority 1: the 3 still needed
  EXPECT_EQ(plan.takes[1].chunks, 3u);
  EXPECT_EQ(plan.bytes, 5 * kChunk);
}

TEST(ReclaimPolicyTest, NeverBelowMinimumsGuaranteesOrPendingShrinks) {
  std::vector<ReclaimCandidate> leases = {Lease(1, 1, true, 0, 8), Lease(2, 2, true, 0, 8),
                                          Lease(3, 3, true, 0, 8)};
  leases[0].min_chunks = 6;           // 2 spare
  leases[1].owner_keep = 7 * kChunk;  // the owner keeps 7 chunks' worth: 1 spare
  leases[2].shrink_pending = true;    // already asked: not again
  const ReclaimPlan plan = ChooseReclaim(leases, {9, 0, 0}, 10 * kChunk);
  EXPECT_FALSE(plan.enough);
  EXPECT_EQ(plan.bytes, 3 * kChunk);
  // Two leases of one owner share its room.
  std::vector<ReclaimCandidate> shared = {Lease(1, 1, true, 0, 4), Lease(2, 1, true, 0, 4)};
  shared[0].owner_charged = shared[1].owner_charged = 8 * kChunk;
  shared[0].owner_keep = shared[1].owner_keep = 5 * kChunk;
  const ReclaimPlan capped = ChooseReclaim(shared, {9, 0, 0}, 8 * kChunk);
  EXPECT_EQ(capped.bytes, 3 * kChunk);
}

TEST(ReclaimPolicyTest, TheRequesterNeverReclaimsFromItselfAndEqualsDoNotYield) {
  const std::vector<ReclaimCandidate> leases = {Lease(1, 9, true, 0, 8), Lease(2, 2, false, 4, 8)};
  const ReclaimPlan plan = ChooseReclaim(leases, {9, 4, 0}, kChunk);
  EXPECT_FALSE(plan.enough);
  EXPECT_TRUE(plan.takes.empty());
  // Asking for nothing is always enough.
  EXPECT_TRUE(ChooseReclaim(leases, {9, 4, 0}, 0).enough);
}

// Request classes first: a busy lease yields to more urgent work whatever the owners'
// priorities, never to less urgent work, and owner priority decides between equals.
TEST(ReclaimPolicyTest, BusyLeasesYieldOnlyToMoreUrgentWorkAndPriorityBreaksTies) {
  std::vector<ReclaimCandidate> leases = {Lease(1, 1, false, 9, 4), Lease(2, 2, false, -5, 4),
                                          Lease(3, 3, false, 0, 4)};
  leases[0].urgency = 0;  // a strong owner running ordinary work
  leases[1].urgency = 2;  // a weak owner running critical work
  leases[2].urgency = 1;
  // Critical work of a weak owner (urgency 2, priority -10): lease 1 and 3 yield (less urgent),
  // the least urgent first; lease 2 (as urgent, owner priority -5 > -10) does not.
  const ReclaimPlan critical = ChooseReclaim(leases, {9, -10, 2}, 12 * kChunk);
  EXPECT_FALSE(critical.enough);
  ASSERT_EQ(critical.takes.size(), 2u);
  EXPECT_EQ(critical.takes[0].lease_id, 1u);
  EXPECT_EQ(critical.takes[1].lease_id, 3u);
  EXPECT_EQ(critical.bytes, 8 * kChunk);
  // Ordinary work of an owner as strong as lease 1's: nothing busy holds less urgent work, and
  // the only lease as urgent (lease 1, priority 9) is not weaker.
  EXPECT_TRUE(ChooseReclaim(leases, {9, 9, 0}, kChunk).takes.empty());
  // As urgent as lease 3 and stronger than its owner: lease 3 yields, the others do not.
  const ReclaimPlan tie = ChooseReclaim(leases, {9, 1, 1}, 8 * kChunk);
  ASSERT_EQ(tie.takes.size(), 2u) << "lease 1 (less urgent) and lease 3 (tie, weaker)";
  EXPECT_EQ(tie.takes[0].lease_id, 1u);
  EXPECT_EQ(tie.takes[1].lease_id, 3u);
  // Idle leases yield to anything, before every busy one.
  leases.push_back(Lease(4, 4, true, 99, 1));
  leases.back().urgency = 5;
  const ReclaimPlan low = ChooseReclaim(leases, {9, -100, -1}, kChunk);
  ASSERT_EQ(low.takes.size(), 1u);
  EXPECT_EQ(low.takes[0].lease_id, 4u);
}

// Two models whose work all waits, each holding part of what it needs: only the earlier
// owner may take from the other, so they do not trade chunks back and forth.
TEST(ReclaimPolicyTest, AmongLeasesWhoseWorkAllWaitsTheEarlierOwnerTakes) {
  ReclaimCandidate first = Lease(1, 1, false, 0, 3);
  ReclaimCandidate second = Lease(2, 2, false, 0, 3);
  first.waiting_only = second.waiting_only = true;
  EXPECT_TRUE(ChooseReclaim({second}, {1, 0, 0}, kChunk).enough);
  EXPECT_FALSE(ChooseReclaim({first}, {2, 0, 0}, kChunk).enough);
  // Work that runs is not taken at equal urgency and priority, whoever asks.
  second.waiting_only = false;
  EXPECT_FALSE(ChooseReclaim({second}, {1, 0, 0}, kChunk).enough);
}

}  // namespace
}  // namespace pier

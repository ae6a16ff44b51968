#include "memory/lease.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "memory/test_util.h"

namespace pier {
namespace {

using testing::AddOwner;
using testing::BudgetOf;
using testing::kKiB;
using testing::kMiB;
using testing::MakeGovernor;
using namespace std::chrono_literals;

constexpr size_t kChunk = 1 * kMiB;

class LeaseTest : public ::testing::TestWithParam<bool> {
 protected:
  // Parameter: whether the device supports virtual memory (contiguous arenas) or not.
  LeaseTest()
      : device_(FakeDeviceOptions{.capacity_bytes = 64 * kMiB,
                                  .vm_granularity_bytes = GetParam() ? 64 * kKiB : 0}) {}

  GovernorOptions Options(size_t budget, std::chrono::milliseconds deadline = 200ms) {
    GovernorOptions options = BudgetOf(budget);
    options.shrink_deadline = deadline;
    return options;
  }

  std::unique_ptr<Lease> MakeLease(MemoryGovernor& governor, OwnerId owner, size_t initial,
                                   std::function<void(const ShrinkRequest&)> handler = {},
                                   size_t min_chunks = 0) {
    LeaseOptions options;
    options.name = "kv";
    options.chunk_bytes = kChunk;
    options.max_chunks = 32;
    options.min_chunks = min_chunks;
    options.initial_chunks = initial;
    options.on_shrink_request = std::move(handler);
    MemoryResult<std::unique_ptr<Lease>> lease = governor.CreateLease(owner, options);
    PIER_CHECK(lease.ok(), lease.status().ToString());
    return std::move(lease).value();
  }

  FakeDevice device_;
};

TEST_P(LeaseTest, GrowsAndShrinksChunkByChunkWithinTheBudget) {
  auto governor = MakeGovernor(&device_, Options(8 * kMiB));
  OwnerId kv = AddOwner(*governor, {.name = "m/kv"});
  auto lease = MakeLease(*governor, kv, 2);
  EXPECT_EQ(lease->contiguous(), GetParam());
  EXPECT_EQ(lease->chunks(), 2u);
  ASSERT_TRUE(lease->Grow(4).ok());
  EXPECT_EQ(lease->chunks(), 6u);
  for (size_t i = 0; i < lease->chunks(); ++i) {
    std::memset(lease->ChunkAddress(i), static_cast<int>(i), kChunk);
  }
  if (lease->contiguous()) {
    EXPECT_EQ(lease->ChunkAddress(3), static_cast<char*>(lease->base()) + 3 * kChunk);
  }
  EXPECT_EQ(governor->StatsFor(kv)->lease_bytes, 6 * kChunk);
  MemoryStatus over = lease->Grow(3);  // 9 MiB > 8 MiB budget, nobody to reclaim from
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().kind, MemoryErrorKind::kBudget);
  EXPECT_EQ(over.error().used_bytes, 6 * kChunk);
  EXPECT_EQ(over.error().free_bytes, 2 * kChunk);
  ASSERT_TRUE(lease->Shrink(4).ok());
  EXPECT_EQ(lease->chunks(), 2u);
  EXPECT_EQ(static_cast<unsigned char*>(lease->ChunkAddress(1))[0], 1);
  EXPECT_EQ(lease->Shrink(3).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(governor->CheckInvariants().ok());
  lease.reset();
  EXPECT_EQ(governor->Stats().allocated_bytes, 0u);
}

TEST_P(LeaseTest, CooperativeOwnerShrinksForAHigherPriorityGrower) {
  auto governor = MakeGovernor(&device_, Options(8 * kMiB));
  OwnerId low = AddOwner(*governor, {.name = "low/kv", .priority = 0});
  OwnerId high = AddOwner(*governor, {.name = "high/kv", .priority = 10});
  Lease* low_ptr = nullptr;
  std::atomic<int> asked{0};
  std::atomic<uint64_t> waiting_while_asked{0};
  auto low_lease = MakeLease(*governor, low, 6, [&](const ShrinkRequest& request) {
    ++asked;
    EXPECT_EQ(request.requester, "high/kv");
    // The grower counts as waiting (pier_memory_waiting_allocations) while the reclaim runs.
    waiting_while_asked = governor->Stats().waiting_allocations;
    // A cooperative owner gives the chunks back from another thread before the deadline.
    std::thread([low_ptr, n = request.chunks] { ASSERT_TRUE(low_ptr->Shrink(n).ok()); }).detach();
  });
  low_ptr = low_lease.get();
  auto high_lease = MakeLease(*governor, high, 1);
  MemoryStatus grown = high_lease->Grow(4, GrowOptions{.wait = true, .timeout = 2000ms});
  ASSERT_TRUE(grown.ok()) << grown.status().ToString();
  EXPECT_EQ(asked.load(), 1);
  EXPECT_EQ(waiting_while_asked.load(), 1u);
  EXPECT_EQ(governor->Stats().waiting_allocations, 0u) << "no longer waiting once it returns";
  EXPECT_EQ(high_lease->chunks(), 5u);
  EXPECT_EQ(low_lease->chunks(), 3u);
  EXPECT_FALSE(low_lease->pending_request().has_value());
  GovernorStats stats = governor->Stats();
  EXPECT_EQ(stats.shrink_requests, 1u);
  EXPECT_EQ(stats.deadline_misses, 0u);
  ASSERT_TRUE(governor->CheckInvariants().ok());
}

TEST_P(LeaseTest, OwnerThatMissesTheDeadlineIsMarkedUnresponsive) {
  auto governor = MakeGovernor(&device_, Options(8 * kMiB, 50ms));
  OwnerId low = AddOwner(*governor, {.name = "low/kv", .priority = 0});
  OwnerId high = AddOwner(*governor, {.name = "high/kv", .priority = 10});
  std::atomic<int> asked{0};
  auto low_lease = MakeLease(*governor, low, 6, [&](const ShrinkRequest&) { ++asked; });
  auto high_lease = MakeLease(*governor, high, 1);

  // Without waiting: refused at once, with the request sent.
  MemoryStatus now = high_lease->Grow(4);
  ASSERT_FALSE(now.ok());
  EXPECT_EQ(now.error().kind, MemoryErrorKind::kReclaimPending);
  EXPECT_EQ(asked.load(), 1);
  ASSERT_TRUE(low_lease->pending_request().has_value());
  EXPECT_EQ(low_lease->pending_request()->chunks, 3u);

  // Waiting: refused when the deadline passes, naming the slow owner.
  MemoryStatus waited = high_lease->Grow(4, GrowOptions{.wait = true, .timeout = 2000ms});
  ASSERT_FALSE(waited.ok());
  EXPECT_EQ(waited.error().kind, MemoryErrorKind::kReclaimTimedOut);
  EXPECT_NE(waited.status().message().find("low/kv"), std::string::npos)
      << waited.status().message();
  GovernorStats stats = governor->Stats();
  EXPECT_EQ(stats.deadline_misses, 1u);
  EXPECT_TRUE(governor->StatsFor(low)->unresponsive);
  EXPECT_EQ(governor->StatsFor(low)->deadline_misses, 1u);

  // The unresponsive owner may not grow until it complies.
  MemoryStatus low_grow = low_lease->Grow(1);
  ASSERT_FALSE(low_grow.ok());
  EXPECT_EQ(low_grow.error().kind, MemoryErrorKind::kOwnerUnresponsive);
  EXPECT_EQ(low_grow.status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(low_lease->Shrink(3).ok());  // complies late
  EXPECT_FALSE(governor->StatsFor(low)->unresponsive);
  EXPECT_TRUE(high_lease->Grow(4).ok());
  ASSERT_TRUE(low_lease->Shrink(1).ok());
  EXPECT_TRUE(low_lease->Grow(1).ok());  // may grow again
  ASSERT_TRUE(governor->CheckInvariants().ok());
}

TEST_P(LeaseTest, IdleOwnersAreReclaimedFirstAndGuaranteesAreKept) {
  auto governor = MakeGovernor(&device_, Options(12 * kMiB));
  OwnerId idle = AddOwner(*governor, {.name = "idle/kv", .priority = 50});
  OwnerId busy = AddOwner(*governor, {.name = "busy/kv", .priority = 0});
  OwnerId grower = AddOwner(*governor, {.name = "grower/kv", .priority = 10});
  std::vector<std::string> order;
  Lease* idle_ptr = nullptr;
  Lease* busy_ptr = nullptr;
  auto idle_lease = MakeLease(*governor, idle, 4, [&](const ShrinkRequest& r) {
    order.push_back("idle");
    ASSERT_TRUE(idle_ptr->Shrink(r.chunks).ok());
  });
  auto busy_lease = MakeLease(
      *governor, busy, 6,
      [&](const ShrinkRequest& r) {
        order.push_back("busy");
        ASSERT_TRUE(busy_ptr->Shrink(r.chunks).ok());
      },
      /*min_chunks=*/2);
  idle_ptr = idle_lease.get();
  busy_ptr = busy_lease.get();
  idle_lease->SetIdle(true);
  auto grow_lease = MakeLease(*governor, grower, 2);
  // 12 MiB full. Ask for 3: the idle high-priority owner goes first (synchronous handler).
  ASSERT_TRUE(grow_lease->Grow(3).ok());
  ASSERT_EQ(order.size(), 1u);
  EXPECT_EQ(order[0], "idle");
  EXPECT_EQ(idle_lease->chunks(), 1u);
  // Next: idle has 1 left; then the lower-priority busy owner, never below its 2 chunks.
  ASSERT_TRUE(grow_lease->Grow(5).ok());
  EXPECT_EQ(idle_lease->chunks(), 0u);
  EXPECT_EQ(busy_lease->chunks(), 2u);
  MemoryStatus more = grow_lease->Grow(1);
  ASSERT_FALSE(more.ok());
  EXPECT_EQ(more.error().kind, MemoryErrorKind::kBudget);
  ASSERT_TRUE(governor->CheckInvariants().ok());
}

TEST_P(LeaseTest, HigherPriorityBusyOwnersAreNotReclaimed) {
  auto governor = MakeGovernor(&device_, Options(8 * kMiB));
  OwnerId vip = AddOwner(*governor, {.name = "vip/kv", .priority = 10});
  OwnerId batch = AddOwner(*governor, {.name = "batch/kv", .priority = 1});
  std::atomic<int> asked{0};
  auto vip_lease = MakeLease(*governor, vip, 7, [&](const ShrinkRequest&) { ++asked; });
  auto batch_lease = MakeLease(*governor, batch, 1);
  MemoryStatus grown = batch_lease->Grow(2);
  ASSERT_FALSE(grown.ok());
  EXPECT_EQ(grown.error().kind, MemoryErrorKind::kBudget);
  EXPECT_EQ(asked.load(), 0);
}

// A model about to load (an owner with no lease) gets back the chunks an idle model's lease
// was lent, waiting for an owner that shrinks on its own thread; then its reservation fits.
TEST_P(LeaseTest, MakeRoomTakesLentChunksBackFromAnIdleLeaseForALoad) {
  auto governor = MakeGovernor(&device_, Options(10 * kMiB, 2000ms));
  OwnerId kv = AddOwner(*governor, {.name = "a/kv"});
  OwnerId weights = AddOwner(*governor, {.name = "b/weights"});
  Lease* lease_ptr = nullptr;
  std::vector<std::thread> shrinkers;
  auto lease = MakeLease(
      *governor, kv, 8,
      [&](const ShrinkRequest& r) {
        shrinkers.emplace_back([&lease_ptr, chunks = r.chunks] {
          std::this_thread::sleep_for(20ms);  // the owner's own thread, a moment later
          ASSERT_TRUE(lease_ptr->Shrink(chunks).ok());
        });
      },
      /*min_chunks=*/2);
  lease_ptr = lease.get();
  lease->SetIdle(true);
  EXPECT_FALSE(governor->Reserve(weights, 5 * kMiB).ok()) << "2 MiB free: short before";

  MemoryStatus room = governor->MakeRoom(weights, 5 * kMiB, 1000ms);
  for (std::thread& t : shrinkers) t.join();
  ASSERT_TRUE(room.ok()) << room.status().ToString();
  EXPECT_EQ(lease->chunks(), 5u) << "3 chunks given back, no more";
  EXPECT_TRUE(governor->Reserve(weights, 5 * kMiB).ok());
  // Room that is already there takes nothing.
  OwnerId small = AddOwner(*governor, {.name = "c/weights"});
  ASSERT_TRUE(governor->MakeRoom(small, 0, 10ms).ok());
  EXPECT_EQ(lease->chunks(), 5u);
  ASSERT_TRUE(governor->CheckInvariants().ok());
}

// What reclaim may not take (a busy lease of a higher priority, anything below a lease's
// minimum) is never asked for: MakeRoom refuses at once with the numbers, and asks nobody.
TEST_P(LeaseTest, MakeRoomRefusesAtOnceWhatReclaimCannotGive) {
  auto governor = MakeGovernor(&device_, Options(8 * kMiB));
  OwnerId vip = AddOwner(*governor, {.name = "vip/kv", .priority = 10});
  OwnerId idle = AddOwner(*governor, {.name = "idle/kv"});
  OwnerId weights = AddOwner(*governor, {.name = "new/weights", .priority = 1});
  std::atomic<int> asked{0};
  auto vip_lease = MakeLease(*governor, vip, 5, [&](const ShrinkRequest&) { ++asked; });
  auto idle_lease = MakeLease(
      *governor, idle, 2, [&](const ShrinkRequest&) { ++asked; }, /*min_chunks=*/2);
  idle_lease->SetIdle(true);
  const auto start = std::chrono::steady_clock::now();
  MemoryStatus room = governor->MakeRoom(weights, 3 * kMiB, 5000ms);
  ASSERT_FALSE(room.ok());
  EXPECT_EQ(room.error().kind, MemoryErrorKind::kBudget);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1000ms) << "refused, not waited";
  EXPECT_EQ(asked.load(), 0);
  EXPECT_EQ(vip_lease->chunks(), 5u);
  EXPECT_EQ(governor->Stats().committed_bytes, 7 * kMiB);
}

TEST_P(LeaseTest, GuaranteedMinimumIsNeverReclaimed) {
  auto governor = MakeGovernor(&device_, Options(8 * kMiB));
  OwnerId low = AddOwner(*governor, {.name = "low/kv", .guaranteed_bytes = 5 * kChunk});
  OwnerId high = AddOwner(*governor, {.name = "high/kv", .priority = 5});
  Lease* low_ptr = nullptr;
  auto low_lease = MakeLease(*governor, low, 7, [&](const ShrinkRequest& r) {
    ASSERT_TRUE(low_ptr->Shrink(r.chunks).ok());
  });
  low_ptr = low_lease.get();
  auto high_lease = MakeLease(*governor, high, 1);
  ASSERT_TRUE(high_lease->Grow(2).ok());  // takes 2 of low's 7, leaving its guaranteed 5
  EXPECT_EQ(low_lease->chunks(), 5u);
  MemoryStatus more = high_lease->Grow(1);
  ASSERT_FALSE(more.ok());
  EXPECT_EQ(more.error().kind, MemoryErrorKind::kBudget);
  EXPECT_EQ(low_lease->chunks(), 5u);
}

TEST_P(LeaseTest, BadLeaseOptionsAreRefused) {
  auto governor = MakeGovernor(&device_, Options(8 * kMiB));
  OwnerId kv = AddOwner(*governor, {.name = "kv"});
  LeaseOptions options;
  options.chunk_bytes = 0;
  options.max_chunks = 4;
  EXPECT_EQ(governor->CreateLease(kv, options).error().kind, MemoryErrorKind::kInvalidRequest);
  options.chunk_bytes = kChunk;
  options.max_chunks = 0;
  EXPECT_EQ(governor->CreateLease(kv, options).error().kind, MemoryErrorKind::kInvalidRequest);
  options.max_chunks = 4;
  options.initial_chunks = 5;
  EXPECT_EQ(governor->CreateLease(kv, options).error().kind, MemoryErrorKind::kInvalidRequest);
  options.initial_chunks = 9;
  options.max_chunks = 16;
  EXPECT_EQ(governor->CreateLease(kv, options).error().kind, MemoryErrorKind::kBudget);
  EXPECT_EQ(governor->Stats().allocated_bytes, 0u);
}

TEST_P(LeaseTest, AccountingOnlyLeaseCountsAgainstTheBudgetWithoutAllocating) {
  auto governor = MakeGovernor(&device_, Options(8 * kMiB));
  OwnerId worker = AddOwner(*governor, {.name = "m/worker", .priority = 0});
  OwnerId other = AddOwner(*governor, {.name = "other/kv", .priority = 10});
  std::atomic<int> asked{0};
  LeaseOptions options;
  options.name = "m/worker-kv";
  options.chunk_bytes = kChunk;
  options.max_chunks = 8;
  options.accounting_only = true;
  options.on_shrink_request = [&](const ShrinkRequest& request) {
    ++asked;
    EXPECT_EQ(request.target_chunks, 3u);
  };
  auto mirror = std::move(governor->CreateLease(worker, options)).value();
  EXPECT_FALSE(mirror->contiguous());
  ASSERT_TRUE(mirror->Grow(6).ok());
  GovernorStats stats = governor->Stats();
  EXPECT_EQ(stats.allocated_bytes, 6 * kChunk);
  EXPECT_EQ(stats.external_bytes, 6 * kChunk);  // held elsewhere, counted here
  EXPECT_EQ(stats.arena_bytes, 0u);
  EXPECT_EQ(stats.pool.reserved_bytes, 0u);
  ASSERT_EQ(stats.leases.size(), 1u);
  EXPECT_EQ(stats.leases[0].chunks, 6u);
  // Another owner's growth asks the mirror to shrink like any lease.
  auto other_lease = MakeLease(*governor, other, 0);
  MemoryStatus grown = other_lease->Grow(5);
  ASSERT_FALSE(grown.ok());
  EXPECT_EQ(grown.error().kind, MemoryErrorKind::kReclaimPending);
  EXPECT_EQ(asked.load(), 1);
  ASSERT_TRUE(mirror->Shrink(3).ok());
  EXPECT_TRUE(other_lease->Grow(5).ok());
  ASSERT_TRUE(governor->CheckInvariants().ok());
  mirror.reset();
  EXPECT_EQ(governor->Stats().external_bytes, 0u);
  EXPECT_EQ(governor->StatsFor(worker)->allocated_bytes, 0u);
}

TEST_P(LeaseTest, BudgetRisesAtOnceAndDropsOnceLeasesHaveShrunk) {
  auto governor = MakeGovernor(&device_, Options(4 * kMiB));
  OwnerId kv = AddOwner(*governor, {.name = "m/kv"});
  std::optional<ShrinkRequest> asked;
  auto lease = MakeLease(*governor, kv, 4, [&](const ShrinkRequest& r) { asked = r; });
  EXPECT_EQ(lease->Grow(1).error().kind, MemoryErrorKind::kBudget);
  ASSERT_TRUE(governor->SetBudget(8 * kMiB).ok());
  EXPECT_EQ(governor->budget_bytes(), 8 * kMiB);
  ASSERT_TRUE(lease->Grow(2).ok());

  // Lower than what the lease holds: it is asked to shrink, the budget waits for it. (Whole
  // pool segments, so that no half-used segment holds the lowering up.)
  ASSERT_TRUE(governor->SetBudget(4 * kMiB).ok());
  ASSERT_TRUE(asked.has_value());
  EXPECT_EQ(asked->chunks, 2u);
  EXPECT_EQ(asked->target_chunks, 4u);
  EXPECT_EQ(asked->requester, "the budget");
  EXPECT_EQ(governor->budget_bytes(), 8 * kMiB);
  EXPECT_EQ(governor->pending_budget(), std::optional<uint64_t>(4 * kMiB));
  EXPECT_EQ(lease->Grow(1).error().kind, MemoryErrorKind::kReclaimPending);
  ASSERT_TRUE(lease->Shrink(1).ok());
  EXPECT_EQ(governor->budget_bytes(), 8 * kMiB);  // 5 MiB still held
  ASSERT_TRUE(lease->Shrink(1).ok());
  EXPECT_EQ(governor->budget_bytes(), 4 * kMiB);
  EXPECT_FALSE(governor->pending_budget().has_value());
  EXPECT_EQ(lease->Grow(1).error().kind, MemoryErrorKind::kBudget);
  ASSERT_TRUE(governor->CheckInvariants().ok());

  // Lowering to what is free applies at once; a rise replaces a pending lowering.
  ASSERT_TRUE(governor->SetBudget(4 * kMiB).ok());
  asked.reset();
  ASSERT_TRUE(governor->SetBudget(1 * kMiB).ok());
  EXPECT_TRUE(asked.has_value());
  ASSERT_TRUE(governor->SetBudget(6 * kMiB).ok());
  EXPECT_EQ(governor->budget_bytes(), 6 * kMiB);
  EXPECT_FALSE(governor->pending_budget().has_value());
  ASSERT_TRUE(governor->CheckInvariants().ok());
}

TEST_P(LeaseTest, BudgetThatCannotBeReachedOrExceedsTheDeviceIsRefused) {
  auto governor = MakeGovernor(&device_, Options(8 * kMiB));
  OwnerId kv = AddOwner(*governor, {.name = "m/kv"});
  auto lease = MakeLease(*governor, kv, 4, {}, /*min_chunks=*/4);
  Status low = governor->SetBudget(2 * kMiB);
  EXPECT_EQ(low.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(low.message().find("cannot lower"), std::string::npos) << low.message();
  EXPECT_EQ(governor->budget_bytes(), 8 * kMiB);
  EXPECT_FALSE(governor->pending_budget().has_value());
  EXPECT_EQ(governor->SetBudget(65 * kMiB).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(governor->budget_bytes(), 8 * kMiB);
}

TEST_P(LeaseTest, ALeaseShortOfBudgetAsksTheHandlerAndGrowsOnceGranted) {
  auto governor = MakeGovernor(&device_, Options(4 * kMiB));
  OwnerId kv = AddOwner(*governor, {.name = "m/kv"});
  std::vector<std::pair<uint64_t, int>> asks;
  governor->SetBudgetShortHandler([&](uint64_t bytes, int urgency) {
    asks.emplace_back(bytes, urgency);
    return true;
  });
  auto lease = MakeLease(*governor, kv, 3);
  MemoryStatus grown = lease->Grow(3, GrowOptions{.urgency = 1});
  ASSERT_FALSE(grown.ok());
  EXPECT_EQ(grown.error().kind, MemoryErrorKind::kReclaimPending);
  ASSERT_EQ(asks.size(), 1u);
  EXPECT_EQ(asks[0].first, 2 * kChunk);  // 6 MiB wanted, 4 MiB budget
  EXPECT_EQ(asks[0].second, 1);
  // Plain allocations are not the supervisor's to grant: refused as before.
  EXPECT_EQ(governor->Allocate(kv, 2 * kMiB).error().kind, MemoryErrorKind::kBudget);
  EXPECT_EQ(asks.size(), 1u);
  // A supervisor that answers at once (here from the handler itself): the grower waits for
  // the answer and grows in the same call.
  governor->SetBudgetShortHandler([&](uint64_t bytes, int) {
    EXPECT_TRUE(governor->SetBudget(governor->budget_bytes() + bytes).ok());
    return true;
  });
  EXPECT_TRUE(lease->Grow(3).ok());
  EXPECT_EQ(governor->budget_bytes(), 6 * kMiB);
  // An answer that grants nothing: refused after it, to retry later.
  governor->SetBudgetShortHandler([&](uint64_t, int) {
    EXPECT_TRUE(governor->SetBudget(governor->budget_bytes()).ok());
    return true;
  });
  EXPECT_EQ(lease->Grow(1).error().kind, MemoryErrorKind::kReclaimPending);
  // A question already on its way (the handler did not ask): refused at once, no wait.
  governor->SetBudgetShortHandler([&](uint64_t, int) { return false; });
  const auto before = std::chrono::steady_clock::now();
  EXPECT_EQ(lease->Grow(1).error().kind, MemoryErrorKind::kReclaimPending);
  EXPECT_LT(std::chrono::steady_clock::now() - before, 150ms);
  ASSERT_TRUE(governor->CheckInvariants().ok());
}

// The ceiling a request is checked against: what a lease could reach if every other owner gave
// back what reclaim may take, whatever the other leases hold now.
TEST_P(LeaseTest, AttainableChunksCountEveryOtherLeaseDownToItsMinimum) {
  auto governor = MakeGovernor(&device_, Options(16 * kMiB));
  OwnerId a = AddOwner(*governor, {.name = "a/kv"});
  OwnerId b = AddOwner(*governor, {.name = "b/kv"});
  OwnerId w = AddOwner(*governor, {.name = "b/weights"});
  // A guarantee is kept whatever reclaim could take.
  OwnerId g = AddOwner(*governor, {.name = "g", .guaranteed_bytes = 4 * kMiB});
  Block weights = governor->Allocate(w, 3 * kMiB).value();
  auto lease_a = MakeLease(*governor, a, 1);
  auto lease_b = MakeLease(*governor, b, 7, {}, /*min_chunks=*/2);
  // 16 MiB less b's weights (3), b's minimum (2) and g's guarantee (4): a could hold 7 chunks,
  // though only 1 is free now.
  EXPECT_EQ(governor->AttainableBytes(a), 7 * kMiB);
  EXPECT_EQ(lease_a->AttainableChunks(), 7u);
  EXPECT_EQ(lease_a->Grow(2).error().kind, MemoryErrorKind::kBudget);  // b has no handler
  EXPECT_TRUE(governor->RemoveOwner(g).ok());
  EXPECT_EQ(lease_a->AttainableChunks(), 11u);
  // Capped by the lease's own maximum (32 chunks) and the owner's quota.
  lease_b.reset();
  weights.Reset();
  EXPECT_EQ(lease_a->AttainableChunks(), 16u);
  OwnerId capped = AddOwner(*governor, {.name = "c/kv", .max_bytes = 5 * kMiB});
  auto lease_c = MakeLease(*governor, capped, 1);
  EXPECT_EQ(lease_c->AttainableChunks(), 5u);
  ASSERT_TRUE(governor->CheckInvariants().ok());
}

// An owner waiting for room hears of every release on the notifier thread, not by polling; a
// lease marked waiting counts in the pressure figures.
TEST_P(LeaseTest, ReleaseListenersHearFreesAndShrinks) {
  auto governor = MakeGovernor(&device_, Options(8 * kMiB));
  OwnerId kv = AddOwner(*governor, {.name = "m/kv"});
  OwnerId w = AddOwner(*governor, {.name = "m/weights"});
  auto lease = MakeLease(*governor, kv, 4);
  std::mutex mutex;
  std::condition_variable cv;
  int heard = 0;
  const uint64_t id = governor->AddReleaseListener([&] {
    std::lock_guard lock(mutex);
    ++heard;
    cv.notify_all();
  });
  auto wait_heard = [&](int at_least) {
    std::unique_lock lock(mutex);
    return cv.wait_for(lock, 5s, [&] { return heard >= at_least; });
  };
  const uint64_t epoch = governor->release_epoch();
  Block block = governor->Allocate(w, 1 * kMiB).value();
  EXPECT_EQ(governor->release_epoch(), epoch);  // taking memory is no release
  block.Reset();
  EXPECT_GT(governor->release_epoch(), epoch);
  EXPECT_TRUE(wait_heard(1));
  ASSERT_TRUE(lease->Shrink(2).ok());
  EXPECT_TRUE(wait_heard(2));

  EXPECT_EQ(governor->Stats().waiting_allocations, 0u);
  lease->SetWaitingForMemory(true);
  EXPECT_EQ(governor->Stats().waiting_allocations, 1u);
  EXPECT_TRUE(governor->Stats().leases.at(0).waiting_for_memory);
  lease->SetWaitingForMemory(false);
  EXPECT_EQ(governor->Stats().waiting_allocations, 0u);

  governor->RemoveReleaseListener(id);
  const int before = heard;
  ASSERT_TRUE(lease->Shrink(1).ok());
  std::this_thread::sleep_for(50ms);
  std::lock_guard lock(mutex);
  EXPECT_EQ(heard, before);
}

INSTANTIATE_TEST_SUITE_P(Arenas, LeaseTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "VirtualMemory" : "PoolBlocks";
                         });

}  // namespace
}  // namespace pier

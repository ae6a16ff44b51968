#include <gtest/gtest.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <vector>

#include "memory/memory_governor.h"
#include "memory/test_util.h"

namespace pier {
namespace {

using testing::AddOwner;
using testing::BudgetOf;
using testing::kKiB;
using testing::kMiB;
using testing::MakeGovernor;

class GovernorTest : public ::testing::Test {
 protected:
  FakeDevice device_{FakeDeviceOptions{.capacity_bytes = 64 * kMiB}};
};

TEST_F(GovernorTest, ChargesEveryBlockToItsOwnerAndReturnsIt) {
  auto governor = MakeGovernor(&device_, BudgetOf(32 * kMiB));
  OwnerId weights = AddOwner(*governor, {.name = "m/weights"});
  OwnerId work = AddOwner(*governor, {.name = "m/workspace"});
  {
    MemoryResult<Block> a = governor->Allocate(weights, 3 * kMiB);
    MemoryResult<Block> b = governor->Allocate(work, 1000);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_EQ(a->size(), 3 * kMiB);
    EXPECT_EQ(b->size(), 1000u);
    EXPECT_EQ(b->charged_bytes(), 1024u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % 256, 0u);
    EXPECT_EQ(governor->StatsFor(weights)->allocated_bytes, 3 * kMiB);
    EXPECT_EQ(governor->StatsFor(work)->allocated_bytes, 1024u);
    GovernorStats stats = governor->Stats();
    EXPECT_EQ(stats.allocated_bytes, 3 * kMiB + 1024);
    EXPECT_GE(stats.reserved_bytes, stats.allocated_bytes);
    ASSERT_TRUE(governor->CheckInvariants().ok());
  }
  EXPECT_EQ(governor->Stats().allocated_bytes, 0u);
  EXPECT_EQ(governor->StatsFor(weights)->peak_allocated_bytes, 3 * kMiB);
  governor->Trim();
  EXPECT_EQ(device_.allocated_bytes(), 0u);
}

TEST_F(GovernorTest, QuotaRefusalCarriesTheNumbers) {
  auto governor = MakeGovernor(&device_, BudgetOf(32 * kMiB));
  OwnerId kv = AddOwner(*governor, {.name = "m/kv", .max_bytes = 4 * kMiB});
  MemoryResult<Block> a = governor->Allocate(kv, 3 * kMiB);
  ASSERT_TRUE(a.ok());
  MemoryResult<Block> b = governor->Allocate(kv, 2 * kMiB);
  ASSERT_FALSE(b.ok());
  const MemoryError& e = b.error();
  EXPECT_EQ(e.kind, MemoryErrorKind::kOwnerQuota);
  EXPECT_EQ(e.owner, "m/kv");
  EXPECT_EQ(e.requested_bytes, 2 * kMiB);
  EXPECT_EQ(e.used_bytes, 3 * kMiB);
  EXPECT_EQ(e.quota_bytes, 4 * kMiB);
  EXPECT_EQ(e.free_bytes, 1 * kMiB);
  EXPECT_EQ(e.budget_bytes, 32 * kMiB);
  Status status = b.status();
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("over its quota"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("m/kv"), std::string::npos);
  EXPECT_EQ(governor->StatsFor(kv)->failure_count, 1u);
}

TEST_F(GovernorTest, BudgetRefusalHonoursOtherOwnersGuarantees) {
  auto governor = MakeGovernor(&device_, BudgetOf(16 * kMiB));
  OwnerId a = AddOwner(*governor, {.name = "a", .guaranteed_bytes = 6 * kMiB});
  OwnerId b = AddOwner(*governor, {.name = "b"});
  MemoryResult<Block> big = governor->Allocate(b, 8 * kMiB);
  ASSERT_TRUE(big.ok()) << big.status().ToString();
  // b may not eat into a's untouched guarantee: 16 - 6 - 8 = 2 MiB left for b.
  MemoryResult<Block> more = governor->Allocate(b, 3 * kMiB);
  ASSERT_FALSE(more.ok());
  EXPECT_EQ(more.error().kind, MemoryErrorKind::kBudget);
  EXPECT_EQ(more.error().used_bytes, 8 * kMiB);
  EXPECT_EQ(more.error().free_bytes, 2 * kMiB);
  EXPECT_EQ(more.error().requested_bytes, 3 * kMiB);
  // a still gets its guarantee.
  MemoryResult<Block> guaranteed = governor->Allocate(a, 6 * kMiB);
  EXPECT_TRUE(guaranteed.ok()) << guaranteed.status().ToString();
  ASSERT_TRUE(governor->CheckInvariants().ok());
}

TEST_F(GovernorTest, ReserveThenLoadRefusesAnOversizeModelBeforeTouchingMemory) {
  auto governor = MakeGovernor(&device_, BudgetOf(16 * kMiB));
  OwnerId model = AddOwner(*governor, {.name = "big/weights"});
  const size_t allocations_before = device_.allocate_calls();
  MemoryResult<Reservation> too_big = governor->Reserve(model, 20 * kMiB);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.error().kind, MemoryErrorKind::kBudget);
  EXPECT_EQ(too_big.error().requested_bytes, 20 * kMiB);
  EXPECT_EQ(too_big.error().free_bytes, 16 * kMiB);
  EXPECT_NE(too_big.status().message().find("20.0 MiB"), std::string::npos);
  EXPECT_NE(too_big.status().message().find("16.0 MiB"), std::string::npos);
  EXPECT_EQ(device_.allocate_calls(), allocations_before);

  // A model that fits: reserve, then its allocations are covered by the reservation.
  MemoryResult<Reservation> fits = governor->Reserve(model, 10 * kMiB);
  ASSERT_TRUE(fits.ok());
  OwnerId other = AddOwner(*governor, {.name = "other"});
  MemoryResult<Block> squeeze = governor->Allocate(other, 7 * kMiB);
  ASSERT_FALSE(squeeze.ok());  // the reservation holds 10 of 16 MiB
  EXPECT_EQ(squeeze.error().free_bytes, 6 * kMiB);
  MemoryResult<Block> w1 = governor->Allocate(model, 6 * kMiB);
  MemoryResult<Block> w2 = governor->Allocate(model, 4 * kMiB);
  ASSERT_TRUE(w1.ok() && w2.ok());
  EXPECT_EQ(governor->Stats().committed_bytes, 10 * kMiB);
  fits->Release();
  EXPECT_EQ(governor->Stats().committed_bytes, 10 * kMiB);  // now held by the blocks
  ASSERT_TRUE(governor->CheckInvariants().ok());
}

TEST_F(GovernorTest, ExternalChargesCountAgainstTheBudget) {
  auto governor = MakeGovernor(&device_, BudgetOf(16 * kMiB));
  OwnerId weights = AddOwner(*governor, {.name = "mmap/weights"});
  MemoryResult<ExternalCharge> mapped = governor->ChargeExternal(weights, 12 * kMiB);
  ASSERT_TRUE(mapped.ok());
  EXPECT_EQ(governor->Stats().external_bytes, 12 * kMiB);
  MemoryResult<Block> block = governor->Allocate(weights, 5 * kMiB);
  ASSERT_FALSE(block.ok());
  EXPECT_EQ(block.error().used_bytes, 12 * kMiB);
  mapped->Release();
  EXPECT_EQ(governor->StatsFor(weights)->allocated_bytes, 0u);
}

TEST_F(GovernorTest, BadRequestsAndContradictoryOwnersAreClearErrors) {
  auto governor = MakeGovernor(&device_, BudgetOf(16 * kMiB));
  OwnerId a = AddOwner(*governor, {.name = "a", .guaranteed_bytes = 10 * kMiB});
  EXPECT_EQ(governor->Allocate(a, 0).error().kind, MemoryErrorKind::kInvalidRequest);
  EXPECT_EQ(governor->Allocate(a, SIZE_MAX).error().kind, MemoryErrorKind::kInvalidRequest);
  EXPECT_EQ(governor->Allocate(a, SIZE_MAX).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(governor->Allocate(OwnerId{999}, 10).error().kind, MemoryErrorKind::kInvalidRequest);
  EXPECT_FALSE(governor->AddOwner({.name = "a"}).ok());  // duplicate
  EXPECT_FALSE(governor->AddOwner({.name = ""}).ok());
  EXPECT_FALSE(governor->AddOwner({.name = "x", .guaranteed_bytes = 5, .max_bytes = 4}).ok());
  EXPECT_FALSE(governor->AddOwner({.name = "x", .max_bytes = 0}).ok());
  Result<OwnerId> over = governor->AddOwner({.name = "b", .guaranteed_bytes = 7 * kMiB});
  ASSERT_FALSE(over.ok());  // 10 + 7 > 16
  EXPECT_NE(over.status().message().find("does not fit"), std::string::npos);
  // Budget bigger than the device, reserve that leaves nothing.
  EXPECT_FALSE(MemoryGovernor::Create(&device_, BudgetOf(128 * kMiB)).ok());
  GovernorOptions reserve_all = BudgetOf(16 * kMiB);
  reserve_all.reserve_bytes = 16 * kMiB;
  EXPECT_FALSE(MemoryGovernor::Create(&device_, reserve_all).ok());
}

TEST_F(GovernorTest, PercentBudgetMinusReserve) {
  GovernorOptions options;
  options.budget = BudgetSpec::Percent(50);
  options.reserve_bytes = 2 * kMiB;
  auto governor = MakeGovernor(&device_, options);
  EXPECT_EQ(governor->budget_bytes(), 30 * kMiB);
}

TEST_F(GovernorTest, DoubleFreeAndForeignPointerDoNotCorruptThePool) {
  auto governor = MakeGovernor(&device_, BudgetOf(16 * kMiB));
  OwnerId a = AddOwner(*governor, {.name = "a"});
  MemoryResult<Block> block = governor->Allocate(a, 4096);
  ASSERT_TRUE(block.ok());
  void* ptr = block->data();
  block->Reset();
  Status twice = governor->FreeAddress(ptr);
  EXPECT_EQ(twice.code(), StatusCode::kFailedPrecondition);
  int local = 0;
  EXPECT_EQ(governor->FreeAddress(&local).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(governor->Stats().allocated_bytes, 0u);
  ASSERT_TRUE(governor->CheckInvariants().ok());
  MemoryResult<Block> again = governor->Allocate(a, 4096);
  EXPECT_TRUE(again.ok());
}

TEST_F(GovernorTest, RemoveOwnerOnlyWhenEmpty) {
  auto governor = MakeGovernor(&device_, BudgetOf(16 * kMiB));
  OwnerId a = AddOwner(*governor, {.name = "a"});
  MemoryResult<Block> block = governor->Allocate(a, 4096);
  EXPECT_EQ(governor->RemoveOwner(a).code(), StatusCode::kFailedPrecondition);
  block->Reset();
  EXPECT_TRUE(governor->RemoveOwner(a).ok());
  EXPECT_FALSE(governor->FindOwner("a").ok());
}

TEST_F(GovernorTest, DeviceFailureIsATypedErrorNotACrash) {
  auto governor = MakeGovernor(&device_, BudgetOf(16 * kMiB));
  OwnerId a = AddOwner(*governor, {.name = "a"});
  device_.FailNextAllocations(2);
  MemoryResult<Block> block = governor->Allocate(a, 4096);
  ASSERT_FALSE(block.ok());
  EXPECT_EQ(block.error().kind, MemoryErrorKind::kDeviceOutOfMemory);
  EXPECT_EQ(governor->Stats().failure_count, 1u);
  EXPECT_TRUE(governor->Allocate(a, 4096).ok());
}

TEST_F(GovernorTest, SnapshotIsJsonWithOwnersAndSegments) {
  auto governor = MakeGovernor(&device_, BudgetOf(16 * kMiB));
  OwnerId a = AddOwner(*governor, {.name = "a", .priority = 3});
  MemoryResult<Block> block = governor->Allocate(a, 10 * kKiB);
  nlohmann::json snapshot = governor->Snapshot();
  EXPECT_EQ(snapshot["budget_bytes"], 16 * kMiB);
  ASSERT_EQ(snapshot["owners"].size(), 1u);
  EXPECT_EQ(snapshot["owners"][0]["name"], "a");
  EXPECT_EQ(snapshot["owners"][0]["allocated_bytes"], 10 * kKiB);
  EXPECT_EQ(snapshot["owners"][0]["priority"], 3);
  ASSERT_EQ(snapshot["pool"]["segments"].size(), 1u);
  EXPECT_EQ(snapshot["pool"]["segments"][0]["blocks"][0]["tag"], a.value);
  EXPECT_FALSE(snapshot.dump().empty());
}

TEST_F(GovernorTest, ManyThreadsAllocatingAtOnceStayWithinQuotas) {
  auto governor = MakeGovernor(&device_, BudgetOf(48 * kMiB));
  constexpr int kThreads = 8;
  std::vector<OwnerId> owners;
  for (int t = 0; t < kThreads; ++t) {
    owners.push_back(AddOwner(*governor, {.name = "t" + std::to_string(t), .max_bytes = 5 * kMiB}));
  }
  std::atomic<int> refusals{0};
  std::atomic<bool> broken{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(1234 + t);
      std::vector<Block> held;
      for (int i = 0; i < 3000; ++i) {
        if (!held.empty() && (rng() % 3 == 0 || held.size() > 40)) {
          held.erase(held.begin() + static_cast<long>(rng() % held.size()));
          continue;
        }
        size_t bytes = 1 + rng() % (rng() % 8 == 0 ? 1 * kMiB : 16 * kKiB);
        MemoryResult<Block> block = governor->Allocate(owners[t], bytes);
        if (!block.ok()) {
          ++refusals;
          if (block.error().kind != MemoryErrorKind::kOwnerQuota) broken = true;
          continue;
        }
        std::memset(block->data(), t, bytes);
        held.push_back(std::move(block).value());
        if (governor->StatsFor(owners[t])->allocated_bytes > 5 * kMiB) broken = true;
      }
      for (const Block& b : held) {
        for (size_t k = 0; k < b.size(); k += 997) {
          if (static_cast<const unsigned char*>(b.data())[k] != t) broken = true;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_FALSE(broken.load());
  EXPECT_GT(refusals.load(), 0);  // quotas were hit and refused cleanly
  GovernorStats stats = governor->Stats();
  EXPECT_EQ(stats.allocated_bytes, 0u);
  ASSERT_TRUE(governor->CheckInvariants().ok());
}

}  // namespace
}  // namespace pier

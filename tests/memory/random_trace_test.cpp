// A seeded random trace of allocate/free operations against the governor, checked at every
// step against a model of what should be live.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
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

constexpr int kSteps = 120000;
constexpr int kFullCheckEvery = 500;

struct Live {
  Block block;
  size_t owner_index = 0;
  uint64_t stamp = 0;  // written at both ends; checked on free
};

uint64_t Stamp(uint64_t step) { return step * 0x9E3779B97F4A7C15ull + 1; }

void WriteStamp(const Block& block, uint64_t stamp) {
  auto* bytes = static_cast<unsigned char*>(block.data());
  std::memcpy(bytes, &stamp, std::min<size_t>(8, block.size()));
  if (block.size() >= 16) std::memcpy(bytes + block.size() - 8, &stamp, 8);
}

bool StampIntact(const Block& block, uint64_t stamp) {
  const auto* bytes = static_cast<const unsigned char*>(block.data());
  uint64_t head = 0, tail = stamp;
  std::memcpy(&head, bytes, std::min<size_t>(8, block.size()));
  if (block.size() >= 16) std::memcpy(&tail, bytes + block.size() - 8, 8);
  if (block.size() < 8) {
    uint64_t expected = 0;
    std::memcpy(&expected, &stamp, block.size());
    return head == expected;
  }
  return head == stamp && tail == stamp;
}

TEST(RandomTraceTest, HundredThousandOperationsKeepEveryInvariant) {
  FakeDevice device(FakeDeviceOptions{.capacity_bytes = 64 * kMiB});
  auto governor = MakeGovernor(&device, BudgetOf(40 * kMiB));
  struct OwnerModel {
    OwnerSpec spec;
    OwnerId id;
    uint64_t used = 0;
  };
  std::vector<OwnerModel> owners = {
      {{.name = "a/weights", .guaranteed_bytes = 4 * kMiB, .max_bytes = 16 * kMiB}, {}, 0},
      {{.name = "b/workspace", .max_bytes = 20 * kMiB}, {}, 0},
      {{.name = "c/kv", .guaranteed_bytes = 2 * kMiB, .max_bytes = 8 * kMiB}, {}, 0},
      {{.name = "d/other"}, {}, 0},
  };
  for (OwnerModel& o : owners) o.id = AddOwner(*governor, o.spec);

  std::mt19937_64 rng(20240601);
  std::vector<Live> live;
  std::map<uintptr_t, size_t> intervals;  // start -> size of live blocks
  uint64_t model_total = 0;
  int refusals = 0, quota_refusals = 0, budget_refusals = 0, device_refusals = 0, frees = 0,
      allocs = 0;

  auto headroom = [&](size_t index) {
    uint64_t others = 0;
    for (size_t i = 0; i < owners.size(); ++i) {
      if (i != index) others += std::max(owners[i].used, owners[i].spec.guaranteed_bytes);
    }
    const uint64_t budget = governor->budget_bytes();
    return budget > others + owners[index].used ? budget - others - owners[index].used : 0;
  };

  for (int step = 0; step < kSteps; ++step) {
    const uint64_t r = rng();
    // Phases of growth (up to the quotas and the budget), steady state and draining; freed
    // blocks are mostly recent ones (short lifetimes), sometimes any (long lifetimes).
    static constexpr uint64_t kFreePercent[3] = {25, 50, 75};
    const bool do_free = !live.empty() && (r % 100) < kFreePercent[(step / 2000) % 3];
    if (do_free) {
      size_t index = (r >> 8) % 4 == 0
                         ? (r >> 16) % live.size()
                         : live.size() - 1 - (r >> 16) % std::min<size_t>(8, live.size());
      Live item = std::move(live[index]);
      live[index] = std::move(live.back());
      live.pop_back();
      ASSERT_TRUE(StampIntact(item.block, item.stamp)) << "block overwritten at step " << step;
      intervals.erase(reinterpret_cast<uintptr_t>(item.block.data()));
      owners[item.owner_index].used -= item.block.charged_bytes();
      model_total -= item.block.charged_bytes();
      item.block.Reset();
      ++frees;
    } else {
      size_t owner_index = (r >> 4) % owners.size();
      const uint64_t kind = (r >> 12) % 100;
      size_t bytes = kind < 70   ? 1 + (r >> 20) % (4 * kKiB)
                     : kind < 95 ? 1 + (r >> 20) % (256 * kKiB)
                                 : 256 * kKiB + (r >> 20) % (3 * kMiB);
      OwnerModel& o = owners[owner_index];
      const uint64_t charged = (bytes + 255) / 256 * 256;
      MemoryResult<Block> block = governor->Allocate(o.id, bytes);
      if (!block.ok()) {
        ++refusals;
        const MemoryError& e = block.error();
        ASSERT_EQ(e.used_bytes, o.used) << "step " << step;
        ASSERT_EQ(e.requested_bytes, bytes);
        ASSERT_EQ(e.quota_bytes, o.spec.max_bytes);
        if (e.kind == MemoryErrorKind::kOwnerQuota) {
          ++quota_refusals;
          ASSERT_GT(o.used + charged, o.spec.max_bytes) << "quota refusal at step " << step;
        } else if (e.kind == MemoryErrorKind::kBudget) {
          ++budget_refusals;
          ASSERT_GT(charged, headroom(owner_index)) << "budget refusal at step " << step;
          ASSERT_EQ(e.free_bytes, std::min(headroom(owner_index), o.spec.max_bytes - o.used));
        } else {
          // Fragmentation can make the physical budget refuse what the accounting allows.
          ASSERT_EQ(e.kind, MemoryErrorKind::kDeviceOutOfMemory) << block.status().ToString();
          ++device_refusals;
        }
      } else {
        ASSERT_LE(charged, headroom(owner_index)) << "granted past the budget at step " << step;
        ASSERT_LE(o.used + charged, o.spec.max_bytes);
        const auto addr = reinterpret_cast<uintptr_t>(block->data());
        ASSERT_EQ(addr % 256, 0u);
        ASSERT_EQ(block->charged_bytes(), charged);
        // No overlap with the live neighbours on either side.
        auto next = intervals.lower_bound(addr);
        if (next != intervals.end()) {
          ASSERT_LE(addr + bytes, next->first) << "step " << step;
        }
        if (next != intervals.begin()) {
          auto prev = std::prev(next);
          ASSERT_LE(prev->first + prev->second, addr) << "step " << step;
        }
        intervals.emplace(addr, bytes);
        Live item{std::move(block).value(), owner_index, Stamp(step)};
        WriteStamp(item.block, item.stamp);
        o.used += charged;
        model_total += charged;
        live.push_back(std::move(item));
        ++allocs;
      }
    }
    if (step % 5000 == 4999) governor->Trim();
    // Cheap invariants every step.
    GovernorStats stats = governor->Stats();
    ASSERT_EQ(stats.allocated_bytes, model_total) << "step " << step;
    ASSERT_EQ(stats.pool.live_blocks, live.size());
    ASSERT_LE(stats.reserved_bytes, governor->budget_bytes());
    ASSERT_LE(stats.committed_bytes, governor->budget_bytes());
    for (size_t i = 0; i < owners.size(); ++i) {
      ASSERT_EQ(stats.owners[i].allocated_bytes, owners[i].used) << "step " << step;
      ASSERT_LE(stats.owners[i].allocated_bytes, owners[i].spec.max_bytes);
    }
    if (step % kFullCheckEvery == 0) {
      Status invariants = governor->CheckInvariants();
      ASSERT_TRUE(invariants.ok()) << "step " << step << ": " << invariants.ToString();
    }
  }
  // Every kind of outcome happened.
  EXPECT_GT(allocs, kSteps / 3);
  EXPECT_GT(frees, kSteps / 3);
  EXPECT_GT(quota_refusals, 0);
  EXPECT_GT(budget_refusals, 0);
  std::printf("trace: %d allocations, %d frees, %d refusals (%d quota, %d budget, %d device)\n",
              allocs, frees, refusals, quota_refusals, budget_refusals, device_refusals);

  for (Live& item : live) ASSERT_TRUE(StampIntact(item.block, item.stamp));
  live.clear();
  GovernorStats end = governor->Stats();
  EXPECT_EQ(end.allocated_bytes, 0u);
  EXPECT_EQ(end.pool.live_blocks, 0u);
  EXPECT_EQ(end.alloc_count, static_cast<uint64_t>(allocs));
  ASSERT_TRUE(governor->CheckInvariants().ok());
  governor->Trim();
  EXPECT_EQ(device.allocated_bytes(), 0u);
  EXPECT_EQ(device.live_allocations(), 0u);
}

}  // namespace
}  // namespace pier

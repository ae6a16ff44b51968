#include "memory/caching_allocator.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "memory/test_util.h"

namespace pier {
namespace {

using testing::kKiB;
using testing::kMiB;

// Segments straight from a fake device; events from the device.
class DeviceBackend : public AllocatorBackend {
 public:
  explicit DeviceBackend(Device* device) : device_(device) {}
  Result<void*> AllocateSegment(size_t bytes) override {
    ++segment_requests;
    return device_->AllocateRaw(bytes, 256);
  }
  void FreeSegment(void* ptr, size_t bytes) override { device_->FreeRaw(ptr, bytes); }
  Result<Event> RecordEvent(Stream stream) override {
    PIER_ASSIGN_OR_RETURN(Event e, device_->CreateEvent());
    PIER_RETURN_IF_ERROR(device_->RecordEvent(e, stream));
    return e;
  }
  bool EventDone(Event event) override { return *device_->EventDone(event); }
  void DestroyEvent(Event event) override { device_->DestroyEvent(event); }
  int segment_requests = 0;

 private:
  Device* device_;
};

class CachingAllocatorTest : public ::testing::Test {
 protected:
  FakeDevice device_{FakeDeviceOptions{.capacity_bytes = 16 * kMiB, .manual_events = true}};
  DeviceBackend backend_{&device_};
  CachingAllocator pool_{&backend_, testing::SmallPool()};

  AllocatedBlock Alloc(size_t bytes, Stream stream = {}) {
    Result<AllocatedBlock> block = pool_.Allocate(bytes, stream, 1);
    PIER_CHECK(block.ok(), block.status().ToString());
    return *block;
  }
  void Free(const AllocatedBlock& block) {
    Result<FreedBlock> freed = pool_.Free(block.ptr);
    PIER_CHECK(freed.ok(), freed.status().ToString());
  }
};

TEST_F(CachingAllocatorTest, RoundsTo256AndAligns) {
  AllocatedBlock a = Alloc(1);
  AllocatedBlock b = Alloc(300);
  EXPECT_EQ(a.size, 256u);
  EXPECT_EQ(b.size, 512u);
  EXPECT_EQ(b.requested, 300u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.ptr) % 256, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.ptr) % 256, 0u);
  // Both came from one small segment, next to each other.
  EXPECT_EQ(static_cast<char*>(b.ptr) - static_cast<char*>(a.ptr), 256);
  EXPECT_EQ(pool_.Stats().segments, 1u);
  Free(a);
  Free(b);
  ASSERT_TRUE(pool_.CheckInvariants().ok());
}

TEST_F(CachingAllocatorTest, CoalescesNeighboursAndReusesCachedMemory) {
  AllocatedBlock a = Alloc(4 * kKiB);
  AllocatedBlock b = Alloc(4 * kKiB);
  AllocatedBlock c = Alloc(4 * kKiB);
  Free(a);
  Free(c);
  AllocatorStats mid = pool_.Stats();
  EXPECT_EQ(mid.free_blocks, 2u);  // a alone; c merged with the tail
  Free(b);
  AllocatorStats after = pool_.Stats();
  EXPECT_EQ(after.free_blocks, 1u);  // everything merged back into one block
  EXPECT_EQ(after.largest_free_block_bytes, 256 * kKiB);
  EXPECT_EQ(after.external_fragmentation, 0.0);
  const int requests = backend_.segment_requests;
  AllocatedBlock d = Alloc(12 * kKiB);
  EXPECT_EQ(backend_.segment_requests, requests);  // served from the cache
  EXPECT_EQ(d.ptr, a.ptr);
  Free(d);
  ASSERT_TRUE(pool_.CheckInvariants().ok());
}

TEST_F(CachingAllocatorTest, BestFitPicksTheSmallestFreeBlockThatFits) {
  // Carve holes of 8 KiB and 3 KiB separated by live blocks.
  AllocatedBlock big_hole = Alloc(8 * kKiB);
  AllocatedBlock sep1 = Alloc(1 * kKiB);
  AllocatedBlock small_hole = Alloc(3 * kKiB);
  AllocatedBlock sep2 = Alloc(1 * kKiB);
  Free(big_hole);
  Free(small_hole);
  AllocatedBlock x = Alloc(2 * kKiB);
  EXPECT_EQ(x.ptr, small_hole.ptr);
  Free(x);
  Free(sep1);
  Free(sep2);
  ASSERT_TRUE(pool_.CheckInvariants().ok());
}

TEST_F(CachingAllocatorTest, LargeRequestsUseTheLargePoolAndTrimReturnsSegments) {
  AllocatedBlock big = Alloc(3 * kMiB);  // above large_segment_bytes: own segment, rounded
  AllocatedBlock mid = Alloc(100 * kKiB);
  AllocatorStats stats = pool_.Stats();
  EXPECT_EQ(stats.segments, 2u);
  EXPECT_EQ(stats.reserved_bytes, 3 * kMiB + 2 * kMiB);
  Free(big);
  Free(mid);
  EXPECT_EQ(device_.allocated_bytes(), 5 * kMiB);  // cached
  EXPECT_EQ(pool_.Trim(), 5 * kMiB);
  EXPECT_EQ(device_.allocated_bytes(), 0u);
  EXPECT_EQ(pool_.Stats().segments, 0u);
}

TEST_F(CachingAllocatorTest, DeviceRefusalTrimsCacheAndRetriesSmaller) {
  // Fill the cache with segments, free them, then ask for more than is left.
  std::vector<AllocatedBlock> blocks;
  for (int i = 0; i < 5; ++i) blocks.push_back(Alloc(1900 * kKiB));  // 5 x 2 MiB segments
  for (const AllocatedBlock& b : blocks) Free(b);
  EXPECT_EQ(pool_.Stats().reserved_bytes, 10 * kMiB);
  AllocatedBlock huge = Alloc(12 * kMiB);  // needs the cached 10 MiB back
  EXPECT_EQ(pool_.Stats().reserved_bytes, 12 * kMiB);
  Result<AllocatedBlock> too_big = pool_.Allocate(8 * kMiB, Stream{}, 1);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(pool_.Stats().failure_count, 1u);
  Free(huge);
  ASSERT_TRUE(pool_.CheckInvariants().ok());
}

TEST_F(CachingAllocatorTest, DoubleFreeAndForeignPointersAreErrorsThatChangeNothing) {
  AllocatedBlock a = Alloc(1000);
  AllocatedBlock b = Alloc(1000);
  Free(a);
  AllocatorStats before = pool_.Stats();
  Result<FreedBlock> twice = pool_.Free(a.ptr);
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(twice.status().message().find("double free"), std::string::npos);
  int local = 0;
  Result<FreedBlock> foreign = pool_.Free(&local);
  ASSERT_FALSE(foreign.ok());
  EXPECT_EQ(foreign.status().code(), StatusCode::kInvalidArgument);
  Result<FreedBlock> inside = pool_.Free(static_cast<char*>(b.ptr) + 256);
  ASSERT_FALSE(inside.ok());
  EXPECT_NE(inside.status().message().find("not the start"), std::string::npos);
  AllocatorStats after = pool_.Stats();
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(after.free_count, before.free_count);
  ASSERT_TRUE(pool_.CheckInvariants().ok());
  Free(b);
}

TEST_F(CachingAllocatorTest, BlockUsedOnAnotherStreamIsNotReusedUntilItsEventCompletes) {
  Stream other{7};
  AllocatedBlock a = Alloc(4 * kKiB);
  ASSERT_TRUE(pool_.RecordStream(a.ptr, other).ok());
  Free(a);
  AllocatorStats stats = pool_.Stats();
  EXPECT_EQ(stats.pending_bytes, 4 * kKiB);
  EXPECT_EQ(stats.active_bytes, 4 * kKiB);
  AllocatedBlock b = Alloc(4 * kKiB);
  EXPECT_NE(b.ptr, a.ptr);  // still in flight on the other stream
  device_.CompleteAllWork();
  Free(b);
  AllocatedBlock c = Alloc(4 * kKiB);
  EXPECT_EQ(c.ptr, a.ptr);  // reusable now
  EXPECT_EQ(pool_.Stats().pending_bytes, 0u);
  Free(c);
  ASSERT_TRUE(pool_.CheckInvariants().ok());
}

TEST_F(CachingAllocatorTest, SegmentsAreNotSharedAcrossStreams) {
  AllocatedBlock a = Alloc(1 * kKiB, Stream{1});
  AllocatedBlock b = Alloc(1 * kKiB, Stream{2});
  EXPECT_EQ(pool_.Stats().segments, 2u);
  Free(a);
  Free(b);
}

TEST_F(CachingAllocatorTest, SnapshotListsSegmentsAndBlocks) {
  AllocatedBlock a = Alloc(1 * kKiB);
  nlohmann::json snapshot = pool_.Snapshot();
  ASSERT_EQ(snapshot["segments"].size(), 1u);
  const auto& blocks = snapshot["segments"][0]["blocks"];
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_EQ(blocks[0]["state"], "allocated");
  EXPECT_EQ(blocks[0]["bytes"], 1 * kKiB);
  EXPECT_EQ(blocks[1]["state"], "free");
  Free(a);
}

TEST(CachingAllocatorDeathTest, DestroyingWithLiveBlocksAborts) {
  EXPECT_DEATH(
      {
        FakeDevice device;
        DeviceBackend backend(&device);
        CachingAllocator pool(&backend, testing::SmallPool());
        (void)pool.Allocate(100, Stream{}, 1);
      },
      "live blocks");
}

}  // namespace
}  // namespace pier

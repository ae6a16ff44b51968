#include "memory/pinned_host_pool.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstring>

#include "device/cpu/cpu_device.h"
#include "memory/test_util.h"

namespace pier {
namespace {

using testing::kKiB;
using testing::kMiB;

std::unique_ptr<CpuDevice> MakeCpu() {
  CpuDeviceOptions options;
  options.capacity_bytes = 256 * kMiB;
  return std::move(CpuDevice::Create(options)).value();
}

TEST(PinnedHostPoolTest, CachesBuffersAndReportsLocking) {
  auto device = MakeCpu();
  PinnedHostPool pool(device.get(), {.limit_bytes = 8 * kMiB, .pool = testing::SmallPool()});
  void* first = nullptr;
  {
    Result<PinnedBuffer> buffer = pool.Allocate(100 * kKiB);
    ASSERT_TRUE(buffer.ok()) << buffer.status().ToString();
    std::memset(buffer->data(), 7, buffer->size());
    first = buffer->data();
  }
  Result<PinnedBuffer> again = pool.Allocate(100 * kKiB);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->data(), first);  // reused from the cache
  PinnedHostStats stats = pool.Stats();
  EXPECT_EQ(stats.locked_bytes + stats.unlocked_bytes, stats.pool.reserved_bytes);
  EXPECT_EQ(stats.lock_refused, stats.unlocked_bytes > 0);
}

TEST(PinnedHostPoolTest, FallsBackWhenTheOsRefusesToLock) {
  // Forbid locking for this process, then ask for a buffer: it still works, unlocked.
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &old), 0);
  rlimit none = old;
  none.rlim_cur = 0;
  if (setrlimit(RLIMIT_MEMLOCK, &none) != 0) GTEST_SKIP() << "cannot lower RLIMIT_MEMLOCK here";
  auto device = MakeCpu();
  {
    PinnedHostPool pool(device.get(), {.limit_bytes = 8 * kMiB, .pool = testing::SmallPool()});
    Result<PinnedBuffer> buffer = pool.Allocate(64 * kKiB);
    ASSERT_TRUE(buffer.ok()) << buffer.status().ToString();
    std::memset(buffer->data(), 1, buffer->size());
    PinnedHostStats stats = pool.Stats();
    // Root ignores RLIMIT_MEMLOCK (CAP_IPC_LOCK): then the pages are locked anyway.
    if (stats.locked_bytes == 0) {
      EXPECT_TRUE(stats.lock_refused);
      EXPECT_GT(stats.unlocked_bytes, 0u);
    }
  }
  setrlimit(RLIMIT_MEMLOCK, &old);
}

TEST(PinnedHostPoolTest, ReportsUnlockedSegmentsFromADeviceThatCannotPin) {
  FakeDevice device;  // hands out ordinary pages, locked = false
  PinnedHostPool pool(&device, {.limit_bytes = 4 * kMiB, .pool = testing::SmallPool()});
  Result<PinnedBuffer> buffer = pool.Allocate(10 * kKiB);
  ASSERT_TRUE(buffer.ok());
  PinnedHostStats stats = pool.Stats();
  EXPECT_TRUE(stats.lock_refused);
  EXPECT_EQ(stats.locked_bytes, 0u);
  EXPECT_EQ(stats.unlocked_bytes, stats.pool.reserved_bytes);
  EXPECT_GT(stats.unlocked_bytes, 0u);
}

TEST(PinnedHostPoolTest, RefusesPastItsLimit) {
  auto device = MakeCpu();
  PinnedHostPool pool(device.get(), {.limit_bytes = 1 * kMiB, .pool = testing::SmallPool()});
  Result<PinnedBuffer> too_big = pool.Allocate(2 * kMiB);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(pool.Allocate(0).ok());
}

}  // namespace
}  // namespace pier

#include "device/cpu/system_memory.h"

#include <gtest/gtest.h>

#include <string>

#include "device/cpu/cpu_device.h"

namespace pier {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kFixtureAvailable = uint64_t{8388608} * 1024;  // MemAvailable in the fixtures

SystemMemoryRoots FixtureRoots(const std::string& name) {
  std::string base = std::string(PIER_SOURCE_DIR) + "/tests/fixtures/cgroup/" + name;
  return SystemMemoryRoots{base + "/proc", base + "/sys/fs/cgroup"};
}

TEST(SystemMemoryTest, ParsesMeminfoFields) {
  Result<SystemMemory> memory =
      ParseMeminfo("MemTotal:       1000 kB\nMemFree: 5 kB\nMemAvailable:     300 kB\n");
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  EXPECT_EQ(memory->mem_total_bytes, 1000u * 1024);
  EXPECT_EQ(memory->mem_available_bytes, 300u * 1024);
  EXPECT_FALSE(memory->cgroup.has_value());
  EXPECT_EQ(memory->CapacityBytes(), 300u * 1024);
}

TEST(SystemMemoryTest, RejectsMeminfoWithoutAvailable) {
  Result<SystemMemory> memory = ReadSystemMemory(FixtureRoots("no_available"));
  ASSERT_FALSE(memory.ok());
  EXPECT_EQ(memory.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(memory.status().message().find("MemAvailable"), std::string::npos);
}

TEST(SystemMemoryTest, RejectsGarbageInMeminfo) {
  EXPECT_FALSE(ParseMeminfo("MemTotal: lots kB\nMemAvailable: 1 kB\n").ok());
}

TEST(SystemMemoryTest, ParentSliceLimitAppliesToLeafWithMax) {
  Result<SystemMemory> memory = ReadSystemMemory(FixtureRoots("v2_limited"));
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  ASSERT_TRUE(memory->cgroup.has_value());
  EXPECT_EQ(memory->cgroup->version, 2);
  EXPECT_EQ(memory->cgroup->limit_bytes, 2 * kGiB);
  EXPECT_EQ(memory->cgroup->usage_bytes, 512 * kMiB);
  EXPECT_NE(memory->cgroup->path.find("pier.slice"), std::string::npos);
  EXPECT_EQ(memory->mem_available_bytes, kFixtureAvailable);
  EXPECT_EQ(memory->CapacityBytes(), 2 * kGiB);
  EXPECT_EQ(memory->AvailableNowBytes(), 2 * kGiB - 512 * kMiB);
}

TEST(SystemMemoryTest, MaxEverywhereMeansNoLimit) {
  Result<SystemMemory> memory = ReadSystemMemory(FixtureRoots("v2_unlimited"));
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  EXPECT_FALSE(memory->cgroup.has_value());
  EXPECT_EQ(memory->CapacityBytes(), kFixtureAvailable);
}

TEST(SystemMemoryTest, NamespacedCgroupReadsMountRoot) {
  Result<SystemMemory> memory = ReadSystemMemory(FixtureRoots("v2_namespaced"));
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  ASSERT_TRUE(memory->cgroup.has_value());
  EXPECT_EQ(memory->cgroup->limit_bytes, 1 * kGiB);
  EXPECT_EQ(memory->CapacityBytes(), 1 * kGiB);
}

TEST(SystemMemoryTest, LimitAboveAvailableLeavesAvailable) {
  Result<SystemMemory> memory = ReadSystemMemory(FixtureRoots("v2_above_available"));
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  ASSERT_TRUE(memory->cgroup.has_value());
  EXPECT_EQ(memory->cgroup->limit_bytes, 32 * kGiB);
  EXPECT_EQ(memory->CapacityBytes(), kFixtureAvailable);
}

TEST(SystemMemoryTest, V1LimitAtMountRootOfHybridHost) {
  Result<SystemMemory> memory = ReadSystemMemory(FixtureRoots("v1_hybrid"));
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  ASSERT_TRUE(memory->cgroup.has_value());
  EXPECT_EQ(memory->cgroup->version, 1);
  EXPECT_EQ(memory->cgroup->limit_bytes, 512 * kMiB);
  EXPECT_EQ(memory->AvailableNowBytes(), 256 * kMiB);
}

TEST(SystemMemoryTest, V1UnlimitedSentinelMeansNoLimit) {
  Result<SystemMemory> memory = ReadSystemMemory(FixtureRoots("v1_unlimited"));
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  EXPECT_FALSE(memory->cgroup.has_value());
}

TEST(SystemMemoryTest, GarbageLimitIsAClearError) {
  Result<SystemMemory> memory = ReadSystemMemory(FixtureRoots("garbage"));
  ASSERT_FALSE(memory.ok());
  EXPECT_EQ(memory.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(memory.status().message().find("memory.max"), std::string::npos);
  EXPECT_NE(memory.status().message().find("lots"), std::string::npos);
}

TEST(SystemMemoryTest, MissingProcIsAnIoError) {
  Result<SystemMemory> memory = ReadSystemMemory({"/nonexistent/proc", "/nonexistent/cgroup"});
  ASSERT_FALSE(memory.ok());
  EXPECT_EQ(memory.status().code(), StatusCode::kIoError);
}

TEST(CpuDeviceTest, DefaultCapacityComesFromTheFixtureCgroup) {
  CpuDeviceOptions options;
  options.roots = FixtureRoots("v2_limited");
  Result<std::unique_ptr<CpuDevice>> device = CpuDevice::Create(options);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  EXPECT_EQ((*device)->TotalBytes(), 2 * kGiB);
  EXPECT_EQ((*device)->kind(), DeviceKind::kCpu);
  EXPECT_LE((*device)->FreeBytes(), 2 * kGiB - 512 * kMiB);
}

TEST(CpuDeviceTest, OverrideCapacityReplacesTheProbe) {
  CpuDeviceOptions options;
  options.roots = FixtureRoots("v2_limited");
  options.capacity_bytes = 96 * kMiB;
  Result<std::unique_ptr<CpuDevice>> device = CpuDevice::Create(options);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  EXPECT_EQ((*device)->TotalBytes(), 96 * kMiB);
}

TEST(CpuDeviceTest, ZeroOverrideIsRejected) {
  CpuDeviceOptions options;
  options.capacity_bytes = 0;
  Result<std::unique_ptr<CpuDevice>> device = CpuDevice::Create(options);
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), StatusCode::kInvalidArgument);
}

TEST(CpuDeviceTest, RealSystemProbeGivesAPositiveCapacity) {
  Result<std::unique_ptr<CpuDevice>> device = CpuDevice::Create();
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  EXPECT_GT((*device)->TotalBytes(), 0u);
}

}  // namespace
}  // namespace pier

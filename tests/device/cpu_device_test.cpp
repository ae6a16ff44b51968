#include "device/cpu/cpu_device.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "device/fake_device.h"

namespace pier {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

std::unique_ptr<CpuDevice> MakeCpu(size_t capacity) {
  CpuDeviceOptions options;
  options.capacity_bytes = capacity;
  Result<std::unique_ptr<CpuDevice>> device = CpuDevice::Create(options);
  PIER_CHECK(device.ok(), device.status().ToString());
  return std::move(device).value();
}

TEST(CpuDeviceTest, AllocationsAreAlignedAndCounted) {
  auto device = MakeCpu(64 * kMiB);
  for (size_t bytes : {size_t{1}, size_t{4096}, 3 * kMiB}) {
    Result<void*> ptr = device->AllocateRaw(bytes, 256);
    ASSERT_TRUE(ptr.ok()) << ptr.status().ToString();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(*ptr) % 256, 0u);
    EXPECT_EQ(device->allocated_bytes(), bytes);
    std::memset(*ptr, 0xab, bytes);
    device->FreeRaw(*ptr, bytes);
    EXPECT_EQ(device->allocated_bytes(), 0u);
  }
}

TEST(CpuDeviceTest, RejectsZeroSizeAndBadAlignment) {
  auto device = MakeCpu(64 * kMiB);
  EXPECT_EQ(device->AllocateRaw(0, 256).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(device->AllocateRaw(64, 3).status().code(), StatusCode::kInvalidArgument);
}

TEST(CpuDeviceTest, CopiesRoundTrip) {
  auto device = MakeCpu(64 * kMiB);
  Result<void*> ptr = device->AllocateRaw(1024, 256);
  ASSERT_TRUE(ptr.ok());
  std::vector<uint8_t> src(1024), dst(1024, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7);
  Stream stream = *device->CreateStream();
  ASSERT_TRUE(device->CopyHostToDevice(*ptr, src.data(), 1024, stream).ok());
  ASSERT_TRUE(device->CopyDeviceToHost(dst.data(), *ptr, 1024, stream).ok());
  ASSERT_TRUE(device->Synchronize(stream).ok());
  EXPECT_EQ(src, dst);
  ASSERT_TRUE(device->Memset(*ptr, 0, 1024, stream).ok());
  ASSERT_TRUE(device->CopyDeviceToHost(dst.data(), *ptr, 1024, stream).ok());
  EXPECT_EQ(dst, std::vector<uint8_t>(1024, 0));
  EXPECT_EQ(device->CopyHostToDevice(nullptr, src.data(), 4, stream).code(),
            StatusCode::kInvalidArgument);
  Event event = *device->CreateEvent();
  ASSERT_TRUE(device->RecordEvent(event, stream).ok());
  EXPECT_TRUE(*device->EventDone(event));
  device->DestroyEvent(event);
  device->DestroyStream(stream);
  device->FreeRaw(*ptr, 1024);
}

TEST(CpuDeviceTest, VirtualArenaMapsWritesAndUnmapsChunks) {
  auto device = MakeCpu(64 * kMiB);
  ASSERT_TRUE(device->SupportsVirtualMemory());
  const size_t g = device->VmGranularity();
  Result<VirtualRange> range = device->ReserveAddressRange(16 * g);
  ASSERT_TRUE(range.ok()) << range.status().ToString();
  EXPECT_EQ(device->allocated_bytes(), 0u);
  ASSERT_TRUE(device->MapChunk(*range, 0, 4 * g).ok());
  EXPECT_EQ(device->allocated_bytes(), 4 * g);
  std::memset(range->base, 0x5a, 4 * g);
  EXPECT_EQ(static_cast<uint8_t*>(range->base)[4 * g - 1], 0x5a);
  ASSERT_TRUE(device->UnmapChunk(*range, 2 * g, 2 * g).ok());
  EXPECT_EQ(device->allocated_bytes(), 2 * g);
  EXPECT_EQ(device->MapChunk(*range, 1, g).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(device->MapChunk(*range, 16 * g, g).code(), StatusCode::kInvalidArgument);
  device->ReleaseAddressRange(*range);
  EXPECT_EQ(device->allocated_bytes(), 0u);
}

// The VmFlags line of /proc/self/smaps for the mapping that holds `address` ("" if none does).
std::string VmFlagsOf(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  const auto a = reinterpret_cast<uintptr_t>(address);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long begin = 0, end = 0;
    // A mapping's first line: "begin-end perms ...", where a field line is "Name: value".
    if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2 &&
        line.find(':') > line.find(' ')) {
      inside = a >= begin && a < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

TEST(CpuDeviceTest, LargeAllocationsStartOnAHugePageAndAskForHugePages) {
  auto device = MakeCpu(64 * kMiB);
  constexpr size_t kHuge = 2 * kMiB;
  const size_t bytes = 5 * kMiB + 123;
  const size_t mapped = (bytes + 4095) / 4096 * 4096;
  Result<void*> ptr = device->AllocateRaw(bytes, 256);
  ASSERT_TRUE(ptr.ok()) << ptr.status().ToString();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*ptr) % kHuge, 0u);
  std::memset(*ptr, 0x3c, bytes);
  EXPECT_EQ(static_cast<uint8_t*>(*ptr)[bytes - 1], 0x3c);
  // MADV_HUGEPAGE marks the mapping "hg" whatever THP's mode; only a kernel without THP (no
  // such file) refuses it, and a sandbox whose smaps lists no VmFlags cannot show it.
  const bool thp = std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled").good();
  const bool flags_shown = !VmFlagsOf(*ptr).empty();
  if (thp && flags_shown) {
    EXPECT_NE(VmFlagsOf(*ptr).find(" hg"), std::string::npos) << VmFlagsOf(*ptr);
  } else {
    std::printf("huge page advice not checked: %s\n",
                thp ? "smaps shows no VmFlags" : "this kernel has no transparent huge pages");
  }
  device->FreeRaw(*ptr, bytes);
  EXPECT_EQ(device->allocated_bytes(), 0u);
  if (flags_shown) {
    // Nothing of the mapping (nor of the padding trimmed off its ends) is left.
    EXPECT_EQ(VmFlagsOf(*ptr), "") << "the mapping outlived FreeRaw";
    EXPECT_EQ(VmFlagsOf(static_cast<char*>(*ptr) + mapped - 1), "");
  }
  // Below a huge page: an ordinary mapping, still usable.
  Result<void*> small = device->AllocateRaw(kMiB + kMiB / 2, 256);
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  std::memset(*small, 1, kMiB + kMiB / 2);
  device->FreeRaw(*small, kMiB + kMiB / 2);
  EXPECT_EQ(device->allocated_bytes(), 0u);
}

TEST(CpuDeviceTest, PinnedHostMemoryIsUsableWhetherOrNotLocked) {
  auto device = MakeCpu(64 * kMiB);
  Result<HostAllocation> host = device->AllocatePinnedHost(100000);
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  EXPECT_GE(host->bytes, 100000u);
  std::memset(host->ptr, 1, 100000);
  device->FreePinnedHost(*host);
}

TEST(FakeDeviceTest, EnforcesCapacityAndInjectedFailures) {
  FakeDevice device(FakeDeviceOptions{.capacity_bytes = 1 * kMiB});
  Result<void*> a = device.AllocateRaw(768 << 10, 256);
  ASSERT_TRUE(a.ok());
  Result<void*> b = device.AllocateRaw(512 << 10, 256);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted);
  device.FailNextAllocations(1);
  EXPECT_FALSE(device.AllocateRaw(1024, 256).ok());
  Result<void*> c = device.AllocateRaw(1024, 256);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(device.live_allocations(), 2u);
  device.FreeRaw(*a, 768 << 10);
  device.FreeRaw(*c, 1024);
  EXPECT_EQ(device.allocated_bytes(), 0u);
}

TEST(FakeDeviceTest, ManualEventsCompleteOnlyWhenTold) {
  FakeDevice device(FakeDeviceOptions{.manual_events = true});
  Event event = *device.CreateEvent();
  ASSERT_TRUE(device.RecordEvent(event, device.DefaultStream()).ok());
  EXPECT_FALSE(*device.EventDone(event));
  device.CompleteAllWork();
  EXPECT_TRUE(*device.EventDone(event));
}

TEST(FakeDeviceDeathTest, FreeOfAForeignPointerAborts) {
  FakeDevice device;
  int local = 0;
  EXPECT_DEATH(device.FreeRaw(&local, sizeof(local)), "did not allocate");
}

TEST(DeviceTest, KindNames) {
  EXPECT_EQ(DeviceKindName(DeviceKind::kCpu), "cpu");
  EXPECT_EQ(DeviceKindName(DeviceKind::kCuda), "cuda");
}

}  // namespace
}  // namespace pier

// CudaDevice (src/device/cuda/cuda_device.h) on a real GPU: raw and pinned memory, copies,
// streams and events, and virtual-memory arenas. Skips with the reason when no GPU is usable.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "tests/kernels/cuda_test_device.h"

namespace pier::cuda {
namespace {

using CudaDeviceTest = CudaTest;

TEST_F(CudaDeviceTest, DescribesItself) {
  EXPECT_EQ(device_->kind(), DeviceKind::kCuda);
  EXPECT_EQ(device_->index(), 0);
  EXPECT_EQ(device_->name().rfind("cuda:0 (", 0), 0u) << device_->name();
  EXPECT_GT(device_->TotalBytes(), size_t{1} << 30);
  EXPECT_GT(device_->FreeBytes(), 0u);
  EXPECT_LE(device_->FreeBytes(), device_->TotalBytes());
  std::printf("device: %s, sm_%d%d, %d SMs, %zu MiB, VM granularity %zu\n", device_->name().c_str(),
              device_->info().compute_major, device_->info().compute_minor,
              device_->info().multiprocessors, device_->TotalBytes() >> 20,
              device_->VmGranularity());
}

TEST_F(CudaDeviceTest, RawMemoryRoundTripsThroughCopies) {
  const size_t n = 1 << 20;
  std::vector<uint32_t> host(n);
  std::iota(host.begin(), host.end(), 7u);
  Result<void*> a = device_->AllocateRaw(n * 4, 256);
  Result<void*> b = device_->AllocateRaw(n * 4, 256);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*a) % 256, 0u);
  Result<Stream> stream = device_->CreateStream();
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  ASSERT_TRUE(device_->CopyHostToDevice(*a, host.data(), n * 4, *stream).ok());
  ASSERT_TRUE(device_->CopyDeviceToDevice(*b, *a, n * 4, *stream).ok());
  ASSERT_TRUE(device_->Memset(*a, 0, n * 4, *stream).ok());
  std::vector<uint32_t> back(n, 0), zeros(n, 1);
  ASSERT_TRUE(device_->CopyDeviceToHost(back.data(), *b, n * 4, *stream).ok());
  ASSERT_TRUE(device_->CopyDeviceToHost(zeros.data(), *a, n * 4, *stream).ok());
  ASSERT_TRUE(device_->Synchronize(*stream).ok());
  EXPECT_EQ(back, host);
  EXPECT_EQ(zeros, std::vector<uint32_t>(n, 0));
  device_->DestroyStream(*stream);
  device_->FreeRaw(*a, n * 4);
  device_->FreeRaw(*b, n * 4);
}

TEST_F(CudaDeviceTest, OutOfMemoryIsAStatusNotACrash) {
  const size_t too_much = device_->TotalBytes() * 4;
  Result<void*> ptr = device_->AllocateRaw(too_much, 256);
  ASSERT_FALSE(ptr.ok());
  EXPECT_EQ(ptr.status().code(), StatusCode::kResourceExhausted) << ptr.status().ToString();
  // The failure leaves the device usable.
  Result<void*> small = device_->AllocateRaw(4096, 256);
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  device_->FreeRaw(*small, 4096);
}

TEST_F(CudaDeviceTest, BadSizesAndAlignmentsAreInvalidArguments) {
  EXPECT_EQ(device_->AllocateRaw(0, 256).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(device_->AllocateRaw(64, 3).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(device_->AllocateRaw(64, 4096).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(CudaDeviceTest, PinnedHostMemoryIsLockedAndCopies) {
  const size_t bytes = 8 << 20;
  Result<HostAllocation> pinned = device_->AllocatePinnedHost(bytes);
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  EXPECT_TRUE(pinned->locked);
  std::memset(pinned->ptr, 0x5a, bytes);
  Result<void*> dev = device_->AllocateRaw(bytes, 256);
  ASSERT_TRUE(dev.ok());
  ASSERT_TRUE(device_->CopyHostToDevice(*dev, pinned->ptr, bytes, Stream{}).ok());
  // Copies from pinned memory are asynchronous: the host buffer may be reused only after
  // the stream has consumed it.
  ASSERT_TRUE(device_->Synchronize(Stream{}).ok());
  std::memset(pinned->ptr, 0, bytes);
  ASSERT_TRUE(device_->CopyDeviceToHost(pinned->ptr, *dev, bytes, Stream{}).ok());
  ASSERT_TRUE(device_->Synchronize(Stream{}).ok());
  const auto* p = static_cast<const uint8_t*>(pinned->ptr);
  EXPECT_EQ(p[0], 0x5a);
  EXPECT_EQ(p[bytes - 1], 0x5a);
  device_->FreeRaw(*dev, bytes);
  device_->FreePinnedHost(*pinned);
}

TEST_F(CudaDeviceTest, EventsOrderStreamsAndTime) {
  const size_t bytes = 64 << 20;
  Result<void*> a = device_->AllocateRaw(bytes, 256);
  Result<void*> b = device_->AllocateRaw(bytes, 256);
  ASSERT_TRUE(a.ok() && b.ok());
  Result<Stream> s1 = device_->CreateStream();
  Result<Stream> s2 = device_->CreateStream();
  Result<Event> start = device_->CreateEvent();
  Result<Event> done = device_->CreateEvent();
  ASSERT_TRUE(s1.ok() && s2.ok() && start.ok() && done.ok());
  ASSERT_TRUE(device_->RecordEvent(*start, *s1).ok());
  ASSERT_TRUE(device_->Memset(*a, 0x11, bytes, *s1).ok());
  ASSERT_TRUE(device_->RecordEvent(*done, *s1).ok());
  // s2 copies a -> b only after s1's memset.
  ASSERT_TRUE(device_->StreamWaitEvent(*s2, *done).ok());
  ASSERT_TRUE(device_->CopyDeviceToDevice(*b, *a, bytes, *s2).ok());
  ASSERT_TRUE(device_->Synchronize(*s2).ok());
  Result<bool> finished = device_->EventDone(*done);
  ASSERT_TRUE(finished.ok());
  EXPECT_TRUE(*finished);
  Result<float> ms = device_->ElapsedMs(*start, *done);
  ASSERT_TRUE(ms.ok()) << ms.status().ToString();
  EXPECT_GT(*ms, 0.0f);
  uint8_t last = 0;
  ASSERT_TRUE(device_->CopyDeviceToHost(&last, static_cast<char*>(*b) + bytes - 1, 1, *s2).ok());
  ASSERT_TRUE(device_->SynchronizeEvent(*done).ok());
  ASSERT_TRUE(device_->Synchronize(*s2).ok());
  EXPECT_EQ(last, 0x11);
  device_->DestroyEvent(*start);
  device_->DestroyEvent(*done);
  device_->DestroyStream(*s1);
  device_->DestroyStream(*s2);
  device_->FreeRaw(*a, bytes);
  device_->FreeRaw(*b, bytes);
}

TEST_F(CudaDeviceTest, ArenaGrowsAndShrinksInChunksAtAFixedAddress) {
  if (!device_->SupportsVirtualMemory()) GTEST_SKIP() << "device has no virtual-memory support";
  const size_t g = device_->VmGranularity();
  ASSERT_GT(g, 0u);
  Result<VirtualRange> range = device_->ReserveAddressRange(16 * g - 1);  // rounds up
  ASSERT_TRUE(range.ok()) << range.status().ToString();
  EXPECT_EQ(range->bytes, 16 * g);
  const size_t free_before = device_->FreeBytes();

  // Grow to 4 chunks, write through the whole span, shrink the middle, grow again.
  ASSERT_TRUE(device_->MapChunk(*range, 0, 4 * g).ok());
  EXPECT_LE(device_->FreeBytes() + 4 * g, free_before + g) << "mapping takes device memory";
  ASSERT_TRUE(device_->Memset(range->base, 0x7f, 4 * g, Stream{}).ok());
  ASSERT_TRUE(device_->Synchronize(Stream{}).ok());
  EXPECT_EQ(device_->MapChunk(*range, g, g).code(), StatusCode::kInvalidArgument)
      << "mapping over a mapped chunk is refused";
  ASSERT_TRUE(device_->UnmapChunk(*range, g, 2 * g).ok());
  ASSERT_TRUE(device_->MapChunk(*range, g, g).ok());
  ASSERT_TRUE(device_->MapChunk(*range, 2 * g, g).ok());  // fills the hole the shrink left
  ASSERT_TRUE(device_->MapChunk(*range, 4 * g, 2 * g).ok());
  ASSERT_TRUE(device_->Memset(range->base, 0x01, 6 * g, Stream{}).ok());
  uint8_t last = 0;
  ASSERT_TRUE(
      device_->CopyDeviceToHost(&last, static_cast<char*>(range->base) + 6 * g - 1, 1, Stream{})
          .ok());
  ASSERT_TRUE(device_->Synchronize(Stream{}).ok());
  EXPECT_EQ(last, 0x01);

  EXPECT_EQ(device_->MapChunk(*range, 1, g).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(device_->MapChunk(*range, 15 * g, 2 * g).code(), StatusCode::kInvalidArgument);
  device_->ReleaseAddressRange(*range);  // unmaps what is left
  EXPECT_GE(device_->FreeBytes() + g, free_before) << "released chunks return to the device";
}

TEST_F(CudaDeviceTest, ArenaOutOfMemoryMapsNothing) {
  if (!device_->SupportsVirtualMemory()) GTEST_SKIP() << "device has no virtual-memory support";
  const size_t g = device_->VmGranularity();
  // Take all but about 16 chunks' worth of memory with one cudaMalloc, then ask the arena for
  // 64 chunks: the map must fail part-way and roll back.
  size_t hog_bytes = device_->FreeBytes() / g * g - 16 * g;
  Result<void*> hog = device_->AllocateRaw(hog_bytes, 256);
  for (int tries = 0; !hog.ok() && tries < 8; ++tries) {
    hog_bytes -= 4 * g;
    hog = device_->AllocateRaw(hog_bytes, 256);
  }
  ASSERT_TRUE(hog.ok()) << hog.status().ToString();
  Result<VirtualRange> range = device_->ReserveAddressRange(64 * g);
  ASSERT_TRUE(range.ok()) << range.status().ToString();
  const size_t free_before = device_->FreeBytes();
  ASSERT_LT(free_before, 64 * g) << "the hog left too much free";
  const Status status = device_->MapChunk(*range, 0, 64 * g);
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted) << status.ToString();
  EXPECT_GE(device_->FreeBytes() + g, free_before) << "a failed map rolls back";
  device_->FreeRaw(*hog, hog_bytes);
  ASSERT_TRUE(device_->MapChunk(*range, 0, 64 * g).ok()) << "the arena is still usable";
  device_->ReleaseAddressRange(*range);
}

}  // namespace
}  // namespace pier::cuda

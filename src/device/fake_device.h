// FakeDevice: a deterministic Device for tests: host memory behind a small, fixed capacity.
//
// Memory, scheduler and engine tests use it to run out of memory on purpose. It checks its
// callers: FreeRaw of a pointer it did not hand out, or with the wrong size, is a PIER_CHECK
// failure; it can be told to refuse the next N allocations; it counts everything. Virtual
// memory is simulated: a reserved range is host memory that counts against the capacity only
// for the chunks mapped into it. Events complete immediately unless `manual_events` is set;
// then they complete when the test calls CompleteAllWork(), which lets tests check
// stream-ordered reuse.
//
// Thread-safety: every method is safe to call concurrently (one internal mutex).
#pragma once

#include <cstddef>
#include <map>
#include <set>

#include "common/mutex.h"
#include "device/device.h"

namespace pier {

struct FakeDeviceOptions {
  size_t capacity_bytes = size_t{64} << 20;
  size_t vm_granularity_bytes = size_t{64} << 10;  // 0: no virtual-memory support
  bool manual_events = false;
};

class FakeDevice final : public Device {
 public:
  explicit FakeDevice(FakeDeviceOptions options = {}, int index = 0);
  ~FakeDevice() override;

  // The next `count` AllocateRaw/MapChunk calls fail with kResourceExhausted.
  void FailNextAllocations(int count);
  // Completes every recorded event (manual_events only).
  void CompleteAllWork();

  size_t allocated_bytes() const;   // raw allocations + mapped chunks
  size_t live_allocations() const;  // raw allocations not yet freed
  size_t allocate_calls() const;    // successful AllocateRaw calls
  size_t free_calls() const;

  size_t TotalBytes() const override { return options_.capacity_bytes; }
  size_t FreeBytes() const override;

  Result<void*> AllocateRaw(size_t bytes, size_t alignment) override;
  void FreeRaw(void* ptr, size_t bytes) override;

  Result<HostAllocation> AllocatePinnedHost(size_t bytes) override;
  void FreePinnedHost(const HostAllocation& allocation) override;

  bool SupportsVirtualMemory() const override { return options_.vm_granularity_bytes != 0; }
  size_t VmGranularity() const override { return options_.vm_granularity_bytes; }
  Result<VirtualRange> ReserveAddressRange(size_t bytes) override;
  Status MapChunk(const VirtualRange& range, size_t offset, size_t bytes) override;
  Status UnmapChunk(const VirtualRange& range, size_t offset, size_t bytes) override;
  void ReleaseAddressRange(const VirtualRange& range) override;

  Result<Stream> CreateStream() override;
  void DestroyStream(Stream stream) override;
  Status Synchronize(Stream stream) override;
  Result<Event> CreateEvent() override;
  void DestroyEvent(Event event) override;
  Status RecordEvent(Event event, Stream stream) override;
  Result<bool> EventDone(Event event) override;
  Status StreamWaitEvent(Stream stream, Event event) override;
  Status SynchronizeEvent(Event event) override;

  Status CopyHostToDevice(void* device_dst, const void* host_src, size_t bytes,
                          Stream stream) override;
  Status CopyDeviceToHost(void* host_dst, const void* device_src, size_t bytes,
                          Stream stream) override;
  Status CopyDeviceToDevice(void* device_dst, const void* device_src, size_t bytes,
                            Stream stream) override;
  Status Memset(void* device_dst, uint8_t value, size_t bytes, Stream stream) override;

 private:
  struct Arena {
    size_t bytes = 0;
    std::set<size_t> mapped_offsets;  // granularity-sized chunks that are mapped
  };

  // Takes `bytes` from the capacity or says why not.
  Status TakeLocked(size_t bytes) PIER_REQUIRES(mutex_);

  const FakeDeviceOptions options_;
  mutable Mutex mutex_;
  size_t allocated_bytes_ PIER_GUARDED_BY(mutex_) = 0;
  int fail_next_ PIER_GUARDED_BY(mutex_) = 0;
  size_t allocate_calls_ PIER_GUARDED_BY(mutex_) = 0;
  size_t free_calls_ PIER_GUARDED_BY(mutex_) = 0;
  uintptr_t next_handle_ PIER_GUARDED_BY(mutex_) = 1;
  std::map<const void*, size_t> live_ PIER_GUARDED_BY(mutex_);  // ptr -> bytes
  std::map<uintptr_t, Arena> arenas_ PIER_GUARDED_BY(mutex_);
  std::set<uintptr_t> pending_events_ PIER_GUARDED_BY(mutex_);
};

}  // namespace pier

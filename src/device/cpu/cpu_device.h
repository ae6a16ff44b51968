// CpuDevice: the Device for host memory and CPU compute.
//
// Capacity is, by default, MemAvailable capped by the cgroup memory limit, read once at
// creation (see system_memory.h); an explicit capacity (`--device-memory`) replaces it, which
// lets a CPU stand in for a GPU of a given size in tests. Raw allocations of 1 MiB or more are
// anonymous mappings (returned to the kernel on FreeRaw); smaller ones come from the C heap.
// Raw allocations of 2 MiB or more start on a 2 MiB boundary and are advised to use transparent
// huge pages (MADV_HUGEPAGE), so that streaming weights and K/V does not miss the TLB at every
// 4 KiB; where THP is "never" they stay ordinary pages. Reserved ranges do not (their chunks
// are returned one by one, which a huge page spanning two chunks would delay).
// Virtual-memory arenas reserve address space with PROT_NONE and map page-granular chunks
// with mprotect, releasing them with madvise(MADV_DONTNEED). Pinned host memory is mlock'd;
// when RLIMIT_MEMLOCK refuses, it falls back to ordinary pages and reports `locked = false`.
// Streams and events are trivial: every operation has completed when it returns.
//
// Thread-safety: all methods are safe to call concurrently (counters are atomic; the arena
// table has its own mutex).
#pragma once

#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>

#include "common/mutex.h"
#include "device/cpu/system_memory.h"
#include "device/device.h"

namespace pier {

struct CpuDeviceOptions {
  // When set, the device's capacity in bytes (`--device-memory`); otherwise probed.
  std::optional<size_t> capacity_bytes;
  // Where /proc and /sys/fs/cgroup are (tests point these at a fixture tree).
  SystemMemoryRoots roots;
};

class CpuDevice final : public Device {
 public:
  // Probes the system (unless a capacity is given). kInvalidArgument for a zero capacity;
  // kIoError/kDataLoss when /proc/meminfo or a cgroup limit file cannot be read or parsed.
  [[nodiscard]] static Result<std::unique_ptr<CpuDevice>> Create(CpuDeviceOptions options = {});

  // The probe made at creation (limits in it are informational when a capacity was given).
  const SystemMemory& system_memory() const { return system_memory_; }
  // Bytes currently handed out through AllocateRaw and mapped arena chunks.
  size_t allocated_bytes() const { return allocated_bytes_.load(); }

  size_t TotalBytes() const override { return capacity_bytes_; }
  size_t FreeBytes() const override;

  Result<void*> AllocateRaw(size_t bytes, size_t alignment) override;
  void FreeRaw(void* ptr, size_t bytes) override;

  Result<HostAllocation> AllocatePinnedHost(size_t bytes) override;
  void FreePinnedHost(const HostAllocation& allocation) override;

  bool SupportsVirtualMemory() const override { return true; }
  size_t VmGranularity() const override { return page_bytes_; }
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
  CpuDevice(size_t capacity_bytes, SystemMemory system_memory, SystemMemoryRoots roots);

  // Checks that [offset, offset + bytes) is a granularity-aligned span inside `range`.
  Status CheckSpan(const VirtualRange& range, size_t offset, size_t bytes) const;

  const size_t capacity_bytes_;
  const SystemMemory system_memory_;
  const SystemMemoryRoots roots_;
  const size_t page_bytes_;
  std::atomic<size_t> allocated_bytes_{0};
  std::atomic<uintptr_t> next_handle_{1};

  Mutex arenas_mutex_;
  // Mapped bytes per reserved range id.
  std::map<uintptr_t, size_t> arena_mapped_bytes_ PIER_GUARDED_BY(arenas_mutex_);
};

}  // namespace pier

#include "device/cpu/cpu_device.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace pier {
namespace {

// Raw allocations at least this large are anonymous mappings, so FreeRaw gives them back to
// the kernel at once (the pool's Trim relies on that); smaller ones use the C heap.
constexpr size_t kMmapThresholdBytes = size_t{1} << 20;

bool IsPowerOfTwo(size_t x) { return x != 0 && (x & (x - 1)) == 0; }
size_t RoundUp(size_t x, size_t to) { return (x + to - 1) / to * to; }

// The x86-64 transparent huge page. Mappings at least this large start on such a boundary and
// ask for huge pages (MADV_HUGEPAGE; honoured unless THP is "never"): weights and K/V are read
// in full every step, and with 4 KiB pages those reads miss the TLB once per page, which in a
// VM costs a two-level page walk. 16 sequences of SmolLM2 on the Xeon VM decoded 5-8% faster.
constexpr size_t kHugePageBytes = size_t{2} << 20;

// An anonymous read-write mapping of `bytes` (a multiple of the page size). One of a huge page
// or more starts on a huge page boundary and asks for huge pages; if the system refuses the
// padding that alignment needs, an unaligned mapping of the exact size is tried. nullptr (with
// errno) when the system refuses.
//
// Not faulted in here: the kernel may compact memory to find a huge page (THP's "defrag" at
// "madvise", Debian's default; once 2 s on this VM), and this runs under the governor's lock,
// so that happens at first write instead (at load for weights). Only whole allocations get huge
// pages: the chunks of a lease's range are unmapped one by one, and a chunk that ends inside a
// huge page would not give its memory back until the kernel splits that page under pressure.
void* MapAnonymous(size_t bytes) {
  const int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS;
  if (bytes >= kHugePageBytes && bytes <= SIZE_MAX - kHugePageBytes) {
    // Over-map by a huge page, then return the unaligned head and the tail to the kernel.
    const size_t padded = bytes + kHugePageBytes;
    void* raw = mmap(nullptr, padded, prot, flags, -1, 0);
    if (raw != MAP_FAILED) {
      const auto start = reinterpret_cast<uintptr_t>(raw);
      const uintptr_t aligned = RoundUp(start, kHugePageBytes);
      if (aligned > start) munmap(raw, aligned - start);
      const uintptr_t end = start + padded, used_end = aligned + bytes;
      if (end > used_end) munmap(reinterpret_cast<void*>(used_end), end - used_end);
      void* ptr = reinterpret_cast<void*>(aligned);
      madvise(ptr, bytes, MADV_HUGEPAGE);  // a hint: refused where THP is off, which is fine
      return ptr;
    }
  }
  void* ptr = mmap(nullptr, bytes, prot, flags, -1, 0);
  return ptr == MAP_FAILED ? nullptr : ptr;
}

Status CheckCopy(const void* dst, const void* src, size_t bytes) {
  if (bytes != 0 && (dst == nullptr || src == nullptr)) {
    return InvalidArgumentError("copy of " + std::to_string(bytes) + " bytes with a null pointer");
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<CpuDevice>> CpuDevice::Create(CpuDeviceOptions options) {
  if (options.capacity_bytes && *options.capacity_bytes == 0) {
    return InvalidArgumentError("device memory must be more than 0 bytes");
  }
  PIER_ASSIGN_OR_RETURN(SystemMemory system, ReadSystemMemory(options.roots));
  size_t capacity = options.capacity_bytes ? *options.capacity_bytes : system.CapacityBytes();
  if (capacity == 0) {
    return UnavailableError("no memory available for the CPU device (MemAvailable is 0)");
  }
  return std::unique_ptr<CpuDevice>(new CpuDevice(capacity, system, options.roots));
}

CpuDevice::CpuDevice(size_t capacity_bytes, SystemMemory system_memory, SystemMemoryRoots roots)
    : Device(DeviceKind::kCpu, 0, "cpu"),
      capacity_bytes_(capacity_bytes),
      system_memory_(std::move(system_memory)),
      roots_(std::move(roots)),
      page_bytes_(static_cast<size_t>(sysconf(_SC_PAGESIZE))) {}

size_t CpuDevice::FreeBytes() const {
  size_t allocated = allocated_bytes_.load();
  size_t free = capacity_bytes_ > allocated ? capacity_bytes_ - allocated : 0;
  Result<SystemMemory> now = ReadSystemMemory(roots_);
  if (now.ok()) free = std::min<size_t>(free, now->AvailableNowBytes());
  return free;
}

Result<void*> CpuDevice::AllocateRaw(size_t bytes, size_t alignment) {
  if (bytes == 0) return InvalidArgumentError("cpu: allocation of 0 bytes");
  if (!IsPowerOfTwo(alignment)) {
    return InvalidArgumentError("cpu: alignment " + std::to_string(alignment) +
                                " is not a power of two");
  }
  if (bytes >= kMmapThresholdBytes && alignment > page_bytes_) {
    return InvalidArgumentError("cpu: alignment " + std::to_string(alignment) +
                                " above the page size for a large allocation");
  }
  void* ptr = nullptr;
  if (bytes >= kMmapThresholdBytes) {
    ptr = MapAnonymous(RoundUp(bytes, page_bytes_));
  } else {
    ptr = std::aligned_alloc(std::max(alignment, sizeof(void*)), RoundUp(bytes, alignment));
  }
  if (ptr == nullptr) {
    return ResourceExhaustedError("cpu: the system refused " + std::to_string(bytes) + " bytes (" +
                                  std::strerror(errno) + ")");
  }
  allocated_bytes_ += bytes;
  return ptr;
}

void CpuDevice::FreeRaw(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  allocated_bytes_ -= bytes;
  if (bytes >= kMmapThresholdBytes) {
    munmap(ptr, RoundUp(bytes, page_bytes_));
  } else {
    std::free(ptr);
  }
}

Result<HostAllocation> CpuDevice::AllocatePinnedHost(size_t bytes) {
  if (bytes == 0) return InvalidArgumentError("cpu: pinned allocation of 0 bytes");
  size_t rounded = RoundUp(bytes, page_bytes_);
  void* ptr = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (ptr == MAP_FAILED) {
    return ResourceExhaustedError("cpu: cannot map " + std::to_string(bytes) +
                                  " bytes of host memory (" + std::strerror(errno) + ")");
  }
  HostAllocation allocation{ptr, rounded, mlock(ptr, rounded) == 0};
  return allocation;
}

void CpuDevice::FreePinnedHost(const HostAllocation& allocation) {
  if (allocation.ptr == nullptr) return;
  if (allocation.locked) munlock(allocation.ptr, allocation.bytes);
  munmap(allocation.ptr, allocation.bytes);
}

Result<VirtualRange> CpuDevice::ReserveAddressRange(size_t bytes) {
  if (bytes == 0) return InvalidArgumentError("cpu: address range of 0 bytes");
  size_t rounded = RoundUp(bytes, page_bytes_);
  void* base =
      mmap(nullptr, rounded, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    return ResourceExhaustedError("cpu: cannot reserve " + std::to_string(rounded) +
                                  " bytes of address space (" + std::strerror(errno) + ")");
  }
  VirtualRange range{base, rounded, next_handle_++};
  MutexLock lock(arenas_mutex_);
  arena_mapped_bytes_[range.id] = 0;
  return range;
}

Status CpuDevice::CheckSpan(const VirtualRange& range, size_t offset, size_t bytes) const {
  if (bytes == 0 || offset % page_bytes_ != 0 || bytes % page_bytes_ != 0 || offset > range.bytes ||
      bytes > range.bytes - offset) {
    return InvalidArgumentError("cpu: span [" + std::to_string(offset) + ", +" +
                                std::to_string(bytes) + ") is not a page-aligned part of a " +
                                std::to_string(range.bytes) + "-byte range");
  }
  return Status::Ok();
}

Status CpuDevice::MapChunk(const VirtualRange& range, size_t offset, size_t bytes) {
  PIER_RETURN_IF_ERROR(CheckSpan(range, offset, bytes));
  char* start = static_cast<char*>(range.base) + offset;
  if (mprotect(start, bytes, PROT_READ | PROT_WRITE) != 0) {
    return ResourceExhaustedError("cpu: cannot map " + std::to_string(bytes) + " bytes (" +
                                  std::strerror(errno) + ")");
  }
  allocated_bytes_ += bytes;
  MutexLock lock(arenas_mutex_);
  arena_mapped_bytes_[range.id] += bytes;
  return Status::Ok();
}

Status CpuDevice::UnmapChunk(const VirtualRange& range, size_t offset, size_t bytes) {
  PIER_RETURN_IF_ERROR(CheckSpan(range, offset, bytes));
  char* start = static_cast<char*>(range.base) + offset;
  // MADV_DONTNEED drops the pages now; PROT_NONE makes a stale pointer fault instead of
  // silently reading zeros.
  madvise(start, bytes, MADV_DONTNEED);
  mprotect(start, bytes, PROT_NONE);
  allocated_bytes_ -= bytes;
  MutexLock lock(arenas_mutex_);
  size_t& mapped = arena_mapped_bytes_[range.id];
  mapped -= std::min(mapped, bytes);
  return Status::Ok();
}

void CpuDevice::ReleaseAddressRange(const VirtualRange& range) {
  if (range.base == nullptr) return;
  munmap(range.base, range.bytes);
  MutexLock lock(arenas_mutex_);
  auto it = arena_mapped_bytes_.find(range.id);
  if (it != arena_mapped_bytes_.end()) {
    allocated_bytes_ -= it->second;
    arena_mapped_bytes_.erase(it);
  }
}

Result<Stream> CpuDevice::CreateStream() { return Stream{next_handle_++}; }
void CpuDevice::DestroyStream(Stream /*stream*/) {}
Status CpuDevice::Synchronize(Stream /*stream*/) { return Status::Ok(); }
Result<Event> CpuDevice::CreateEvent() { return Event{next_handle_++}; }
void CpuDevice::DestroyEvent(Event /*event*/) {}
Status CpuDevice::RecordEvent(Event /*event*/, Stream /*stream*/) { return Status::Ok(); }
Result<bool> CpuDevice::EventDone(Event /*event*/) { return true; }
Status CpuDevice::StreamWaitEvent(Stream /*stream*/, Event /*event*/) { return Status::Ok(); }
Status CpuDevice::SynchronizeEvent(Event /*event*/) { return Status::Ok(); }

Status CpuDevice::CopyHostToDevice(void* device_dst, const void* host_src, size_t bytes,
                                   Stream /*stream*/) {
  PIER_RETURN_IF_ERROR(CheckCopy(device_dst, host_src, bytes));
  if (bytes != 0) std::memcpy(device_dst, host_src, bytes);
  return Status::Ok();
}

Status CpuDevice::CopyDeviceToHost(void* host_dst, const void* device_src, size_t bytes,
                                   Stream /*stream*/) {
  PIER_RETURN_IF_ERROR(CheckCopy(host_dst, device_src, bytes));
  if (bytes != 0) std::memcpy(host_dst, device_src, bytes);
  return Status::Ok();
}

Status CpuDevice::CopyDeviceToDevice(void* device_dst, const void* device_src, size_t bytes,
                                     Stream /*stream*/) {
  PIER_RETURN_IF_ERROR(CheckCopy(device_dst, device_src, bytes));
  if (bytes != 0) std::memmove(device_dst, device_src, bytes);
  return Status::Ok();
}

Status CpuDevice::Memset(void* device_dst, uint8_t value, size_t bytes, Stream /*stream*/) {
  if (bytes != 0 && device_dst == nullptr) return InvalidArgumentError("memset of a null pointer");
  if (bytes != 0) std::memset(device_dst, value, bytes);
  return Status::Ok();
}

}  // namespace pier

#include "device/fake_device.h"

#include <cstdlib>
#include <cstring>
#include <string>

namespace pier {
namespace {
bool IsPowerOfTwo(size_t x) { return x != 0 && (x & (x - 1)) == 0; }
size_t RoundUp(size_t x, size_t to) { return (x + to - 1) / to * to; }
}  // namespace

FakeDevice::FakeDevice(FakeDeviceOptions options, int index)
    : Device(DeviceKind::kFake, index, "fake:" + std::to_string(index)), options_(options) {}

FakeDevice::~FakeDevice() {
  MutexLock lock(mutex_);
  PIER_CHECK(live_.empty(), "FakeDevice destroyed with " + std::to_string(live_.size()) +
                                " raw allocations still live (a leak in the pool)");
}

void FakeDevice::FailNextAllocations(int count) {
  MutexLock lock(mutex_);
  fail_next_ = count;
}

void FakeDevice::CompleteAllWork() {
  MutexLock lock(mutex_);
  pending_events_.clear();
}

size_t FakeDevice::allocated_bytes() const {
  MutexLock lock(mutex_);
  return allocated_bytes_;
}
size_t FakeDevice::live_allocations() const {
  MutexLock lock(mutex_);
  return live_.size();
}
size_t FakeDevice::allocate_calls() const {
  MutexLock lock(mutex_);
  return allocate_calls_;
}
size_t FakeDevice::free_calls() const {
  MutexLock lock(mutex_);
  return free_calls_;
}

size_t FakeDevice::FreeBytes() const {
  MutexLock lock(mutex_);
  return options_.capacity_bytes - allocated_bytes_;
}

Status FakeDevice::TakeLocked(size_t bytes) {
  if (fail_next_ > 0) {
    --fail_next_;
    return ResourceExhaustedError(name() + ": injected out-of-memory");
  }
  if (bytes > options_.capacity_bytes - allocated_bytes_) {
    return ResourceExhaustedError(
        name() + ": out of memory: " + std::to_string(bytes) + " bytes requested, " +
        std::to_string(options_.capacity_bytes - allocated_bytes_) + " free");
  }
  allocated_bytes_ += bytes;
  return Status::Ok();
}

Result<void*> FakeDevice::AllocateRaw(size_t bytes, size_t alignment) {
  if (bytes == 0) return InvalidArgumentError(name() + ": allocation of 0 bytes");
  if (!IsPowerOfTwo(alignment)) return InvalidArgumentError(name() + ": bad alignment");
  MutexLock lock(mutex_);
  PIER_RETURN_IF_ERROR(TakeLocked(bytes));
  void* ptr = std::aligned_alloc(std::max(alignment, sizeof(void*)), RoundUp(bytes, alignment));
  if (ptr == nullptr) {
    allocated_bytes_ -= bytes;
    return ResourceExhaustedError(name() + ": host allocation failed");
  }
  live_[ptr] = bytes;
  ++allocate_calls_;
  return ptr;
}

void FakeDevice::FreeRaw(void* ptr, size_t bytes) {
  MutexLock lock(mutex_);
  auto it = live_.find(ptr);
  PIER_CHECK(it != live_.end(), name() + ": FreeRaw of a pointer it did not allocate");
  PIER_CHECK(it->second == bytes, name() + ": FreeRaw with size " + std::to_string(bytes) +
                                      ", allocated with " + std::to_string(it->second));
  live_.erase(it);
  allocated_bytes_ -= bytes;
  ++free_calls_;
  std::free(ptr);
}

Result<HostAllocation> FakeDevice::AllocatePinnedHost(size_t bytes) {
  if (bytes == 0) return InvalidArgumentError(name() + ": pinned allocation of 0 bytes");
  void* ptr = std::aligned_alloc(4096, RoundUp(bytes, 4096));
  if (ptr == nullptr) return ResourceExhaustedError(name() + ": host allocation failed");
  return HostAllocation{ptr, bytes, false};
}

void FakeDevice::FreePinnedHost(const HostAllocation& allocation) { std::free(allocation.ptr); }

Result<VirtualRange> FakeDevice::ReserveAddressRange(size_t bytes) {
  if (!SupportsVirtualMemory()) return Device::ReserveAddressRange(bytes);
  if (bytes == 0) return InvalidArgumentError(name() + ": address range of 0 bytes");
  size_t rounded = RoundUp(bytes, options_.vm_granularity_bytes);
  void* base = std::aligned_alloc(options_.vm_granularity_bytes, rounded);
  if (base == nullptr) return ResourceExhaustedError(name() + ": cannot reserve address range");
  MutexLock lock(mutex_);
  VirtualRange range{base, rounded, next_handle_++};
  arenas_[range.id].bytes = rounded;
  return range;
}

Status FakeDevice::MapChunk(const VirtualRange& range, size_t offset, size_t bytes) {
  if (!SupportsVirtualMemory()) return Device::MapChunk(range, offset, bytes);
  const size_t g = options_.vm_granularity_bytes;
  MutexLock lock(mutex_);
  auto it = arenas_.find(range.id);
  if (it == arenas_.end()) return InvalidArgumentError(name() + ": unknown address range");
  if (bytes == 0 || offset % g != 0 || bytes % g != 0 || offset + bytes > it->second.bytes) {
    return InvalidArgumentError(name() + ": span not granularity-aligned inside the range");
  }
  for (size_t o = offset; o < offset + bytes; o += g) {
    if (it->second.mapped_offsets.count(o) != 0) {
      return InvalidArgumentError(name() + ": chunk at offset " + std::to_string(o) +
                                  " is already mapped");
    }
  }
  PIER_RETURN_IF_ERROR(TakeLocked(bytes));
  for (size_t o = offset; o < offset + bytes; o += g) it->second.mapped_offsets.insert(o);
  return Status::Ok();
}

Status FakeDevice::UnmapChunk(const VirtualRange& range, size_t offset, size_t bytes) {
  if (!SupportsVirtualMemory()) return Device::UnmapChunk(range, offset, bytes);
  const size_t g = options_.vm_granularity_bytes;
  MutexLock lock(mutex_);
  auto it = arenas_.find(range.id);
  if (it == arenas_.end()) return InvalidArgumentError(name() + ": unknown address range");
  if (bytes == 0 || offset % g != 0 || bytes % g != 0 || offset + bytes > it->second.bytes) {
    return InvalidArgumentError(name() + ": span not granularity-aligned inside the range");
  }
  for (size_t o = offset; o < offset + bytes; o += g) {
    if (it->second.mapped_offsets.count(o) == 0) {
      return InvalidArgumentError(name() + ": chunk at offset " + std::to_string(o) +
                                  " is not mapped");
    }
  }
  for (size_t o = offset; o < offset + bytes; o += g) it->second.mapped_offsets.erase(o);
  allocated_bytes_ -= bytes;
  return Status::Ok();
}

void FakeDevice::ReleaseAddressRange(const VirtualRange& range) {
  if (range.base == nullptr) return;
  MutexLock lock(mutex_);
  auto it = arenas_.find(range.id);
  PIER_CHECK(it != arenas_.end(), name() + ": release of an unknown address range");
  allocated_bytes_ -= it->second.mapped_offsets.size() * options_.vm_granularity_bytes;
  arenas_.erase(it);
  std::free(range.base);
}

Result<Stream> FakeDevice::CreateStream() {
  MutexLock lock(mutex_);
  return Stream{next_handle_++};
}
void FakeDevice::DestroyStream(Stream /*stream*/) {}
Status FakeDevice::Synchronize(Stream /*stream*/) {
  CompleteAllWork();
  return Status::Ok();
}
Result<Event> FakeDevice::CreateEvent() {
  MutexLock lock(mutex_);
  return Event{next_handle_++};
}
void FakeDevice::DestroyEvent(Event event) {
  MutexLock lock(mutex_);
  pending_events_.erase(event.id);
}
Status FakeDevice::RecordEvent(Event event, Stream /*stream*/) {
  MutexLock lock(mutex_);
  if (options_.manual_events) pending_events_.insert(event.id);
  return Status::Ok();
}
Result<bool> FakeDevice::EventDone(Event event) {
  MutexLock lock(mutex_);
  return pending_events_.count(event.id) == 0;
}
Status FakeDevice::StreamWaitEvent(Stream /*stream*/, Event /*event*/) { return Status::Ok(); }
Status FakeDevice::SynchronizeEvent(Event event) {
  MutexLock lock(mutex_);
  pending_events_.erase(event.id);
  return Status::Ok();
}

Status FakeDevice::CopyHostToDevice(void* dst, const void* src, size_t bytes, Stream /*s*/) {
  if (bytes != 0 && (dst == nullptr || src == nullptr)) return InvalidArgumentError("null copy");
  if (bytes != 0) std::memcpy(dst, src, bytes);
  return Status::Ok();
}
Status FakeDevice::CopyDeviceToHost(void* dst, const void* src, size_t bytes, Stream /*s*/) {
  if (bytes != 0 && (dst == nullptr || src == nullptr)) return InvalidArgumentError("null copy");
  if (bytes != 0) std::memcpy(dst, src, bytes);
  return Status::Ok();
}
Status FakeDevice::CopyDeviceToDevice(void* dst, const void* src, size_t bytes, Stream /*s*/) {
  if (bytes != 0 && (dst == nullptr || src == nullptr)) return InvalidArgumentError("null copy");
  if (bytes != 0) std::memmove(dst, src, bytes);
  return Status::Ok();
}
Status FakeDevice::Memset(void* dst, uint8_t value, size_t bytes, Stream /*s*/) {
  if (bytes != 0 && dst == nullptr) return InvalidArgumentError("null memset");
  if (bytes != 0) std::memset(dst, value, bytes);
  return Status::Ok();
}

}  // namespace pier

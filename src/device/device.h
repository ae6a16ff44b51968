// Device: the small abstract interface every compute backend implements (CPU, CUDA, fakes).
//
// A Device hands out raw memory, runs work on streams, orders it with events and copies
// bytes between the host and itself. Nothing above src/memory/ calls AllocateRaw/FreeRaw:
// the memory governor (src/memory/) is the only client, so that every byte is charged to an
// owner under a budget. Everything else asks the governor for a Block.
//
// Ownership: a Device owns nothing it hands out; the caller of AllocateRaw (the pool) owns
// the pointer until it calls FreeRaw with the same size. Streams, events and address ranges
// are opaque handles created and destroyed through the device that made them; using a
// handle with another device is a bug.
//
// Thread-safety: every method may be called from any thread concurrently; implementations
// guard their own state. Work queued on one stream runs in order; work on different streams
// is unordered unless an event orders it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace pier {

enum class DeviceKind : uint8_t {
  kCpu = 0,
  kCuda,
  kFake,  // tests: host memory with a small, fixed capacity and failure injection
  // A GPU this process only accounts for (ledger_device.h): its models run in worker
  // processes.
  kLedger,
};

// "cpu", "cuda", "fake".
std::string_view DeviceKindName(DeviceKind kind);

// An ordered queue of device work. id 0 is the device's default stream. On the CPU every
// operation completes before it returns, so streams are trivial.
struct Stream {
  uintptr_t id = 0;
  friend bool operator==(Stream, Stream) = default;
};

// A marker recorded on a stream; it completes when the work queued before it has run.
struct Event {
  uintptr_t id = 0;
  friend bool operator==(Event, Event) = default;
};

// A reserved range of device virtual addresses (no memory behind it until chunks are mapped).
// `base` is the first address; `bytes` is a multiple of VmGranularity(). `id` is the
// implementation's handle (0 = none).
struct VirtualRange {
  void* base = nullptr;
  size_t bytes = 0;
  uintptr_t id = 0;
};

// Host memory for staging transfers. `locked` tells whether the pages are pinned (CUDA
// cudaHostAlloc, or mlock on the CPU); when the OS refuses to lock, `locked` is false and the
// memory is still usable, only transfers from it may be slower.
struct HostAllocation {
  void* ptr = nullptr;
  size_t bytes = 0;
  bool locked = false;
};

class Device {
 public:
  Device(DeviceKind kind, int index, std::string name)
      : kind_(kind), index_(index), name_(std::move(name)) {}
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  DeviceKind kind() const { return kind_; }
  // Ordinal among devices of the same kind (CUDA device number; 0 for the CPU).
  int index() const { return index_; }
  // Human-readable, e.g. "cpu", "cuda:0 (NVIDIA H200)".
  const std::string& name() const { return name_; }

  // ---- Capacity -------------------------------------------------------------------------

  // Bytes this device may ever hold for Pier: the GPU's memory, or on the CPU the available
  // memory capped by the cgroup limit, or an explicit override (`--device-memory`).
  // Budgets given as a percentage are a percentage of this number. Stable over the
  // device's lifetime.
  virtual size_t TotalBytes() const = 0;

  // Bytes that could be allocated right now (a snapshot; another process may take them).
  virtual size_t FreeBytes() const = 0;

  // ---- Raw memory (only the memory pool calls these) -------------------------------------

  // Allocates `bytes` (> 0) of device memory aligned to `alignment` (a power of two; 256 is
  // what the pool asks for). Returns kResourceExhausted when the device is out of memory
  // (never aborts), kInvalidArgument for a zero size or a bad alignment.
  [[nodiscard]] virtual Result<void*> AllocateRaw(size_t bytes, size_t alignment) = 0;

  // Releases memory from AllocateRaw; `bytes` is the size passed there.
  virtual void FreeRaw(void* ptr, size_t bytes) = 0;

  // ---- Pinned host memory (the staging pool calls these) ----------------------------------

  // Allocates host memory suited to fast transfers to and from this device. Never fails only
  // because pinning was refused: it falls back to ordinary pages and says so in `locked`.
  [[nodiscard]] virtual Result<HostAllocation> AllocatePinnedHost(size_t bytes) = 0;
  virtual void FreePinnedHost(const HostAllocation& allocation) = 0;

  // ---- Virtual memory (elastic KV arenas) --------------------------------------------------
  //
  // An arena reserves a large address range once and maps physical chunks of
  // VmGranularity() bytes into it as it grows, unmapping them as it shrinks, so its address
  // never moves. Devices without support return false from SupportsVirtualMemory() and
  // kUnsupported from the calls; the pool then grows arenas as separate segments.

  virtual bool SupportsVirtualMemory() const { return false; }
  // Size and alignment of one physical chunk (e.g. 2 MiB on CUDA, the page size on the CPU).
  virtual size_t VmGranularity() const { return 0; }

  // Reserves `bytes` (rounded up to the granularity) of address space; no memory is used.
  [[nodiscard]] virtual Result<VirtualRange> ReserveAddressRange(size_t bytes);
  // Backs [range.base + offset, + bytes) with physical memory, readable and writable by the
  // device. offset and bytes are multiples of the granularity; the range must be unmapped.
  // kResourceExhausted when the device has no memory left.
  [[nodiscard]] virtual Status MapChunk(const VirtualRange& range, size_t offset, size_t bytes);
  // Returns the physical memory of a mapped span to the device; the addresses stay reserved.
  [[nodiscard]] virtual Status UnmapChunk(const VirtualRange& range, size_t offset, size_t bytes);
  // Unmaps whatever is still mapped and releases the address range.
  virtual void ReleaseAddressRange(const VirtualRange& range);

  // ---- Streams and events ------------------------------------------------------------------

  // The default stream (always valid, never destroyed).
  Stream DefaultStream() const { return Stream{}; }
  [[nodiscard]] virtual Result<Stream> CreateStream() = 0;
  virtual void DestroyStream(Stream stream) = 0;
  // Blocks until all work queued on `stream` has completed.
  [[nodiscard]] virtual Status Synchronize(Stream stream) = 0;

  [[nodiscard]] virtual Result<Event> CreateEvent() = 0;
  virtual void DestroyEvent(Event event) = 0;
  // Records `event` at the current end of `stream`.
  [[nodiscard]] virtual Status RecordEvent(Event event, Stream stream) = 0;
  // True when the work before the last RecordEvent has completed (or it was never recorded).
  [[nodiscard]] virtual Result<bool> EventDone(Event event) = 0;
  // Makes future work on `stream` wait for `event` (does not block the host).
  [[nodiscard]] virtual Status StreamWaitEvent(Stream stream, Event event) = 0;
  // Blocks the host until `event` has completed.
  [[nodiscard]] virtual Status SynchronizeEvent(Event event) = 0;

  // ---- Copies --------------------------------------------------------------------------------
  //
  // Queued on `stream`; the source must stay valid and unchanged until the stream reaches
  // the copy (synchronize or wait on an event). On the CPU they complete before returning.

  [[nodiscard]] virtual Status CopyHostToDevice(void* device_dst, const void* host_src,
                                                size_t bytes, Stream stream) = 0;
  [[nodiscard]] virtual Status CopyDeviceToHost(void* host_dst, const void* device_src,
                                                size_t bytes, Stream stream) = 0;
  [[nodiscard]] virtual Status CopyDeviceToDevice(void* device_dst, const void* device_src,
                                                  size_t bytes, Stream stream) = 0;
  // Sets `bytes` bytes at `device_dst` to `value`.
  [[nodiscard]] virtual Status Memset(void* device_dst, uint8_t value, size_t bytes,
                                      Stream stream) = 0;

 private:
  const DeviceKind kind_;
  const int index_;
  const std::string name_;
};

}  // namespace pier

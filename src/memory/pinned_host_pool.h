// PinnedHostPool: cached, page-locked host memory for staging transfers and KV swap.
//
// Buffers come from a CachingAllocator whose segments are the device's pinned host memory
// (cudaHostAlloc on CUDA; mmap + mlock on the CPU). When the OS refuses to lock pages
// (RLIMIT_MEMLOCK), the segment is still used as ordinary memory: the pool logs it once and
// Stats() reports `lock_refused` and the unlocked bytes, so an operator can raise the limit.
// The pool has its own byte limit: host staging memory is not device memory and is not
// charged to the device budget.
//
// Ownership: PinnedBuffer is a move-only RAII handle; the pool must outlive its buffers.
// Thread-safety: all methods may be called from any thread; `mutex_` guards the pool.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "common/mutex.h"
#include "device/device.h"
#include "memory/caching_allocator.h"

namespace pier {

class PinnedHostPool;

// [size()] bytes of host memory, 256-byte aligned.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { Reset(); }
  PinnedBuffer(PinnedBuffer&& other) noexcept { *this = std::move(other); }
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  explicit operator bool() const { return ptr_ != nullptr; }
  void* data() const { return ptr_; }
  size_t size() const { return size_; }
  void Reset();

 private:
  friend class PinnedHostPool;
  PinnedBuffer(PinnedHostPool* pool, void* ptr, size_t size)
      : pool_(pool), ptr_(ptr), size_(size) {}
  PinnedHostPool* pool_ = nullptr;  // not owned
  void* ptr_ = nullptr;
  size_t size_ = 0;
};

struct PinnedHostPoolOptions {
  uint64_t limit_bytes = uint64_t{256} << 20;
  CachingAllocatorOptions pool = {};
};

struct PinnedHostStats {
  AllocatorStats pool;
  uint64_t limit_bytes = 0;
  uint64_t locked_bytes = 0;    // segments the OS locked
  uint64_t unlocked_bytes = 0;  // segments it refused to lock (ordinary pages)
  bool lock_refused = false;    // at least one segment could not be locked
};

class PinnedHostPool {
 public:
  PinnedHostPool(Device* device, PinnedHostPoolOptions options = {});
  ~PinnedHostPool();
  PinnedHostPool(const PinnedHostPool&) = delete;
  PinnedHostPool& operator=(const PinnedHostPool&) = delete;

  // kResourceExhausted past the pool's limit; kInvalidArgument for 0 bytes.
  [[nodiscard]] Result<PinnedBuffer> Allocate(size_t bytes);
  size_t Trim();
  PinnedHostStats Stats() const;

 private:
  friend class PinnedBuffer;
  class Backend;
  void Free(void* ptr);

  Device* const device_;
  const PinnedHostPoolOptions options_;
  std::unique_ptr<Backend> backend_;
  mutable Mutex mutex_;
  std::unique_ptr<CachingAllocator> pool_ PIER_GUARDED_BY(mutex_);
};

}  // namespace pier

#include "memory/pinned_host_pool.h"

#include <spdlog/spdlog.h>

#include "memory/byte_size.h"

namespace pier {

// Segments are pinned host allocations; host memory has no streams, so events are trivial.
// Called with the pool's mutex held.
class PinnedHostPool::Backend final : public AllocatorBackend {
 public:
  Backend(Device* device, uint64_t limit_bytes) : device_(device), limit_bytes_(limit_bytes) {}

  Result<void*> AllocateSegment(size_t bytes) override {
    if (held_bytes_ + bytes > limit_bytes_) {
      return ResourceExhaustedError("pinned host pool: " + FormatBytes(bytes) +
                                    " more would pass " + "its limit of " +
                                    FormatBytes(limit_bytes_));
    }
    PIER_ASSIGN_OR_RETURN(HostAllocation allocation, device_->AllocatePinnedHost(bytes));
    if (!allocation.locked && !lock_refused_) {
      spdlog::warn(
          "memory: the OS refused to lock {} of host staging memory (RLIMIT_MEMLOCK?); using "
          "ordinary pages, transfers may be slower",
          FormatBytes(bytes));
    }
    lock_refused_ = lock_refused_ || !allocation.locked;
    (allocation.locked ? locked_bytes_ : unlocked_bytes_) += bytes;
    held_bytes_ += bytes;
    allocations_[allocation.ptr] = allocation;
    return allocation.ptr;
  }

  void FreeSegment(void* ptr, size_t bytes) override {
    auto it = allocations_.find(ptr);
    PIER_CHECK(it != allocations_.end(), "pinned host pool: unknown segment");
    (it->second.locked ? locked_bytes_ : unlocked_bytes_) -= bytes;
    held_bytes_ -= bytes;
    device_->FreePinnedHost(it->second);
    allocations_.erase(it);
  }

  Result<Event> RecordEvent(Stream /*stream*/) override { return Event{}; }
  bool EventDone(Event /*event*/) override { return true; }
  void DestroyEvent(Event /*event*/) override {}

  uint64_t locked_bytes() const { return locked_bytes_; }
  uint64_t unlocked_bytes() const { return unlocked_bytes_; }
  bool lock_refused() const { return lock_refused_; }

 private:
  Device* const device_;
  const uint64_t limit_bytes_;
  uint64_t held_bytes_ = 0;
  uint64_t locked_bytes_ = 0;
  uint64_t unlocked_bytes_ = 0;
  bool lock_refused_ = false;
  std::map<void*, HostAllocation> allocations_;
};

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    pool_ = std::exchange(other.pool_, nullptr);
    ptr_ = std::exchange(other.ptr_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void PinnedBuffer::Reset() {
  if (ptr_ == nullptr) return;
  pool_->Free(ptr_);
  ptr_ = nullptr;
  pool_ = nullptr;
}

PinnedHostPool::PinnedHostPool(Device* device, PinnedHostPoolOptions options)
    : device_(device),
      options_(options),
      backend_(std::make_unique<Backend>(device, options.limit_bytes)),
      pool_(std::make_unique<CachingAllocator>(backend_.get(), options.pool)) {}

PinnedHostPool::~PinnedHostPool() {
  MutexLock lock(mutex_);
  pool_.reset();
}

Result<PinnedBuffer> PinnedHostPool::Allocate(size_t bytes) {
  if (bytes == 0) return InvalidArgumentError("pinned host buffer of 0 bytes");
  if (bytes > options_.limit_bytes) {
    return ResourceExhaustedError("pinned host buffer of " + FormatBytes(bytes) +
                                  " is larger than the pool's limit of " +
                                  FormatBytes(options_.limit_bytes));
  }
  MutexLock lock(mutex_);
  PIER_ASSIGN_OR_RETURN(AllocatedBlock block, pool_->Allocate(bytes, Stream{}, 0));
  return PinnedBuffer(this, block.ptr, bytes);
}

void PinnedHostPool::Free(void* ptr) {
  MutexLock lock(mutex_);
  Result<FreedBlock> freed = pool_->Free(ptr);
  PIER_CHECK(freed.ok(), "a PinnedBuffer could not free its memory: " + freed.status().ToString());
}

size_t PinnedHostPool::Trim() {
  MutexLock lock(mutex_);
  return pool_->Trim();
}

PinnedHostStats PinnedHostPool::Stats() const {
  MutexLock lock(mutex_);
  PinnedHostStats stats;
  stats.pool = pool_->Stats();
  stats.limit_bytes = options_.limit_bytes;
  stats.locked_bytes = backend_->locked_bytes();
  stats.unlocked_bytes = backend_->unlocked_bytes();
  stats.lock_refused = backend_->lock_refused();
  return stats;
}

}  // namespace pier

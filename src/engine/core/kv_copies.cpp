#include "engine/core/kv_copies.h"

#include <string>
#include <utility>

#include "common/check.h"

namespace pier::engine {
namespace {

// Swapped K/V in the pinned host pool: [n_slots][bytes_per_block]. On the CPU device the
// "device" KV is host memory too, so a swap is a memcpy each way (and moves the bytes out of
// the device's budget into the pool's).
class HostSwapSpace final : public SwapSpace {
 public:
  static Result<std::unique_ptr<SwapSpace>> Create(KvStore* kv, int64_t n_slots,
                                                   PinnedHostPool* pool) {
    const size_t bytes_per_block = kv->layout().bytes_per_block();
    Result<PinnedBuffer> buffer = pool->Allocate(static_cast<size_t>(n_slots) * bytes_per_block);
    if (!buffer.ok()) {
      return Status(buffer.status().code(), "engine: swap space of " + std::to_string(n_slots) +
                                                " KV blocks: " + buffer.status().message());
    }
    Result<Stream> stream = kv->device().CreateStream();
    if (!stream.ok()) {
      return Status(stream.status().code(),
                    "engine: swap space's copy stream: " + stream.status().message());
    }
    return std::unique_ptr<SwapSpace>(
        new HostSwapSpace(kv, n_slots, bytes_per_block, std::move(buffer).value(), *stream));
  }
  ~HostSwapSpace() override {
    (void)kv_->device().Synchronize(stream_);
    kv_->device().DestroyStream(stream_);
  }
  int64_t num_slots() const override { return n_slots_; }
  // Queued on the swap space's own stream (pinned host memory: asynchronous on a GPU); the
  // runner's step has ended (its stream synchronized) before the scheduler swaps.
  void CopyOut(int32_t block, int64_t slot) override {
    const Status s = kv_->device().CopyDeviceToHost(Slot(slot), kv_->BlockData(block),
                                                    bytes_per_block_, stream_);
    PIER_CHECK(s.ok(), "KV swap out: " + s.ToString());
  }
  void CopyIn(int64_t slot, int32_t block) override {
    const Status s = kv_->device().CopyHostToDevice(kv_->BlockData(block), Slot(slot),
                                                    bytes_per_block_, stream_);
    PIER_CHECK(s.ok(), "KV swap in: " + s.ToString());
  }
  void Wait() override {
    const Status s = kv_->device().Synchronize(stream_);
    PIER_CHECK(s.ok(), "KV swap: " + s.ToString());
  }

 private:
  HostSwapSpace(KvStore* kv, int64_t n_slots, size_t bytes_per_block, PinnedBuffer buffer,
                Stream stream)
      : kv_(kv),
        bytes_per_block_(bytes_per_block),
        n_slots_(n_slots),
        buffer_(std::move(buffer)),
        stream_(stream) {}
  std::byte* Slot(int64_t slot) {
    return static_cast<std::byte*>(buffer_.data()) + static_cast<size_t>(slot) * bytes_per_block_;
  }

  KvStore* kv_;
  size_t bytes_per_block_;
  int64_t n_slots_;
  PinnedBuffer buffer_;  // [n_slots][bytes_per_block]
  Stream stream_;        // the copies' own (a copy stream on a GPU)
};

class KvBlockCopier final : public BlockCopier {
 public:
  explicit KvBlockCopier(KvStore* kv) : kv_(kv) {}
  void CopyBlock(int32_t from, int32_t to) override {
    Device& device = kv_->device();
    const Status s = device.CopyDeviceToDevice(kv_->BlockData(to), kv_->BlockData(from),
                                               kv_->layout().bytes_per_block(), Stream{});
    PIER_CHECK(s.ok() && device.Synchronize(Stream{}).ok(), "KV block copy: " + s.ToString());
  }

 private:
  KvStore* kv_;
};

}  // namespace

Result<std::unique_ptr<SwapSpace>> CreateHostSwapSpace(KvStore* kv, int64_t n_slots,
                                                       PinnedHostPool* pool) {
  return HostSwapSpace::Create(kv, n_slots, pool);
}

std::unique_ptr<BlockCopier> MakeKvBlockCopier(KvStore* kv) {
  return std::make_unique<KvBlockCopier>(kv);
}

}  // namespace pier::engine

// LeasedKvStore: a KvStore whose blocks live in an elastic lease from the memory governor.
//
// Block ids span the lease's largest size (max_chunks * blocks_per_chunk); only the blocks of
// mapped chunks, [0, usable_blocks()), may be touched. Block b lives in chunk
// b / blocks_per_chunk at offset (b % blocks_per_chunk) * bytes_per_block. The engine grows the
// lease a chunk at a time when sequences wait for blocks, and honours the governor's shrink
// requests by preempting the sequences that hold blocks of the last chunks (see engine.h).
//
// Ownership: owns the Lease (destroying the store returns every chunk). The governor must
// outlive it. Thread-safety: BlockData is called by the engine thread only; the shrink
// handler may be set and called from any thread (guarded by handler_mutex_).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "common/mutex.h"
#include "common/status.h"
#include "engine/kv/kv_store.h"
#include "memory/lease.h"
#include "memory/memory_governor.h"

namespace pier::engine {

struct LeasedKvOptions {
  std::string name = "kv";
  int64_t blocks_per_chunk = 16;
  size_t min_chunks = 1;
  size_t max_chunks = 64;
  size_t initial_chunks = 1;
  bool use_virtual_memory = true;  // when the device supports it
};

class LeasedKvStore final : public KvStore {
 public:
  // INVALID_ARGUMENT for a bad layout or chunk counts; the governor's refusal otherwise.
  [[nodiscard]] static Result<std::unique_ptr<LeasedKvStore>> Create(const KvLayout& layout,
                                                                     const LeasedKvOptions& options,
                                                                     MemoryGovernor& governor,
                                                                     OwnerId owner);

  int64_t num_blocks() const override {
    return blocks_per_chunk_ * static_cast<int64_t>(lease_->max_chunks());
  }
  std::byte* BlockData(int32_t block) const override;

  int64_t blocks_per_chunk() const { return blocks_per_chunk_; }
  size_t min_chunks() const { return min_chunks_; }
  int64_t usable_blocks() const {
    return blocks_per_chunk_ * static_cast<int64_t>(lease_->chunks());
  }
  Lease& lease() { return *lease_; }
  // Who hears the governor's shrink requests (the engine); empty to stop hearing them.
  void SetShrinkHandler(std::function<void(const ShrinkRequest&)> handler);

 private:
  LeasedKvStore(const KvLayout& layout, Device* device, int64_t blocks_per_chunk, size_t min_chunks)
      : KvStore(layout, device), blocks_per_chunk_(blocks_per_chunk), min_chunks_(min_chunks) {}
  void OnShrinkRequest(const ShrinkRequest& request);

  const int64_t blocks_per_chunk_;
  const size_t min_chunks_;
  std::unique_ptr<Lease> lease_;
  Mutex handler_mutex_;
  std::function<void(const ShrinkRequest&)> handler_ PIER_GUARDED_BY(handler_mutex_);
};

}  // namespace pier::engine

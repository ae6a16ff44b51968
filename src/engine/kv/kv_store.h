// KvStore: the K/V of every cached position, in fixed-size blocks.
//
// A block holds `block_size` consecutive positions of one sequence for every
// layer. Its bytes are laid out as
//   [n_layer][2 (K, V)][block_size][n_kv_head][head_dim] of the layout's dtype
// (f32, or IEEE half f16: half the bytes, each value rounded to nearest even when
// written; see kv_convert.h), so one layer's K (or V) seen across blocks is
//   [n_blocks][block_size][n_kv_head][head_dim] with a block stride of bytes_per_block,
// and a whole block is one contiguous range (a unit to copy, swap or hand back).
// Sequences reach their blocks through block tables (see batch.h); the store
// knows nothing about sequences. How blocks are allocated is the caller's
// policy: KvStore only maps a block id to its memory.
//
// Ownership: PooledKvStore owns one memory-governor block holding all its KV
// blocks. Thread-safety: the store hands out raw pointers; the engine thread
// owns it and orders reads and writes (one Step at a time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "common/check.h"
#include "common/status.h"
#include "kernels/cpu/paged_kv.h"
#include "memory/memory_governor.h"

namespace pier::engine {

using kernels::KvDtype;
using kernels::KvLayout;

// "f32", "f16" or "q8_0".
std::string_view KvDtypeName(KvDtype dtype);
// "f32", "f16" or "q8_0" (as `--kv-dtype` takes them); INVALID_ARGUMENT naming the accepted
// values.
[[nodiscard]] Result<KvDtype> ParseKvDtype(std::string_view name);

// How a model's KV cache holds memory: static, its whole capacity from load on; elastic, it
// grows on demand and lends memory back (engine/kv/leased_kv_store.h).
enum class KvPolicy : uint8_t { kStatic, kElastic };
// "static" or "elastic"; INVALID_ARGUMENT naming them otherwise.
[[nodiscard]] Result<KvPolicy> ParseKvPolicy(std::string_view name);

// INVALID_ARGUMENT for a non-positive dimension, an unknown dtype, or q8_0 with a head size
// that is not a multiple of 32 (the message names the head size).
[[nodiscard]] Status ValidateKvLayout(const KvLayout& layout);

class KvStore {
 public:
  // `device`: where the blocks live (the governor's device); BlockData pointers are that
  // device's memory, so whoever copies blocks (swap, copy-on-write) goes through it.
  KvStore(KvLayout layout, Device* device) : layout_(layout), device_(device) {}
  virtual ~KvStore() = default;
  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;

  const KvLayout& layout() const { return layout_; }
  Device& device() const { return *device_; }
  virtual int64_t num_blocks() const = 0;

  // The store as the kernels read it (valid while the store lives).
  kernels::PagedKvView View() const {
    return kernels::PagedKvView(layout_, this, [](const void* store, int32_t block) {
      return static_cast<const KvStore*>(store)->BlockData(block);
    });
  }

  // Start of block `block` (0 <= block < num_blocks()): bytes_per_block() bytes.
  virtual std::byte* BlockData(int32_t block) const = 0;

  // K (V) of layer `layer` in block `block`: [block_size][n_kv_head][head_dim] values of
  // the layout's dtype (plane_bytes() bytes).
  std::byte* KeyPlane(int64_t layer, int32_t block) const {
    return BlockData(block) + static_cast<size_t>(2 * layer) * layout_.plane_bytes();
  }
  std::byte* ValuePlane(int64_t layer, int32_t block) const {
    return BlockData(block) + static_cast<size_t>(2 * layer + 1) * layout_.plane_bytes();
  }
  // The same planes as floats, for f32 layouts only.
  float* Keys(int64_t layer, int32_t block) const {
    PIER_CHECK(layout_.dtype == KvDtype::kF32, "KvStore::Keys on a non-f32 KV layout");
    return reinterpret_cast<float*>(KeyPlane(layer, block));
  }
  float* Values(int64_t layer, int32_t block) const {
    PIER_CHECK(layout_.dtype == KvDtype::kF32, "KvStore::Values on a non-f32 KV layout");
    return reinterpret_cast<float*>(ValuePlane(layer, block));
  }

 private:
  KvLayout layout_;
  Device* device_;  // not owned
};

// The simple store: `n_blocks` blocks in one block of the governor's pool, charged to `owner`.
class PooledKvStore final : public KvStore {
 public:
  // INVALID_ARGUMENT for a bad layout or n_blocks < 1; the governor's refusal (with its
  // numbers) when the memory is not available.
  [[nodiscard]] static Result<std::unique_ptr<PooledKvStore>> Create(const KvLayout& layout,
                                                                     int64_t n_blocks,
                                                                     MemoryGovernor& governor,
                                                                     OwnerId owner);

  int64_t num_blocks() const override { return n_blocks_; }
  std::byte* BlockData(int32_t block) const override;

 private:
  PooledKvStore(const KvLayout& layout, Device* device, int64_t n_blocks, Block memory)
      : KvStore(layout, device), n_blocks_(n_blocks), memory_(std::move(memory)) {}

  int64_t n_blocks_;
  Block memory_;  // [n_blocks][bytes_per_block]
};

}  // namespace pier::engine

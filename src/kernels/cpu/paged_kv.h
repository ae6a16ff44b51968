// A paged K/V cache as the CPU kernels see it: the layout of its blocks and where each
// block's bytes start. The engine's stores (engine/kv_store.h) own the memory and decide
// which sequence holds which block; a kernel only needs this view.
//
// A block holds `block_size` consecutive positions of one sequence for every layer:
//   [n_layer][2 (K, V)][block_size][n_kv_head][head_dim] of the layout's dtype,
// so one layer's K (or V) of a block is one plane of plane_bytes() bytes.
//
// Thread-safety: a view is a value; reading through it is as safe as reading the store.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pier::kernels {

// Positions per tile of the attention kernels: a sliding window's first tile starts at a
// multiple of it, and the tiles wholly before it are never read (attention_kernel.h,
// FirstAttendedTile; the engine releases those blocks, engine/kv_groups.h).
inline constexpr int64_t kAttentionTilePositions = 16;

// The element type of stored K/V values.
enum class KvDtype : uint8_t {
  kF32,   // exact copies of the runner's f32 K/V
  kF16,   // IEEE half, rounded to nearest even: half the memory
  kQ8_0,  // GGUF's Q8_0 per 32 values of a head (f16 scale, int8 values): 34 bytes per 32,
          // about half of f16; the head size must be a multiple of 32
};

struct KvLayout {
  int64_t n_layer = 0;
  int64_t block_size = 16;  // positions per block
  int64_t n_kv_head = 0;
  int64_t head_dim = 0;
  KvDtype dtype = KvDtype::kF32;

  // Bytes of one head's head_dim values of one position.
  size_t head_bytes() const {
    const auto hd = static_cast<size_t>(head_dim);
    switch (dtype) {
      case KvDtype::kF16:
        return 2 * hd;
      case KvDtype::kQ8_0:
        return hd / 32 * 34;
      case KvDtype::kF32:
        break;
    }
    return 4 * hd;
  }
  // Values of one position of one layer's K (or V): n_kv_head * head_dim.
  int64_t row_elements() const { return n_kv_head * head_dim; }
  // Values of one layer's K (or V) in one block.
  int64_t plane_elements() const { return block_size * row_elements(); }
  size_t row_bytes() const { return static_cast<size_t>(n_kv_head) * head_bytes(); }
  size_t plane_bytes() const { return static_cast<size_t>(block_size) * row_bytes(); }
  size_t bytes_per_block() const { return static_cast<size_t>(n_layer) * 2 * plane_bytes(); }
  friend bool operator==(const KvLayout&, const KvLayout&) = default;
};

class PagedKvView {
 public:
  // Start of block `block` of `store` (bytes_per_block() bytes).
  using BlockDataFn = std::byte* (*)(const void* store, int32_t block);

  PagedKvView(const KvLayout& layout, const void* store, BlockDataFn block_data)
      : layout_(layout), store_(store), block_data_(block_data) {}

  const KvLayout& layout() const { return layout_; }
  std::byte* BlockData(int32_t block) const { return block_data_(store_, block); }
  // K (V) of layer `layer` in block `block`: [block_size][n_kv_head][head_dim] values.
  std::byte* KeyPlane(int64_t layer, int32_t block) const {
    return BlockData(block) + static_cast<size_t>(2 * layer) * layout_.plane_bytes();
  }
  std::byte* ValuePlane(int64_t layer, int32_t block) const {
    return BlockData(block) + static_cast<size_t>(2 * layer + 1) * layout_.plane_bytes();
  }

 private:
  KvLayout layout_;
  const void* store_;
  BlockDataFn block_data_;
};

}  // namespace pier::kernels

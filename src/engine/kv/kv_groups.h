// KvGroups: how a model's layers share the paged KV cache when some of them attend only a
// sliding window of positions (Gemma 2/3, Mistral).
//
// A layer that attends every position needs the K/V of all of them; a sliding layer only the
// last `window`. To free what a sliding layer no longer reads while the others keep it, the
// layers are split into groups of the same size and kind, and a KV block holds the K/V of one
// group's layers for block_size positions (the KvLayout's n_layer is the group size). A
// sequence's block table then has one entry per group for each block_size positions:
//   entry (i * n_groups + g) holds positions [i * block_size, (i + 1) * block_size) of group g,
// and a sliding group's entries that fall wholly before its window are released (-1 in the
// table, kNoBlock). A model without sliding layers has one group of all its layers and the
// plain table of one entry per block_size positions.
//
// The group size is the greatest common divisor of the number of layers of each window, so
// every block in the store has the same size (one pool, one free list): Gemma 3 270M's 3
// global and 15 sliding layers make 6 groups of 3 layers, 1 global and 5 sliding.
//
// Thread-safety: a plain value.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace pier::engine {

// A released entry of a block table (a sliding group's block before its window).
inline constexpr int32_t kNoBlock = -1;

struct KvGroups {
  int64_t layers_per_block = 0;         // layers whose K/V one block holds
  std::vector<int64_t> windows;         // [n_groups] positions a group attends (0: all)
  std::vector<int32_t> group_of_layer;  // [n_layer] the group holding layer il's K/V
  std::vector<int32_t> slot_of_layer;   // [n_layer] its place among the group's layers

  // 0 for a default KvGroups, which means one group of every layer (the plain table).
  int64_t n_groups() const { return static_cast<int64_t>(windows.size()); }
  bool any_window() const;

  // The first position a token at `position` attends in a group of window `window`, rounded
  // down to a tile of 16 positions (the attention kernels read whole tiles: see
  // kernels/cpu/attention_kernel.h, FirstAttendedTile); 0 when window is 0.
  static int64_t FirstReadPosition(int64_t position, int64_t window);
  // Block-table entries of group `group` (logical blocks of block_size positions) wholly before
  // what a token at `position` reads: the ones a sequence whose next token is there can free.
  int64_t BlocksBefore(int64_t group, int64_t position, int64_t block_size) const;
  // Blocks one sequence holds at most while computing positions 0 .. n_tokens - 1 in chunks of
  // at most `max_chunk` tokens.
  int64_t MaxBlocksHeld(int64_t n_tokens, int64_t block_size, int64_t max_chunk) const;
};

// Groups layers by window (`layer_windows[il]`: the positions layer il attends, 0 for all).
// One group of every layer when no layer has a window.
KvGroups GroupLayersByWindow(std::span<const int64_t> layer_windows);

}  // namespace pier::engine

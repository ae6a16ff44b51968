// A random paged K/V cache in the layout of kernels/cpu/paged_kv.h (f16), with shuffled block
// tables, for the GPU attention's tests (the unit test of its host arithmetic and the GPU
// test). Header-only, no Pier library needed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/attention_math.h"

namespace pier::cuda::testing {

struct RandomKvCache {
  int64_t n_layer, n_kv_head, head_dim;
  int64_t n_blocks;
  attn::KvGeometry geometry;  // of layer `layer`
  std::vector<uint8_t> bytes;
  std::vector<int32_t> tables;  // every sequence's table, one after another
  std::vector<int32_t> table_offsets;

  int64_t plane_bytes() const { return attn::kBlockPositions * n_kv_head * head_dim * 2; }

  // One table per context length, the blocks of all tables shuffled over the cache; K and V
  // values normal(0, 1) (and a few larger), rounded to f16.
  RandomKvCache(int64_t layers, int64_t layer, int64_t kv_heads, int64_t dim,
                const std::vector<int64_t>& context_lengths, uint32_t seed)
      : n_layer(layers), n_kv_head(kv_heads), head_dim(dim) {
    std::mt19937 rng(seed);
    int64_t total = 0;
    for (int64_t len : context_lengths) total += (len + attn::kBlockPositions - 1) / 16;
    n_blocks = total + 3;  // a few blocks no table uses
    const int64_t bytes_per_block = n_layer * 2 * plane_bytes();
    geometry = {bytes_per_block, 2 * layer * plane_bytes(), (2 * layer + 1) * plane_bytes(),
                n_kv_head, head_dim};
    bytes.resize(static_cast<size_t>(n_blocks * bytes_per_block));
    std::normal_distribution<float> value(0.0f, 1.0f);
    for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
      float v = value(rng);
      if (i % 202 == 0) v *= 8.0f;
      const uint16_t h = attn::FloatToHalf(v);
      std::memcpy(&bytes[i], &h, 2);
    }
    std::vector<int32_t> order(static_cast<size_t>(n_blocks));
    for (int32_t i = 0; i < n_blocks; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    size_t next = 0;
    for (int64_t len : context_lengths) {
      table_offsets.push_back(static_cast<int32_t>(tables.size()));
      for (int64_t b = 0; b < (len + 15) / 16; ++b) tables.push_back(order[next++]);
    }
  }

  const int32_t* table(size_t sequence) const { return tables.data() + table_offsets[sequence]; }
};

inline std::vector<float> RandomQueries(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> value(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(n));
  for (float& v : q) v = value(rng);
  return q;
}

}  // namespace pier::cuda::testing

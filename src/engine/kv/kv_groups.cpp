#include "engine/kv/kv_groups.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "common/check.h"
#include "kernels/cpu/paged_kv.h"

namespace pier::engine {

bool KvGroups::any_window() const {
  return std::any_of(windows.begin(), windows.end(), [](int64_t w) { return w > 0; });
}

int64_t KvGroups::FirstReadPosition(int64_t position, int64_t window) {
  if (window <= 0) return 0;
  constexpr int64_t kTile = kernels::kAttentionTilePositions;
  return std::max<int64_t>(0, position - window + 1) / kTile * kTile;
}

int64_t KvGroups::BlocksBefore(int64_t group, int64_t position, int64_t block_size) const {
  return FirstReadPosition(position, windows[static_cast<size_t>(group)]) / block_size;
}

int64_t KvGroups::MaxBlocksHeld(int64_t n_tokens, int64_t block_size, int64_t max_chunk) const {
  const int64_t all = (n_tokens + block_size - 1) / block_size;
  if (windows.empty()) return all;  // the plain table
  int64_t held = 0;
  for (const int64_t window : windows) {
    if (window <= 0) {
      held += all;
      continue;
    }
    // A chunk of c tokens from position p reads from FirstReadPosition(p) (at most window + 14
    // positions before p) to p + c - 1, in blocks that may straddle both ends.
    held += std::min(all, (window + 14 + max_chunk) / block_size + 2);
  }
  return held;
}

KvGroups GroupLayersByWindow(std::span<const int64_t> layer_windows) {
  PIER_CHECK(!layer_windows.empty(), "a model without layers");
  // Layers per window, in order of first appearance (so a model whose first layer attends
  // everything has its full group first).
  std::vector<int64_t> kinds;
  std::map<int64_t, int64_t> count;
  for (const int64_t w : layer_windows) {
    if (count[w]++ == 0) kinds.push_back(w);
  }
  int64_t per_block = 0;
  for (const auto& [w, n] : count) per_block = std::gcd(per_block, n);
  KvGroups groups;
  groups.layers_per_block = per_block;
  std::map<int64_t, int64_t> first_group;
  for (const int64_t w : kinds) {
    first_group[w] = groups.n_groups();
    for (int64_t i = 0; i < count[w] / per_block; ++i) groups.windows.push_back(w);
  }
  std::map<int64_t, int64_t> seen;
  for (const int64_t w : layer_windows) {
    const int64_t k = seen[w]++;
    groups.group_of_layer.push_back(static_cast<int32_t>(first_group[w] + k / per_block));
    groups.slot_of_layer.push_back(static_cast<int32_t>(k % per_block));
  }
  return groups;
}

}  // namespace pier::engine

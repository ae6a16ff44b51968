// BlockManager: bookkeeping of the paged KV cache's blocks (ids 0 .. num_blocks-1 of a KvStore).
//
// Every block is in exactly one of three states:
//   - used:    ref_count > 0; held by one or more sequences' block tables;
//   - cached:  ref_count == 0 but registered in the prefix index: its K/V are still valid and a
//              new sequence with the same prefix may take it back (Acquire); kept in LRU order
//              and evicted (oldest release first) only when no plain free block is left;
//   - free:    ref_count == 0, content meaningless.
// "Available" blocks (what an allocation can get) are free + cached.
//
// Capacity: ids run over [0, num_blocks) but only [0, capacity) are usable (an elastic KV
// arena maps chunks of blocks at the end of the range). SetCapacity grows or shrinks it; a
// shrink requires the blocks it drops to be unreferenced (the caller preempts their holders
// first) and evicts the cached ones. Allocation takes the lowest free id, so high chunks empty
// out first.
//
// Prefix index: a full block is named by a chained hash, xxh3-64 of its block_size token ids
// seeded with the hash of the block before it (kRootBlockHash for the first), so equal tokens
// after different prefixes get different names. A hash maps to one block; registering a hash
// that is already indexed keeps the existing block.
//
// Copy-on-write: blocks shared by several tables (Fork) are never written in place;
// PrepareWrite hands back a private block (and the block to copy from) when a block is shared
// or indexed.
//
// The manager knows nothing about K/V bytes; the caller copies block contents.
// Thread-safety: none; the engine thread owns it.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "engine/kv/kv_groups.h"

namespace pier::engine {

using BlockHash = uint64_t;
inline constexpr BlockHash kRootBlockHash = 0x9E3779B97F4A7C15ULL;

// Hash of one full block of `tokens` after a prefix whose last block hashed to `parent`.
BlockHash ChainBlockHash(BlockHash parent, std::span<const int32_t> tokens);

// Chained hashes of the first `n_blocks` full blocks of `tokens` (n_blocks * block_size <=
// tokens.size()), appended to *hashes after the ones already there (which must be a prefix).
void ExtendBlockHashes(std::span<const int32_t> tokens, int64_t block_size, int64_t n_blocks,
                       std::vector<BlockHash>* hashes);

// The name of group `group`'s block for the positions `hash` names (kv_groups.h: a model with
// sliding layers keeps one block per group of layers). Group 0's is `hash` itself.
BlockHash GroupBlockHash(BlockHash hash, int64_t group);

struct CopyOnWrite {
  int32_t block = -1;      // the block to write (maybe the same as before)
  int32_t copy_from = -1;  // when >= 0: copy this block's contents into `block` first
};

class BlockManager {
 public:
  // `capacity` < 0: all num_blocks usable.
  BlockManager(int64_t num_blocks, int64_t block_size, int64_t capacity = -1);

  int64_t num_blocks() const { return static_cast<int64_t>(ref_counts_.size()); }
  int64_t capacity() const { return capacity_; }
  int64_t block_size() const { return block_size_; }
  // Blocks an allocation can get now (free + cached).
  int64_t num_available() const { return static_cast<int64_t>(free_.size() + lru_.size()); }
  int64_t num_used() const { return capacity_ - num_available(); }
  // Grows or shrinks the usable range to [0, capacity). PIER_CHECK: 0 <= capacity <=
  // num_blocks and no block at or past `capacity` is referenced.
  void SetCapacity(int64_t capacity);
  int64_t num_cached() const { return static_cast<int64_t>(lru_.size()); }
  int32_t ref_count(int32_t block) const;
  bool IsIndexed(int32_t block) const;

  // The indexed blocks holding the longest prefix of whole blocks of `hashes` (at most
  // `max_blocks`). Read-only.
  std::vector<int32_t> MatchPrefix(std::span<const BlockHash> hashes, int64_t max_blocks) const;

  // The indexed block named `hash`, if any. Read-only.
  std::optional<int32_t> Find(BlockHash hash) const;
  // Takes a reference on a used or cached block (a cached one becomes used).
  void Acquire(int32_t block);
  // A fresh block with ref_count 1: a free one, else the least recently released cached one
  // (dropped from the index). RESOURCE_EXHAUSTED when every block is used.
  [[nodiscard]] Result<int32_t> Allocate();
  // Drops one reference; at zero the block becomes cached (if indexed) or free.
  void Release(int32_t block);
  // Entries kNoBlock (released before, see kv_groups.h) are skipped, here and in Fork.
  void ReleaseAll(std::span<const int32_t> blocks);
  // Names a used, fully written block by its chained hash. No-op when the hash is already
  // indexed (another block holds the same prefix) or the block already has a name.
  void Register(int32_t block, BlockHash hash);

  // Another reference on every block of `table` (a child sequence sharing them).
  void Fork(std::span<const int32_t> table);
  // Before writing `block` (held by the caller): the block itself when the caller is its only
  // holder and it is not indexed; otherwise a new private block (the caller's reference on
  // the old one is dropped) with copy_from = the old block. RESOURCE_EXHAUSTED when no block
  // is available (nothing changes then).
  [[nodiscard]] Result<CopyOnWrite> PrepareWrite(int32_t block);

  // Evictions of cached blocks since creation.
  int64_t evictions() const { return evictions_; }

  // Invariants: every block in exactly one state, index and reverse index agree. For tests.
  [[nodiscard]] Status CheckConsistency() const;

 private:
  void Unindex(int32_t block);

  int64_t block_size_;
  int64_t capacity_;
  std::vector<int32_t> ref_counts_;                     // [num_blocks]
  std::vector<std::optional<BlockHash>> block_hashes_;  // [num_blocks] name when indexed
  std::set<int32_t> free_;                              // free usable blocks, lowest first
  std::list<int32_t> lru_;                              // cached blocks, oldest release first
  std::vector<std::list<int32_t>::iterator> lru_pos_;   // [num_blocks] valid when cached
  std::vector<bool> in_lru_;                            // [num_blocks]
  std::unordered_map<BlockHash, int32_t> index_;        // hash -> block
  int64_t evictions_ = 0;
};

}  // namespace pier::engine

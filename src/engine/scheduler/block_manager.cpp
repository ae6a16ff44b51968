#include "engine/scheduler/block_manager.h"

#include <xxhash.h>

#include <string>

namespace pier::engine {

BlockHash ChainBlockHash(BlockHash parent, std::span<const int32_t> tokens) {
  return XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), parent);
}

void ExtendBlockHashes(std::span<const int32_t> tokens, int64_t block_size, int64_t n_blocks,
                       std::vector<BlockHash>* hashes) {
  PIER_CHECK(n_blocks * block_size <= static_cast<int64_t>(tokens.size()), "blocks past tokens");
  for (int64_t i = static_cast<int64_t>(hashes->size()); i < n_blocks; ++i) {
    const BlockHash parent = i == 0 ? kRootBlockHash : (*hashes)[i - 1];
    hashes->push_back(ChainBlockHash(parent, tokens.subspan(static_cast<size_t>(i * block_size),
                                                            static_cast<size_t>(block_size))));
  }
}

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size)
    : block_size_(block_size),
      ref_counts_(static_cast<size_t>(num_blocks), 0),
      block_hashes_(static_cast<size_t>(num_blocks)),
      lru_pos_(static_cast<size_t>(num_blocks)),
      in_lru_(static_cast<size_t>(num_blocks), false) {
  PIER_CHECK(num_blocks > 0 && block_size > 0, "empty KV cache");
  free_.reserve(static_cast<size_t>(num_blocks));
  // Lowest ids are handed out first.
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

int32_t BlockManager::ref_count(int32_t block) const {
  PIER_CHECK(block >= 0 && block < num_blocks(), "block id out of range");
  return ref_counts_[block];
}

bool BlockManager::IsIndexed(int32_t block) const { return block_hashes_[block].has_value(); }

std::vector<int32_t> BlockManager::MatchPrefix(std::span<const BlockHash> hashes,
                                               int64_t max_blocks) const {
  std::vector<int32_t> blocks;
  for (size_t i = 0; i < hashes.size() && static_cast<int64_t>(i) < max_blocks; ++i) {
    auto it = index_.find(hashes[i]);
    if (it == index_.end()) break;
    blocks.push_back(it->second);
  }
  return blocks;
}

void BlockManager::Acquire(int32_t block) {
  PIER_CHECK(block >= 0 && block < num_blocks(), "block id out of range");
  if (ref_counts_[block] == 0) {
    PIER_CHECK(in_lru_[block], "acquiring a free block that is not cached");
    lru_.erase(lru_pos_[block]);
    in_lru_[block] = false;
  }
  ++ref_counts_[block];
}

Result<int32_t> BlockManager::Allocate() {
  int32_t block = -1;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    block = lru_.front();
    lru_.pop_front();
    in_lru_[block] = false;
    Unindex(block);
    ++evictions_;
  } else {
    return ResourceExhaustedError("KV cache: all " + std::to_string(num_blocks()) +
                                  " blocks are in use");
  }
  ref_counts_[block] = 1;
  return block;
}

void BlockManager::Release(int32_t block) {
  PIER_CHECK(block >= 0 && block < num_blocks(), "block id out of range");
  PIER_CHECK(ref_counts_[block] > 0, "releasing a block nobody holds");
  if (--ref_counts_[block] > 0) return;
  if (block_hashes_[block].has_value()) {
    lru_pos_[block] = lru_.insert(lru_.end(), block);
    in_lru_[block] = true;
  } else {
    free_.push_back(block);
  }
}

void BlockManager::ReleaseAll(std::span<const int32_t> blocks) {
  // Last block first: the tail of a sequence is the least likely to be shared, so the
  // prefix's blocks are released last and are evicted last.
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) Release(*it);
}

void BlockManager::Register(int32_t block, BlockHash hash) {
  PIER_CHECK(ref_counts_[block] > 0, "registering a block nobody holds");
  if (block_hashes_[block].has_value() || index_.contains(hash)) return;
  block_hashes_[block] = hash;
  index_.emplace(hash, block);
}

void BlockManager::Fork(std::span<const int32_t> table) {
  for (int32_t block : table) Acquire(block);
}

Result<CopyOnWrite> BlockManager::PrepareWrite(int32_t block) {
  PIER_CHECK(ref_counts_[block] > 0, "writing a block nobody holds");
  if (ref_counts_[block] == 1 && !block_hashes_[block].has_value()) {
    return CopyOnWrite{.block = block, .copy_from = -1};
  }
  PIER_ASSIGN_OR_RETURN(int32_t fresh, Allocate());
  Release(block);
  return CopyOnWrite{.block = fresh, .copy_from = block};
}

void BlockManager::Unindex(int32_t block) {
  if (!block_hashes_[block].has_value()) return;
  index_.erase(*block_hashes_[block]);
  block_hashes_[block].reset();
}

Status BlockManager::CheckConsistency() const {
  int64_t zero_refs = 0;
  for (int64_t b = 0; b < num_blocks(); ++b) {
    if (ref_counts_[b] < 0)
      return InternalError("negative ref count on block " + std::to_string(b));
    if (ref_counts_[b] == 0) ++zero_refs;
    if (in_lru_[b] && (ref_counts_[b] != 0 || !block_hashes_[b].has_value())) {
      return InternalError("cached block " + std::to_string(b) + " is held or unnamed");
    }
    if (block_hashes_[b].has_value()) {
      auto it = index_.find(*block_hashes_[b]);
      if (it == index_.end() || it->second != b) {
        return InternalError("block " + std::to_string(b) + " named but not indexed");
      }
    }
  }
  if (zero_refs != num_available()) {
    return InternalError("free + cached = " + std::to_string(num_available()) + " but " +
                         std::to_string(zero_refs) + " blocks have no holder");
  }
  for (int32_t b : free_) {
    if (ref_counts_[b] != 0 || block_hashes_[b].has_value() || in_lru_[b]) {
      return InternalError("free block " + std::to_string(b) + " is held, named or cached");
    }
  }
  if (index_.size() > static_cast<size_t>(num_blocks())) return InternalError("index too large");
  return Status::Ok();
}

}  // namespace pier::engine

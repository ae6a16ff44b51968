#include "engine/kv/block_manager.h"

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

BlockHash GroupBlockHash(BlockHash hash, int64_t group) {
  if (group == 0) return hash;
  const BlockHash words[2] = {hash, static_cast<BlockHash>(group)};
  return XXH3_64bits(words, sizeof(words));
}

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size, int64_t capacity)
    : block_size_(block_size),
      capacity_(capacity < 0 ? num_blocks : capacity),
      ref_counts_(static_cast<size_t>(num_blocks), 0),
      block_hashes_(static_cast<size_t>(num_blocks)),
      lru_pos_(static_cast<size_t>(num_blocks)),
      in_lru_(static_cast<size_t>(num_blocks), false) {
  PIER_CHECK(num_blocks > 0 && block_size > 0, "empty KV cache");
  PIER_CHECK(capacity_ <= num_blocks, "capacity past the block ids");
  for (int64_t b = 0; b < capacity_; ++b) free_.insert(free_.end(), static_cast<int32_t>(b));
}

void BlockManager::SetCapacity(int64_t capacity) {
  PIER_CHECK(capacity >= 0 && capacity <= num_blocks(), "capacity out of range");
  for (int64_t b = capacity_; b < capacity; ++b) free_.insert(static_cast<int32_t>(b));
  for (int64_t b = capacity; b < capacity_; ++b) {
    PIER_CHECK(ref_counts_[b] == 0, "shrinking away a block that is still held");
    if (in_lru_[b]) {
      lru_.erase(lru_pos_[b]);
      in_lru_[b] = false;
      Unindex(static_cast<int32_t>(b));
      ++evictions_;
    } else {
      free_.erase(static_cast<int32_t>(b));
    }
  }
  capacity_ = capacity;
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

std::optional<int32_t> BlockManager::Find(BlockHash hash) const {
  auto it = index_.find(hash);
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

void BlockManager::Acquire(int32_t block) {
  PIER_CHECK(block >= 0 && block < capacity_, "block id out of range");
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
    block = *free_.begin();
    free_.erase(free_.begin());
  } else if (!lru_.empty()) {
    block = lru_.front();
    lru_.pop_front();
    in_lru_[block] = false;
    Unindex(block);
    ++evictions_;
  } else {
    return ResourceExhaustedError("KV cache: all " + std::to_string(capacity_) +
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
    free_.insert(block);
  }
}

void BlockManager::ReleaseAll(std::span<const int32_t> blocks) {
  // Last block first: the tail of a sequence is the least likely to be shared, so the
  // prefix's blocks are released last and are evicted last.
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    if (*it != kNoBlock) Release(*it);
  }
}

void BlockManager::Register(int32_t block, BlockHash hash) {
  PIER_CHECK(ref_counts_[block] > 0, "registering a block nobody holds");
  if (block_hashes_[block].has_value() || index_.contains(hash)) return;
  block_hashes_[block] = hash;
  index_.emplace(hash, block);
}

void BlockManager::Fork(std::span<const int32_t> table) {
  for (int32_t block : table) {
    if (block != kNoBlock) Acquire(block);
  }
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
    if (b >= capacity_) {
      if (ref_counts_[b] != 0 || in_lru_[b] || block_hashes_[b].has_value() || free_.contains(b)) {
        return InternalError("block " + std::to_string(b) + " past the capacity is in use");
      }
      continue;
    }
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

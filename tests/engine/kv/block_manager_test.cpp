// BlockManager: reference counts, the prefix index with chained hashes, LRU eviction of cached
// blocks, copy-on-write, and consistency under random operations.
#include "engine/kv/block_manager.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <random>
#include <vector>

namespace pier::engine {
namespace {

std::vector<BlockHash> Hashes(const std::vector<int32_t>& tokens, int64_t bs) {
  std::vector<BlockHash> h;
  ExtendBlockHashes(tokens, bs, static_cast<int64_t>(tokens.size()) / bs, &h);
  return h;
}

TEST(BlockManagerTest, AllocateAndReleaseTrackRefCounts) {
  BlockManager bm(4, 2);
  EXPECT_EQ(bm.num_available(), 4);
  Result<int32_t> a = bm.Allocate();
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(bm.ref_count(*a), 1);
  EXPECT_EQ(bm.num_used(), 1);
  bm.Acquire(*a);
  EXPECT_EQ(bm.ref_count(*a), 2);
  bm.Release(*a);
  EXPECT_EQ(bm.num_used(), 1);
  bm.Release(*a);
  EXPECT_EQ(bm.ref_count(*a), 0);
  EXPECT_EQ(bm.num_used(), 0);
  EXPECT_TRUE(bm.CheckConsistency().ok());
}

TEST(BlockManagerTest, RefusesWhenEveryBlockIsUsed) {
  BlockManager bm(2, 4);
  ASSERT_TRUE(bm.Allocate().ok());
  ASSERT_TRUE(bm.Allocate().ok());
  Result<int32_t> c = bm.Allocate();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kResourceExhausted);
}

TEST(BlockManagerTest, PrefixHitReusesTheSameBlocks) {
  const int64_t bs = 4;
  BlockManager bm(8, bs);
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<BlockHash> h = Hashes(tokens, bs);
  ASSERT_EQ(h.size(), 2u);
  std::vector<int32_t> table;
  for (int i = 0; i < 3; ++i) table.push_back(*bm.Allocate());
  bm.Register(table[0], h[0]);
  bm.Register(table[1], h[1]);
  bm.ReleaseAll(table);
  EXPECT_EQ(bm.num_used(), 0);
  EXPECT_EQ(bm.num_cached(), 2);

  std::vector<int32_t> hit = bm.MatchPrefix(h, 10);
  EXPECT_EQ(hit, (std::vector<int32_t>{table[0], table[1]}));
  EXPECT_EQ(bm.MatchPrefix(h, 1), (std::vector<int32_t>{table[0]}));
  for (int32_t b : hit) bm.Acquire(b);
  EXPECT_EQ(bm.num_cached(), 0);
  EXPECT_EQ(bm.num_used(), 2);
  EXPECT_TRUE(bm.CheckConsistency().ok());

  // A different first block: no hit at all, even though the second block's tokens match.
  std::vector<int32_t> other = {0, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_TRUE(bm.MatchPrefix(Hashes(other, bs), 10).empty());
}

TEST(BlockManagerTest, ChainedHashDistinguishesEqualBlocksAfterDifferentPrefixes) {
  const int64_t bs = 2;
  std::vector<BlockHash> a = Hashes({1, 2, 7, 7}, bs);
  std::vector<BlockHash> b = Hashes({3, 4, 7, 7}, bs);
  EXPECT_NE(a[1], b[1]);
  EXPECT_EQ(ChainBlockHash(kRootBlockHash, std::vector<int32_t>{7, 7}),
            ChainBlockHash(kRootBlockHash, std::vector<int32_t>{7, 7}));
  EXPECT_NE(ChainBlockHash(a[0], std::vector<int32_t>{7, 7}),
            ChainBlockHash(b[0], std::vector<int32_t>{7, 7}));

  BlockManager bm(4, bs);
  int32_t x0 = *bm.Allocate();
  int32_t x1 = *bm.Allocate();
  bm.Register(x0, a[0]);
  bm.Register(x1, a[1]);
  // b shares no prefix with a: no block of a may serve it.
  EXPECT_TRUE(bm.MatchPrefix(b, 2).empty());
  EXPECT_EQ(bm.MatchPrefix(a, 2).size(), 2u);
}

TEST(BlockManagerTest, EvictsLeastRecentlyReleasedCachedBlockFirst) {
  const int64_t bs = 1;
  BlockManager bm(3, bs);
  std::vector<int32_t> blocks;
  for (int i = 0; i < 3; ++i) {
    blocks.push_back(*bm.Allocate());
    bm.Register(blocks.back(), ChainBlockHash(kRootBlockHash, std::vector<int32_t>{i}));
  }
  // Release order: 1, then 0, then 2.
  bm.Release(blocks[1]);
  bm.Release(blocks[0]);
  bm.Release(blocks[2]);
  EXPECT_EQ(bm.num_cached(), 3);
  EXPECT_EQ(*bm.Allocate(), blocks[1]);
  EXPECT_FALSE(bm.IsIndexed(blocks[1]));
  EXPECT_EQ(*bm.Allocate(), blocks[0]);
  EXPECT_EQ(*bm.Allocate(), blocks[2]);
  EXPECT_EQ(bm.evictions(), 3);
  // The evicted prefixes are gone from the index.
  EXPECT_TRUE(
      bm.MatchPrefix(
            std::vector<BlockHash>{ChainBlockHash(kRootBlockHash, std::vector<int32_t>{0})}, 1)
          .empty());
  EXPECT_TRUE(bm.CheckConsistency().ok());
}

TEST(BlockManagerTest, PrefersFreeBlocksOverCachedOnes) {
  BlockManager bm(2, 1);
  int32_t a = *bm.Allocate();
  bm.Register(a, 42);
  bm.Release(a);
  int32_t b = *bm.Allocate();
  EXPECT_NE(a, b);
  EXPECT_TRUE(bm.IsIndexed(a));
  EXPECT_EQ(bm.evictions(), 0);
}

TEST(BlockManagerTest, CopyOnWriteGivesAPrivateBlockWhenShared) {
  BlockManager bm(4, 4);
  std::vector<int32_t> table = {*bm.Allocate(), *bm.Allocate()};
  bm.Fork(table);  // a second sequence shares both blocks
  EXPECT_EQ(bm.ref_count(table[1]), 2);

  Result<CopyOnWrite> w = bm.PrepareWrite(table[1]);
  ASSERT_TRUE(w.ok());
  EXPECT_NE(w->block, table[1]);
  EXPECT_EQ(w->copy_from, table[1]);
  EXPECT_EQ(bm.ref_count(table[1]), 1);
  EXPECT_EQ(bm.ref_count(w->block), 1);

  // Now the other holder is alone: it writes in place.
  Result<CopyOnWrite> again = bm.PrepareWrite(table[1]);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->block, table[1]);
  EXPECT_EQ(again->copy_from, -1);
  EXPECT_TRUE(bm.CheckConsistency().ok());
}

TEST(BlockManagerTest, CopyOnWriteFailsCleanlyWhenNoBlockIsLeft) {
  BlockManager bm(1, 4);
  int32_t a = *bm.Allocate();
  bm.Acquire(a);
  Result<CopyOnWrite> w = bm.PrepareWrite(a);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(bm.ref_count(a), 2);
}

TEST(BlockManagerTest, CapacityGrowsAndShrinksFromTheEnd) {
  BlockManager bm(8, 2, 4);
  EXPECT_EQ(bm.capacity(), 4);
  EXPECT_EQ(bm.num_available(), 4);
  std::vector<int32_t> got;
  for (int i = 0; i < 4; ++i) got.push_back(*bm.Allocate());
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 2, 3}));  // lowest ids first
  EXPECT_FALSE(bm.Allocate().ok());
  bm.SetCapacity(8);
  EXPECT_EQ(bm.num_available(), 4);
  int32_t high = *bm.Allocate();
  EXPECT_EQ(high, 4);
  bm.Register(high, 99);
  bm.Release(high);    // cached
  bm.Release(got[3]);  // free
  bm.SetCapacity(3);   // drops 3..7: block 3 is free, 4 cached, the rest free
  EXPECT_EQ(bm.capacity(), 3);
  EXPECT_FALSE(bm.IsIndexed(4));
  EXPECT_TRUE(bm.MatchPrefix(std::vector<BlockHash>{99}, 1).empty());
  EXPECT_EQ(bm.num_available(), 0);
  EXPECT_EQ(bm.num_used(), 3);
  EXPECT_TRUE(bm.CheckConsistency().ok()) << bm.CheckConsistency().ToString();
}

TEST(BlockManagerTest, RandomOperationsKeepCountsConsistent) {
  const int64_t n_blocks = 16;
  BlockManager bm(n_blocks, 2);
  std::mt19937 rng(7);
  std::vector<std::vector<int32_t>> holders(6);
  for (int op = 0; op < 10000; ++op) {
    auto& h = holders[rng() % holders.size()];
    switch (rng() % 5) {
      case 0:
      case 1: {
        Result<int32_t> b = bm.Allocate();
        if (b.ok()) {
          h.push_back(*b);
          if (rng() % 2) bm.Register(*b, rng() % 64);
        }
        break;
      }
      case 2:
        if (!h.empty()) {
          bm.Release(h.back());
          h.pop_back();
        }
        break;
      case 3: {
        auto& other = holders[rng() % holders.size()];
        if (!other.empty() && &other != &h) {
          bm.Acquire(other.front());
          h.push_back(other.front());
        }
        break;
      }
      case 4: {
        std::vector<BlockHash> q = {static_cast<BlockHash>(rng() % 64)};
        std::vector<int32_t> hit = bm.MatchPrefix(q, 1);
        if (!hit.empty()) {
          bm.Acquire(hit[0]);
          h.push_back(hit[0]);
        }
        break;
      }
    }
    ASSERT_TRUE(bm.CheckConsistency().ok()) << bm.CheckConsistency().ToString();
  }
  std::map<int32_t, int32_t> expected;
  for (const auto& h : holders) {
    for (int32_t b : h) ++expected[b];
  }
  for (int32_t b = 0; b < n_blocks; ++b) EXPECT_EQ(bm.ref_count(b), expected[b]) << "block " << b;
  for (auto& h : holders) bm.ReleaseAll(h);
  EXPECT_EQ(bm.num_used(), 0);
  EXPECT_TRUE(bm.CheckConsistency().ok());
}

}  // namespace
}  // namespace pier::engine

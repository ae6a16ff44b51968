#include "engine/sampling/random.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>

namespace pier::sampling {
namespace {

// Published reference outputs: splitmix64 started from state 0, and xoshiro256** started from
// the state {1, 2, 3, 4}, as in the authors' reference C code.
TEST(RandomTest, SplitMix64MatchesReferenceOutputs) {
  uint64_t state = 0;
  EXPECT_EQ(SplitMix64(&state), 0xE220A8397B1DCDAFULL);
  EXPECT_EQ(SplitMix64(&state), 0x6E789E6AA1B965F4ULL);
  EXPECT_EQ(SplitMix64(&state), 0x06C45D188009454FULL);
}

TEST(RandomTest, Xoshiro256StarStarMatchesReferenceOutputs) {
  Xoshiro256StarStar rng(std::array<uint64_t, 4>{1, 2, 3, 4});
  EXPECT_EQ(rng.Next(), 11520ULL);
  EXPECT_EQ(rng.Next(), 0ULL);
  EXPECT_EQ(rng.Next(), 1509978240ULL);
  EXPECT_EQ(rng.Next(), 1215971899390074240ULL);
}

TEST(RandomTest, SameSeedSameStreamDifferentSeedDifferentStream) {
  Xoshiro256StarStar a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.Next();
    EXPECT_EQ(x, b.Next());
    differs = differs || x != c.Next();
  }
  EXPECT_TRUE(differs);
}

TEST(RandomTest, NextDoubleIsInUnitIntervalWithMeanOneHalf) {
  Xoshiro256StarStar rng(7);
  double sum = 0.0;
  constexpr int kDraws = 100000;
  for (int i = 0; i < kDraws; ++i) {
    const double u = rng.NextDouble();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  // Standard deviation of the mean: sqrt(1/12 / n) ~ 0.0009; allow 5 of them.
  EXPECT_NEAR(sum / kDraws, 0.5, 0.0046);
}

}  // namespace
}  // namespace pier::sampling

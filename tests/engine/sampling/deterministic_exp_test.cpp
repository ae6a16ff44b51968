#include "engine/sampling/deterministic_exp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace pier::sampling {
namespace {

TEST(DeterministicExpTest, MatchesLibmToWithinThreeUlpsForNormalResults) {
  double worst = 0.0;
  for (double x = -708.0; x <= 709.0; x += 0.0137) {
    const double ref = std::exp(x);
    const double rel = std::fabs(DeterministicExp(x) - ref) / ref;
    worst = std::max(worst, rel);
  }
  EXPECT_LT(worst, 6.7e-16);  // 3 ulps: ours and libm each err by up to ~2 and ~0.5
}

TEST(DeterministicExpTest, IsExactAtZeroAndMonotoneNearZero) {
  EXPECT_EQ(DeterministicExp(0.0), 1.0);
  double prev = 0.0;
  for (double x = -30.0; x <= 0.0; x += 1.0 / 1024) {
    const double y = DeterministicExp(x);
    EXPECT_GE(y, prev) << "at x=" << x;
    prev = y;
  }
}

TEST(DeterministicExpTest, HandlesTheEnds) {
  EXPECT_EQ(DeterministicExp(-std::numeric_limits<double>::infinity()), 0.0);
  EXPECT_EQ(DeterministicExp(-1000.0), 0.0);
  EXPECT_EQ(DeterministicExp(1000.0), std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(DeterministicExp(std::numeric_limits<double>::quiet_NaN())));
  // Subnormal results keep only a few bits; they are still close to libm's.
  EXPECT_NEAR(DeterministicExp(-740.0) / std::exp(-740.0), 1.0, 1e-2);
}

}  // namespace
}  // namespace pier::sampling

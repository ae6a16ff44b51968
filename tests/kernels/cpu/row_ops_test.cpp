#include "kernels/cpu/row_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_isa.h"

namespace pier::kernels::ops {
namespace {

double SiluMulReference(double g, double up) { return g / (1.0 + std::exp(-g)) * up; }

TEST(RowOpsTest, SiluMulIsCloseToTheFloat64Value) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> wide(-30.0f, 30.0f);
  std::vector<float> gate(4099), up(4099), expect(4099);
  for (size_t i = 0; i < gate.size(); ++i) {
    gate[i] = i < 2000 ? wide(rng) : wide(rng) / 10.0f;
    up[i] = wide(rng) / 7.0f;
  }
  gate[0] = 0.0f;
  gate[1] = -100.0f;  // exp(100) would overflow in the textbook formula
  gate[2] = 100.0f;
  gate[3] = -1e-30f;
  std::vector<double> reference(gate.size());
  for (size_t i = 0; i < gate.size(); ++i) reference[i] = SiluMulReference(gate[i], up[i]);
  SiluMul(gate.data(), up.data(), static_cast<int64_t>(gate.size()));
  for (size_t i = 0; i < gate.size(); ++i) {
    const double tol = 8 * std::numeric_limits<float>::epsilon() * std::abs(reference[i]) + 1e-37;
    ASSERT_NEAR(gate[i], reference[i], tol) << "element " << i;
  }
  EXPECT_EQ(gate[0], 0.0f);
  EXPECT_EQ(gate[2], 100.0f * up[2]);
}

TEST(RowOpsTest, SiluMulElementBitsDoNotDependOnLengthOrOffset) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  const int64_t n = 1000;
  std::vector<float> gate(n), up(n);
  for (int64_t i = 0; i < n; ++i) {
    gate[i] = normal(rng);
    up[i] = normal(rng);
  }
  std::vector<float> whole = gate;
  SiluMul(whole.data(), up.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    float one = gate[i];
    SiluMul(&one, &up[i], 1);  // the scalar tail alone
    ASSERT_EQ(std::memcmp(&one, &whole[i], sizeof(float)), 0) << "element " << i;
  }
  std::vector<float> shifted(gate.begin() + 3, gate.end());
  SiluMul(shifted.data(), up.data() + 3, n - 3);  // other vector/tail boundaries
  EXPECT_EQ(std::memcmp(shifted.data(), whole.data() + 3, sizeof(float) * (n - 3)), 0);
}

TEST(RowOpsTest, SiluMulGivesTheSameBitsAtEveryCpuLevel) {
  std::mt19937 rng(6);
  std::normal_distribution<float> normal(0.0f, 6.0f);
  const int64_t n = 517;
  std::vector<float> gate(n), up(n);
  for (int64_t i = 0; i < n; ++i) {
    gate[i] = normal(rng);
    up[i] = normal(rng);
  }
  internal::SetActiveIsaForTesting(Isa::kScalar);
  std::vector<float> scalar = gate;
  SiluMul(scalar.data(), up.data(), n);
  int levels = 1;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (!IsaSupported(isa)) continue;
    internal::SetActiveIsaForTesting(isa);
    std::vector<float> got = gate;
    SiluMul(got.data(), up.data(), n);
    EXPECT_EQ(std::memcmp(got.data(), scalar.data(), sizeof(float) * n), 0) << IsaName(isa);
    ++levels;
  }
  internal::SetActiveIsaForTesting(std::nullopt);
  std::printf("SiluMul compared at %d CPU levels\n", levels);
}

}  // namespace
}  // namespace pier::kernels::ops

#include "kernels/cpu/row_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_isa.h"

namespace pier::kernels::ops {
namespace {

// A gated activation (gate[i] = act(gate[i]) * up[i]) and its float64 value.
struct Gated {
  const char* name;
  void (*fn)(float* gate, const float* up, int64_t n);
  double (*reference)(double g, double up);
  // Allowed error in units of float epsilon times |reference|: the sigmoid's argument z is
  // rounded once (GELU: z = c (g + 0.044715 g^3), a few roundings), and exp(z) turns an
  // absolute error of z into a relative one of the result, so the bound grows with |z|.
  double (*eps_units)(double g);
};

double SiluReference(double g, double up) { return g / (1.0 + std::exp(-g)) * up; }
// 0.5 g (1 + tanh(u)) written as g / (1 + exp(-2u)): the same value, without the cancellation
// of 1 + tanh(u) for very negative u that costs the textbook form its precision in float64.
double GeluReference(double g, double up) {
  const double u = std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g);
  return g / (1.0 + std::exp(-2.0 * u)) * up;
}
double SiluUnits(double) { return 8; }
double GeluUnits(double g) {
  return 8 + 4 * std::abs(1.5957691216057308 * (g + 0.044715 * g * g * g));
}

class GatedActivationTest : public ::testing::TestWithParam<Gated> {};

TEST_P(GatedActivationTest, IsCloseToTheFloat64Value) {
  const Gated& act = GetParam();
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
  std::vector<float> input = gate;
  for (size_t i = 0; i < gate.size(); ++i) reference[i] = act.reference(gate[i], up[i]);
  act.fn(gate.data(), up.data(), static_cast<int64_t>(gate.size()));
  for (size_t i = 0; i < gate.size(); ++i) {
    // Results below 1e-30 are exp(-69) of their input or less: 0 is as good an answer.
    const double tol =
        act.eps_units(input[i]) * std::numeric_limits<float>::epsilon() * std::abs(reference[i]) +
        1e-30;
    ASSERT_NEAR(gate[i], reference[i], tol) << act.name << " element " << i << " g " << input[i];
  }
  EXPECT_EQ(gate[0], 0.0f);
  EXPECT_EQ(gate[2], 100.0f * up[2]);
}

TEST_P(GatedActivationTest, ElementBitsDoNotDependOnLengthOrOffset) {
  const Gated& act = GetParam();
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  const int64_t n = 1000;
  std::vector<float> gate(n), up(n);
  for (int64_t i = 0; i < n; ++i) {
    gate[i] = normal(rng);
    up[i] = normal(rng);
  }
  std::vector<float> whole = gate;
  act.fn(whole.data(), up.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    float one = gate[i];
    act.fn(&one, &up[i], 1);  // the scalar tail alone
    ASSERT_EQ(std::memcmp(&one, &whole[i], sizeof(float)), 0) << "element " << i;
  }
  std::vector<float> shifted(gate.begin() + 3, gate.end());
  act.fn(shifted.data(), up.data() + 3, n - 3);  // other vector/tail boundaries
  EXPECT_EQ(std::memcmp(shifted.data(), whole.data() + 3, sizeof(float) * (n - 3)), 0);
}

TEST_P(GatedActivationTest, GivesTheSameBitsAtEveryCpuLevel) {
  const Gated& act = GetParam();
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
  act.fn(scalar.data(), up.data(), n);
  int levels = 1;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (!IsaSupported(isa)) continue;
    internal::SetActiveIsaForTesting(isa);
    std::vector<float> got = gate;
    act.fn(got.data(), up.data(), n);
    EXPECT_EQ(std::memcmp(got.data(), scalar.data(), sizeof(float) * n), 0) << IsaName(isa);
    ++levels;
  }
  internal::SetActiveIsaForTesting(std::nullopt);
  std::printf("%s compared at %d CPU levels\n", act.name, levels);
}

INSTANTIATE_TEST_SUITE_P(Activations, GatedActivationTest,
                         ::testing::Values(Gated{"SiluMul", SiluMul, SiluReference, SiluUnits},
                                           Gated{"GeluMul", GeluMul, GeluReference, GeluUnits}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace pier::kernels::ops

// The one CPU probe: level names, nesting, and the PIER_CPU_ISA override (each override case
// runs in a fresh process, since the override is read once per process).
#include "kernels/cpu/cpu_isa.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace pier::kernels {
namespace {

TEST(CpuIsaTest, NamesRoundTripAndUnknownNamesAreRefusedNamingTheAccepted) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    Result<Isa> parsed = ParseIsa(IsaName(isa));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, isa);
  }
  Result<Isa> bad = ParseIsa("sse9");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'sse9'"), std::string::npos);
  EXPECT_NE(bad.status().message().find("scalar, avx2 or avx512"), std::string::npos);
}

TEST(CpuIsaTest, LevelsAreNestedAndTheBestIsSupported) {
  EXPECT_TRUE(IsaSupported(Isa::kScalar));
  if (IsaSupported(Isa::kAvx512)) {
    EXPECT_TRUE(IsaSupported(Isa::kAvx2));
  }
  EXPECT_TRUE(IsaSupported(BestIsa()));
  std::printf("best CPU level here: %s\n", IsaName(BestIsa()));
}

// In a child process: sets PIER_CPU_ISA, then exits with 0 when validation passed and the
// active level is `want`, 1 when validation failed with `want_code` and the active level fell
// back to the best, 2 otherwise.
[[noreturn]] void CheckOverride(const char* value, Isa want, bool want_ok) {
  setenv("PIER_CPU_ISA", value, 1);
  const Status status = ValidateCpuIsaOverride();
  if (want_ok) std::exit(status.ok() && ActiveIsa() == want ? 0 : 2);
  const bool named = status.message().find(value) != std::string::npos;
  std::exit(!status.ok() && named && ActiveIsa() == BestIsa() ? 1 : 2);
}

TEST(CpuIsaDeathTest, TheOverrideForcesASupportedLevel) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(CheckOverride("scalar", Isa::kScalar, true), ::testing::ExitedWithCode(0), "");
  if (IsaSupported(Isa::kAvx2)) {
    EXPECT_EXIT(CheckOverride("avx2", Isa::kAvx2, true), ::testing::ExitedWithCode(0), "");
  }
}

TEST(CpuIsaDeathTest, ABadOverrideIsAnErrorAndNeverAnUnsupportedLevel) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(CheckOverride("avx9000", Isa::kScalar, false), ::testing::ExitedWithCode(1), "");
  if (!IsaSupported(Isa::kAvx512)) {
    EXPECT_EXIT(CheckOverride("avx512", Isa::kScalar, false), ::testing::ExitedWithCode(1), "");
  }
}

TEST(CpuIsaTest, TestsCanForceEachSupportedLevel) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!IsaSupported(isa)) continue;
    internal::SetActiveIsaForTesting(isa);
    EXPECT_EQ(ActiveIsa(), isa);
  }
  internal::SetActiveIsaForTesting(std::nullopt);
  EXPECT_TRUE(IsaSupported(ActiveIsa()));
}

}  // namespace
}  // namespace pier::kernels

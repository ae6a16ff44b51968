// The K/V conversions: the dispatched path, the F16C path and the scalar reference give the
// same bits for f16; Q8_0 round-trips within half a step.
#include "kernels/cpu/kv_convert.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "tensor/float16.h"

namespace pier::kernels {
namespace {

bool IsNanHalf(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

// Converts `in` with every path and counts outputs that differ from the scalar reference.
int64_t F32ToF16Mismatches(const std::vector<float>& in) {
  std::vector<uint16_t> reference(in.size()), dispatched(in.size()), f16c(in.size());
  internal::ConvertF32ToF16Scalar(in.data(), static_cast<int64_t>(in.size()), reference.data());
  ConvertF32ToF16(in.data(), static_cast<int64_t>(in.size()), dispatched.data());
  if (IsaSupported(Isa::kAvx2)) {
    internal::ConvertF32ToF16F16c(in.data(), static_cast<int64_t>(in.size()), f16c.data());
  } else {
    f16c = reference;
  }
  int64_t mismatches = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (std::isnan(in[i])) {
      mismatches += !IsNanHalf(dispatched[i]) || !IsNanHalf(f16c[i]) || !IsNanHalf(reference[i]);
      continue;
    }
    if (dispatched[i] != reference[i] || f16c[i] != reference[i]) {
      if (mismatches < 5) {
        ADD_FAILURE() << std::hexfloat << in[i] << ": reference " << reference[i] << ", got "
                      << dispatched[i] << " / " << f16c[i];
      }
      ++mismatches;
    }
  }
  return mismatches;
}

TEST(KvConvertTest, F16ToF32MatchesTheReferenceForEveryPattern) {
  std::printf("F16C %s\n", IsaSupported(Isa::kAvx2) ? "present: vector path checked"
                                                    : "absent: only the scalar path runs here");
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> dispatched(all.size()), f16c(all.size());
  ConvertF16ToF32(all.data(), 65536, dispatched.data());
  if (IsaSupported(Isa::kAvx2)) {
    internal::ConvertF16ToF32F16c(all.data(), 65536, f16c.data());
  } else {
    internal::ConvertF16ToF32Scalar(all.data(), 65536, f16c.data());
  }
  int64_t mismatches = 0, nans = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    const float reference = Fp16ToFp32(all[i]);
    if (IsNanHalf(all[i])) {
      ++nans;
      mismatches += !std::isnan(dispatched[i]) || !std::isnan(f16c[i]) || !std::isnan(reference);
      continue;
    }
    const uint32_t want = std::bit_cast<uint32_t>(reference);
    if (std::bit_cast<uint32_t>(dispatched[i]) != want ||
        std::bit_cast<uint32_t>(f16c[i]) != want) {
      ++mismatches;
    }
  }
  EXPECT_EQ(nans, 2 * 1023);
  EXPECT_EQ(mismatches, 0);
}

TEST(KvConvertTest, F32ToF16MatchesTheReferenceOnRandomBits) {
  // Any bit pattern (NaNs included: they must stay NaN), 4M values.
  std::mt19937 rng(5);
  std::vector<float> in(1 << 22);
  for (float& f : in) f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
  EXPECT_EQ(F32ToF16Mismatches(in), 0);
}

TEST(KvConvertTest, F32ToF16MatchesTheReferenceWhereRoundingIsDelicate) {
  std::mt19937 rng(7);
  std::vector<float> in;
  // Magnitudes from 2^-27 to 2^-13: zero, f16 subnormals and the smallest normals, 2M values.
  for (int i = 0; i < (1 << 21); ++i) {
    const uint32_t exponent = 100 + rng() % 15;
    const uint32_t bits = (rng() & 0x80000000u) | (exponent << 23) | (rng() & 0x7fffffu);
    in.push_back(std::bit_cast<float>(bits));
  }
  // Every finite half's midpoint to the next half, and its f32 neighbours (ties to even and
  // the carries into the next binade or into infinity), both signs.
  for (uint32_t h = 0; h < 0x7c00u; ++h) {
    const float lo = Fp16ToFp32(static_cast<uint16_t>(h));
    const float hi = h + 1 == 0x7c00u ? 65536.0f : Fp16ToFp32(static_cast<uint16_t>(h + 1));
    const float mid = lo + (hi - lo) / 2;  // exact: a half needs 11 bits, f32 has 24
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f), lo}) {
      in.push_back(f);
      in.push_back(-f);
    }
  }
  // Around the largest half (65504) and overflow, and the infinities.
  for (float f = 65000.0f; f < 66000.0f; f += 0.25f) in.push_back(f);
  in.push_back(INFINITY);
  in.push_back(-INFINITY);
  in.push_back(std::numeric_limits<float>::denorm_min());
  in.push_back(-std::numeric_limits<float>::min());
  EXPECT_EQ(F32ToF16Mismatches(in), 0);
}

TEST(KvConvertTest, EveryLengthAndOffsetConvertsEveryValueAndNothingElse) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> src(64);
  for (float& f : src) f = normal(rng);
  for (int64_t offset = 0; offset < 3; ++offset) {
    for (int64_t n = 0; n <= 40; ++n) {
      std::vector<uint16_t> half(48, 0xabcd);
      ConvertF32ToF16(src.data() + offset, n, half.data() + offset);
      std::vector<float> back(48, -7.0f);
      ConvertF16ToF32(half.data() + offset, n, back.data() + offset);
      for (int64_t i = 0; i < 48; ++i) {
        const bool inside = i >= offset && i < offset + n;
        EXPECT_EQ(half[i], inside ? Fp32ToFp16(src[i]) : 0xabcd) << n << " " << i;
        EXPECT_EQ(back[i], inside ? Fp16ToFp32(half[i]) : -7.0f) << n << " " << i;
      }
    }
  }
}

TEST(KvConvertTest, StridedRowsConvertToPackedRows) {
  // 3 rows of 5 values, 7 values apart.
  std::vector<uint16_t> src(21);
  for (size_t i = 0; i < src.size(); ++i) src[i] = Fp32ToFp16(static_cast<float>(i) * 0.5f);
  std::vector<float> dst(15, -1.0f);
  ConvertF16RowsToF32(src.data(), 7, 3, 5, dst.data());
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 5; ++c) EXPECT_EQ(dst[r * 5 + c], (r * 7 + c) * 0.5f);
  }
}

TEST(KvConvertTest, Q8_0RoundTripsWithinHalfAStepAndKeepsZerosAndExtremes) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const int64_t n = 32 * 40;
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  for (int i = 64; i < 96; ++i) x[i] = 0.0f;  // an all-zero block
  x[100] = 1e4f;                              // an outlier sets its block's scale
  std::vector<std::byte> q(n / 32 * 34);
  std::vector<float> back(n);
  ConvertF32ToQ8_0(x.data(), n, q.data());
  ConvertQ8_0ToF32(q.data(), n, back.data());
  for (int64_t b = 0; b < n / 32; ++b) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[32 * b + i]));
    const float d = Fp16ToFp32(Fp32ToFp16(amax / 127.0f));
    for (int i = 0; i < 32; ++i) {
      const int64_t k = 32 * b + i;
      // Half a step of the scale used to quantize, plus the scale's own f16 rounding.
      ASSERT_NEAR(back[k], x[k], 0.5f * d + 127.0f * d * 1e-3f + 1e-30f) << "value " << k;
    }
  }
  for (int i = 64; i < 96; ++i) EXPECT_EQ(back[i], 0.0f);
  EXPECT_NEAR(back[100], 1e4f, 1e4f * 1e-3f);  // the block's largest value lands on +-127 d
  // A NaN does not reach an int8 cast (no undefined behaviour); the block still converts.
  x[5] = std::numeric_limits<float>::quiet_NaN();
  ConvertF32ToQ8_0(x.data(), 32, q.data());
  ConvertQ8_0ToF32(q.data(), 32, back.data());
  EXPECT_EQ(back[5], 0.0f);
}

}  // namespace
}  // namespace pier::kernels

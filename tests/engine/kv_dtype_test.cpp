// The KV dtype: f16 conversions (the run-time chosen path, the F16C path and the scalar
// reference give the same bits), layouts and stores of each dtype, and parsing its name.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "device/cpu/cpu_device.h"
#include "engine/kv_convert.h"
#include "engine/kv_store.h"
#include "memory/memory_governor.h"
#include "tensor/float16.h"

namespace pier::engine {
namespace {

bool IsNanHalf(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

// Converts `in` with every path and counts outputs that differ from the scalar reference.
int64_t F32ToF16Mismatches(const std::vector<float>& in) {
  std::vector<uint16_t> reference(in.size()), dispatched(in.size()), f16c(in.size());
  internal::ConvertF32ToF16Scalar(in.data(), static_cast<int64_t>(in.size()), reference.data());
  ConvertF32ToF16(in.data(), static_cast<int64_t>(in.size()), dispatched.data());
  if (internal::CpuHasF16c()) {
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
  std::printf("F16C %s\n", internal::CpuHasF16c() ? "present: vector path checked"
                                                  : "absent: only the scalar path runs here");
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> dispatched(all.size()), f16c(all.size());
  ConvertF16ToF32(all.data(), 65536, dispatched.data());
  if (internal::CpuHasF16c()) {
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

TEST(KvDtypeTest, ParsesItsNamesAndRefusesOthersNamingTheAccepted) {
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kQ8_0}) {
    Result<KvDtype> parsed = ParseKvDtype(KvDtypeName(dtype));
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_EQ(*parsed, dtype);
  }
  for (const char* bad : {"q4_0", "Q8_0", "F16", "", "fp16", "f16 "}) {
    Result<KvDtype> parsed = ParseKvDtype(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("accepted: f32, f16, q8_0"), std::string::npos)
        << parsed.status().message();
  }
}

TEST(KvDtypeTest, F16LayoutHoldsHalfTheBytes) {
  KvLayout f32{.n_layer = 30, .block_size = 16, .n_kv_head = 3, .head_dim = 64};
  KvLayout f16 = f32;
  f16.dtype = KvDtype::kF16;
  EXPECT_EQ(f32.head_bytes(), 256u);
  EXPECT_EQ(f16.head_bytes(), 128u);
  EXPECT_EQ(f32.row_elements(), f16.row_elements());
  EXPECT_EQ(f32.bytes_per_block(), 30u * 2 * 16 * 3 * 64 * 4);
  EXPECT_EQ(2 * f16.bytes_per_block(), f32.bytes_per_block());
  EXPECT_EQ(2 * f16.plane_bytes(), f32.plane_bytes());
  EXPECT_FALSE(f16 == f32);
}

TEST(KvDtypeTest, Q8_0LayoutHolds34BytesPer32Values) {
  KvLayout q8{.n_layer = 30, .block_size = 16, .n_kv_head = 3, .head_dim = 64};
  q8.dtype = KvDtype::kQ8_0;
  EXPECT_EQ(q8.head_bytes(), 68u);
  EXPECT_EQ(q8.bytes_per_block(), 30u * 2 * 16 * 3 * 68);
  EXPECT_TRUE(ValidateKvLayout(q8).ok());
  q8.head_dim = 80;
  EXPECT_EQ(ValidateKvLayout(q8).code(), StatusCode::kInvalidArgument);
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

TEST(KvDtypeTest, F16StorePlanesTileEachBlock) {
  auto device = CpuDevice::Create();
  ASSERT_TRUE(device.ok());
  auto governor = MemoryGovernor::Create(device->get());
  ASSERT_TRUE(governor.ok());
  auto owner = (*governor)->AddOwner({.name = "kv"});
  ASSERT_TRUE(owner.ok());
  KvLayout layout{
      .n_layer = 3, .block_size = 4, .n_kv_head = 2, .head_dim = 8, .dtype = KvDtype::kF16};
  auto store = PooledKvStore::Create(layout, 5, **governor, *owner);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const KvStore& kv = **store;
  EXPECT_GE((*governor)->Stats().committed_bytes, 5 * layout.bytes_per_block());
  for (int32_t b = 0; b < 5; ++b) {
    EXPECT_EQ(kv.BlockData(b) - kv.BlockData(0), static_cast<ptrdiff_t>(b * 3 * 2 * 4 * 16 * 2));
    for (int64_t l = 0; l < 3; ++l) {
      EXPECT_EQ(kv.KeyPlane(l, b), kv.BlockData(b) + 2 * l * 4 * 16 * 2);
      EXPECT_EQ(kv.ValuePlane(l, b), kv.KeyPlane(l, b) + 4 * 16 * 2);
    }
  }
  EXPECT_DEATH((void)kv.Keys(0, 0), "non-f32 KV layout");
}

}  // namespace
}  // namespace pier::engine

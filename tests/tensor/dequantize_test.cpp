// Dequantization and dtype tests against gguf-py (fixture: tools/gen_dequant_fixture.py).
#include "tensor/dequantize.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/float16.h"

namespace pier {
namespace {

nlohmann::json LoadFixture() {
  const std::string path = std::string(PIER_SOURCE_DIR) + "/tests/fixtures/model/dequant.json";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "missing fixture " << path;
  return nlohmann::json::parse(in);
}

std::vector<uint8_t> HexBytes(const std::string& hex) {
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<uint8_t>(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
  }
  return out;
}

// Big-endian hex of uint32 bit patterns ("3f800000" is 1.0f).
std::vector<uint32_t> HexWords(const std::string& hex) {
  std::vector<uint32_t> out(hex.size() / 8);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<uint32_t>(std::stoul(hex.substr(8 * i, 8), nullptr, 16));
  }
  return out;
}

TEST(DTypeTest, TraitsMatchGgufPy) {
  const nlohmann::json fixture = LoadFixture();
  ASSERT_GE(fixture["type_sizes"].size(), 30u);
  for (const auto& entry : fixture["type_sizes"]) {
    const auto id = entry["type_id"].get<uint32_t>();
    std::optional<DTypeTraits> traits = GetDTypeTraits(id);
    ASSERT_TRUE(traits.has_value()) << "type " << id << " not recognized";
    EXPECT_EQ(traits->name, entry["name"].get<std::string>());
    EXPECT_EQ(traits->block_size, entry["block_size"].get<int64_t>()) << traits->name;
    EXPECT_EQ(traits->type_size, entry["type_size"].get<int64_t>()) << traits->name;
  }
}

TEST(DTypeTest, UnknownNumbersAreNotTypes) {
  for (uint32_t id : {4u, 5u, 31u, 32u, 33u, 36u, 38u, 1000u}) {
    EXPECT_FALSE(GetDTypeTraits(id).has_value()) << id;
  }
}

TEST(DTypeTest, RowBytes) {
  EXPECT_EQ(RowBytes(DType::kQ4_1, 576), 360u);
  EXPECT_EQ(RowBytes(DType::kQ6_K, 512), 420u);
  EXPECT_EQ(RowBytes(DType::kF16, 3), 6u);
  EXPECT_FALSE(RowBytes(DType::kQ4_0, 33).has_value());
  EXPECT_FALSE(RowBytes(DType::kF32, -1).has_value());
  EXPECT_FALSE(RowBytes(DType::kF32, int64_t{1} << 62).has_value());
}

TEST(DequantizeTest, MatchesGgufPyBitExactly) {
  const nlohmann::json fixture = LoadFixture();
  std::set<std::string> types_seen;
  for (const auto& c : fixture["cases"]) {
    const auto type = static_cast<DType>(c["type_id"].get<uint32_t>());
    const auto n = c["n"].get<int64_t>();
    const std::vector<uint8_t> src = HexBytes(c["bytes"].get<std::string>());
    const std::vector<uint32_t> expected = HexWords(c["expected"].get<std::string>());
    ASSERT_EQ(static_cast<int64_t>(expected.size()), n);
    ASSERT_EQ(src.size(), RowBytes(type, n).value());
    std::vector<float> out(static_cast<size_t>(n), -12345.0f);
    ASSERT_TRUE(DequantizeRow(type, src.data(), out.data(), n).ok()) << DTypeName(type);
    int mismatches = 0;
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t got = std::bit_cast<uint32_t>(out[i]);
      if (got != expected[i] && ++mismatches <= 5) {
        ADD_FAILURE() << DTypeName(type) << " element " << i << ": got " << out[i] << " (0x"
                      << std::hex << got << "), expected 0x" << expected[i] << std::dec;
      }
    }
    EXPECT_EQ(mismatches, 0) << DTypeName(type);
    types_seen.insert(c["type"].get<std::string>());
  }
  EXPECT_EQ(types_seen.size(), 11u);  // every supported type is covered
}

TEST(DequantizeTest, SupportedTypes) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
                  DType::kQ5_1, DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    EXPECT_TRUE(CanDequantize(t)) << DTypeName(t);
    EXPECT_TRUE(Traits(t).supported) << DTypeName(t);
  }
}

TEST(DequantizeTest, UnsupportedTypeIsAnError) {
  for (DType t :
       {DType::kQ2_K, DType::kQ3_K, DType::kQ8_K, DType::kI8, DType::kF64, DType::kIQ4_XS}) {
    std::vector<uint8_t> src(1024);
    std::vector<float> dst(256);
    const int64_t n = Traits(t).block_size;
    Status status = DequantizeRow(t, src.data(), dst.data(), n);
    EXPECT_EQ(status.code(), StatusCode::kUnsupported) << DTypeName(t);
    EXPECT_NE(status.message().find(std::string(DTypeName(t))), std::string::npos);
    EXPECT_FALSE(Traits(t).supported);
  }
}

TEST(DequantizeTest, RejectsPartialBlocks) {
  std::vector<uint8_t> src(64);
  std::vector<float> dst(64);
  EXPECT_EQ(DequantizeRow(DType::kQ4_0, src.data(), dst.data(), 31).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(DequantizeRow(DType::kF16, src.data(), dst.data(), -1).code(),
            StatusCode::kInvalidArgument);
}

TEST(Float16Test, HalfRoundTripsEveryPattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = Fp16ToFp32(static_cast<uint16_t>(h));
    const bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0;
    EXPECT_EQ(std::isnan(f), nan) << h;
    if (!nan) {
      EXPECT_EQ(Fp32ToFp16(f), h) << h;
    }
  }
}

TEST(Float16Test, HalfRoundsToNearestEven) {
  EXPECT_EQ(Fp16ToFp32(0x3c00), 1.0f);
  EXPECT_EQ(Fp16ToFp32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(Fp32ToFp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie -> even
  EXPECT_EQ(Fp32ToFp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(Fp32ToFp16(65520.0f), 0x7c00);                          // rounds to infinity
  EXPECT_EQ(Fp32ToFp16(65519.0f), 0x7bff);
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even (zero)
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(Fp32ToFp16(-2.0f), 0xc000);
  EXPECT_EQ(Fp32ToFp16(1e10f), 0x7c00);
}

TEST(Float16Test, Bfloat16) {
  EXPECT_EQ(Bf16ToFp32(0x3f80), 1.0f);
  EXPECT_EQ(Fp32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Fp32ToBf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(Fp32ToBf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie -> even (up)
  EXPECT_TRUE(std::isnan(Bf16ToFp32(Fp32ToBf16(std::nanf("")))));
}

}  // namespace
}  // namespace pier

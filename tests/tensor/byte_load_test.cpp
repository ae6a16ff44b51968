// The little-endian loads (tensor/byte_load.h) read unaligned bytes, low byte first.
#include "tensor/byte_load.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace pier {
namespace {

TEST(ByteLoadTest, ReadsUnalignedScalarsLowByteFirst) {
  // One byte of padding so that every load below is unaligned.
  const uint8_t bytes[] = {0xee, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08};
  EXPECT_EQ(LoadU16(bytes + 1), 0x0201u);
  EXPECT_EQ(LoadU32(bytes + 1), 0x04030201u);
  EXPECT_EQ(LoadLittleEndian<uint64_t>(bytes + 1), 0x0807060504030201ull);
  EXPECT_EQ(LoadLittleEndian<int16_t>(bytes), static_cast<int16_t>(0x01ee));
}

TEST(ByteLoadTest, LoadHalfConvertsTheStoredHalf) {
  const uint8_t one_and_a_half[] = {0x00, 0x00, 0x3e};  // 0x3e00 = 1.5 at offset 1
  EXPECT_EQ(LoadHalf(one_and_a_half + 1), 1.5f);
  const uint8_t minus_two[] = {0x00, 0xc0};  // 0xc000 = -2
  EXPECT_EQ(LoadHalf(minus_two), -2.0f);
}

TEST(ByteLoadTest, LoadLittleEndianReadsFloats) {
  const uint8_t one[] = {0x00, 0x00, 0x00, 0x80, 0x3f};  // 0x3f800000 = 1.0f at offset 1
  EXPECT_EQ(LoadLittleEndian<float>(one + 1), 1.0f);
}

}  // namespace
}  // namespace pier

// CUDA Q4_1 dequantization against a plain scalar reference written here (kept
// self-contained so the binary runs on a GPU machine with nothing installed).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "tests/kernels/cuda_test_device.h"

namespace pier::cuda {
namespace {

constexpr size_t kBlockBytes = 20;  // {half d; half m; uint8_t qs[16]}
constexpr size_t kBlockElements = 32;

// IEEE binary16 -> float, including subnormals, infinities and NaN.
float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    magnitude = mantissa == 0 ? INFINITY : NAN;
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa | 0x400u), static_cast<int>(exponent) - 25);
  }
  return sign ? -magnitude : magnitude;
}

// The reference: x = d * q + m, low nibbles first, then high nibbles.
std::vector<float> DequantizeReference(const std::vector<uint8_t>& blocks) {
  const size_t n_blocks = blocks.size() / kBlockBytes;
  std::vector<float> out(n_blocks * kBlockElements);  // [n_blocks * 32]
  for (size_t b = 0; b < n_blocks; ++b) {
    const uint8_t* block = blocks.data() + b * kBlockBytes;
    uint16_t d_bits, m_bits;
    std::memcpy(&d_bits, block, 2);
    std::memcpy(&m_bits, block + 2, 2);
    const float d = HalfToFloat(d_bits);
    const float m = HalfToFloat(m_bits);
    const uint8_t* qs = block + 4;
    for (size_t i = 0; i < 16; ++i) {
      const float lo = d * static_cast<float>(qs[i] & 0x0f);
      const float hi = d * static_cast<float>(qs[i] >> 4);
      out[b * kBlockElements + i] = lo + m;
      out[b * kBlockElements + 16 + i] = hi + m;
    }
  }
  return out;
}

// Random finite halves, subnormals and signed zeros included.
uint16_t RandomHalf(std::mt19937& rng) {
  const uint16_t sign = static_cast<uint16_t>(rng() & 1u) << 15;
  const uint16_t exponent = static_cast<uint16_t>(rng() % 31);  // never 31: no inf/NaN
  const uint16_t mantissa = static_cast<uint16_t>(rng() & 0x3ffu);
  return sign | static_cast<uint16_t>(exponent << 10) | mantissa;
}

std::vector<uint8_t> RandomBlocks(size_t n_blocks, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> blocks(n_blocks * kBlockBytes);
  for (size_t b = 0; b < n_blocks; ++b) {
    uint8_t* block = blocks.data() + b * kBlockBytes;
    const uint16_t d = RandomHalf(rng);
    const uint16_t m = RandomHalf(rng);
    std::memcpy(block, &d, 2);
    std::memcpy(block + 2, &m, 2);
    for (size_t i = 0; i < 16; ++i) block[4 + i] = static_cast<uint8_t>(rng());
  }
  return blocks;
}

class CudaDequantizeTest : public CudaTest {
 protected:
  // Uploads `blocks`, dequantizes on the GPU and downloads the floats.
  std::vector<float> RunOnGpu(const std::vector<uint8_t>& blocks) {
    const size_t n_blocks = blocks.size() / kBlockBytes;
    const size_t out_bytes = n_blocks * kBlockElements * sizeof(float);
    Result<void*> src = device_->AllocateRaw(blocks.size(), 256);
    Result<void*> dst = device_->AllocateRaw(out_bytes, 256);
    EXPECT_TRUE(src.ok() && dst.ok());
    if (!src.ok() || !dst.ok()) return {};
    std::vector<float> out(n_blocks * kBlockElements);
    const Stream stream = device_->DefaultStream();
    EXPECT_TRUE(device_->Memset(*dst, 0xff, out_bytes, stream).ok());  // NaN until written
    EXPECT_TRUE(device_->CopyHostToDevice(*src, blocks.data(), blocks.size(), stream).ok());
    const Status run = device_->DequantizeQ4_1(*src, static_cast<float*>(*dst), n_blocks, stream);
    EXPECT_TRUE(run.ok()) << run.ToString();
    EXPECT_TRUE(device_->CopyDeviceToHost(out.data(), *dst, out_bytes, stream).ok());
    const Status sync = device_->Synchronize(stream);
    EXPECT_TRUE(sync.ok()) << sync.ToString();
    device_->FreeRaw(*src, blocks.size());
    device_->FreeRaw(*dst, out_bytes);
    return out;
  }
};

TEST_F(CudaDequantizeTest, HandBuiltBlockPutsLowNibblesFirst) {
  std::vector<uint8_t> block(kBlockBytes);
  const uint16_t d = 0x3800;  // 0.5
  const uint16_t m = 0xbc00;  // -1.0
  std::memcpy(block.data(), &d, 2);
  std::memcpy(block.data() + 2, &m, 2);
  for (int i = 0; i < 16; ++i) {
    block[4 + i] = static_cast<uint8_t>((15 - i) << 4 | i);  // low = i, high = 15 - i
  }
  const std::vector<float> out = RunOnGpu(block);
  ASSERT_EQ(out.size(), kBlockElements);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(out[i], 0.5f * i - 1.0f) << "element " << i;
    EXPECT_EQ(out[16 + i], 0.5f * (15 - i) - 1.0f) << "element " << 16 + i;
  }
}

TEST_F(CudaDequantizeTest, MatchesScalarReferenceBitForBit) {
  // An odd count, so the last thread block is only partly used.
  const std::vector<uint8_t> blocks = RandomBlocks(100003, 42);
  const std::vector<float> expected = DequantizeReference(blocks);
  const std::vector<float> got = RunOnGpu(blocks);
  ASSERT_EQ(got.size(), expected.size());
  size_t mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &expected[i], 4);
    if (a != b && ++mismatches <= 5) {
      ADD_FAILURE() << "element " << i << ": gpu " << got[i] << " reference " << expected[i];
    }
  }
  EXPECT_EQ(mismatches, 0u);
}

TEST_F(CudaDequantizeTest, LargeInputUsesTheGridLoop) {
  // 65536 thread blocks of 256 threads cover 4M Q4_1 blocks; take more than that.
  const size_t n_blocks = (size_t{1} << 22) + 77;
  const std::vector<uint8_t> blocks = RandomBlocks(n_blocks, 7);
  const std::vector<float> expected = DequantizeReference(blocks);
  const std::vector<float> got = RunOnGpu(blocks);
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)), 0);
}

TEST_F(CudaDequantizeTest, ZeroBlocksIsANoOp) {
  EXPECT_TRUE(device_->DequantizeQ4_1(nullptr, nullptr, 0, device_->DefaultStream()).ok());
}

TEST_F(CudaDequantizeTest, MisalignedOutputIsRejected) {
  Result<void*> src = device_->AllocateRaw(kBlockBytes, 256);
  Result<void*> dst = device_->AllocateRaw(kBlockElements * sizeof(float) + 16, 256);
  ASSERT_TRUE(src.ok() && dst.ok());
  auto* misaligned = reinterpret_cast<float*>(static_cast<char*>(*dst) + 4);
  const Status status = device_->DequantizeQ4_1(*src, misaligned, 1, device_->DefaultStream());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_TRUE(device_->Synchronize(device_->DefaultStream()).ok());
  device_->FreeRaw(*src, kBlockBytes);
  device_->FreeRaw(*dst, kBlockElements * sizeof(float) + 16);
}

}  // namespace
}  // namespace pier::cuda

// The GPU forward pass's per-token arithmetic (kernels/cuda/row_math.h) run on the CPU: the
// very functions the CUDA kernels run, against the CPU runner's own operations (row_ops.h,
// attention_lanes.h's Exp, the reference dequantization, MatMul's activation quantization),
// bit for bit. Needs no GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/attention_lanes.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/row_ops.h"
#include "kernels/cuda/row_math.h"
#include "tensor/dequantize.h"
#include "tensor/float16.h"
#include "tests/kernels/random_gguf.h"

namespace pier::cuda {
namespace {

using testing::kAllQuantTypes;
using testing::QuantTypeName;
using testing::SameBits;

std::vector<float> Normal(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> value(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = value(rng);
  return v;
}

TEST(CudaRowMathTest, ExpIsTheCpuSoftmaxExpBitForBit) {
  std::vector<float> inputs = {0.0f,
                               -0.0f,
                               -1e-30f,
                               -1.0f,
                               -87.3f,
                               -87.29999f,
                               -87.30001f,
                               -88.0f,
                               -100.0f,
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN()};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> wide(-90.0f, 0.0f);
  std::uniform_real_distribution<float> narrow(-1.0f, 0.0f);
  for (int i = 0; i < 1000000; ++i) inputs.push_back(wide(rng));
  for (int i = 0; i < 1000000; ++i) inputs.push_back(narrow(rng));
  for (float x : inputs) {
    const float gpu = rowmath::Exp(x), cpu = kernels::attention::Exp(x);
    ASSERT_TRUE(SameBits(gpu, cpu) || (std::isnan(gpu) && std::isnan(cpu)))
        << "x = " << x << ": " << gpu << " vs " << cpu;
  }
}

TEST(CudaRowMathTest, SiluMulIsTheCpusBitForBit) {
  const size_t n = 4096;
  std::vector<float> gate = Normal(n, 2, 4.0f), up = Normal(n, 3);
  gate[0] = 0.0f;
  gate[1] = -0.0f;
  gate[2] = 100.0f;
  gate[3] = -100.0f;
  std::vector<float> cpu = gate;
  kernels::ops::SiluMul(cpu.data(), up.data(), static_cast<int64_t>(n));
  std::vector<float> gpu(n);
  rowmath::SiluMulGolden(gate.data(), up.data(), 1, static_cast<int64_t>(n), gpu.data(), nullptr);
  for (size_t i = 0; i < n; ++i) ASSERT_TRUE(SameBits(gpu[i], cpu[i])) << "element " << i;
}

// RmsNorm, with and without the residual add, as f32 and as the activation blocks MatMul
// would make from the CPU's normalized row.
TEST(CudaRowMathTest, AddRmsNormIsTheCpusBitForBit) {
  for (int64_t n : {64, 576, 4096}) {
    SCOPED_TRACE(n);
    const int64_t n_tokens = 3;
    const std::vector<float> x0 = Normal(n_tokens * n, 4, 3.0f), add = Normal(n_tokens * n, 5);
    const std::vector<float> weight = Normal(n, 6);
    const float eps = 1e-5f;
    for (bool with_add : {false, true}) {
      std::vector<float> x = x0, y(n_tokens * n);
      std::vector<uint8_t> xq(quant::ActivationRowBytes(n) * n_tokens);
      rowmath::AddRmsNormGolden(x.data(), with_add ? add.data() : nullptr, weight.data(), n_tokens,
                                n, eps, y.data(), xq.data());
      const kernels::internal::QuantLayout layout = kernels::internal::MakeQuantLayout(n);
      std::vector<std::byte> cpu_q(layout.row_stride + 64);
      std::byte* aligned =
          reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(cpu_q.data()) + 63) / 64 * 64);
      for (int64_t t = 0; t < n_tokens; ++t) {
        std::vector<float> cx(x0.begin() + t * n, x0.begin() + (t + 1) * n), cy(n);
        if (with_add) kernels::ops::Add(add.data() + t * n, n, cx.data());
        kernels::ops::RmsNorm(cx.data(), weight.data(), n, eps, cy.data());
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_TRUE(SameBits(x[t * n + i], cx[i])) << "residual, token " << t << " " << i;
          ASSERT_TRUE(SameBits(y[t * n + i], cy[i])) << "token " << t << " element " << i;
        }
        kernels::internal::QuantizeRowScalar(cy.data(), layout, aligned);
        const uint8_t* row = xq.data() + t * quant::ActivationRowBytes(n);
        EXPECT_EQ(std::memcmp(row, aligned, n), 0) << "token " << t;
        EXPECT_EQ(std::memcmp(row + n, aligned + layout.d_offset, 4 * (n / 32)), 0);
        EXPECT_EQ(std::memcmp(row + n + 4 * (n / 32), aligned + layout.bx_offset, 4 * (n / 32)), 0);
      }
    }
  }
}

TEST(CudaRowMathTest, RopeIsTheCpusBitForBitInBothStyles) {
  const int64_t n_tokens = 2, n_heads = 3, head_dim = 64, n_rot = 48;
  const std::vector<float> x0 = Normal(n_tokens * n_heads * head_dim, 7);
  std::vector<float> cos_sin(n_tokens * n_rot);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t i = 0; i < n_rot / 2; ++i) {
      const double angle = (t + 5) * std::pow(10000.0, -2.0 * i / n_rot);
      cos_sin[(t * n_rot / 2 + i) * 2] = static_cast<float>(std::cos(angle));
      cos_sin[(t * n_rot / 2 + i) * 2 + 1] = static_cast<float>(std::sin(angle));
    }
  }
  for (bool neox : {false, true}) {
    std::vector<float> gpu = x0, cpu = x0;
    rowmath::RopeGolden(gpu.data(), n_tokens, n_heads, head_dim, n_rot, neox, cos_sin.data());
    for (int64_t t = 0; t < n_tokens; ++t) {
      kernels::ops::Rope(neox ? kernels::ops::RopeStyle::kNeox : kernels::ops::RopeStyle::kNormal,
                         cpu.data() + t * n_heads * head_dim, n_heads, head_dim, n_rot,
                         cos_sin.data() + t * n_rot);
    }
    for (size_t i = 0; i < gpu.size(); ++i) {
      ASSERT_TRUE(SameBits(gpu[i], cpu[i])) << (neox ? "neox " : "normal ") << i;
    }
    EXPECT_NE(gpu, x0);
  }
}

TEST(CudaRowMathTest, EmbeddingElementsAreTheReferenceDequantization) {
  const int64_t n_cols = 512;
  for (quant::QuantType type : kAllQuantTypes) {
    SCOPED_TRACE(QuantTypeName(type));
    const std::vector<uint8_t> w = testing::RandomGgufMatrix(type, 2, n_cols, 8);
    std::vector<float> expected(2 * n_cols);
    ASSERT_TRUE(
        DequantizeRow(static_cast<DType>(type), w.data(), expected.data(), 2 * n_cols).ok());
    for (int64_t r = 0; r < 2; ++r) {
      const uint8_t* row = w.data() + r * quant::GgufRowBytes(type, n_cols);
      for (int64_t k = 0; k < n_cols; ++k) {
        ASSERT_TRUE(SameBits(rowmath::EmbeddingElement(static_cast<int32_t>(type), row, k),
                             expected[r * n_cols + k]))
            << "row " << r << " element " << k;
      }
    }
  }
  // F16 and F32 tables.
  const std::vector<float> values = Normal(64, 9);
  std::vector<uint16_t> halves(64);
  for (int k = 0; k < 64; ++k) halves[k] = Fp32ToFp16(values[k]);
  for (int k = 0; k < 64; ++k) {
    EXPECT_TRUE(
        SameBits(rowmath::EmbeddingElement(1, reinterpret_cast<const uint8_t*>(halves.data()), k),
                 Fp16ToFp32(halves[k])));
    EXPECT_TRUE(
        SameBits(rowmath::EmbeddingElement(0, reinterpret_cast<const uint8_t*>(values.data()), k),
                 values[k]));
  }
}

TEST(CudaRowMathTest, ArgmaxGoldenTakesTheLowestIndexAmongTheLargest) {
  EXPECT_EQ(rowmath::ArgmaxGolden(std::vector<float>{1, 3, 2, 3}.data(), 4), 1);
  EXPECT_EQ(rowmath::ArgmaxGolden(std::vector<float>{-0.0f, 0.0f}.data(), 2), 0);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(rowmath::ArgmaxGolden(std::vector<float>{-inf, -inf, -inf}.data(), 3), 0);
  EXPECT_EQ(rowmath::ArgmaxGolden(std::vector<float>{0, NAN, 1}.data(), 3), -1);
}

}  // namespace
}  // namespace pier::cuda

// The GPU product's arithmetic (kernels/cuda/quant_dot.h) run on the CPU: the very functions
// the CUDA kernels run, checked against Pier's CPU MatMul bit for bit (the canonical form),
// against the GGUF reference dequantization, and against a float64 product. Needs no GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "common/thread_pool.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cuda/quant_dot.h"
#include "kernels/cuda/quant_pack.h"
#include "tensor/dequantize.h"
#include "tensor/dtype.h"
#include "tensor/float16.h"
#include "tests/kernels/random_gguf.h"

namespace pier::cuda {
namespace {

using quant::QuantType;
using testing::kAllQuantTypes;
using testing::QuantTypeName;
using testing::RandomActivations;
using testing::RandomGgufMatrix;
using testing::SameBits;

DType ToDType(QuantType type) { return static_cast<DType>(static_cast<int32_t>(type)); }

int64_t ColumnsFor(QuantType type) {
  return quant::GgufBlockElements(type) == 256 ? 768 : 576;  // the default model's width
}

TEST(CudaQuantDotTest, HalfToFloatIsExactForEveryPattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = quant::HalfToFloat(static_cast<uint16_t>(h));
    const float b = Fp16ToFp32(static_cast<uint16_t>(h));
    ASSERT_TRUE(SameBits(a, b)) << "half 0x" << std::hex << h;
  }
}

TEST(CudaQuantDotTest, BlockSizesAreGgufs) {
  for (QuantType type : kAllQuantTypes) {
    const DTypeTraits traits = Traits(ToDType(type));
    EXPECT_EQ(quant::GgufBlockElements(type), traits.block_size) << QuantTypeName(type);
    EXPECT_EQ(quant::GgufBlockBytes(type), traits.type_size) << QuantTypeName(type);
    EXPECT_EQ(static_cast<uint64_t>(quant::GgufRowBytes(type, 1536)),
              *RowBytes(ToDType(type), 1536));
  }
}

TEST(CudaQuantDotTest, OnlyTypesWithAKernelAreAccepted) {
  for (QuantType type : kAllQuantTypes) EXPECT_TRUE(quant::IsQuantType(static_cast<int>(type)));
  // F32, F16, Q2_K, Q3_K, BF16, negative and unknown numbers.
  for (int32_t type : {0, 1, 4, 5, 9, 10, 11, 15, 30, -1, 1000}) {
    EXPECT_FALSE(quant::IsQuantType(type)) << type;
  }
}

// The activation rows equal the CPU's quantized rows: same q, same dx, same bx.
TEST(CudaQuantDotTest, ActivationsQuantizeAsTheCpuDoes) {
  const int64_t n_cols = 576, n_tokens = 5, n_blocks = n_cols / 32;
  const std::vector<float> x = RandomActivations(n_tokens, n_cols, 3);
  std::vector<uint8_t> xq(quant::ActivationRowBytes(n_cols) * n_tokens);
  quant::QuantizeActivationsGolden(x.data(), n_tokens, n_cols, xq.data());

  const kernels::internal::QuantLayout layout = kernels::internal::MakeQuantLayout(n_cols);
  alignas(64) std::vector<std::byte> cpu(layout.row_stride + 64);
  std::byte* row =
      reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(cpu.data()) + 63) / 64 * 64);
  for (int64_t t = 0; t < n_tokens; ++t) {
    kernels::internal::QuantizeRowScalar(x.data() + t * n_cols, layout, row);
    const uint8_t* gpu = xq.data() + t * quant::ActivationRowBytes(n_cols);
    EXPECT_EQ(std::memcmp(gpu, row, n_cols), 0) << "token " << t;
    const auto* dx = reinterpret_cast<const float*>(gpu + n_cols);
    const auto* cpu_dx = reinterpret_cast<const float*>(row + layout.d_offset);
    const auto* cpu_bx = reinterpret_cast<const float*>(row + layout.bx_offset);
    for (int64_t b = 0; b < n_blocks; ++b) {
      EXPECT_TRUE(SameBits(dx[b], cpu_dx[b])) << "token " << t << " block " << b;
      EXPECT_TRUE(SameBits(dx[n_blocks + b], cpu_bx[b])) << "token " << t << " block " << b;
    }
    EXPECT_EQ(dx[1], 0.0f) << "the all-zero block has scale 0";
  }
}

// Every weight's decoded integer and its block factors give the GGUF reference value.
TEST(CudaQuantDotTest, DecodedWeightsAreTheGgufValues) {
  for (QuantType type : kAllQuantTypes) {
    SCOPED_TRACE(QuantTypeName(type));
    const int64_t n_cols = 512;
    const std::vector<uint8_t> w = RandomGgufMatrix(type, 1, n_cols, 11);
    std::vector<float> expected(n_cols);
    ASSERT_TRUE(DequantizeRow(ToDType(type), w.data(), expected.data(), n_cols).ok());
    for (int64_t b = 0; b < n_cols / 32; ++b) {
      const quant::BlockFactors f = quant::LoadBlockFactors(type, w.data(), b);
      EXPECT_EQ(f.has_offset, quant::HasOffset(type));
      for (int quad = 0; quad < 8; ++quad) {
        const quant::WeightQuad q = quant::LoadWeightQuad(type, w.data(), b, quad);
        for (int i = 0; i < 4; ++i) {
          const int64_t k = 32 * b + 4 * quad + i;
          const double qi = static_cast<int8_t>(q.packed >> (8 * i));
          const double value = static_cast<double>(f.dw) * q.scale * qi + (f.has_offset ? f.mw : 0);
          // The reference rounds its own way (e.g. (q - 8) * d against d * q - 8 * d).
          const double tolerance = 4e-7 * (std::fabs(value) + std::fabs(f.mw)) + 1e-12;
          ASSERT_NEAR(value, expected[k], tolerance) << "element " << k;
        }
      }
    }
  }
}

std::vector<float> CpuMatMul(QuantType type, const std::vector<uint8_t>& w, int64_t n_rows,
                             int64_t n_cols, const std::vector<float>& x, int64_t n_tokens,
                             kernels::Isa isa) {
  const kernels::WeightMatrix matrix{ToDType(type), n_rows, n_cols, w.data(),
                                     static_cast<size_t>(quant::GgufRowBytes(type, n_cols))};
  std::vector<float> y(n_tokens * n_rows, std::nanf(""));
  std::vector<std::byte> scratch(kernels::MatMulScratchBytes(matrix, n_tokens));
  ThreadPool pool(1);
  const Status status = kernels::internal::MatMulWithIsa(isa, matrix, x.data(), n_tokens, y.data(),
                                                         n_rows, scratch, pool);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return y;
}

// The golden the GPU must match is the CPU's canonical product, bit for bit, on every CPU
// path this machine has; and it is within float rounding of a float64 product.
TEST(CudaQuantDotTest, GoldenProductIsTheCpuMatMulBitForBit) {
  for (QuantType type : kAllQuantTypes) {
    SCOPED_TRACE(QuantTypeName(type));
    const int64_t n_rows = 40, n_cols = ColumnsFor(type), n_tokens = 9;
    const std::vector<uint8_t> w = RandomGgufMatrix(type, n_rows, n_cols, 5);
    const std::vector<float> x = RandomActivations(n_tokens, n_cols, 7);
    std::vector<uint8_t> xq(quant::ActivationRowBytes(n_cols) * n_tokens);
    quant::QuantizeActivationsGolden(x.data(), n_tokens, n_cols, xq.data());
    std::vector<float> golden(n_tokens * n_rows);
    quant::QuantMatMulGolden(type, w.data(), n_rows, n_cols, xq.data(), n_tokens, golden.data(),
                             n_rows);

    for (kernels::Isa isa : {kernels::Isa::kScalar, kernels::Isa::kAvx2, kernels::Isa::kAvx512}) {
      if (!kernels::IsaSupported(isa)) continue;
      const std::vector<float> cpu = CpuMatMul(type, w, n_rows, n_cols, x, n_tokens, isa);
      for (int64_t i = 0; i < n_tokens * n_rows; ++i) {
        ASSERT_TRUE(SameBits(golden[i], cpu[i]))
            << kernels::IsaName(isa) << " token " << i / n_rows << " row " << i % n_rows
            << ": golden " << golden[i] << " cpu " << cpu[i];
      }
    }

    // float64: dequantized weights times the quantized activations.
    std::vector<float> wrow(n_cols);
    for (int64_t r = 0; r < n_rows; ++r) {
      ASSERT_TRUE(DequantizeRow(ToDType(type), w.data() + r * quant::GgufRowBytes(type, n_cols),
                                wrow.data(), n_cols)
                      .ok());
      for (int64_t t = 0; t < n_tokens; ++t) {
        const uint8_t* xr = xq.data() + t * quant::ActivationRowBytes(n_cols);
        const auto* dx = reinterpret_cast<const float*>(xr + n_cols);
        double sum = 0.0, mass = 0.0;
        for (int64_t k = 0; k < n_cols; ++k) {
          const double xk = static_cast<double>(dx[k / 32]) * static_cast<int8_t>(xr[k]);
          sum += static_cast<double>(wrow[k]) * xk;
          mass += std::fabs(static_cast<double>(wrow[k]) * xk);
        }
        EXPECT_NEAR(golden[t * n_rows + r], sum, 2e-5 * mass + 1e-6)
            << "token " << t << " row " << r;
      }
    }
  }
}

// The largest integer sums stay exact: all-max weights against all-max activations.
TEST(CudaQuantDotTest, ExtremeBlocksStayExact) {
  for (QuantType type : kAllQuantTypes) {
    SCOPED_TRACE(QuantTypeName(type));
    const int64_t n_cols = quant::GgufBlockElements(type);
    std::vector<uint8_t> w = RandomGgufMatrix(type, 1, n_cols, 1);
    // Every quant byte 0xff (the scale fields stay as set, except Q6_K's scales: -128).
    const std::vector<uint8_t> scales = w;
    std::memset(w.data(), 0xff, w.size());
    const size_t bytes = w.size();
    switch (type) {
      case QuantType::kQ4_K:
      case QuantType::kQ5_K:
        std::memcpy(w.data(), scales.data(), 4);  // d, dmin
        break;
      case QuantType::kQ6_K:
        std::memset(w.data() + 192, 0x80, 16);
        std::memcpy(w.data() + 208, scales.data() + 208, 2);
        break;
      default:
        for (size_t base = 0; base < bytes; base += quant::GgufBlockBytes(type)) {
          const bool has_m = type == QuantType::kQ4_1 || type == QuantType::kQ5_1;
          std::memcpy(w.data() + base, scales.data() + base, has_m ? 4 : 2);
        }
    }
    std::vector<float> x(n_cols, -1.0f);  // every q_x = -127
    std::vector<uint8_t> xq(quant::ActivationRowBytes(n_cols));
    quant::QuantizeActivationsGolden(x.data(), 1, n_cols, xq.data());
    float golden = 0.0f;
    quant::QuantMatMulGolden(type, w.data(), 1, n_cols, xq.data(), 1, &golden, 1);
    const std::vector<float> cpu = CpuMatMul(type, w, 1, n_cols, x, 1, kernels::Isa::kScalar);
    EXPECT_TRUE(SameBits(golden, cpu[0])) << golden << " vs " << cpu[0];
  }
}

// The packed GPU layout holds the GGUF blocks' integers and factors, and its product is the
// GGUF-layout golden's bits (so the CPU MatMul's), packed whole or in pieces of rows.
TEST(CudaQuantDotTest, PackedLayoutGivesTheSameIntegersFactorsAndBits) {
  for (QuantType type : kAllQuantTypes) {
    if (!quant::HasPackedLayout32(type)) continue;
    SCOPED_TRACE(QuantTypeName(type));
    const int64_t n_rows = 37, n_cols = 96, n_tokens = 5, n_blocks = n_cols / 32;
    const std::vector<uint8_t> w = RandomGgufMatrix(type, n_rows, n_cols, 21);
    const int64_t bytes = quant::PackedBytes(type, n_rows, n_cols);
    EXPECT_LE(bytes, quant::AlignUp16(quant::GgufRowBytes(type, n_cols) * n_rows) + 48);
    std::vector<uint8_t> whole(bytes, 0xee), pieces(bytes, 0xee);
    quant::PackRows32(type, w.data(), 0, n_rows, n_rows, n_cols, whole.data());
    const int64_t row_bytes = quant::GgufRowBytes(type, n_cols);
    quant::PackRows32(type, w.data(), 0, 20, n_rows, n_cols, pieces.data());
    quant::PackRows32(type, w.data() + 20 * row_bytes, 20, n_rows - 20, n_rows, n_cols,
                      pieces.data());
    const quant::PackedView v = quant::ViewPacked(type, whole.data(), n_rows, n_cols);
    const quant::PackedView p = quant::ViewPacked(type, pieces.data(), n_rows, n_cols);
    for (int64_t r = 0; r < n_rows; ++r) {
      const uint8_t* row = w.data() + r * row_bytes;
      for (int64_t b = 0; b < n_blocks; ++b) {
        uint32_t words[8], again[8];
        quant::LoadPackedBlock(type, v, r, b, words);
        quant::LoadPackedBlock(type, p, r, b, again);
        for (int k = 0; k < 8; ++k) {
          ASSERT_EQ(words[k], quant::LoadWeightQuad(type, row, b, k).packed)
              << "row " << r << " block " << b << " word " << k;
          ASSERT_EQ(again[k], words[k]);
        }
        const quant::BlockFactors a = quant::LoadPackedFactors(type, v, r, b);
        const quant::BlockFactors e = quant::LoadBlockFactors(type, row, b);
        ASSERT_TRUE(SameBits(a.dw, e.dw) && SameBits(a.mw, e.mw) && a.has_offset == e.has_offset);
      }
    }
    const std::vector<float> x = RandomActivations(n_tokens, n_cols, 22);
    std::vector<uint8_t> xq(quant::ActivationRowBytes(n_cols) * n_tokens);
    quant::QuantizeActivationsGolden(x.data(), n_tokens, n_cols, xq.data());
    std::vector<float> gguf(n_tokens * n_rows), packed(n_tokens * n_rows);
    quant::QuantMatMulGolden(type, w.data(), n_rows, n_cols, xq.data(), n_tokens, gguf.data(),
                             n_rows);
    quant::PackedMatMulGolden(type, whole.data(), n_rows, n_cols, xq.data(), n_tokens,
                              packed.data(), n_rows);
    for (size_t i = 0; i < gguf.size(); ++i) ASSERT_TRUE(SameBits(gguf[i], packed[i])) << i;
  }
  EXPECT_FALSE(quant::HasPackedLayout32(QuantType::kQ4_K));
}

}  // namespace
}  // namespace pier::cuda

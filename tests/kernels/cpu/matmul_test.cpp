#include "kernels/cpu/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/packed_weights.h"
#include "tensor/dequantize.h"
#include "tensor/float16.h"

namespace pier::kernels {
namespace {

const DType kAllTypes[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                           DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
                           DType::kF16,  DType::kBF16, DType::kF32};

bool IsKQuant(DType type) {
  return type == DType::kQ4_K || type == DType::kQ5_K || type == DType::kQ6_K;
}

// A random matrix in `type`'s layout: random bytes, with every f16 scale field
// overwritten by a modest random value (random bits could be inf or NaN).
struct RandomMatrix {
  std::vector<uint8_t> bytes;
  WeightMatrix w;

  RandomMatrix(DType type, int64_t n_rows, int64_t n_cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(0.001f, 0.02f);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    const size_t row_bytes = *RowBytes(type, n_cols);
    bytes.resize(row_bytes * n_rows);
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(byte(rng));
    auto put_half = [&](size_t offset, float v) {
      const uint16_t h = Fp32ToFp16(v);
      std::memcpy(&bytes[offset], &h, 2);
    };
    const DTypeTraits traits = Traits(type);
    const int64_t n_blocks = n_rows * n_cols / traits.block_size;
    for (int64_t b = 0; b < n_blocks; ++b) {
      const size_t base = b * traits.type_size;
      switch (type) {
        case DType::kQ4_0:
        case DType::kQ5_0:
        case DType::kQ8_0:
          put_half(base, scale(rng));
          break;
        case DType::kQ4_1:
        case DType::kQ5_1:
          put_half(base, scale(rng));
          put_half(base + 2, -16.0f * scale(rng) * value(rng));
          break;
        case DType::kQ4_K:
        case DType::kQ5_K:
          put_half(base, scale(rng) / 32);
          put_half(base + 2, scale(rng) / 32);
          break;
        case DType::kQ6_K:
          put_half(base + 208, scale(rng) / 64);
          break;
        case DType::kQ2_K:  // no kernel: only for "no packed layout" checks
          put_half(base + 80, scale(rng) / 16);
          put_half(base + 82, scale(rng) / 16);
          break;
        case DType::kF16:
          put_half(base, value(rng));
          break;
        case DType::kBF16: {
          const uint16_t h = Fp32ToBf16(value(rng));
          std::memcpy(&bytes[base], &h, 2);
          break;
        }
        case DType::kF32: {
          const float v = value(rng);
          std::memcpy(&bytes[base], &v, 4);
          break;
        }
        default:
          ADD_FAILURE() << "no generator for " << DTypeName(type);
      }
    }
    w = WeightMatrix{type, n_rows, n_cols, bytes.data(), row_bytes};
  }
};

std::vector<float> RandomActivations(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> value(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = value(rng);
  // A few outliers, as real activations have.
  for (int64_t i = 0; i < n; i += 97) x[i] *= 20.0f;
  return x;
}

// Runs MatMul on `isa`; y is [n_tokens, ldy] with ldy = n_rows + 3 (pad left as NaN).
std::vector<float> RunMatMul(Isa isa, const WeightMatrix& w, const float* x, int64_t n_tokens,
                             int threads) {
  ThreadPool pool(threads);
  const int64_t ldy = w.n_rows + 3;
  std::vector<float> y(n_tokens * ldy, std::nanf(""));
  std::vector<std::byte> scratch(MatMulScratchBytes(w, n_tokens));
  const Status status = internal::MatMulWithIsa(isa, w, x, n_tokens, y.data(), ldy, scratch, pool);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return y;
}

std::vector<Isa> SupportedIsas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (IsaSupported(isa)) isas.push_back(isa);
  }
  return isas;
}

// The plain reference, llama2.c style: dequantize each weight row with the tensor
// library, quantize-dequantize each activation row as the kernel does, and take
// the dot product in double. Also returns the "mass" sum |w_k| |x_k| over the
// kernel's split w = dw * q + mw, which bounds the float rounding error.
struct Reference {
  std::vector<double> y;     // [n_tokens, n_rows]
  std::vector<double> mass;  // [n_tokens, n_rows]
};

Reference ComputeReference(const WeightMatrix& w, const std::vector<float>& x, int64_t n_tokens) {
  const int64_t n = w.n_cols;
  const bool quantized = internal::IsQuantized(w.type);
  std::vector<float> xr(n_tokens * n);  // activations as the kernel sees them
  if (quantized) {
    const internal::QuantLayout layout = internal::MakeQuantLayout(n);
    std::vector<std::byte> row(layout.row_stride + 64);
    std::byte* aligned =
        reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(row.data()) + 63) / 64 * 64);
    for (int64_t t = 0; t < n_tokens; ++t) {
      internal::QuantizeRowScalar(x.data() + t * n, layout, aligned);
      const int8_t* q = reinterpret_cast<const int8_t*>(aligned);
      const float* d = reinterpret_cast<const float*>(aligned + layout.d_offset);
      for (int64_t k = 0; k < n; ++k) xr[t * n + k] = d[k / 32] * static_cast<float>(q[k]);
    }
  } else {
    xr = std::vector<float>(x.begin(), x.begin() + n_tokens * n);
  }
  Reference ref;
  ref.y.assign(n_tokens * w.n_rows, 0.0);
  ref.mass.assign(n_tokens * w.n_rows, 0.0);
  std::vector<float> wrow(n);
  std::vector<double> wmag(n);  // |dw * q| + |mw| per element, or |w|
  for (int64_t r = 0; r < w.n_rows; ++r) {
    EXPECT_TRUE(DequantizeRow(w.type, w.data + r * w.row_bytes, wrow.data(), n).ok());
    for (int64_t k = 0; k < n; ++k) wmag[k] = std::fabs(wrow[k]);
    if (quantized) {
      const internal::QuantLayout layout = internal::MakeQuantLayout(n);
      const internal::UnpackLayout unpack = internal::MakeUnpackLayout(layout);
      std::vector<std::byte> buf(unpack.row_stride);
      internal::UnpackRowScalar(w.type, w.data + r * w.row_bytes, layout, unpack, buf.data());
      const uint8_t* q = reinterpret_cast<const uint8_t*>(buf.data());
      const float* dw = reinterpret_cast<const float*>(buf.data() + unpack.dw_offset);
      const float* mw = reinterpret_cast<const float*>(buf.data() + unpack.mw_offset);
      for (int64_t k = 0; k < n; ++k) {
        const double qk = internal::HasSignedWeights(w.type) ? static_cast<int8_t>(q[k]) : q[k];
        wmag[k] = std::fabs(dw[(k / 32) * 8 + (k % 32) / 4] * qk) +
                  std::fabs(mw[(k / 32) * 8 + (k % 32) / 4]);
      }
    }
    for (int64_t t = 0; t < n_tokens; ++t) {
      double sum = 0.0, mass = 0.0;
      for (int64_t k = 0; k < n; ++k) {
        sum += static_cast<double>(wrow[k]) * xr[t * n + k];
        mass += wmag[k] * std::fabs(xr[t * n + k]);
      }
      ref.y[t * w.n_rows + r] = sum;
      ref.mass[t * w.n_rows + r] = mass;
    }
  }
  return ref;
}

// Float rounding in the kernel: per block one product, one fma, then sums of
// n/32 block terms; 1e-5 of the mass is about 100 float epsilons.
constexpr double kRelTolerance = 1e-5;

TEST(MatMulTest, MatchesScalarReferenceForEveryTypeAndOddShape) {
  for (DType type : kAllTypes) {
    const int64_t block = IsKQuant(type) ? 256 : 32;
    for (int64_t n_cols : {block, 3 * block}) {
      for (int64_t n_rows : {1, 7, 13}) {
        const RandomMatrix m(type, n_rows, n_cols, 17 * n_rows + n_cols);
        const int64_t max_tokens = 67;
        const std::vector<float> x = RandomActivations(max_tokens * n_cols, 5 + n_cols);
        const Reference ref = ComputeReference(m.w, x, max_tokens);
        for (int64_t n_tokens : {1, 2, 3, 5, 67}) {
          const std::vector<float> y = RunMatMul(BestIsa(), m.w, x.data(), n_tokens, 2);
          for (int64_t t = 0; t < n_tokens; ++t) {
            for (int64_t r = 0; r < n_rows; ++r) {
              const double expect = ref.y[t * n_rows + r];
              const double tol = kRelTolerance * ref.mass[t * n_rows + r] + 1e-30;
              ASSERT_NEAR(y[t * (n_rows + 3) + r], expect, tol)
                  << DTypeName(type) << " n_cols=" << n_cols << " n_rows=" << n_rows
                  << " n_tokens=" << n_tokens << " t=" << t << " r=" << r;
            }
          }
        }
      }
    }
  }
}

TEST(MatMulTest, FloatWeightsHandleColumnsNotAMultipleOfEight) {
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
    const RandomMatrix m(type, 5, 37, 3);
    const std::vector<float> x = RandomActivations(4 * 37, 4);
    const Reference ref = ComputeReference(m.w, x, 4);
    for (Isa isa : SupportedIsas()) {
      const std::vector<float> y = RunMatMul(isa, m.w, x.data(), 4, 1);
      for (int64_t t = 0; t < 4; ++t) {
        for (int64_t r = 0; r < 5; ++r) {
          ASSERT_NEAR(y[t * 8 + r], ref.y[t * 5 + r], kRelTolerance * ref.mass[t * 5 + r])
              << DTypeName(type) << " " << IsaName(isa);
        }
      }
    }
  }
}

bool SameBits(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, sizeof(float) * n) == 0;
}

TEST(MatMulTest, TokenAloneEqualsItsRowInAnyBatchAndThreadCount) {
  const int64_t n_rows = 37, max_tokens = 67;
  for (DType type : kAllTypes) {
    const int64_t n_cols = IsKQuant(type) ? 512 : 160;
    const RandomMatrix m(type, n_rows, n_cols, 99);
    const std::vector<float> x = RandomActivations(max_tokens * n_cols, 7);
    for (Isa isa : SupportedIsas()) {
      // Each token alone, one thread.
      std::vector<std::vector<float>> alone(max_tokens);
      for (int64_t t = 0; t < max_tokens; ++t) {
        alone[t] = RunMatMul(isa, m.w, x.data() + t * n_cols, 1, 1);
      }
      for (int threads : {1, 2, 3}) {
        for (int64_t n_tokens : {2, 3, 7, 16, 64, 67}) {
          const std::vector<float> y = RunMatMul(isa, m.w, x.data(), n_tokens, threads);
          for (int64_t t = 0; t < n_tokens; ++t) {
            ASSERT_TRUE(SameBits(&y[t * (n_rows + 3)], alone[t].data(), n_rows))
                << DTypeName(type) << " " << IsaName(isa) << " threads=" << threads
                << " n_tokens=" << n_tokens << " t=" << t;
          }
        }
      }
    }
  }
}

TEST(MatMulTest, EverySimdPathMatchesScalarPathBitwise) {
  const std::vector<Isa> isas = SupportedIsas();
  std::printf("MatMul paths on this CPU:");
  for (Isa isa : isas) std::printf(" %s", IsaName(isa));
  std::printf(" (default %s)\n", MatMulIsaName());
  for (DType type : kAllTypes) {
    const int64_t n_cols = IsKQuant(type) ? 768 : 224;
    for (int64_t n_rows : {3, 9}) {
      const RandomMatrix m(type, n_rows, n_cols, 1234 + n_rows);
      const int64_t n_tokens = 11;
      const std::vector<float> x = RandomActivations(n_tokens * n_cols, 77);
      const std::vector<float> scalar = RunMatMul(Isa::kScalar, m.w, x.data(), n_tokens, 1);
      for (Isa isa : isas) {
        const std::vector<float> y = RunMatMul(isa, m.w, x.data(), n_tokens, 2);
        for (int64_t t = 0; t < n_tokens; ++t) {
          for (int64_t r = 0; r < n_rows; ++r) {
            const int64_t i = t * (n_rows + 3) + r;
            ASSERT_TRUE(SameBits(&y[i], &scalar[i], 1))
                << DTypeName(type) << " " << IsaName(isa) << " t=" << t << " r=" << r << ": "
                << y[i] << " vs scalar " << scalar[i];
          }
        }
      }
    }
  }
}

TEST(MatMulTest, SimdActivationQuantizationMatchesScalar) {
  const int64_t n_cols = 4096;
  std::vector<float> x = RandomActivations(n_cols, 21);
  x[5] = 0.5f * (x[4] + x[6]);  // nothing special; plus an all-zero block below
  for (int64_t k = 64; k < 96; ++k) x[k] = 0.0f;
  const internal::QuantLayout layout = internal::MakeQuantLayout(n_cols);
  std::vector<std::byte> a(layout.row_stride + 64), b(layout.row_stride + 64);
  auto align = [](std::vector<std::byte>& v) {
    return reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(v.data()) + 63) / 64 * 64);
  };
  internal::QuantizeRowScalar(x.data(), layout, align(a));
  for (Isa isa : SupportedIsas()) {
    const internal::IsaKernels& k = isa == Isa::kAvx512 ? internal::Avx512Kernels()
                                    : isa == Isa::kAvx2 ? internal::Avx2Kernels()
                                                        : internal::ScalarKernels();
    k.quantize_row(x.data(), layout, align(b));
    EXPECT_EQ(std::memcmp(align(a), align(b), layout.row_stride), 0) << IsaName(isa);
  }
}

TEST(MatMulTest, SimdBlockMajorQuantizationMatchesScatteredScalarRows) {
  const int64_t n_cols = 256, n_tokens = 5;
  const internal::QuantLayout layout = internal::MakeQuantLayout(n_cols);
  std::vector<float> x = RandomActivations(n_tokens * n_cols, 23);
  for (int64_t k = 32; k < 64; ++k) x[k] = 0.0f;  // an all-zero block
  const size_t entries = sizeof(internal::XEntry) * layout.n_blocks * n_tokens;
  std::vector<std::byte> row(layout.row_stride + 64), expect(entries), got(entries);
  std::byte* aligned =
      reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(row.data()) + 63) / 64 * 64);
  for (int64_t t = 0; t < n_tokens; ++t) {
    internal::QuantizeRowScalar(x.data() + t * n_cols, layout, aligned);
    internal::ScatterBlocks(aligned, layout, t, n_tokens, expect.data());
  }
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (!IsaSupported(isa)) continue;
    const internal::IsaKernels& k =
        isa == Isa::kAvx512 ? internal::Avx512Kernels() : internal::Avx2Kernels();
    ASSERT_NE(k.quantize_entries, nullptr);
    std::fill(got.begin(), got.end(), std::byte{0x5a});
    for (int64_t t = 0; t < n_tokens; ++t) {
      k.quantize_entries(x.data() + t * n_cols, layout, got.data() + t * sizeof(internal::XEntry),
                         n_tokens * static_cast<int64_t>(sizeof(internal::XEntry)));
    }
    EXPECT_EQ(std::memcmp(got.data(), expect.data(), entries), 0) << IsaName(isa);
  }
}

TEST(MatMulTest, RejectsBadArguments) {
  ThreadPool pool(1);
  const RandomMatrix m(DType::kQ4_1, 4, 64, 1);
  std::vector<float> x(64, 1.0f), y(8, 0.0f);
  std::vector<std::byte> scratch(MatMulScratchBytes(m.w, 1));
  EXPECT_TRUE(MatMul(m.w, x.data(), 1, y.data(), 4, scratch, pool).ok());

  EXPECT_EQ(MatMul(m.w, x.data(), 1, y.data(), 3, scratch, pool).code(),
            StatusCode::kInvalidArgument);  // ldy < n_rows
  EXPECT_EQ(MatMul(m.w, x.data(), 1, y.data(), 4, std::span(scratch).first(8), pool).code(),
            StatusCode::kInvalidArgument);  // scratch too small
  WeightMatrix bad_cols = m.w;
  bad_cols.n_cols = 48;
  EXPECT_EQ(MatMul(bad_cols, x.data(), 1, y.data(), 4, scratch, pool).code(),
            StatusCode::kInvalidArgument);
  WeightMatrix short_rows = m.w;
  short_rows.row_bytes = 20;
  EXPECT_EQ(MatMul(short_rows, x.data(), 1, y.data(), 4, scratch, pool).code(),
            StatusCode::kInvalidArgument);
  WeightMatrix q2k = m.w;
  q2k.type = DType::kQ2_K;
  q2k.n_cols = 256;
  EXPECT_EQ(MatMul(q2k, x.data(), 1, y.data(), 4, scratch, pool).code(), StatusCode::kUnsupported);
}

// The packed canonical form (matmul_internal.h) written straight from the GGUF blocks,
// independently of the packing: per block the exact integer sum, then
// fma(float(isum), dw * dx, acc) and, with offsets, fma(mw, bx, acc).
std::vector<float> PackedCanonical(const WeightMatrix& w, const std::vector<float>& x,
                                   int64_t n_tokens) {
  const int64_t n = w.n_cols;
  const internal::QuantLayout layout = internal::MakeQuantLayout(n);
  std::vector<std::byte> row(layout.row_stride + 64);
  std::byte* xrow =
      reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(row.data()) + 63) / 64 * 64);
  std::vector<float> y(n_tokens * w.n_rows);
  const internal::UnpackLayout unpack = internal::MakeUnpackLayout(layout);
  std::vector<std::byte> unpacked(unpack.row_stride);
  for (int64_t t = 0; t < n_tokens; ++t) {
    internal::QuantizeRowScalar(x.data() + t * n, layout, xrow);
    const int8_t* xq = reinterpret_cast<const int8_t*>(xrow);
    const float* xd = reinterpret_cast<const float*>(xrow + layout.d_offset);
    for (int64_t r = 0; r < w.n_rows; ++r) {
      const uint8_t* wrow = w.data + r * w.row_bytes;
      float acc = 0.0f;
      if (w.type == DType::kQ6_K) {
        // Straight from ggml's block_q6_K: ql[128] | qh[64] | scales[16] | d; element
        // 128n + l + 32c takes ql[64n + l + 32(c & 1)] >> 4(c >> 1) and qh[32n + l] >> 2c.
        for (int64_t s = 0; s < n / 256; ++s) {
          const uint8_t* blk = wrow + 210 * s;
          int32_t q6[256];
          for (int e = 0; e < 256; ++e) {
            const int nn = e / 128, c = e % 128 / 32, l = e % 32;
            q6[e] = ((blk[64 * nn + l + 32 * (c & 1)] >> (4 * (c >> 1))) & 15) |
                    ((blk[128 + 32 * nn + l] >> (2 * c)) & 3) << 4;
          }
          uint16_t h;
          std::memcpy(&h, blk + 208, 2);
          for (int j = 0; j < 8; ++j) {
            const int64_t b = 8 * s + j;
            int32_t isum = 0;
            for (int half = 0; half < 2; ++half) {
              int32_t dot = 0;
              for (int k = 0; k < 16; ++k) {
                const int e = 32 * j + 16 * half + k;
                dot += (q6[e] - 32) * xq[32 * b + 16 * half + k];
              }
              isum += static_cast<int8_t>(blk[192 + 2 * j + half]) * dot;
            }
            acc = std::fma(static_cast<float>(isum), Fp16ToFp32(h) * xd[b], acc);
          }
        }
        y[t * w.n_rows + r] = acc;
        continue;
      }
      if (w.type == DType::kQ4_K || w.type == DType::kQ5_K || w.type == DType::kQ5_0 ||
          w.type == DType::kQ5_1) {
        // The values and per-32 scales as UnpackRowScalar gives them (Q4_K: dw = d * sc,
        // mw = -(dmin * m); Q5_0: d, -16 d; Q5_1: d, m; the same in every lane of a block).
        internal::UnpackRowScalar(w.type, wrow, layout, unpack, unpacked.data());
        const uint8_t* q = reinterpret_cast<const uint8_t*>(unpacked.data());
        const float* dw = reinterpret_cast<const float*>(unpacked.data() + unpack.dw_offset);
        const float* mw = reinterpret_cast<const float*>(unpacked.data() + unpack.mw_offset);
        for (int64_t b = 0; b < n / 32; ++b) {
          int32_t isum = 0, qsum = 0;
          for (int e = 0; e < 32; ++e) {
            isum += q[32 * b + e] * xq[32 * b + e];
            qsum += xq[32 * b + e];
          }
          acc = std::fma(static_cast<float>(isum), dw[8 * b] * xd[b], acc);
          acc = std::fma(mw[8 * b], static_cast<float>(qsum) * xd[b], acc);
        }
        y[t * w.n_rows + r] = acc;
        continue;
      }
      for (int64_t b = 0; b < n / 32; ++b) {
        int32_t isum = 0, qsum = 0;
        float dw = 0.0f, mw = 0.0f;
        for (int e = 0; e < 32; ++e) {
          int32_t q = 0;
          if (w.type == DType::kQ8_0) {
            q = static_cast<int8_t>(wrow[34 * b + 2 + e]);
          } else {
            const size_t size = w.type == DType::kQ4_1 ? 20 : 18;
            const uint8_t byte = wrow[size * b + (w.type == DType::kQ4_1 ? 4 : 2) + e % 16];
            q = e < 16 ? byte & 0x0f : byte >> 4;
          }
          isum += q * xq[32 * b + e];
          qsum += xq[32 * b + e];
        }
        const size_t block_bytes = w.type == DType::kQ8_0 ? 34 : w.type == DType::kQ4_1 ? 20 : 18;
        uint16_t h;
        std::memcpy(&h, wrow + block_bytes * b, 2);
        dw = Fp16ToFp32(h);
        if (w.type == DType::kQ4_1) {
          std::memcpy(&h, wrow + block_bytes * b + 2, 2);
          mw = Fp16ToFp32(h);
        } else if (w.type == DType::kQ4_0) {
          mw = -8.0f * dw;
        }
        acc = std::fma(static_cast<float>(isum), dw * xd[b], acc);
        if (w.type != DType::kQ8_0) acc = std::fma(mw, static_cast<float>(qsum) * xd[b], acc);
      }
      y[t * w.n_rows + r] = acc;
    }
  }
  return y;
}

// `src` packed, or `src` itself for a type without a packed layout.
struct PackedMatrix {
  std::vector<std::byte> bytes;
  WeightMatrix w;
  explicit PackedMatrix(const WeightMatrix& src) : bytes(PackedWeightBytes(src) + 64), w(src) {
    if (!HasPackedLayout(src.type)) return;
    std::byte* aligned =
        reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(bytes.data()) + 63) / 64 * 64);
    Result<WeightMatrix> packed =
        PackWeights(src, std::span<std::byte>(aligned, PackedWeightBytes(src)));
    EXPECT_TRUE(packed.ok()) << packed.status().ToString();
    if (packed.ok()) w = *packed;
  }
};

const DType kPackedTypes[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                              DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

TEST(PackedMatMulTest, EveryPathAndLayoutGivesTheCanonicalBits) {
  for (DType type : kPackedTypes) {
    for (int64_t n_rows : {1, 16, 37, 64}) {
      const int64_t n_cols = IsKQuant(type) ? 512 : 96;
      const RandomMatrix m(type, n_rows, n_cols, 31 * n_rows + 5);
      const PackedMatrix packed(m.w);
      // 16 + 16 + 4 + 1: every tile size; 150: more than two chunks of 64 tokens.
      for (const int64_t n_tokens : {int64_t{37}, int64_t{150}}) {
        const std::vector<float> x = RandomActivations(n_tokens * n_cols, 8 + n_rows);
        const std::vector<float> expect = PackedCanonical(m.w, x, n_tokens);
        for (Isa isa : SupportedIsas()) {
          for (const WeightMatrix* w : {&m.w, &packed.w}) {
            const std::vector<float> y = RunMatMul(isa, *w, x.data(), n_tokens, 2);
            for (int64_t t = 0; t < n_tokens; ++t) {
              for (int64_t r = 0; r < n_rows; ++r) {
                ASSERT_TRUE(SameBits(&y[t * (n_rows + 3) + r], &expect[t * n_rows + r], 1))
                    << DTypeName(type) << " " << IsaName(isa) << (w == &m.w ? " gguf" : " packed")
                    << " n_rows=" << n_rows << " t=" << t << " r=" << r << ": "
                    << y[t * (n_rows + 3) + r] << " vs " << expect[t * n_rows + r];
              }
              // The padding after the rows is never written.
              ASSERT_TRUE(std::isnan(y[t * (n_rows + 3) + n_rows]));
            }
          }
        }
      }
    }
  }
}

// The largest integer sums a block can have: every weight quant at its maximum (Q8_0: -128)
// against activations that quantize to +-127. The SIMD paths add several blocks' products in
// 16 bits before widening; these sums must still be exact.
TEST(PackedMatMulTest, LargestBlockSumsStayExact) {
  for (DType type : kPackedTypes) {
    const int64_t n_rows = 16, n_cols = IsKQuant(type) ? 256 : 64;
    RandomMatrix m(type, n_rows, n_cols, 77);
    // Bytes after each block's f16 scale(s): quants, fifth bits and 6-bit scales.
    const DTypeTraits traits = Traits(type);
    const size_t scale_bytes =
        type == DType::kQ4_1 || type == DType::kQ5_1 || type == DType::kQ4_K || type == DType::kQ5_K
            ? 4
            : 2;
    const uint8_t fill = type == DType::kQ8_0 ? 0x80 : 0xff;
    for (size_t b = 0; b < m.bytes.size(); b += traits.type_size) {
      if (type == DType::kQ6_K) {  // quants 63, scales -128; the f16 d at the end kept
        std::fill(m.bytes.begin() + b, m.bytes.begin() + b + 192, 0xff);
        std::fill(m.bytes.begin() + b + 192, m.bytes.begin() + b + 208, 0x80);
        continue;
      }
      std::fill(m.bytes.begin() + b + scale_bytes, m.bytes.begin() + b + traits.type_size, fill);
    }
    const PackedMatrix packed(m.w);
    const int64_t n_tokens = 21;  // 16 + 4 + 1
    std::vector<float> x(n_tokens * n_cols);
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t k = 0; k < n_cols; ++k) x[t * n_cols + k] = t % 2 == 0 ? 1.0f : -1.0f;
    }
    const std::vector<float> expect = PackedCanonical(m.w, x, n_tokens);
    for (Isa isa : SupportedIsas()) {
      for (const WeightMatrix* w : {static_cast<const WeightMatrix*>(&m.w), &packed.w}) {
        const std::vector<float> y = RunMatMul(isa, *w, x.data(), n_tokens, 1);
        for (int64_t t = 0; t < n_tokens; ++t) {
          for (int64_t r = 0; r < n_rows; ++r) {
            ASSERT_TRUE(SameBits(&y[t * (n_rows + 3) + r], &expect[t * n_rows + r], 1))
                << DTypeName(type) << " " << IsaName(isa) << (w == &m.w ? " gguf" : " packed")
                << " t=" << t << " r=" << r << ": " << y[t * (n_rows + 3) + r] << " vs "
                << expect[t * n_rows + r];
          }
        }
      }
    }
  }
}

TEST(PackedMatMulTest, PackedRowsDequantizeToTheGgufValues) {
  for (DType type : kPackedTypes) {
    const int64_t n = IsKQuant(type) ? 512 : 64;
    const RandomMatrix m(type, 21, n, 3);
    const PackedMatrix packed(m.w);
    std::vector<float> a(n), b(n);
    for (int64_t r = 0; r < 21; ++r) {
      ASSERT_TRUE(DequantizeRow(type, m.w.data + r * m.w.row_bytes, a.data(), n).ok());
      ASSERT_TRUE(DequantizePackedRow(packed.w, r, b.data()).ok());
      ASSERT_TRUE(SameBits(a.data(), b.data(), n)) << DTypeName(type) << " row " << r;
    }
    EXPECT_FALSE(DequantizePackedRow(packed.w, 21, b.data()).ok());
    EXPECT_FALSE(DequantizePackedRow(m.w, 0, b.data()).ok());  // not packed
  }
}

TEST(PackedMatMulTest, PackedSizeEqualsGgufSizeForWholeGroups) {
  for (DType type : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0}) {
    const RandomMatrix m(type, 48, 576, 1);
    EXPECT_EQ(PackedWeightBytes(m.w), m.bytes.size()) << DTypeName(type);
  }
  // Q4_K: its 6-bit scales unpacked to bytes, 148 bytes per row and super-block against 144.
  const RandomMatrix k(DType::kQ4_K, 48, 1536, 1);
  EXPECT_EQ(PackedWeightBytes(k.w), 48u * 6 * 148);
  // Q6_K: GGUF's 210 bytes per row and super-block.
  const RandomMatrix q6(DType::kQ6_K, 48, 1536, 1);
  EXPECT_EQ(PackedWeightBytes(q6.w), q6.bytes.size());
  // Q5_K: Q4_K's and the fifth bits as Q5_0's, 180 bytes per row and super-block against 176.
  const RandomMatrix q5(DType::kQ5_K, 48, 1536, 1);
  EXPECT_EQ(PackedWeightBytes(q5.w), 48u * 6 * 180);
  const RandomMatrix q2(DType::kQ2_K, 16, 256, 1);
  EXPECT_EQ(PackedWeightBytes(q2.w), 0u);
}

// ggml's quantize_row_q8_0_ref / quantize_row_q4_0_ref, written again here from their
// definitions: one GGUF block of `target` from 32 floats.
std::vector<uint8_t> GgmlBlock(DType target, const float* x) {
  std::vector<uint8_t> out(target == DType::kQ8_0 ? 34 : 18);
  float amax = 0, max = 0;
  for (int i = 0; i < 32; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  const float d = target == DType::kQ8_0 ? amax / 127 : max / -8;
  const float id = d != 0 ? 1 / d : 0;
  const uint16_t h = Fp32ToFp16(d);
  std::memcpy(out.data(), &h, 2);
  for (int i = 0; i < 32; ++i) {
    if (target == DType::kQ8_0) {
      out[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::roundf(x[i] * id)));
    } else {
      const int q = std::min(15, static_cast<int>(static_cast<int8_t>(x[i] * id + 8.5f)));
      out[2 + i % 16] |= static_cast<uint8_t>(i < 16 ? q : q << 4);
    }
  }
  return out;
}

TEST(PackedMatMulTest, FloatWeightsQuantizedAtLoadAreGgmlsBlocks) {
  for (DType source : {DType::kF32, DType::kF16, DType::kBF16}) {
    RandomMatrix m(source, 37, 96, 9);
    // Edge blocks in row 0: all zero (d = 0), and one whose largest magnitude is negative.
    std::vector<float> row0(96);
    ASSERT_TRUE(DequantizeRow(source, m.w.data, row0.data(), 96).ok());
    for (int i = 0; i < 32; ++i) row0[i] = 0.0f;
    row0[40] = -1000.0f;
    for (int64_t k = 0; k < 96; ++k) {
      if (source == DType::kF32) std::memcpy(m.bytes.data() + 4 * k, &row0[k], 4);
      if (source == DType::kF16) {
        const uint16_t h = Fp32ToFp16(row0[k]);
        std::memcpy(m.bytes.data() + 2 * k, &h, 2);
      }
      if (source == DType::kBF16) {
        const uint16_t h = Fp32ToBf16(row0[k]);
        std::memcpy(m.bytes.data() + 2 * k, &h, 2);
      }
    }
    for (DType target : {DType::kQ8_0, DType::kQ4_0}) {
      SCOPED_TRACE(std::string(DTypeName(source)) + " -> " + std::string(DTypeName(target)));
      // The expected GGUF matrix, block by block.
      const size_t row_bytes = *RowBytes(target, 96);
      std::vector<uint8_t> gguf(37 * row_bytes);
      std::vector<float> row(96);
      for (int64_t r = 0; r < 37; ++r) {
        ASSERT_TRUE(DequantizeRow(source, m.w.data + r * m.w.row_bytes, row.data(), 96).ok());
        for (int b = 0; b < 3; ++b) {
          const std::vector<uint8_t> blk = GgmlBlock(target, row.data() + 32 * b);
          std::copy(blk.begin(), blk.end(), gguf.begin() + r * row_bytes + b * blk.size());
        }
      }
      const WeightMatrix expect{target, 37, 96, gguf.data(), row_bytes};
      const size_t bytes = QuantizedPackedBytes(m.w, target);
      ASSERT_EQ(bytes, PackedWeightBytes(expect));
      std::vector<std::byte> storage(bytes + 64);
      std::byte* aligned = reinterpret_cast<std::byte*>(
          (reinterpret_cast<uintptr_t>(storage.data()) + 63) / 64 * 64);
      int64_t reported = 0;
      Result<WeightMatrix> packed = QuantizeToPacked(m.w, target, std::span(aligned, bytes),
                                                     [&](int64_t rows) { reported = rows; });
      ASSERT_TRUE(packed.ok()) << packed.status().ToString();
      EXPECT_EQ(reported, 37);
      std::vector<float> a(96), b(96);
      for (int64_t r = 0; r < 37; ++r) {
        ASSERT_TRUE(DequantizeRow(target, gguf.data() + r * row_bytes, a.data(), 96).ok());
        ASSERT_TRUE(DequantizePackedRow(*packed, r, b.data()).ok());
        ASSERT_TRUE(SameBits(a.data(), b.data(), 96)) << "row " << r;
      }
      // And MatMul over it gives the canonical bits of the GGUF matrix.
      const std::vector<float> x = RandomActivations(5 * 96, 4);
      const std::vector<float> want = PackedCanonical(expect, x, 5);
      const std::vector<float> got = RunMatMul(ActiveIsa(), *packed, x.data(), 5, 2);
      for (int64_t t = 0; t < 5; ++t) {
        ASSERT_TRUE(SameBits(&got[t * 40], &want[t * 37], 37)) << "token " << t;
      }
    }
  }
  const RandomMatrix q(DType::kQ8_0, 16, 64, 1);
  std::vector<std::byte> storage(1 << 16);
  std::byte* aligned =
      reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(storage.data()) + 63) / 64 * 64);
  EXPECT_EQ(
      QuantizeToPacked(q.w, DType::kQ8_0, std::span(aligned, 4096), [](int64_t) {}).status().code(),
      StatusCode::kUnsupported);  // only float sources
  const RandomMatrix f(DType::kF32, 16, 64, 1);
  EXPECT_EQ(
      QuantizeToPacked(f.w, DType::kQ4_K, std::span(aligned, 4096), [](int64_t) {}).status().code(),
      StatusCode::kUnsupported);  // only q8_0 and q4_0 targets
}

TEST(PackedMatMulTest, PackWeightsRejectsBadInputAndReportsProgress) {
  const RandomMatrix m(DType::kQ8_0, 4000, 64, 1);  // 136 KB: one report at the end
  std::vector<std::byte> bytes(PackedWeightBytes(m.w) + 64);
  std::byte* aligned =
      reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(bytes.data()) + 63) / 64 * 64);
  std::vector<int64_t> reports;
  Result<WeightMatrix> packed =
      PackWeights(m.w, std::span<std::byte>(aligned, PackedWeightBytes(m.w)),
                  [&](int64_t rows) { reports.push_back(rows); });
  ASSERT_TRUE(packed.ok());
  ASSERT_FALSE(reports.empty());
  EXPECT_EQ(reports.back(), 4000);
  EXPECT_EQ(packed->layout, WeightLayout::kPacked16);

  EXPECT_EQ(PackWeights(m.w, std::span<std::byte>(aligned, 100)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      PackWeights(m.w, std::span<std::byte>(aligned + 1, PackedWeightBytes(m.w))).status().code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(
      PackWeights(*packed, std::span<std::byte>(aligned, PackedWeightBytes(m.w))).status().code(),
      StatusCode::kInvalidArgument);
  const RandomMatrix k(DType::kQ2_K, 16, 256, 1);
  EXPECT_EQ(PackWeights(k.w, std::span<std::byte>(aligned, 1 << 16)).status().code(),
            StatusCode::kUnsupported);
}

TEST(MatMulTest, SlicesGiveEachRowTheBitsOfAPlainMatMul) {
  for (DType type : {DType::kQ4_0, DType::kQ4_1, DType::kQ8_0, DType::kQ5_1, DType::kF16}) {
    const int64_t n_cols = 64, n_rows = 16 + 32 + 7;  // Q, K, V shaped: whole groups, then a tail
    const RandomMatrix m(type, n_rows, n_cols, 11);
    const PackedMatrix packed(m.w);
    const int64_t n_tokens = 19;
    const std::vector<float> x = RandomActivations(n_tokens * n_cols, 12);
    for (Isa isa : SupportedIsas()) {
      const std::vector<float> whole = RunMatMul(isa, m.w, x.data(), n_tokens, 2);
      for (const WeightMatrix* w : {&m.w, &packed.w}) {
        std::vector<float> a(n_tokens * 16), b(n_tokens * 40), c(n_tokens * 7);
        const OutputSlice slices[] = {{16, a.data(), 16}, {32, b.data(), 40}, {7, c.data(), 7}};
        std::vector<std::byte> scratch(MatMulScratchBytes(*w, n_tokens));
        ThreadPool pool(2);
        ASSERT_TRUE(
            internal::MatMulToSlicesWithIsa(isa, *w, x.data(), n_tokens, slices, scratch, pool)
                .ok());
        for (int64_t t = 0; t < n_tokens; ++t) {
          const float* row = &whole[t * (n_rows + 3)];
          ASSERT_TRUE(SameBits(&a[t * 16], row, 16)) << DTypeName(type) << " t=" << t;
          ASSERT_TRUE(SameBits(&b[t * 40], row + 16, 32)) << DTypeName(type) << " t=" << t;
          ASSERT_TRUE(SameBits(&c[t * 7], row + 48, 7)) << DTypeName(type) << " t=" << t;
        }
      }
    }
  }
}

TEST(MatMulTest, SlicesMustCoverTheRowsInWholeGroups) {
  ThreadPool pool(1);
  const RandomMatrix m(DType::kQ4_1, 48, 64, 1);
  std::vector<float> x(64, 1.0f), y(64, 0.0f);
  std::vector<std::byte> scratch(MatMulScratchBytes(m.w, 1));
  const OutputSlice short_of_rows[] = {{16, y.data(), 16}, {16, y.data(), 16}};
  EXPECT_EQ(MatMulToSlices(m.w, x.data(), 1, short_of_rows, scratch, pool).code(),
            StatusCode::kInvalidArgument);
  const OutputSlice split_group[] = {{8, y.data(), 8}, {40, y.data(), 40}};
  EXPECT_EQ(MatMulToSlices(m.w, x.data(), 1, split_group, scratch, pool).code(),
            StatusCode::kInvalidArgument);
  const OutputSlice narrow_ldy[] = {{16, y.data(), 15}, {32, y.data(), 32}};
  EXPECT_EQ(MatMulToSlices(m.w, x.data(), 1, narrow_ldy, scratch, pool).code(),
            StatusCode::kInvalidArgument);
  const OutputSlice fine[] = {{16, y.data(), 16}, {32, y.data() + 16, 32}};
  EXPECT_TRUE(MatMulToSlices(m.w, x.data(), 1, fine, scratch, pool).ok());
}

TEST(MatMulTest, ReportsAKnownIsaName) {
  const std::string name = MatMulIsaName();
  EXPECT_TRUE(name == "avx512" || name == "avx2" || name == "scalar") << name;
}

}  // namespace
}  // namespace pier::kernels

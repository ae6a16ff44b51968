#include "kernels/cpu/kv_convert.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/check.h"
#include "kernels/cpu/cpu_isa.h"
#include "tensor/float16.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PIER_KV_F16C 1
#else
#define PIER_KV_F16C 0
#endif

namespace pier::kernels {
namespace internal {

namespace {

// F16C is part of the AVX2 level (cpu_isa.h); the scalar level uses the reference.
bool UseF16c() { return PIER_KV_F16C && ActiveIsa() != Isa::kScalar; }

}  // namespace

void ConvertF32ToF16Scalar(const float* src, int64_t n, uint16_t* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Fp32ToFp16(src[i]);
}

void ConvertF16ToF32Scalar(const uint16_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Fp16ToFp32(src[i]);
}

#if PIER_KV_F16C

// Eight values per instruction; a tail of fewer than eight goes through a padded lane
// buffer so that every value takes the same instruction.
__attribute__((target("avx,f16c"))) void ConvertF32ToF16F16c(const float* src, int64_t n,
                                                             uint16_t* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  if (i < n) {
    alignas(32) float in[8] = {};
    alignas(16) uint16_t out[8];
    std::memcpy(in, src + i, static_cast<size_t>(n - i) * sizeof(float));
    _mm_store_si128(reinterpret_cast<__m128i*>(out),
                    _mm256_cvtps_ph(_mm256_load_ps(in), _MM_FROUND_TO_NEAREST_INT));
    std::memcpy(dst + i, out, static_cast<size_t>(n - i) * sizeof(uint16_t));
  }
}

__attribute__((target("avx,f16c"))) void ConvertF16ToF32F16c(const uint16_t* src, int64_t n,
                                                             float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  if (i < n) {
    alignas(16) uint16_t in[8] = {};
    alignas(32) float out[8];
    std::memcpy(in, src + i, static_cast<size_t>(n - i) * sizeof(uint16_t));
    _mm256_store_ps(out, _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(in))));
    std::memcpy(dst + i, out, static_cast<size_t>(n - i) * sizeof(float));
  }
}

// Rows of a plane into packed rows (see ConvertF16RowsToF32), the loop inside the target.
__attribute__((target("avx,f16c"))) void ConvertF16RowsToF32F16c(const uint16_t* src,
                                                                 int64_t src_stride, int64_t n_rows,
                                                                 int64_t row_len, float* dst) {
  for (int64_t r = 0; r < n_rows; ++r) {
    ConvertF16ToF32F16c(src + r * src_stride, row_len, dst + r * row_len);
  }
}

#else

void ConvertF16RowsToF32F16c(const uint16_t*, int64_t, int64_t, int64_t, float*) {
  PIER_CHECK(false, "F16C conversion called on a build without it");
}
void ConvertF32ToF16F16c(const float*, int64_t, uint16_t*) {
  PIER_CHECK(false, "F16C conversion called on a build without it");
}
void ConvertF16ToF32F16c(const uint16_t*, int64_t, float*) {
  PIER_CHECK(false, "F16C conversion called on a build without it");
}

#endif

}  // namespace internal

void ConvertF32ToF16(const float* src, int64_t n, uint16_t* dst) {
  if (internal::UseF16c()) {
    internal::ConvertF32ToF16F16c(src, n, dst);
  } else {
    internal::ConvertF32ToF16Scalar(src, n, dst);
  }
}

void ConvertF16ToF32(const uint16_t* src, int64_t n, float* dst) {
  if (internal::UseF16c()) {
    internal::ConvertF16ToF32F16c(src, n, dst);
  } else {
    internal::ConvertF16ToF32Scalar(src, n, dst);
  }
}

void ConvertF16RowsToF32(const uint16_t* src, int64_t src_stride, int64_t n_rows, int64_t row_len,
                         float* dst) {
  if (internal::UseF16c()) {
    internal::ConvertF16RowsToF32F16c(src, src_stride, n_rows, row_len, dst);
    return;
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    internal::ConvertF16ToF32Scalar(src + r * src_stride, row_len, dst + r * row_len);
  }
}

}  // namespace pier::kernels

namespace pier::kernels {

void ConvertF32ToQ8_0(const float* src, int64_t n, std::byte* dst) {
  PIER_CHECK(n % 32 == 0, "Q8_0 K/V rows hold whole blocks of 32 values");
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* x = src + 32 * b;
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    std::byte* block = dst + 34 * b;
    const uint16_t dh = Fp32ToFp16(d);
    std::memcpy(block, &dh, 2);
    for (int i = 0; i < 32; ++i) {
      float q = std::round(x[i] * id);               // |q| <= 127 for finite inputs
      if (!(q >= -127.0f && q <= 127.0f)) q = 0.0f;  // NaN or inf in: no undefined cast
      block[2 + i] = static_cast<std::byte>(static_cast<int8_t>(q));
    }
  }
}

void ConvertQ8_0ToF32(const std::byte* src, int64_t n, float* dst) {
  PIER_CHECK(n % 32 == 0, "Q8_0 K/V rows hold whole blocks of 32 values");
  for (int64_t b = 0; b < n / 32; ++b) {
    const std::byte* block = src + 34 * b;
    uint16_t dh;
    std::memcpy(&dh, block, 2);
    const float d = Fp16ToFp32(dh);
    for (int i = 0; i < 32; ++i) {
      dst[32 * b + i] = static_cast<float>(static_cast<int8_t>(block[2 + i])) * d;
    }
  }
}

}  // namespace pier::kernels

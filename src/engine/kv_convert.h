// Conversions between the runner's f32 K/V and the f16 values of a KvDtype::kF16 store.
//
// f32 -> f16 rounds to nearest even and gives, for every input that is not a NaN, the
// bits of the scalar reference pier::Fp32ToFp16 (tensor/float16.h); f16 -> f32 is exact and
// gives the bits of pier::Fp16ToFp32 for every pattern that is not a NaN. A NaN stays a NaN
// (the vector path may quiet it or keep another payload). Each call picks, once per
// process, the F16C instructions (_mm256_cvtps_ph / _mm256_cvtph_ps) when the CPU has them
// and the scalar reference otherwise; both give the same bits, so K/V written or read on
// any x86-64 machine are the same. Pure functions of their arguments; thread-safe.
#pragma once

#include <cstdint>

namespace pier::engine {

// dst[i] = f16(src[i]) for i < n.  src: [n] f32, dst: [n] f16 bits.
void ConvertF32ToF16(const float* src, int64_t n, uint16_t* dst);

// dst[i] = f32(src[i]) for i < n.  src: [n] f16 bits, dst: [n] f32.
void ConvertF16ToF32(const uint16_t* src, int64_t n, float* dst);

// n_rows rows of row_len values, row r starting at src + r * src_stride, into
// dst: [n_rows][row_len] f32.
void ConvertF16RowsToF32(const uint16_t* src, int64_t src_stride, int64_t n_rows, int64_t row_len,
                         float* dst);

namespace internal {

// Whether this CPU has F16C (the vector paths below may only be called then).
bool CpuHasF16c();
void ConvertF32ToF16Scalar(const float* src, int64_t n, uint16_t* dst);
void ConvertF16ToF32Scalar(const uint16_t* src, int64_t n, float* dst);
void ConvertF32ToF16F16c(const float* src, int64_t n, uint16_t* dst);
void ConvertF16ToF32F16c(const uint16_t* src, int64_t n, float* dst);
void ConvertF16RowsToF32F16c(const uint16_t* src, int64_t src_stride, int64_t n_rows,
                             int64_t row_len, float* dst);

}  // namespace internal
}  // namespace pier::engine

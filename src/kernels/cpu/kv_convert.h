// Conversions between the runner's f32 K/V and the f16 values of a KvDtype::kF16 store (and
// the Q8_0 blocks of a KvDtype::kQ8_0 one, below).
//
// f32 -> f16 rounds to nearest even and gives, for every input that is not a NaN, the
// bits of the scalar reference pier::Fp32ToFp16 (tensor/float16.h); f16 -> f32 is exact and
// gives the bits of pier::Fp16ToFp32 for every pattern that is not a NaN. A NaN stays a NaN
// (the vector path may quiet it or keep another payload). Each call picks, by
// ActiveIsa() (cpu_isa.h: the AVX2 level includes F16C), the F16C instructions (_mm256_cvtps_ph /
// _mm256_cvtph_ps) when the CPU has them and the scalar reference otherwise; both give the same
// bits, so K/V written or read on any x86-64 machine are the same. Pure functions of their
// arguments; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pier::kernels {

// dst[i] = f16(src[i]) for i < n.  src: [n] f32, dst: [n] f16 bits.
void ConvertF32ToF16(const float* src, int64_t n, uint16_t* dst);

// dst[i] = f32(src[i]) for i < n.  src: [n] f16 bits, dst: [n] f32.
void ConvertF16ToF32(const uint16_t* src, int64_t n, float* dst);

// Q8_0 (KvDtype::kQ8_0), as GGUF quantizes it: per block of 32 values d = amax / 127, stored
// as f16, and q = round(x / d) (half away from zero) as int8; a block is f16 d | int8 q[32]
// (34 bytes). The reverse is exact: float(q) * f32(d) needs at most 19 significant bits.
// One scalar implementation, so every machine writes the same bytes.
//   n: a multiple of 32. src: [n] f32, dst: [n / 32 * 34] bytes.
void ConvertF32ToQ8_0(const float* src, int64_t n, std::byte* dst);
//   src: [n / 32 * 34] bytes, dst: [n] f32.
void ConvertQ8_0ToF32(const std::byte* src, int64_t n, float* dst);

// n_rows rows of row_len values, row r starting at src + r * src_stride, into
// dst: [n_rows][row_len] f32.
void ConvertF16RowsToF32(const uint16_t* src, int64_t src_stride, int64_t n_rows, int64_t row_len,
                         float* dst);

namespace internal {

// The paths below; the F16C ones may only be called where IsaSupported(Isa::kAvx2).
void ConvertF32ToF16Scalar(const float* src, int64_t n, uint16_t* dst);
void ConvertF16ToF32Scalar(const uint16_t* src, int64_t n, float* dst);
void ConvertF32ToF16F16c(const float* src, int64_t n, uint16_t* dst);
void ConvertF16ToF32F16c(const uint16_t* src, int64_t n, float* dst);
void ConvertF16RowsToF32F16c(const uint16_t* src, int64_t src_stride, int64_t n_rows,
                             int64_t row_len, float* dst);

}  // namespace internal
}  // namespace pier::kernels

// Reference dequantization of GGUF tensor types to f32.
//
// Scalar code that mirrors ggml's reference (dequantize_row_*) block layouts,
// written to be read and checked, not to be fast: the CPU and CUDA kernels
// compare against it. Supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// Q4_K, Q5_K, Q6_K; every other type returns UNSUPPORTED. Pure functions;
// thread-safe.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "tensor/dtype.h"

namespace pier {

// Whether DequantizeRow handles `type`.
bool CanDequantize(DType type);

// Decodes `n` elements of `type` from `src` into `dst`.
//   src: RowBytes(type, n) bytes, any alignment
//   dst: [n] floats
// INVALID_ARGUMENT when n is negative or not a multiple of the type's block size;
// UNSUPPORTED for a type Pier cannot decode.
Status DequantizeRow(DType type, const uint8_t* src, float* dst, int64_t n);

}  // namespace pier

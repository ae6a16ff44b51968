// Weights repacked once at load for the fastest MatMul kernels.
//
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q4_K matrices can be rearranged so that 16 rows' blocks
// sit side by side (WeightLayout::kPacked16; the byte layout is described in
// matmul_internal.h). The packed matrix takes the same bytes as the GGUF one when its row
// count is a multiple of 16 (Q4_K: 148 bytes per row and super-block against 144), and
// MatMul over it gives exactly the bits MatMul gives over the GGUF matrix, only faster:
// a vector holds 16 rows of one token, so the integer dot products of a block are shared
// by up to 16 tokens and no horizontal sums are needed.
//
// The caller owns the packed bytes (allocated through the memory governor); the packed
// WeightMatrix points into them. Thread-safety: pure functions over caller buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "common/status.h"
#include "kernels/cpu/matmul.h"

namespace pier::kernels {

// Whether MatMul has a packed layout for `type` (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K).
bool HasPackedLayout(DType type);

// Bytes the packed copy of `w` takes (0 when its type has no packed layout).
size_t PackedWeightBytes(const WeightMatrix& w);

// Packs the GGUF-layout `w` into `dst` (at least PackedWeightBytes(w) bytes, 64-byte
// aligned) and returns the packed matrix, which points into dst. `on_rows_done(r)` is
// called after each stretch of source rows [0, r) has been read for the last time (so a
// caller may release the source's pages), and once at the end with r = n_rows.
// UNSUPPORTED for a type without a packed layout; INVALID_ARGUMENT for a bad shape, a
// GGUF layout expected but not given, or a small or misaligned dst.
template <class OnRowsDone>
Result<WeightMatrix> PackWeights(const WeightMatrix& w, std::span<std::byte> dst,
                                 OnRowsDone&& on_rows_done);
Result<WeightMatrix> PackWeights(const WeightMatrix& w, std::span<std::byte> dst);

// Float weights (F32, F16, BF16) quantized into the packed layout of `target` (Q8_0 or Q4_0):
// `--weights-dtype`. Each block of 32 is quantized as llama.cpp's reference quantizers do
// (quantize_row_q8_0_ref: d = amax / 127, q = roundf(x / d); quantize_row_q4_0_ref: d = the
// signed value of largest magnitude / -8, q = min(15, trunc(x / d + 8.5))), d stored as f16,
// so the result is what a GGUF of that type made by llama-quantize from the same weights holds.
// Bytes: PackedWeightBytes of the matrix as `target`; dst as for PackWeights, and so is
// on_rows_done. UNSUPPORTED for another source or target type.
size_t QuantizedPackedBytes(const WeightMatrix& w, DType target);
template <class OnRowsDone>
Result<WeightMatrix> QuantizeToPacked(const WeightMatrix& w, DType target, std::span<std::byte> dst,
                                      OnRowsDone&& on_rows_done);

// Row `row` of a packed matrix as f32 (the values DequantizeRow gives for the GGUF row).
// out: [w.n_cols]. INVALID_ARGUMENT when w is not packed or row is out of range.
Status DequantizePackedRow(const WeightMatrix& w, int64_t row, float* out);

namespace internal {
// PackWeights over a function pointer, so the template stays in this header.
Result<WeightMatrix> PackWeightsImpl(const WeightMatrix& w, std::span<std::byte> dst,
                                     void (*on_rows_done)(void*, int64_t), void* context);
Result<WeightMatrix> QuantizeToPackedImpl(const WeightMatrix& w, DType target,
                                          std::span<std::byte> dst,
                                          void (*on_rows_done)(void*, int64_t), void* context);
}  // namespace internal

template <class OnRowsDone>
Result<WeightMatrix> QuantizeToPacked(const WeightMatrix& w, DType target, std::span<std::byte> dst,
                                      OnRowsDone&& on_rows_done) {
  using Fn = std::remove_reference_t<OnRowsDone>;
  return internal::QuantizeToPackedImpl(
      w, target, dst, [](void* context, int64_t rows) { (*static_cast<Fn*>(context))(rows); },
      const_cast<void*>(static_cast<const void*>(&on_rows_done)));
}

template <class OnRowsDone>
Result<WeightMatrix> PackWeights(const WeightMatrix& w, std::span<std::byte> dst,
                                 OnRowsDone&& on_rows_done) {
  using Fn = std::remove_reference_t<OnRowsDone>;
  return internal::PackWeightsImpl(
      w, dst, [](void* context, int64_t rows) { (*static_cast<Fn*>(context))(rows); },
      const_cast<void*>(static_cast<const void*>(&on_rows_done)));
}

}  // namespace pier::kernels

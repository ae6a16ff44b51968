// A GPU layout for the 32-element block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), packed once at
// load: the same bytes as the GGUF blocks, regrouped so that a thread reads a whole block's
// quants with one or two aligned 16-byte loads (the GGUF's 18-34-byte blocks are only 2-byte
// aligned). Written once for host and device, like quant_dot.h, whose canonical order the
// packed product keeps: it gives the GGUF-layout product's bits.
//
//   qs:     [rows][n_blocks][16] bytes (Q8_0: [32]): the block's quants as in the GGUF
//   scales: [rows][n_blocks][1 or 2] halves: d (and m for Q4_1, Q5_1)
//   qh:     [rows][n_blocks] u32 (Q5_0, Q5_1 only): the fifth bits
// Each region starts 16-byte aligned; the total is the GGUF size rounded up to that alignment.
#pragma once

#include <stdint.h>
#include <string.h>

#include "kernels/cuda/quant_dot.h"

namespace pier::cuda::quant {

PIER_HD bool HasPackedLayout32(QuantType type) {
  return type == QuantType::kQ4_0 || type == QuantType::kQ4_1 || type == QuantType::kQ5_0 ||
         type == QuantType::kQ5_1 || type == QuantType::kQ8_0;
}
PIER_HD int PackedQsBytes(QuantType type) { return type == QuantType::kQ8_0 ? 32 : 16; }
PIER_HD int PackedScaleHalves(QuantType type) {
  return type == QuantType::kQ4_1 || type == QuantType::kQ5_1 ? 2 : 1;
}
PIER_HD bool HasHighBits(QuantType type) {
  return type == QuantType::kQ5_0 || type == QuantType::kQ5_1;
}
PIER_HD int64_t AlignUp16(int64_t n) { return (n + 15) / 16 * 16; }

// Where a packed matrix's regions start, from its base (16-byte aligned).
struct PackedView {
  const uint8_t* qs;
  const uint16_t* scales;
  const uint32_t* qh;  // null without high bits
  int64_t n_blocks;    // per row
};

PIER_HD int64_t PackedScalesOffset(QuantType type, int64_t rows, int64_t n_blocks) {
  return AlignUp16(rows * n_blocks * PackedQsBytes(type));
}
PIER_HD int64_t PackedQhOffset(QuantType type, int64_t rows, int64_t n_blocks) {
  return PackedScalesOffset(type, rows, n_blocks) +
         AlignUp16(rows * n_blocks * 2 * PackedScaleHalves(type));
}
PIER_HD int64_t PackedBytes(QuantType type, int64_t rows, int64_t cols) {
  const int64_t n_blocks = cols / kBlock;
  return PackedQhOffset(type, rows, n_blocks) +
         (HasHighBits(type) ? AlignUp16(rows * n_blocks * 4) : 0);
}
PIER_HD PackedView ViewPacked(QuantType type, const uint8_t* base, int64_t rows, int64_t cols) {
  const int64_t n_blocks = cols / kBlock;
  PackedView v;
  v.qs = base;
  v.scales = reinterpret_cast<const uint16_t*>(base + PackedScalesOffset(type, rows, n_blocks));
  v.qh = HasHighBits(type)
             ? reinterpret_cast<const uint32_t*>(base + PackedQhOffset(type, rows, n_blocks))
             : nullptr;
  v.n_blocks = n_blocks;
  return v;
}

// The 32 weights of block b of `row`, as 8 words of signed bytes (word k: elements 4k..4k+3),
// the same integers LoadWeightQuad gives quad by quad.
PIER_HD void LoadPackedBlock(QuantType type, const PackedView& v, int64_t row, int64_t b,
                             uint32_t w[8]) {
  const int64_t block = row * v.n_blocks + b;
  const uint8_t* qs = v.qs + block * PackedQsBytes(type);
  uint32_t words[8];
#if defined(__CUDA_ARCH__)
  const uint4 lo = *reinterpret_cast<const uint4*>(qs);
  words[0] = lo.x, words[1] = lo.y, words[2] = lo.z, words[3] = lo.w;
  if (type == QuantType::kQ8_0) {
    const uint4 hi = *reinterpret_cast<const uint4*>(qs + 16);
    words[4] = hi.x, words[5] = hi.y, words[6] = hi.z, words[7] = hi.w;
  }
#else
  memcpy(words, qs, static_cast<size_t>(PackedQsBytes(type)));
#endif
  if (type == QuantType::kQ8_0) {
    for (int k = 0; k < 8; ++k) w[k] = words[k];
    return;
  }
  // Elements 0-15: low nibbles of bytes 0-15; elements 16-31: their high nibbles.
  for (int k = 0; k < 4; ++k) {
    w[k] = words[k] & 0x0f0f0f0fu;
    w[k + 4] = (words[k] >> 4) & 0x0f0f0f0fu;
  }
  if (HasHighBits(type)) {
    const uint32_t qh = v.qh[block];
    for (int k = 0; k < 8; ++k) {
      const uint32_t bits = (qh >> (4 * k)) & 0xfu;  // elements 4k..4k+3
      w[k] |= ((bits & 1u) << 4) | ((bits & 2u) << 11) | ((bits & 4u) << 18) | ((bits & 8u) << 25);
    }
  }
}

// The block's factors, the same values LoadBlockFactors reads from the GGUF block.
PIER_HD BlockFactors LoadPackedFactors(QuantType type, const PackedView& v, int64_t row,
                                       int64_t b) {
  const int64_t block = row * v.n_blocks + b;
  const int halves = PackedScaleHalves(type);
  const float d = HalfToFloat(v.scales[block * halves]);
  switch (type) {
    case QuantType::kQ4_0:
      return {d, MulRn(-8.0f, d), true};
    case QuantType::kQ5_0:
      return {d, MulRn(-16.0f, d), true};
    case QuantType::kQ4_1:
    case QuantType::kQ5_1:
      return {d, HalfToFloat(v.scales[block * halves + 1]), true};
    default:
      return {d, 0.0f, false};
  }
}

// Exact integer dot product of a block's 8 weight words with 8 activation words.
PIER_HD int32_t BlockDot(const uint32_t w[8], const uint32_t x[8]) {
  int32_t s = 0;
  for (int k = 0; k < 8; ++k) s += QuadDot(WeightQuad{w[k], 1}, x[k]);
  return s;
}

// ---- Host side -----------------------------------------------------------------------------

// Packs `rows` GGUF rows of `cols` into `out` (PackedBytes(type, rows, cols) bytes; the
// padding between regions is left as it is, never read), starting at row `first_row` of the
// packed matrix of `total_rows` rows: a matrix can be packed in pieces of rows.
inline void PackRows32(QuantType type, const uint8_t* gguf_rows, int64_t first_row, int64_t rows,
                       int64_t total_rows, int64_t cols, uint8_t* out) {
  const int64_t n_blocks = cols / kBlock;
  const int bytes = GgufBlockBytes(type);
  const int qs_bytes = PackedQsBytes(type);
  const int halves = PackedScaleHalves(type);
  uint8_t* qs = out;
  auto* scales = reinterpret_cast<uint16_t*>(out + PackedScalesOffset(type, total_rows, n_blocks));
  auto* qh = reinterpret_cast<uint32_t*>(out + PackedQhOffset(type, total_rows, n_blocks));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < n_blocks; ++b) {
      const uint8_t* blk = gguf_rows + (r * n_blocks + b) * bytes;
      const int64_t block = (first_row + r) * n_blocks + b;
      memcpy(qs + block * qs_bytes, blk + bytes - qs_bytes, static_cast<size_t>(qs_bytes));
      for (int h = 0; h < halves; ++h) scales[block * halves + h] = LoadU16(blk + 2 * h);
      if (HasHighBits(type)) qh[block] = LoadU32(blk + 2 * halves);
    }
  }
}

// The product over the packed layout on the host, in the canonical order: the golden of the
// packed kernel (equal to QuantMatMulGolden on the same matrix).
inline void PackedMatMulGolden(QuantType type, const uint8_t* packed, int64_t n_rows,
                               int64_t n_cols, const uint8_t* xq, int64_t n_tokens, float* y,
                               int64_t ldy) {
  const PackedView v = ViewPacked(type, packed, n_rows, n_cols);
  const int64_t x_bytes = ActivationRowBytes(n_cols);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const uint8_t* x = xq + t * x_bytes;
    const auto* dx = reinterpret_cast<const float*>(x + n_cols);
    const float* bx = dx + v.n_blocks;
    for (int64_t r = 0; r < n_rows; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < v.n_blocks; ++b) {
        uint32_t w[8], xs[8];
        LoadPackedBlock(type, v, r, b, w);
        memcpy(xs, x + kBlock * b, 32);
        acc = CombineBlock(acc, BlockDot(w, xs), LoadPackedFactors(type, v, r, b), dx[b], bx[b]);
      }
      y[t * ldy + r] = acc;
    }
  }
}

}  // namespace pier::cuda::quant

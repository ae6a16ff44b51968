// Internals of MatMul shared by its scalar and SIMD paths, and exposed to tests.
//
// Two canonical computations; every path produces their exact bits.
//
// Packed types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K; HasPackedLayout), per (row,
// token),
// acc = 0, then per block b of 32 in order:
//      isum = exact integer sum over the block of q_w * q_x    (q_w: u4 0..15, or s8)
//      acc  = fma(float(isum), dw * dx, acc)                    (dw * dx rounded once)
//      acc  = fma(mw, bx, acc)                                   (Q4_0, Q4_1 only)
//  (q_w: u4 0..15, u5 0..31 for Q5_0 / Q5_1 / Q5_K, or s8 for Q8_0)
//  with dw, mw the block's scale and offset (Q4_0: mw = -8 * dw; Q5_0: mw = -16 * dw; Q4_1,
//  Q5_1: m; Q4_K and Q5_K: dw = d * sc,
//  mw = -(dmin * m), both exact in f32, from the super-block's d, dmin and the sub-block's
//  6-bit scale and min) and, for the
//  activations, dx = amax / 127 and bx = float(sum of the block's q_x) * dx; y = acc.
//  One float accumulator per (row, token) lets a vector hold 16 rows of one token: the
//  integer work is per block and the float work per block is three operations.
//  Q6_K (scales per 16 values, u6 quants q with value d * sc * (q - 32)) has one integer and
//  one float step per block b of 32, its halves h = 0, 1 with the int8 scales sc_h:
//      i_h  = exact sum over half h of q_w * q_x  -  32 * (sum of half h's q_x)
//      isum = sc_0 * i_0 + sc_1 * i_1             (exact in int32: |isum| < 2^24)
//      acc  = fma(float(isum), d * dx, acc)        (d: the super-block's f16 scale)
//
// Other quantized types (Q5_0, Q5_1, k-quants, unpacked by UnpackRowScalar):
//  * Activations X[t, :] are quantized per block of 32: d = amax / 127,
//    q = round-half-even(x * (1 / d)), and per lane l (elements 4l..4l+3 of the
//    block) sx[l] = float(sum of those 4 q) * d.
//  * Each weight row is read per block of 32 as small integers q_w (u8) and two
//    8-lane vectors dw and mw, constant over lanes 0-3 (elements
//    0-15) and over lanes 4-7 (elements 16-31), so that w[k] = dw * q_w[k] + mw.
//  * Lane l of a block holds the exact integer sum isum_l of q_w * q_x over
//    elements 4l..4l+3; per block, in order:
//      acc[l] = fma(float(isum_l) * d_x, dw[l], acc[l])
//      acc[l] = fma(mw[l], sx[l], acc[l])      (types with offsets only)
//  * y = Hsum8(acc): lanes (l, l+4) added, then (l, l+2), then (0, 1).
// Integer sums are exact, so the SIMD paths (which form them with maddubs/madd or
// VNNI) agree bit for bit with the scalar path. Float weights (F32/F16/BF16) use
// the same 8 lanes: acc[k mod 8] = fma(w[k], x[k], acc[k mod 8]), zero-padded.
//
// Thread-safety: pure functions over caller buffers (per-thread unpack buffers
// are thread_local).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/matmul.h"

namespace pier::kernels::internal {

// MatMul / MatMulToSlices forced onto one path (which must be supported), for tests and
// benchmarks.
Status MatMulWithIsa(Isa isa, const WeightMatrix& w, const float* x, int64_t n_tokens, float* y,
                     int64_t ldy, std::span<std::byte> scratch, ThreadPool& pool);
Status MatMulToSlicesWithIsa(Isa isa, const WeightMatrix& w, const float* x, int64_t n_tokens,
                             std::span<const OutputSlice> slices, std::span<std::byte> scratch,
                             ThreadPool& pool);

constexpr int64_t kBlock = 32;   // elements per activation / unpacked weight block
constexpr int kLanes = 8;        // canonical accumulator lanes
constexpr int64_t kRowTile = 4;  // rows unpacked together and reused across tokens

// Byte layout of one quantized activation row inside MatMul's scratch:
//   qs [n_cols] int8 | d [n_blocks] f32 | sx [n_blocks][8] f32 | qsum [n_blocks] int32 |
//   bx [n_blocks] f32      (qsum: the sum of a block's q; bx = float(qsum) * d)
struct QuantLayout {
  int64_t n_cols = 0;
  int64_t n_blocks = 0;
  size_t d_offset = 0;
  size_t s_offset = 0;
  size_t qsum_offset = 0;
  size_t bx_offset = 0;
  size_t row_stride = 0;  // multiple of 64
};
QuantLayout MakeQuantLayout(int64_t n_cols);

// Quantizes x [n_cols] into one row laid out as `layout` (row 64-byte aligned).
void QuantizeRowScalar(const float* x, const QuantLayout& layout, std::byte* row);

// Weight rows unpacked by UnpackRowScalar:
//   q [n_cols] u8 (s8 for Q8_0) | dw [n_blocks][8] f32 | mw [n_blocks][8] f32
struct UnpackLayout {
  size_t dw_offset = 0;
  size_t mw_offset = 0;
  size_t row_stride = 0;  // multiple of 64
};
UnpackLayout MakeUnpackLayout(const QuantLayout& layout);

bool IsQuantized(DType type);
// Whether q_w is signed (Q8_0) and whether the type has offset terms (all others).
bool HasSignedWeights(DType type);
bool HasOffsets(DType type);

void UnpackRowScalar(DType type, const uint8_t* src, const QuantLayout& layout,
                     const UnpackLayout& unpack, std::byte* dst);

// One MatMul over quantized weights, split into row ranges by the driver.
struct QuantJob {
  const WeightMatrix* w = nullptr;
  QuantLayout layout;
  UnpackLayout unpack;
  const std::byte* xq = nullptr;  // [n_tokens] rows of layout.row_stride bytes
  int64_t n_tokens = 0;
  float* y = nullptr;
  int64_t ldy = 0;
};

// One MatMul over float weights (x used as f32 directly).
struct FloatJob {
  const WeightMatrix* w = nullptr;
  const float* x = nullptr;  // [n_tokens, n_cols]
  int64_t n_tokens = 0;
  float* y = nullptr;
  int64_t ldy = 0;
};

// The packed layout (WeightLayout::kPacked16) of a matrix of a packed type: rows in
// groups of kPackRows (the last group padded with zero rows), each group laid out as
//   qs [n_blocks][chunks][kPackRows][4] u8 | d [n_blocks][kPackRows] f16 |
//   m [n_blocks][kPackRows] f16 (Q4_1 only) | zero padding to a multiple of 64
// where chunk j of a block holds, for every row, bytes 4j..4j+3 of that row's quants as
// GGUF stores them: for 4-bit types (4 chunks) the low nibbles are elements 4j..4j+3 and
// the high nibbles elements 16+4j..16+4j+3; for Q8_0 (8 chunks) elements 4j..4j+3.
// Sizes equal GGUF's whenever n_rows is a multiple of 16 and the group is 64-aligned.
// Q5_0 / Q5_1 keep their low 4 bits in that nibble layout and add, after the quants,
// qh [n_blocks][16] u32 (each row's GGUF fifth bits: bit e of element e), then d (and m):
// GGUF's size again.
// Q4_K (super-blocks of 256) keeps the same quants layout per block of 32 (its nibbles
// rearranged to Q4_1's order), then d [n_super][16] f16 | dmin [n_super][16] f16 |
// sc [n_blocks][16] u8 | m [n_blocks][16] u8 (the 6-bit scales unpacked): 148 bytes per row
// and super-block against GGUF's 144.
// Q5_K is Q4_K's layout with Q5_0's fifth bits, qh [n_blocks][16] u32, between the quants and
// d: 180 bytes per row and super-block against GGUF's 176.
// Q6_K keeps its low 4 bits in the same nibble layout, then qh [n_blocks][2][16] u32 (word h of
// a row holds the 2 high bits of elements 16h + 4j + k at bits 8k + 2j, j, k < 4, so that a
// shift and a mask put those of chunk j at bits 4-5 of each byte), sc [n_blocks][2][16] s8
// (the scales of the block's two halves) and d [n_super][16] f16: GGUF's 210 bytes per row
// and super-block.
constexpr int64_t kPackRows = 16;

struct PackedGeometry {
  DType type = DType::kQ4_1;
  int64_t n_blocks = 0;
  size_t qs_block_bytes = 0;  // 256 (4-bit) or 512 (Q8_0)
  size_t d_offset = 0;        // within a group
  size_t m_offset = 0;        // within a group (Q4_1: m; Q4_K: dmin)
  size_t qh_offset = 0;       // within a group (Q5_0, Q5_1, Q6_K)
  size_t sc_offset = 0;       // within a group (Q4_K, Q6_K)
  size_t mn_offset = 0;       // within a group (Q4_K)
  size_t group_stride = 0;    // multiple of 64
};
bool HasPackedLayout(DType type);
PackedGeometry MakePackedGeometry(DType type, int64_t n_cols);
// 6-bit (scale, min) pair j of the 12 packed scale bytes of a Q4_K / Q5_K super-block.
void ScaleMinK4(int j, const uint8_t* scales, int* scale, int* min);

// Packs rows [0, n_valid) (n_valid <= kPackRows) starting at `src` (GGUF layout, rows
// row_bytes apart) into one group at `dst` (geometry.group_stride bytes).
void PackGroup(const PackedGeometry& geometry, const uint8_t* src, size_t row_bytes,
               int64_t n_valid, uint8_t* dst);

// Quantized activations block-major, for the packed SIMD kernels: entry (b, t) at
// xb + (b * n_tokens + t) * sizeof(XEntry), so that one pointer and constant offsets reach
// every token of a tile.
struct XEntry {
  int8_t q[32];
  float d;
  float bx;
  int32_t qsum;
  int32_t qsum_lo;  // the sum of q[0..15] (Q6_K's scales change at element 16)
};
static_assert(sizeof(XEntry) == 48);
// Copies token t's quantized row (laid out as `layout`) into its block-major entries: the
// reference the SIMD paths' quantize_entries is tested against.
void ScatterBlocks(const std::byte* row, const QuantLayout& layout, int64_t t, int64_t n_tokens,
                   std::byte* xb);

// One MatMul over packed weights, split into groups of kPackRows rows by the driver.
struct PackedJob {
  PackedGeometry geometry;
  QuantLayout layout;
  const uint8_t* groups = nullptr;       // group g at groups + g * geometry.group_stride, or
  const WeightMatrix* source = nullptr;  // when groups is null: GGUF rows packed on the fly
  int64_t n_rows = 0;
  const std::byte* xq = nullptr;  // [n_tokens] rows of layout.row_stride bytes
  const std::byte* xb = nullptr;  // the same, block-major (XEntry)
  int64_t n_tokens = 0;
  std::span<const OutputSlice> slices;  // rows in order; all but the last whole groups

  // Where group g's results go: token 0's first row, the stride between tokens and the
  // group's rows that exist.
  struct GroupOutput {
    float* y;
    int64_t ldy;
    int n_valid;
  };
  GroupOutput OutputOf(int64_t g) const {
    int64_t first = g * kPackRows;
    for (const OutputSlice& s : slices) {
      if (first < s.n_rows) {
        return {s.y + first, s.ldy, static_cast<int>(std::min(kPackRows, s.n_rows - first))};
      }
      first -= s.n_rows;
    }
    return {nullptr, 0, 0};
  }
};

// Each path: quantize one activation row; compute rows [row_begin, row_end) of an
// unpacked or float matrix, or groups [group_begin, group_end) of a packed one.
struct IsaKernels {
  void (*quantize_row)(const float* x, const QuantLayout& layout, std::byte* row);
  // Quantizes x into block-major entries (block b's at first + b * entry_stride), for the
  // packed SIMD kernels; null on the scalar path, whose packed kernel reads rows.
  void (*quantize_entries)(const float* x, const QuantLayout& layout, std::byte* first,
                           int64_t entry_stride);
  void (*quant_rows)(const QuantJob& job, int64_t row_begin, int64_t row_end);
  void (*float_rows)(const FloatJob& job, int64_t row_begin, int64_t row_end);
  void (*packed_groups)(const PackedJob& job, int64_t group_begin, int64_t group_end);
};

// The group `g` of a packed job: in place, or packed into `buffer` (group_stride bytes,
// 64-aligned) from the GGUF source.
const uint8_t* PackedGroup(const PackedJob& job, int64_t g, uint8_t* buffer);

const IsaKernels& ScalarKernels();
const IsaKernels& Avx2Kernels();
const IsaKernels& Avx512Kernels();

// Canonical horizontal sum of 8 lanes.
inline float Hsum8(const float* v) {
  const float a0 = v[0] + v[4], a1 = v[1] + v[5], a2 = v[2] + v[6], a3 = v[3] + v[7];
  const float b0 = a0 + a2, b1 = a1 + a3;
  return b0 + b1;
}

}  // namespace pier::kernels::internal

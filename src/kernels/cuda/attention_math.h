// The arithmetic of the GPU's paged attention, written once for host and device
// (`__host__ __device__` under nvcc, plain inline C++ under g++).
//
// K/V live in the CPU's paged layout (kernels/cpu/paged_kv.h): blocks of 16 positions, each
// block [n_layer][2 (K, V)][16][n_kv_head][head_dim] f16, blocks `bytes_per_block` apart
// from one base address, found through each sequence's block table.
//
// The canonical computation for one query (position P, one head, q of head_dim floats):
//   splits of kSplit = 256 absolute positions: split s covers [256 s, min(256 s + 256, P + 1))
//   within split s:
//     score[p] = Dot(q, k_p) * (1 / sqrt(head_dim)), Dot = four fma chains over d mod 4,
//                then (c0 + c2) + (c1 + c3)
//     m_s      = max of the split's scores (a max: the same in any order)
//     e[p]     = Exp(score[p] - m_s)            (row_math.h's Exp, the CPU's softmax Exp)
//     l_s      = lanes j = 0..31 sum e[p] over p = 256 s + j + 32 i, i increasing; then the
//                lanes are added in the xor tree (16, 8, 4, 2, 1)
//     o_s[d]   = fma chain over the split's positions in order: o = fma(e[p], v_p[d], o)
//   merge, splits in index order:
//     M = max of m_s;  w_s = Exp(m_s - M);  L = fma(l_s, w_s, L);  O[d] = fma(o_s[d], w_s, O[d])
//     out[d] = O[d] * (1 / L)
// The splits sit at fixed absolute positions and their number follows from P alone, so a
// query's result depends only on q, P and the K/V it reads: not on the batch, on how the
// prompt was chunked, or on whether its K/V came from a prefill or from decode steps. It is
// not the CPU's order (that one has no splits), so GPU and CPU agree within float rounding.
#pragma once

#include <stdint.h>

#include "kernels/cuda/row_math.h"
#include "tensor/float16_bits.h"

namespace pier::cuda::attn {

inline constexpr int kBlockPositions = 16;  // positions per K/V block
inline constexpr int kSplit = 256;          // positions per split
inline constexpr int kMaxHeadDim = 256;

// f32 -> IEEE half, round to nearest even; NaN becomes a quiet NaN (tensor/float16_bits.h,
// the CPU's Fp32ToFp16 too).
PIER_HD uint16_t FloatToHalf(float f) { return Fp32BitsToFp16(rowmath::FloatToBits(f)); }

// Where one layer's K/V rows are: the paged layout's geometry.
struct KvGeometry {
  int64_t bytes_per_block;  // all layers, K and V
  int64_t key_offset;       // bytes from a block's start to this layer's K plane
  int64_t value_offset;     // ... to its V plane
  int64_t n_kv_head;
  int64_t head_dim;
};

// Byte offset, from a block's start, of head `kv_head` of position `slot` (0..15) in a plane.
PIER_HD int64_t RowOffset(const KvGeometry& g, int64_t slot, int64_t kv_head) {
  return ((slot * g.n_kv_head) + kv_head) * g.head_dim * 2;
}

// Address of the K (or V) values of head `kv_head` at position `p` of a sequence.
PIER_HD const uint16_t* KvRow(const uint8_t* base, const KvGeometry& g, const int32_t* table,
                              int64_t p, int64_t kv_head, bool value) {
  const int64_t block = table[p / kBlockPositions];
  return reinterpret_cast<const uint16_t*>(base + block * g.bytes_per_block +
                                           (value ? g.value_offset : g.key_offset) +
                                           RowOffset(g, p % kBlockPositions, kv_head));
}

PIER_HD float InverseSqrtHeadDim(int64_t head_dim) {
  return 1.0f / rowmath::Sqrt(static_cast<float>(head_dim));
}

// The canonical score of one position: Dot(q, k) * scale.
PIER_HD float Score(const float* q, const uint16_t* k, int64_t head_dim, float scale) {
  float c0 = 0.0f, c1 = 0.0f, c2 = 0.0f, c3 = 0.0f;  // chain j takes d = j mod 4
  int64_t d = 0;
  for (; d + 4 <= head_dim; d += 4) {
    c0 = quant::FmaRn(q[d], quant::HalfToFloat(k[d]), c0);
    c1 = quant::FmaRn(q[d + 1], quant::HalfToFloat(k[d + 1]), c1);
    c2 = quant::FmaRn(q[d + 2], quant::HalfToFloat(k[d + 2]), c2);
    c3 = quant::FmaRn(q[d + 3], quant::HalfToFloat(k[d + 3]), c3);
  }
  if (d < head_dim) c0 = quant::FmaRn(q[d], quant::HalfToFloat(k[d]), c0);
  if (d + 1 < head_dim) c1 = quant::FmaRn(q[d + 1], quant::HalfToFloat(k[d + 1]), c1);
  if (d + 2 < head_dim) c2 = quant::FmaRn(q[d + 2], quant::HalfToFloat(k[d + 2]), c2);
  return ((c0 + c2) + (c1 + c3)) * scale;
}

// The xor-tree sum of 32 lane values (what five __shfl_xor steps leave in every lane).
PIER_HD float XorTreeSum32(const float* lanes) {
  float v[32];
  for (int l = 0; l < 32; ++l) v[l] = lanes[l];
  for (int offset = 16; offset > 0; offset >>= 1) {
    float next[32];
    for (int l = 0; l < 32; ++l) next[l] = v[l] + v[l ^ offset];
    for (int l = 0; l < 32; ++l) v[l] = next[l];
  }
  return v[0];
}

PIER_HD int64_t SplitsFor(int64_t position) { return position / kSplit + 1; }

// Floats of scratch the split pass writes: per split of every query and per head,
// o [head_dim], m and l.
PIER_HD int64_t ScratchFloats(int64_t total_splits, int64_t n_head, int64_t head_dim) {
  return total_splits * n_head * (head_dim + 2);
}

// The splits of a launch, numbered query by query: query q's splits are the global splits
// first[q] .. first[q] + SplitsFor(positions[q]) - 1, and split_query[g] names the query of
// global split g (a negative position has none). Returns the total. Made on the host, uploaded
// with the positions: each query gets exactly its own splits' scratch, so a long context in
// one query does not multiply every other query's.
inline int64_t IndexSplits(const int32_t* positions, int64_t n_queries, int32_t* first,
                           int32_t* split_query /* [total]: call with nullptr to count */) {
  int64_t total = 0;
  for (int64_t q = 0; q < n_queries; ++q) {
    first[q] = static_cast<int32_t>(total);
    const int64_t n = positions[q] < 0 ? 0 : SplitsFor(positions[q]);
    for (int64_t s = 0; s < n && split_query != nullptr; ++s) {
      split_query[total + s] = static_cast<int32_t>(q);
    }
    total += n;
  }
  return total;
}

inline constexpr int64_t kGoldenMaxSplits = 64;  // AttendGolden: contexts up to 16,384

// ---- The whole computation on the host: the golden the GPU must match ---------------------

// One query: q [head_dim] at `position` of a sequence with block table `table`, for head
// `head` (its K/V head kv_head); out [head_dim].
inline void AttendGolden(const float* q, int64_t position, const int32_t* table,
                         const uint8_t* kv_base, const KvGeometry& g, int64_t kv_head, float* out) {
  const int64_t hd = g.head_dim;
  const float scale = InverseSqrtHeadDim(hd);
  const int64_t n_splits = SplitsFor(position);
  float m[kGoldenMaxSplits], l[kGoldenMaxSplits];
  static thread_local float o[kGoldenMaxSplits][kMaxHeadDim];
  if (n_splits > kGoldenMaxSplits || hd > kMaxHeadDim) {
    for (int64_t d = 0; d < hd; ++d) out[d] = NAN;  // beyond what the golden is sized for
    return;
  }
  for (int64_t s = 0; s < n_splits; ++s) {
    const int64_t first = s * kSplit;
    const int64_t end = first + kSplit < position + 1 ? first + kSplit : position + 1;
    float score[kSplit];
    float max = -INFINITY;
    for (int64_t p = first; p < end; ++p) {
      score[p - first] = Score(q, KvRow(kv_base, g, table, p, kv_head, false), hd, scale);
      max = score[p - first] > max ? score[p - first] : max;
    }
    float e[kSplit];
    float lanes[32] = {};
    for (int64_t i = 0; i < end - first; ++i) {
      e[i] = rowmath::Exp(score[i] - max);
      lanes[i % 32] = lanes[i % 32] + e[i];
    }
    m[s] = max;
    l[s] = XorTreeSum32(lanes);
    for (int64_t d = 0; d < hd; ++d) o[s][d] = 0.0f;
    for (int64_t p = first; p < end; ++p) {
      const uint16_t* v = KvRow(kv_base, g, table, p, kv_head, true);
      for (int64_t d = 0; d < hd; ++d) {
        o[s][d] = quant::FmaRn(e[p - first], quant::HalfToFloat(v[d]), o[s][d]);
      }
    }
  }
  float big = -INFINITY;
  for (int64_t s = 0; s < n_splits; ++s) big = m[s] > big ? m[s] : big;
  float sum = 0.0f;
  for (int64_t d = 0; d < hd; ++d) out[d] = 0.0f;
  for (int64_t s = 0; s < n_splits; ++s) {
    const float w = rowmath::Exp(m[s] - big);
    sum = quant::FmaRn(l[s], w, sum);
    for (int64_t d = 0; d < hd; ++d) out[d] = quant::FmaRn(o[s][d], w, out[d]);
  }
  const float inv = 1.0f / sum;
  for (int64_t d = 0; d < hd; ++d) out[d] = out[d] * inv;
}

}  // namespace pier::cuda::attn

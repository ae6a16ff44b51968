// The AVX2 attention kernel: the canonical arithmetic of attention_lanes.h with 16 lanes held
// in two 8-float registers (lanes 0-7 and 8-15), so LaneTreeSum's first halving is one add
// of the two. Per tile of 16 positions and K/V head, the rows are widened to f32 once
// (f16: VCVTPH2PS, exact; q8_0: float(q) * d) into a small buffer, and every query of the task
// and every query head of the group reads them there: a prefill task of n_queries tokens reads
// each K/V row from memory once instead of once per token (the flash-attention pattern; the
// softmax stays the canonical two-pass one, so the bits are those of one token alone).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/cpu/attention_kernel.h"
#include "kernels/cpu/attention_lanes.h"

namespace pier::kernels::internal {

#if defined(__x86_64__) && defined(__GNUC__)

namespace {

#define PIER_AVX2 __attribute__((target("avx2,f16c")))

using attention::kLanes;

struct Shape {
  int64_t n_kv, group, n_head, head_dim, chunks, stride, head_bytes, n_queries, first_ctx;
  float scale;
};

// One K/V head's part of the up to 16 rows of a tile, as f32: `row[i]` points into the store
// (f32) or into `buffer` (converted).
struct TileRows {
  const float* row[kLanes];
};

template <KvDtype kDt>
PIER_AVX2 void WidenRows(const std::byte* const* rows, int n_valid, int64_t offset,
                         int64_t head_dim, float* buffer, TileRows& out) {
  for (int i = 0; i < n_valid; ++i) {
    const std::byte* src = rows[i] + offset;
    float* dst = buffer + i * head_dim;
    if constexpr (kDt == KvDtype::kF32) {
      out.row[i] = reinterpret_cast<const float*>(src);
      continue;
    } else if constexpr (kDt == KvDtype::kF16) {
      for (int64_t d = 0; d < head_dim; d += 8) {
        _mm256_storeu_ps(
            dst + d,
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * d))));
      }
    } else {
      // Blocks of 32: f16 d | int8 q[32]; float(q) * d, as ConvertQ8_0ToF32.
      for (int64_t b = 0; b < head_dim / 32; ++b) {
        const std::byte* block = src + 34 * b;
        uint16_t dh;
        std::memcpy(&dh, block, 2);
        const __m256 d = _mm256_cvtph_ps(_mm_set1_epi16(static_cast<int16_t>(dh)));
        for (int j = 0; j < 4; ++j) {
          const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
              _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + 2 + 8 * j))));
          _mm256_storeu_ps(dst + 32 * b + 8 * j, _mm256_mul_ps(q, d));
        }
      }
    }
    out.row[i] = dst;
  }
}

// Lane p of the result: the last three halvings of LaneTreeSum on the 8 lanes of part[p]
// (lane l + lane l+4, then l + l+2, then 0 + 1), for 8 positions at once.
PIER_AVX2 inline __m256 ReduceEight(const __m256* part) {
  // [c of part[k] | c of part[k+4]], c_l = v[l] + v[l+4].
  __m256 t[4];
  for (int k = 0; k < 4; ++k) {
    t[k] = _mm256_add_ps(_mm256_permute2f128_ps(part[k], part[k + 4], 0x20),
                         _mm256_permute2f128_ps(part[k], part[k + 4], 0x31));
  }
  // d_l = c_l + c_{l+2}: [d0 d1 of k, d0 d1 of k+1] per 128-bit half.
  const __m256 u0 =
      _mm256_add_ps(_mm256_shuffle_ps(t[0], t[1], 0x44), _mm256_shuffle_ps(t[0], t[1], 0xee));
  const __m256 u1 =
      _mm256_add_ps(_mm256_shuffle_ps(t[2], t[3], 0x44), _mm256_shuffle_ps(t[2], t[3], 0xee));
  // d0 + d1, in position order.
  return _mm256_add_ps(_mm256_shuffle_ps(u0, u1, 0x88), _mm256_shuffle_ps(u0, u1, 0xdd));
}

// The 2 * nc vectors of a head's row [16 * nc] into registers. Unrolled: as a loop, GCC copies
// the row through the stack in 16-byte halves, whose reload as 32-byte vectors stalls on store
// forwarding.
template <int kMaxC>
PIER_AVX2 __attribute__((always_inline)) inline void LoadHeadRow(const float* row, int nc,
                                                                 __m256* v) {
#pragma GCC unroll 32
  for (int c = 0; c < 2 * nc; ++c) v[c] = _mm256_loadu_ps(row + 8 * c);
}

// Scaled scores of one query head at the tile's positions (-inf from n_valid on):
// scores[i] for i < 16. q: [head_dim]. kC: head_dim / 16 (0: not known at compile time).
template <int kC>
PIER_AVX2 void ScoreRows(const Shape& s, const TileRows& k, int n_valid, const float* q,
                         float* scores) {
  constexpr int kMaxC = kC > 0 ? kC : 16;
  const int nc = kC > 0 ? kC : static_cast<int>(s.chunks);
  __m256 qv[2 * kMaxC];
  LoadHeadRow<kMaxC>(q, nc, qv);
  __m256 part[kLanes];
  for (int i = 0; i < kLanes; ++i) {
    if (i >= n_valid) {
      part[i] = _mm256_setzero_ps();
      continue;
    }
    const float* row = k.row[i];
    __m256 lo = _mm256_mul_ps(qv[0], _mm256_loadu_ps(row));
    __m256 hi = _mm256_mul_ps(qv[1], _mm256_loadu_ps(row + 8));
#pragma GCC unroll 16
    for (int c = 1; c < nc; ++c) {
      lo = _mm256_add_ps(lo, _mm256_mul_ps(qv[2 * c], _mm256_loadu_ps(row + 16 * c)));
      hi = _mm256_add_ps(hi, _mm256_mul_ps(qv[2 * c + 1], _mm256_loadu_ps(row + 16 * c + 8)));
    }
    part[i] = _mm256_add_ps(lo, hi);  // LaneTreeSum's first halving
  }
  const __m256 scale = _mm256_set1_ps(s.scale);
  const __m256 minus_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  for (int half = 0; half < 2; ++half) {
    const __m256 score = _mm256_mul_ps(ReduceEight(part + 8 * half), scale);
    const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 valid =
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n_valid - 8 * half), index));
    _mm256_storeu_ps(scores + 8 * half, _mm256_blendv_ps(minus_inf, score, valid));
  }
}

// attention::Exp on 8 lanes, the same operations in the same order.
PIER_AVX2 inline __m256 Exp8(__m256 x) {
  using namespace attention;  // NOLINT: the constants of Exp
  const __m256 xc = _mm256_max_ps(_mm256_set1_ps(kExpMin), x);
  const __m256 t =
      _mm256_add_ps(_mm256_mul_ps(xc, _mm256_set1_ps(kExpLog2e)), _mm256_set1_ps(kExpRound));
  const __m256 n = _mm256_sub_ps(t, _mm256_set1_ps(kExpRound));
  const __m256 r = _mm256_sub_ps(_mm256_sub_ps(xc, _mm256_mul_ps(n, _mm256_set1_ps(kExpLn2Hi))),
                                 _mm256_mul_ps(n, _mm256_set1_ps(kExpLn2Lo)));
  __m256 y = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(kExpP0), r), _mm256_set1_ps(kExpP1));
  y = _mm256_add_ps(_mm256_mul_ps(y, r), _mm256_set1_ps(kExpP2));
  y = _mm256_add_ps(_mm256_mul_ps(y, r), _mm256_set1_ps(kExpP3));
  y = _mm256_add_ps(_mm256_mul_ps(y, r), _mm256_set1_ps(kExpP4));
  y = _mm256_add_ps(_mm256_mul_ps(y, r), _mm256_set1_ps(kExpP5));
  y = _mm256_mul_ps(y, _mm256_mul_ps(r, r));
  y = _mm256_add_ps(y, r);
  y = _mm256_add_ps(y, _mm256_set1_ps(1.0f));
  const __m256i n_bits =
      _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(static_cast<int>(kExpRoundBits)));
  const __m256 two_n =
      _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n_bits, _mm256_set1_epi32(127)), 23));
  const __m256 e = _mm256_mul_ps(y, two_n);
  const __m256 below = _mm256_cmp_ps(x, _mm256_set1_ps(kExpMin), _CMP_LT_OQ);
  return _mm256_blendv_ps(e, _mm256_setzero_ps(), below);
}

// Replaces one head's scores (n_ctx of them, -inf up to the next multiple of 16) by
// exp(score - max) and returns 1 / (their sum).
PIER_AVX2 float SoftmaxWeights(float* scores, int64_t n_ctx) {
  const int64_t n_tiles = (n_ctx + kLanes - 1) / kLanes;
  __m256 lo = _mm256_loadu_ps(scores), hi = _mm256_loadu_ps(scores + 8);
  for (int64_t t = 1; t < n_tiles; ++t) {
    lo = _mm256_max_ps(_mm256_loadu_ps(scores + 16 * t), lo);
    hi = _mm256_max_ps(_mm256_loadu_ps(scores + 16 * t + 8), hi);
  }
  alignas(32) float lanes[kLanes];
  _mm256_store_ps(lanes, lo);
  _mm256_store_ps(lanes + 8, hi);
  const __m256 m = _mm256_set1_ps(attention::LaneTreeMax(lanes));
  lo = _mm256_setzero_ps();
  hi = _mm256_setzero_ps();
  for (int64_t t = 0; t < n_tiles; ++t) {
    const __m256 e0 = Exp8(_mm256_sub_ps(_mm256_loadu_ps(scores + 16 * t), m));
    const __m256 e1 = Exp8(_mm256_sub_ps(_mm256_loadu_ps(scores + 16 * t + 8), m));
    _mm256_storeu_ps(scores + 16 * t, e0);
    _mm256_storeu_ps(scores + 16 * t + 8, e1);
    lo = _mm256_add_ps(lo, e0);
    hi = _mm256_add_ps(hi, e1);
  }
  _mm256_store_ps(lanes, lo);
  _mm256_store_ps(lanes + 8, hi);
  return 1.0f / attention::LaneTreeSum(lanes);
}

// Adds the weighted V rows of the tile's first n_valid positions, in position order, to one
// query head's running sums [head_dim]; weights[i] is position i's.
template <int kC>
PIER_AVX2 void WeightRows(const Shape& s, const TileRows& v, int n_valid, const float* weights,
                          float* sums) {
  constexpr int kMaxC = kC > 0 ? kC : 16;
  const int nc = kC > 0 ? kC : static_cast<int>(s.chunks);
  __m256 acc[2 * kMaxC];
  LoadHeadRow<kMaxC>(sums, nc, acc);
  for (int i = 0; i < n_valid; ++i) {
    const __m256 e = _mm256_set1_ps(weights[i]);
    const float* row = v.row[i];
#pragma GCC unroll 32
    for (int c = 0; c < 2 * nc; ++c) {
      acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(e, _mm256_loadu_ps(row + 8 * c)));
    }
  }
#pragma GCC unroll 32
  for (int c = 0; c < 2 * nc; ++c) _mm256_storeu_ps(sums + 8 * c, acc[c]);
}

// The rows of the next tile of up to 16 positions; returns how many exist.
inline int NextTile(AttentionRowWalker& walker, int64_t p0, int64_t n_ctx, const std::byte** rows) {
  const int n_valid = static_cast<int>(std::min<int64_t>(kLanes, n_ctx - p0));
  walker.NextRows(n_valid, rows);
  return n_valid;
}

// Positions of tile p0 that query `i` attends (0 when the tile is past its context).
inline int ValidFor(const Shape& s, int64_t i, int64_t p0) {
  return static_cast<int>(std::clamp<int64_t>(s.first_ctx + i - p0, 0, kLanes));
}

// One pass over the task's K rows (scores) or V rows (P.V), tile by tile: per tile and K/V
// head the rows are widened once, then every query that attends the tile uses them for each
// query head of the group.
template <KvDtype kDt, int kC, bool kValues>
PIER_AVX2 void Pass(const AttentionTask& task, const Shape& s, float* buffer) {
  const int64_t head_floats = s.n_head * s.head_dim;
  const std::byte* rows[kLanes];
  TileRows tile;
  AttentionRowWalker walker(task, kValues);
  for (int64_t p0 = FirstAttendedTile(task); p0 < task.n_ctx; p0 += kLanes) {
    const int n_valid = NextTile(walker, p0, task.n_ctx, rows);
    for (int64_t kvh = 0; kvh < s.n_kv; ++kvh) {
      WidenRows<kDt>(rows, n_valid, kvh * s.head_bytes, s.head_dim, buffer, tile);
      for (int64_t i = 0; i < s.n_queries; ++i) {
        const int valid = ValidFor(s, i, p0);
        if (valid == 0) continue;
        for (int64_t h = kvh * s.group; h < (kvh + 1) * s.group; ++h) {
          float* scores = task.scores + (i * s.n_head + h) * s.stride + p0;
          if constexpr (kValues) {
            WeightRows<kC>(s, tile, valid, scores, task.out + i * head_floats + h * s.head_dim);
          } else {
            ScoreRows<kC>(s, tile, valid, task.q + i * head_floats + h * s.head_dim, scores);
          }
        }
      }
    }
  }
}

template <KvDtype kDt, int kC>
PIER_AVX2 void Attend(const AttentionTask& task, const Shape& s) {
  const int64_t head_floats = s.n_head * s.head_dim;
  alignas(32) float buffer[kLanes * kAttentionMaxHeadDim];
  Pass<kDt, kC, /*kValues=*/false>(task, s, buffer);
  SoftcapScores(task);
  MaskBeforeWindow(task);
  for (int64_t i = 0; i < s.n_queries; ++i) {
    for (int64_t h = 0; h < s.n_head; ++h) {
      task.inv_sum[i * s.n_head + h] =
          SoftmaxWeights(task.scores + (i * s.n_head + h) * s.stride, s.first_ctx + i);
    }
  }
  std::fill(task.out, task.out + s.n_queries * head_floats, 0.0f);
  Pass<kDt, kC, /*kValues=*/true>(task, s, buffer);
  for (int64_t i = 0; i < s.n_queries; ++i) {
    for (int64_t h = 0; h < s.n_head; ++h) {
      const __m256 inv = _mm256_set1_ps(task.inv_sum[i * s.n_head + h]);
      float* o = task.out + i * head_floats + h * s.head_dim;
      for (int64_t d = 0; d < s.head_dim; d += 8) {
        _mm256_storeu_ps(o + d, _mm256_mul_ps(_mm256_loadu_ps(o + d), inv));
      }
    }
  }
}

template <KvDtype kDt>
PIER_AVX2 void AttendDtype(const AttentionTask& task, const Shape& s) {
  switch (s.chunks) {
    case 2:
      return Attend<kDt, 2>(task, s);
    case 4:
      return Attend<kDt, 4>(task, s);
    case 8:
      return Attend<kDt, 8>(task, s);
    default:
      return Attend<kDt, 0>(task, s);
  }
}

}  // namespace

void AttendAvx2(const AttentionTask& task) {
  const KvLayout& layout = task.kv->layout();
  const int64_t hd = layout.head_dim;
  // Partial 16-lane chunks, or q8_0 rows whose head is not whole blocks of 32: the portable
  // loops (the same bits).
  if (hd % kLanes != 0 || (layout.dtype == KvDtype::kQ8_0 && hd % 32 != 0)) {
    AttendPortableAvx2(task);  // one query at a time
    return;
  }
  const Shape s{.n_kv = layout.n_kv_head,
                .group = task.n_head / layout.n_kv_head,
                .n_head = task.n_head,
                .head_dim = hd,
                .chunks = hd / kLanes,
                .stride = task.score_stride,
                .head_bytes = static_cast<int64_t>(layout.head_bytes()),
                .n_queries = task.n_queries,
                .first_ctx = task.n_ctx - task.n_queries + 1,
                .scale = 1.0f / std::sqrt(static_cast<float>(hd))};
  switch (layout.dtype) {
    case KvDtype::kF16:
      return AttendDtype<KvDtype::kF16>(task, s);
    case KvDtype::kQ8_0:
      return AttendDtype<KvDtype::kQ8_0>(task, s);
    case KvDtype::kF32:
      break;
  }
  AttendDtype<KvDtype::kF32>(task, s);
}

PIER_AVX2 void ExpAvx2(const float* x, int64_t n, float* y) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, Exp8(_mm256_loadu_ps(x + i)));
  if (i < n) {
    alignas(32) float tail[8] = {};
    std::copy(x + i, x + n, tail);
    _mm256_store_ps(tail, Exp8(_mm256_load_ps(tail)));
    std::copy(tail, tail + (n - i), y + i);
  }
}

#else

void AttendAvx2(const AttentionTask& task) { AttendPortable(task); }
void ExpAvx2(const float* x, int64_t n, float* y) { ExpPortable(x, n, y); }

#endif

}  // namespace pier::kernels::internal

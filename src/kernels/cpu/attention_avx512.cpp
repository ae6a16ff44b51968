// The AVX-512 attention kernel: the canonical arithmetic of attention_lanes.h, 16 lanes per
// instruction. Scores: per position a 16-lane partial dot over head_dim, and 16 positions'
// partials reduced together by shuffles that realize LaneTreeSum for each position. P.V: the
// [heads][head_dim] accumulators stay in registers across every position. f16 K/V rows are
// widened in registers (VCVTPH2PS, exact).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "common/check.h"
#include "kernels/cpu/attention_kernel.h"
#include "kernels/cpu/attention_lanes.h"

namespace pier::kernels::internal {

#if defined(__x86_64__) && defined(__GNUC__)

namespace {

#define PIER_AVX512 __attribute__((target("avx512f")))

using attention::kLanes;

// Values 16c .. 16c + 15 of a K/V row, as f32.
template <KvDtype kDt>
PIER_AVX512 inline __m512 LoadChunk(const std::byte* row, int c) {
  if constexpr (kDt == KvDtype::kF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row) + c));
  } else if constexpr (kDt == KvDtype::kQ8_0) {
    // Half c % 2 of block c / 2 (f16 d | int8 q[32]): float(q) * d, exact as the scalar.
    const std::byte* block = row + 34 * (c / 2);
    uint16_t dh;
    std::memcpy(&dh, block, 2);
    const __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2 + 16 * (c % 2)))));
    return _mm512_mul_ps(q, _mm512_cvtph_ps(_mm256_set1_epi16(static_cast<int16_t>(dh))));
  } else {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + kLanes * c);
  }
}

// attention::Exp on 16 lanes, the same operations in the same order.
PIER_AVX512 inline __m512 Exp16(__m512 x) {
  using namespace attention;  // NOLINT: the constants of Exp
  const __m512 xc = _mm512_max_ps(_mm512_set1_ps(kExpMin), x);
  const __m512 t =
      _mm512_add_ps(_mm512_mul_ps(xc, _mm512_set1_ps(kExpLog2e)), _mm512_set1_ps(kExpRound));
  const __m512 n = _mm512_sub_ps(t, _mm512_set1_ps(kExpRound));
  const __m512 r = _mm512_sub_ps(_mm512_sub_ps(xc, _mm512_mul_ps(n, _mm512_set1_ps(kExpLn2Hi))),
                                 _mm512_mul_ps(n, _mm512_set1_ps(kExpLn2Lo)));
  __m512 y = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(kExpP0), r), _mm512_set1_ps(kExpP1));
  y = _mm512_add_ps(_mm512_mul_ps(y, r), _mm512_set1_ps(kExpP2));
  y = _mm512_add_ps(_mm512_mul_ps(y, r), _mm512_set1_ps(kExpP3));
  y = _mm512_add_ps(_mm512_mul_ps(y, r), _mm512_set1_ps(kExpP4));
  y = _mm512_add_ps(_mm512_mul_ps(y, r), _mm512_set1_ps(kExpP5));
  y = _mm512_mul_ps(y, _mm512_mul_ps(r, r));
  y = _mm512_add_ps(y, r);
  y = _mm512_add_ps(y, _mm512_set1_ps(1.0f));
  const __m512i n_bits =
      _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(static_cast<int>(kExpRoundBits)));
  const __m512 two_n =
      _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n_bits, _mm512_set1_epi32(127)), 23));
  const __m512 e = _mm512_mul_ps(y, two_n);
  const __mmask16 below = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpMin), _CMP_LT_OQ);
  return _mm512_mask_mov_ps(e, below, _mm512_setzero_ps());
}

// VSHUFF32X4 (128-bit chunks 0, 1 from a by imm's low bits, chunks 2, 3 from b). The maskz
// form with every lane set is the same instruction; the unmasked intrinsic starts from an
// "undefined" vector that GCC 12 reports as uninitialized.
template <int kImm>
PIER_AVX512 inline __m512 Shuffle128(__m512 a, __m512 b) {
  return _mm512_maskz_shuffle_f32x4(static_cast<__mmask16>(0xffff), a, b, kImm);
}

// Combines two vectors of 16 lanes each by the first halving of LaneTreeSum: lanes 0-7 hold
// a[l] + a[l + 8], lanes 8-15 b[l] + b[l + 8].
PIER_AVX512 inline __m512 Halve1(__m512 a, __m512 b) {
  return _mm512_add_ps(Shuffle128<0x44>(a, b), Shuffle128<0xee>(a, b));
}
// Second halving on two vectors of two 8-lane halves each: 128-bit chunk k holds l + l+4 of
// half k of a (k = 0, 1) or of b (k = 2, 3).
PIER_AVX512 inline __m512 Halve2(__m512 a, __m512 b) {
  return _mm512_add_ps(Shuffle128<0x88>(a, b), Shuffle128<0xdd>(a, b));
}
// Third and fourth halvings, inside each 128-bit chunk.
PIER_AVX512 inline __m512 Halve3(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x44), _mm512_shuffle_ps(a, b, 0xee));
}
PIER_AVX512 inline __m512 Halve4(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x88), _mm512_shuffle_ps(a, b, 0xdd));
}

// The positions (within a tile of 16) whose partial dots enter Halve1 together, chosen so
// that the reduced vector holds position p in lane p.
constexpr int kPairs[8][2] = {{0, 4}, {8, 12}, {1, 5}, {9, 13}, {2, 6}, {10, 14}, {3, 7}, {11, 15}};

// Query heads processed together (their partial dots share each K row load). kC 0 (a head size
// without its own instantiation, e.g. Gemma's 256): the Wide kernels below, which walk a row
// chunk by chunk, so 4 heads share each widened chunk without holding their queries in
// registers.
constexpr int MaxHeadBlock(int chunks) { return chunks == 8 ? 2 : chunks == 4 ? 3 : 4; }

struct Shape {
  int64_t n_ctx, n_kv, group, head_dim, chunks, stride, head_bytes;
  float scale;
};

// The last halvings of LaneTreeSum for kHb heads' 8 once-halved vectors (s1[h][i] holds
// positions kPairs[i]), scaled, -inf past the n_valid positions that exist, stored at
// scores[h * stride + position].
template <int kHb>
PIER_AVX512 inline void StoreScores(const Shape& s, const __m512 (&s1)[kHb][8], int n_valid,
                                    float* scores) {
  const __mmask16 valid = static_cast<__mmask16>((1u << n_valid) - 1u);
  const __m512 minus_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int h = 0; h < kHb; ++h) {
    const __m512 s2a = Halve2(s1[h][0], s1[h][1]), s2b = Halve2(s1[h][2], s1[h][3]);
    const __m512 s2c = Halve2(s1[h][4], s1[h][5]), s2d = Halve2(s1[h][6], s1[h][7]);
    const __m512 dot = Halve4(Halve3(s2a, s2b), Halve3(s2c, s2d));
    const __m512 score =
        _mm512_mask_mov_ps(minus_inf, valid, _mm512_mul_ps(dot, _mm512_set1_ps(s.scale)));
    _mm512_storeu_ps(scores + h * s.stride, score);
  }
}

// Scores of kHb query heads at the up to 16 positions of one tile (scaled; -inf past the
// n_valid positions that exist). rows[i]: position i's K row of this K/V head (nullptr past
// n_valid); q: [kHb][head_dim]; scores: [kHb][stride], position i at scores[h * stride + i].
// kC: head_dim / 16 (0: not known at compile time).
template <KvDtype kDt, int kC, int kHb>
PIER_AVX512 void ScoreTile(const Shape& s, const std::byte* const* rows, int n_valid,
                           const float* q_rows, float* scores) {
  constexpr int kMaxC = kC > 0 ? kC : 16;
  const int nc = kC > 0 ? kC : static_cast<int>(s.chunks);
  __m512 q[kHb][kMaxC];
  for (int h = 0; h < kHb; ++h) {
    for (int c = 0; c < nc; ++c) q[h][c] = _mm512_loadu_ps(q_rows + h * s.head_dim + 16 * c);
  }
  // Partial dots (lane l: sum over c of q[16c + l] * k[16c + l]), two positions at a time.
  __m512 s1[kHb][8];
  for (int i = 0; i < 8; ++i) {
    __m512 part[2][kHb];
    for (int j = 0; j < 2; ++j) {
      const std::byte* row = rows[kPairs[i][j]];
      if (row == nullptr) {
        for (int h = 0; h < kHb; ++h) part[j][h] = _mm512_setzero_ps();
        continue;
      }
      __m512 k[kMaxC];
      for (int c = 0; c < nc; ++c) k[c] = LoadChunk<kDt>(row, c);
      for (int h = 0; h < kHb; ++h) {
        __m512 acc = _mm512_mul_ps(q[h][0], k[0]);
        for (int c = 1; c < nc; ++c) acc = _mm512_add_ps(acc, _mm512_mul_ps(q[h][c], k[c]));
        part[j][h] = acc;
      }
    }
    for (int h = 0; h < kHb; ++h) s1[h][i] = Halve1(part[0][h], part[1][h]);
  }
  StoreScores<kHb>(s, s1, n_valid, scores);
}

// ScoreTile for any head size: per position, chunk by chunk, the chunk widened once and
// multiplied by each head's query chunk (read from memory): the same operations in the same
// order per (head, position) as ScoreTile, so the same bits.
template <KvDtype kDt, int kHb>
PIER_AVX512 void ScoreTileWide(const Shape& s, const std::byte* const* rows, int n_valid,
                               const float* q_rows, float* scores) {
  const int nc = static_cast<int>(s.chunks);
  __m512 s1[kHb][8];
  for (int i = 0; i < 8; ++i) {
    __m512 part[2][kHb];
    for (int j = 0; j < 2; ++j) {
      const std::byte* row = rows[kPairs[i][j]];
      if (row == nullptr) {
        for (int h = 0; h < kHb; ++h) part[j][h] = _mm512_setzero_ps();
        continue;
      }
      const __m512 k0 = LoadChunk<kDt>(row, 0);
      for (int h = 0; h < kHb; ++h) {
        part[j][h] = _mm512_mul_ps(_mm512_loadu_ps(q_rows + h * s.head_dim), k0);
      }
      for (int c = 1; c < nc; ++c) {
        const __m512 k = LoadChunk<kDt>(row, c);
        for (int h = 0; h < kHb; ++h) {
          part[j][h] = _mm512_add_ps(
              part[j][h], _mm512_mul_ps(_mm512_loadu_ps(q_rows + h * s.head_dim + 16 * c), k));
        }
      }
    }
    for (int h = 0; h < kHb; ++h) s1[h][i] = Halve1(part[0][h], part[1][h]);
  }
  StoreScores<kHb>(s, s1, n_valid, scores);
}

// WeightTile for any head size: chunk by chunk, each position's V chunk widened once and added,
// weighted, to every head's sum of that chunk, positions in order: per (head, value) the same
// additions in the same order as WeightTile.
template <KvDtype kDt, int kHb>
PIER_AVX512 void WeightTileWide(const Shape& s, const std::byte* const* rows, int n_valid,
                                const float* weights, float* sums) {
  for (int64_t c = 0; c < s.chunks; ++c) {
    __m512 acc[kHb];
    for (int h = 0; h < kHb; ++h) acc[h] = _mm512_loadu_ps(sums + h * s.head_dim + 16 * c);
    for (int i = 0; i < n_valid; ++i) {
      const __m512 v = LoadChunk<kDt>(rows[i], static_cast<int>(c));
      for (int h = 0; h < kHb; ++h) {
        acc[h] = _mm512_add_ps(acc[h], _mm512_mul_ps(_mm512_set1_ps(weights[h * s.stride + i]), v));
      }
    }
    for (int h = 0; h < kHb; ++h) _mm512_storeu_ps(sums + h * s.head_dim + 16 * c, acc[h]);
  }
}

// Replaces one head's scores by exp(score - max) and returns 1 / (their sum).
PIER_AVX512 float SoftmaxWeights(float* scores, int64_t n_ctx) {
  const int64_t n_tiles = (n_ctx + kLanes - 1) / kLanes;
  __m512 mx = _mm512_loadu_ps(scores);
  for (int64_t t = 1; t < n_tiles; ++t) mx = _mm512_max_ps(_mm512_loadu_ps(scores + 16 * t), mx);
  alignas(64) float lanes[kLanes];
  _mm512_store_ps(lanes, mx);
  const __m512 m = _mm512_set1_ps(attention::LaneTreeMax(lanes));
  __m512 sum = _mm512_setzero_ps();
  for (int64_t t = 0; t < n_tiles; ++t) {
    const __m512 e = Exp16(_mm512_sub_ps(_mm512_loadu_ps(scores + 16 * t), m));
    _mm512_storeu_ps(scores + 16 * t, e);
    sum = _mm512_add_ps(sum, e);
  }
  _mm512_store_ps(lanes, sum);
  return 1.0f / attention::LaneTreeSum(lanes);
}

// Adds the weighted V rows of one tile's n_valid positions, in position order, to the
// running sums of kHb query heads. rows[i]: position i's V row of this K/V head; weights:
// [kHb][stride], position i at weights[h * stride + i]; sums: [kHb][head_dim].
template <KvDtype kDt, int kC, int kHb>
PIER_AVX512 void WeightTile(const Shape& s, const std::byte* const* rows, int n_valid,
                            const float* weights, float* sums) {
  constexpr int kMaxC = kC > 0 ? kC : 16;
  const int nc = kC > 0 ? kC : static_cast<int>(s.chunks);
  __m512 acc[kHb][kMaxC];
  for (int h = 0; h < kHb; ++h) {
    for (int c = 0; c < nc; ++c) acc[h][c] = _mm512_loadu_ps(sums + h * s.head_dim + 16 * c);
  }
  for (int i = 0; i < n_valid; ++i) {
    __m512 v[kMaxC];
    for (int c = 0; c < nc; ++c) v[c] = LoadChunk<kDt>(rows[i], c);
    for (int h = 0; h < kHb; ++h) {
      const __m512 e = _mm512_set1_ps(weights[h * s.stride + i]);
      for (int c = 0; c < nc; ++c) acc[h][c] = _mm512_add_ps(acc[h][c], _mm512_mul_ps(e, v[c]));
    }
  }
  for (int h = 0; h < kHb; ++h) {
    for (int c = 0; c < nc; ++c) _mm512_storeu_ps(sums + h * s.head_dim + 16 * c, acc[h][c]);
  }
}

// Calls fn(integral_constant<kHb>, h0) over a group's query heads in blocks of up to
// MaxHeadBlock(kC).
template <int kC, typename Fn>
PIER_AVX512 void ForHeadBlocks(int64_t group, const Fn& fn) {
  constexpr int kMax = MaxHeadBlock(kC);
  for (int64_t h0 = 0; h0 < group; h0 += kMax) {
    const int64_t hb = std::min<int64_t>(kMax, group - h0);
    if constexpr (kMax >= 4) {
      if (hb == 4) {
        fn(std::integral_constant<int, 4>{}, h0);
        continue;
      }
    }
    if constexpr (kMax >= 3) {
      if (hb == 3) {
        fn(std::integral_constant<int, 3>{}, h0);
        continue;
      }
    }
    if constexpr (kMax >= 2) {
      if (hb == 2) {
        fn(std::integral_constant<int, 2>{}, h0);
        continue;
      }
    }
    fn(std::integral_constant<int, 1>{}, h0);
  }
}

// The rows of the next tile of up to 16 positions (nullptr past n_ctx); returns how many exist.
inline int NextTile(AttentionRowWalker& walker, int64_t p0, int64_t n_ctx, const std::byte** rows) {
  const int n_valid = static_cast<int>(std::min<int64_t>(kLanes, n_ctx - p0));
  walker.NextRows(n_valid, rows);
  for (int i = n_valid; i < kLanes; ++i) rows[i] = nullptr;
  return n_valid;
}

// The K/V head's part of each row of a tile.
inline void HeadRows(const std::byte* const* rows, int64_t offset, const std::byte** head_rows) {
  for (int i = 0; i < kLanes; ++i) head_rows[i] = rows[i] == nullptr ? nullptr : rows[i] + offset;
}

// Positions of tile p0 that query `i` of the task attends (0 when the tile is past its
// context).
inline int ValidFor(const AttentionTask& task, int64_t i, int64_t p0) {
  const int64_t n_ctx_i = task.n_ctx - (task.n_queries - 1 - i);
  return static_cast<int>(std::clamp<int64_t>(n_ctx_i - p0, 0, kLanes));
}

// Every query of the task reads a tile's rows right after the others (from the cache): the
// K/V come from memory once per task, not once per query.
template <KvDtype kDt, int kC>
PIER_AVX512 void Attend(const AttentionTask& task, const Shape& s) {
  const int64_t n_head = s.n_kv * s.group;
  const int64_t head_floats = n_head * s.head_dim;
  const std::byte* rows[kLanes];
  const std::byte* head_rows[kLanes];
  const std::byte* query_rows[kLanes];
  AttentionRowWalker keys(task, /*values=*/false);
  for (int64_t p0 = FirstAttendedTile(task); p0 < s.n_ctx; p0 += kLanes) {
    NextTile(keys, p0, s.n_ctx, rows);
    for (int64_t kvh = 0; kvh < s.n_kv; ++kvh) {
      HeadRows(rows, kvh * s.head_bytes, head_rows);
      for (int64_t qi = 0; qi < task.n_queries; ++qi) {
        const int valid = ValidFor(task, qi, p0);
        if (valid == 0) continue;
        for (int i = 0; i < kLanes; ++i) query_rows[i] = i < valid ? head_rows[i] : nullptr;
        ForHeadBlocks<kC>(s.group, [&](auto hb, int64_t h0) {
          const int64_t h = kvh * s.group + h0;
          const float* q = task.q + qi * head_floats + h * s.head_dim;
          float* scores = task.scores + (qi * n_head + h) * s.stride + p0;
          if constexpr (kC == 0) {
            ScoreTileWide<kDt, decltype(hb)::value>(s, query_rows, valid, q, scores);
          } else {
            ScoreTile<kDt, kC, decltype(hb)::value>(s, query_rows, valid, q, scores);
          }
        });
      }
    }
  }
  SoftcapScores(task);
  MaskBeforeWindow(task);
  for (int64_t qi = 0; qi < task.n_queries; ++qi) {
    const int64_t n_ctx_i = task.n_ctx - (task.n_queries - 1 - qi);
    for (int64_t h = 0; h < n_head; ++h) {
      task.inv_sum[qi * n_head + h] =
          SoftmaxWeights(task.scores + (qi * n_head + h) * s.stride, n_ctx_i);
    }
  }
  std::fill(task.out, task.out + task.n_queries * head_floats, 0.0f);
  AttentionRowWalker values(task, /*values=*/true);
  for (int64_t p0 = FirstAttendedTile(task); p0 < s.n_ctx; p0 += kLanes) {
    NextTile(values, p0, s.n_ctx, rows);
    for (int64_t kvh = 0; kvh < s.n_kv; ++kvh) {
      HeadRows(rows, kvh * s.head_bytes, head_rows);
      for (int64_t qi = 0; qi < task.n_queries; ++qi) {
        const int valid = ValidFor(task, qi, p0);
        if (valid == 0) continue;
        ForHeadBlocks<kC>(s.group, [&](auto hb, int64_t h0) {
          const int64_t h = kvh * s.group + h0;
          const float* weights = task.scores + (qi * n_head + h) * s.stride + p0;
          float* sums = task.out + qi * head_floats + h * s.head_dim;
          if constexpr (kC == 0) {
            WeightTileWide<kDt, decltype(hb)::value>(s, head_rows, valid, weights, sums);
          } else {
            WeightTile<kDt, kC, decltype(hb)::value>(s, head_rows, valid, weights, sums);
          }
        });
      }
    }
  }
  for (int64_t qh = 0; qh < task.n_queries * n_head; ++qh) {
    const __m512 inv = _mm512_set1_ps(task.inv_sum[qh]);
    for (int64_t c = 0; c < s.chunks; ++c) {
      float* o = task.out + qh * s.head_dim + 16 * c;
      _mm512_storeu_ps(o, _mm512_mul_ps(_mm512_loadu_ps(o), inv));
    }
  }
}

template <KvDtype kDt>
PIER_AVX512 void AttendDtype(const AttentionTask& task, const Shape& s) {
  switch (s.chunks) {
    case 1:
      return Attend<kDt, 1>(task, s);
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

void AttendAvx512(const AttentionTask& task) {
  const KvLayout& layout = task.kv->layout();
  const int64_t hd = layout.head_dim;
  if (hd % kLanes != 0) {  // partial chunks: the portable loops (the same bits)
    AttendPortableAvx2(task);
    return;
  }
  const Shape s{.n_ctx = task.n_ctx,
                .n_kv = layout.n_kv_head,
                .group = task.n_head / layout.n_kv_head,
                .head_dim = hd,
                .chunks = hd / kLanes,
                .stride = task.score_stride,
                .head_bytes = static_cast<int64_t>(layout.head_bytes()),
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

PIER_AVX512 void ExpAvx512(const float* x, int64_t n, float* y) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) _mm512_storeu_ps(y + i, Exp16(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, Exp16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

#else

void AttendAvx512(const AttentionTask&) {
  PIER_CHECK(false, "AVX-512 attention called on a build without it");
}

void ExpAvx512(const float*, int64_t, float*) {
  PIER_CHECK(false, "AVX-512 attention called on a build without it");
}

#endif

}  // namespace pier::kernels::internal

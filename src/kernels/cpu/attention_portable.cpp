// The portable attention kernel: the canonical arithmetic of attention_lanes.h as C++ loops
// over explicit 16-lane arrays, which the compiler vectorizes (the AVX2 clone: two 8-float
// registers per 16 lanes) without changing any operation or its order. Same structure as
// the AVX-512 kernel: K/V read tile by tile (16 positions), partial dots reduced per
// position by LaneTreeSum, the P.V sums of a tile accumulated in a 16-lane array per chunk
// of head_dim.

// Not keeping floating-point exception flags (nothing reads them) lets GCC vectorize Exp's
// selects; it changes no value. Set for the whole file, so that Exp (attention_lanes.h) is
// compiled with the same options and inlined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/cpu/attention_kernel.h"
#include "kernels/cpu/attention_lanes.h"
#include "kernels/cpu/kv_convert.h"

namespace pier::kernels::internal {

// The kernel's body is compiled twice, for the baseline and for AVX2 (AttendPortableAvx2),
// and PagedAttention picks one by ActiveIsa() (cpu_isa.h). Both evaluate the same operations
// in the same order (no fused multiply-adds: -ffp-contract=off), so the results are the same
// bits.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PIER_TARGET_AVX2 __attribute__((target("avx2")))
#else
#define PIER_TARGET_AVX2
#endif

namespace {

using attention::kLanes;

// Pointers to one K/V head's f32 rows of a tile: f32 rows with head_dim a multiple of 16 are
// read in place; others are converted (exactly) or copied into `tile`, whose padding past
// head_dim stays zero.
struct TileRows {
  const float* row[kLanes];
};

inline void HeadTileRows(const std::byte* const* rows, int n_valid, int64_t offset, KvDtype dtype,
                         bool copy, int64_t head_dim, float (*tile)[kAttentionMaxHeadDim],
                         TileRows& out) {
  for (int i = 0; i < n_valid; ++i) {
    const std::byte* src = rows[i] + offset;
    if (!copy) {
      out.row[i] = reinterpret_cast<const float*>(src);
    } else if (dtype == KvDtype::kF16) {
      ConvertF16ToF32(reinterpret_cast<const uint16_t*>(src), head_dim, tile[i]);
      out.row[i] = tile[i];
    } else if (dtype == KvDtype::kQ8_0) {
      ConvertQ8_0ToF32(src, head_dim, tile[i]);
      out.row[i] = tile[i];
    } else {
      std::memcpy(tile[i], src, static_cast<size_t>(head_dim) * sizeof(float));
      out.row[i] = tile[i];
    }
  }
}

// The rows of the next tile of up to 16 positions; returns how many exist.
inline int NextTile(AttentionRowWalker& walker, int64_t p0, int64_t n_ctx, const std::byte** rows) {
  const int n_valid = static_cast<int>(std::min<int64_t>(kLanes, n_ctx - p0));
  walker.NextRows(n_valid, rows);
  return n_valid;
}

__attribute__((always_inline)) inline void Attend(const AttentionTask& task) {
  const KvLayout& layout = task.kv->layout();
  const int64_t hd = layout.head_dim;
  const int64_t n_kv = layout.n_kv_head;
  const int64_t group = task.n_head / n_kv;
  const int64_t chunks = (hd + kLanes - 1) / kLanes;
  const int64_t padded = chunks * kLanes;
  const KvDtype dtype = layout.dtype;
  const bool copy = dtype != KvDtype::kF32 || hd % kLanes != 0;
  const int64_t head_bytes = static_cast<int64_t>(layout.head_bytes());
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t n_ctx = task.n_ctx;
  const int64_t stride = task.score_stride;
  float* q_pad = task.work;                        // [n_head][padded], zero past head_dim
  float* sums = task.work + task.n_head * padded;  // [n_head][padded]
  std::fill(task.work, task.work + 2 * task.n_head * padded, 0.0f);
  for (int64_t h = 0; h < task.n_head; ++h) std::copy_n(task.q + h * hd, hd, q_pad + h * padded);
  alignas(64) float tile[kLanes][kAttentionMaxHeadDim];  // [position][value], f32 copies
  if (copy) std::memset(tile, 0, sizeof(tile));
  const std::byte* rows[kLanes];
  TileRows head_rows;

  // Scores: lane l of position p's partial dot sums q[d] * k[d] over d = l, l + 16, ...
  // (products of zeros past head_dim), then LaneTreeSum, then the scale; -inf past n_ctx.
  AttentionRowWalker keys(task, /*values=*/false);
  for (int64_t p0 = FirstAttendedTile(task); p0 < n_ctx; p0 += kLanes) {
    const int n_valid = NextTile(keys, p0, n_ctx, rows);
    for (int64_t kvh = 0; kvh < n_kv; ++kvh) {
      HeadTileRows(rows, n_valid, kvh * head_bytes, dtype, copy, hd, tile, head_rows);
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        const float* q = q_pad + h * padded;
        float* s = task.scores + h * stride + p0;
        for (int i = 0; i < n_valid; ++i) {
          const float* k = head_rows.row[i];
          float a[kLanes];
          for (int l = 0; l < kLanes; ++l) a[l] = q[l] * k[l];
          for (int64_t c = 1; c < chunks; ++c) {
            for (int l = 0; l < kLanes; ++l) a[l] = a[l] + q[c * kLanes + l] * k[c * kLanes + l];
          }
          s[i] = attention::LaneTreeSum(a) * scale;
        }
        for (int i = n_valid; i < kLanes; ++i) s[i] = -std::numeric_limits<float>::infinity();
      }
    }
  }
  SoftcapScores(task);
  MaskBeforeWindow(task);
  // Softmax weights per head: lane-wise max over the tiles, LaneTreeMax, then
  // e = Exp(score - max) with lane-wise sums over the tiles and LaneTreeSum.
  const int64_t n_padded = AttentionScoreStride(n_ctx);
  for (int64_t h = 0; h < task.n_head; ++h) {
    float* s = task.scores + h * stride;
    float lanes[kLanes];
    for (int l = 0; l < kLanes; ++l) lanes[l] = s[l];
    for (int64_t t = kLanes; t < n_padded; t += kLanes) {
      for (int l = 0; l < kLanes; ++l) lanes[l] = attention::MaxOf(s[t + l], lanes[l]);
    }
    const float mx = attention::LaneTreeMax(lanes);
    for (int l = 0; l < kLanes; ++l) lanes[l] = 0.0f;
    for (int64_t t = 0; t < n_padded; t += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        const float e = attention::Exp(s[t + l] - mx);
        s[t + l] = e;
        lanes[l] = lanes[l] + e;
      }
    }
    task.inv_sum[h] = 1.0f / attention::LaneTreeSum(lanes);
  }
  // out = (sum over positions in order of e * v) * inv_sum, per value; each tile's terms
  // are added to the running sums 16 values at a time.
  AttentionRowWalker values(task, /*values=*/true);
  for (int64_t p0 = FirstAttendedTile(task); p0 < n_ctx; p0 += kLanes) {
    const int n_valid = NextTile(values, p0, n_ctx, rows);
    for (int64_t kvh = 0; kvh < n_kv; ++kvh) {
      HeadTileRows(rows, n_valid, kvh * head_bytes, dtype, copy, hd, tile, head_rows);
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        const float* w = task.scores + h * stride + p0;
        for (int64_t c = 0; c < chunks; ++c) {
          float* sum = sums + h * padded + c * kLanes;
          float a[kLanes];
          for (int l = 0; l < kLanes; ++l) a[l] = sum[l];
          for (int i = 0; i < n_valid; ++i) {
            const float* v = head_rows.row[i] + c * kLanes;
            for (int l = 0; l < kLanes; ++l) a[l] = a[l] + w[i] * v[l];
          }
          for (int l = 0; l < kLanes; ++l) sum[l] = a[l];
        }
      }
    }
  }
  for (int64_t h = 0; h < task.n_head; ++h) {
    for (int64_t d = 0; d < hd; ++d) task.out[h * hd + d] = sums[h * padded + d] * task.inv_sum[h];
  }
}

__attribute__((always_inline)) inline void Exp(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = attention::Exp(x[i]);
}

}  // namespace

namespace {
void AttendOne(const AttentionTask& task) { Attend(task); }
PIER_TARGET_AVX2 void AttendOneAvx2(const AttentionTask& task) { Attend(task); }
}  // namespace

void AttendPortable(const AttentionTask& task) { AttendEachQuery(task, AttendOne); }
void AttendPortableAvx2(const AttentionTask& task) { AttendEachQuery(task, AttendOneAvx2); }

void ExpPortable(const float* x, int64_t n, float* y) { Exp(x, n, y); }
PIER_TARGET_AVX2 void ExpPortableAvx2(const float* x, int64_t n, float* y) { Exp(x, n, y); }

}  // namespace pier::kernels::internal

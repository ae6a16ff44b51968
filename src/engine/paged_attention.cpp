#include "engine/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/check.h"
#include "common/thread_pool.h"
#include "engine/kv_convert.h"

namespace pier::engine {

namespace {

// Floats of one slot's scratch: scores [group][max_context], then for f16 layouts one
// block's K (or V) rows of one head converted to f32 [block_size][head_dim].
int64_t SlotScratchFloats(const KvLayout& layout, int64_t group, int64_t max_context) {
  const int64_t rows = layout.dtype == KvDtype::kF32 ? 0 : layout.block_size * layout.head_dim;
  return group * max_context + rows;
}

}  // namespace

int64_t PagedAttentionScratchFloats(const KvLayout& layout, int64_t n_head, int64_t max_context,
                                    int64_t n_slots) {
  return n_slots * SlotScratchFloats(layout, n_head / layout.n_kv_head, max_context);
}

namespace {

// The attention loops are compiled for AVX-512 and AVX2 as well as the baseline, chosen at
// load time. Every clone evaluates the same operations in the same order (eight explicit
// lanes, no fused multiply-adds: -ffp-contract=off), so the results are the same bits.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PIER_ATTENTION_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PIER_ATTENTION_CLONES
#endif

constexpr int kLanes = 8;
constexpr int64_t kMaxGroup = 64;  // query heads per K/V head (checked by PagedAttention)

// sum_i a[i] * b[i], lane l accumulating i = l mod 8, lanes summed in a fixed tree.
inline float Dot(const float* a, const float* b, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
  }
  for (int l = 0; i + l < n; ++l) acc[l] += a[i + l] * b[i + l];
  const float a0 = acc[0] + acc[4], a1 = acc[1] + acc[5], a2 = acc[2] + acc[6],
              a3 = acc[3] + acc[7];
  return (a0 + a2) + (a1 + a3);
}

// y[i] += a * x[i].
inline void Axpy(float a, const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

struct Item {
  const AttentionSpan* span;
  int64_t token;    // index in the span
  int64_t kv_head;  // K/V head; query heads kv_head * group .. + group - 1
};

// The f32 rows of head `head_offset / head_dim` at positions [0, n) of a K or V plane, and
// the floats between consecutive rows. An f32 plane is read in place; an f16 plane is
// converted (exactly) into `rows` [n][head_dim] first, so the arithmetic that follows
// is the same for both.
struct HeadRows {
  const float* data;
  int64_t stride;
};
inline HeadRows ReadHeadRows(const KvLayout& layout, const std::byte* plane, int64_t head_offset,
                             int64_t n, float* rows) {
  const int64_t row_stride = layout.row_elements();
  if (layout.dtype == KvDtype::kF32) {
    return {reinterpret_cast<const float*>(plane) + head_offset, row_stride};
  }
  ConvertF16RowsToF32(reinterpret_cast<const uint16_t*>(plane) + head_offset, row_stride, n,
                      layout.head_dim, rows);
  return {rows, layout.head_dim};
}

// One query token, one group of query heads sharing a K/V head.
//   scores: [group][max_context] scratch; rows: [block_size][head_dim] scratch (f16 only).
PIER_ATTENTION_CLONES void AttendOne(const KvStore& kv, int64_t layer, const Item& item,
                                     int64_t n_head, const float* q, float* out,
                                     int64_t max_context, float* scores, float* rows) {
  const KvLayout& layout = kv.layout();
  const int64_t hd = layout.head_dim;
  const int64_t n_kv = layout.n_kv_head;
  const int64_t group = n_head / n_kv;
  const int64_t row = item.span->first_row + item.token;
  const int64_t n_ctx = item.span->first_position + item.token + 1;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float* q_row = q + (row * n_head + item.kv_head * group) * hd;  // [group][hd]
  float* out_row = out + (row * n_head + item.kv_head * group) * hd;    // [group][hd]
  const int32_t* table = item.span->block_table;

  const int64_t bs = layout.block_size;
  const int64_t head_offset = item.kv_head * hd;

  // Scores, position by position; block addresses resolved once per block.
  for (int64_t first = 0; first < n_ctx; first += bs) {
    const int64_t n = std::min(bs, n_ctx - first);
    const HeadRows k_rows =
        ReadHeadRows(layout, kv.KeyPlane(layer, table[first / bs]), head_offset, n, rows);
    for (int64_t i = 0; i < n; ++i) {
      const float* k = k_rows.data + i * k_rows.stride;
      for (int64_t j = 0; j < group; ++j) {
        scores[j * max_context + first + i] = Dot(q_row + j * hd, k, hd) * scale;
      }
    }
  }
  // Softmax per head: max, then exp and a sequential sum in position order.
  float inv_sum[kMaxGroup];
  for (int64_t j = 0; j < group; ++j) {
    float* s = scores + j * max_context;
    float mx = s[0];
    for (int64_t p = 1; p < n_ctx; ++p) mx = std::max(mx, s[p]);
    float sum = 0.0f;
    for (int64_t p = 0; p < n_ctx; ++p) {
      s[p] = std::exp(s[p] - mx);
      sum += s[p];
    }
    inv_sum[j] = 1.0f / sum;
    std::fill(out_row + j * hd, out_row + (j + 1) * hd, 0.0f);
  }
  // Weighted V rows in position order; each V row read once for the group.
  for (int64_t first = 0; first < n_ctx; first += bs) {
    const int64_t n = std::min(bs, n_ctx - first);
    const HeadRows v_rows =
        ReadHeadRows(layout, kv.ValuePlane(layer, table[first / bs]), head_offset, n, rows);
    for (int64_t i = 0; i < n; ++i) {
      const float* v = v_rows.data + i * v_rows.stride;
      for (int64_t j = 0; j < group; ++j) {
        Axpy(scores[j * max_context + first + i], v, hd, out_row + j * hd);
      }
    }
  }
  for (int64_t j = 0; j < group; ++j) {
    for (int64_t d = 0; d < hd; ++d) out_row[j * hd + d] *= inv_sum[j];
  }
}

}  // namespace

void PagedAttention(const KvStore& kv, int64_t layer, std::span<const AttentionSpan> spans,
                    int64_t n_head, const float* q, float* out, int64_t max_context, float* scratch,
                    int64_t n_slots, ThreadPool& pool) {
  const int64_t n_kv = kv.layout().n_kv_head;
  const int64_t group = n_head / n_kv;
  PIER_CHECK(group >= 1 && group <= kMaxGroup && group * n_kv == n_head,
             "attention: query heads must be a multiple (up to 64) of K/V heads");
  std::vector<Item> items;
  for (const AttentionSpan& span : spans) {
    for (int64_t t = 0; t < span.n_tokens; ++t) {
      for (int64_t h = 0; h < n_kv; ++h) items.push_back({&span, t, h});
    }
  }
  // Longest contexts first, dealt round-robin to the slots, so slots get similar work.
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return a.span->first_position + a.token > b.span->first_position + b.token;
  });
  const int64_t n_items = static_cast<int64_t>(items.size());
  n_slots = std::max<int64_t>(1, std::min(n_slots, n_items));
  const int64_t slot_floats = SlotScratchFloats(kv.layout(), group, max_context);
  pool.ParallelFor(n_slots, 1, [&](int64_t begin, int64_t end) {
    for (int64_t slot = begin; slot < end; ++slot) {
      float* scores = scratch + slot * slot_floats;  // [group][max_context]
      float* rows = scores + group * max_context;    // [block_size][head_dim] (f16 only)
      for (int64_t i = slot; i < n_items; i += n_slots) {
        AttendOne(kv, layer, items[i], n_head, q, out, max_context, scores, rows);
      }
    }
  });
}

}  // namespace pier::engine

#include "engine/paged_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "common/check.h"
#include "common/thread_pool.h"
#include "engine/attention_kernel.h"
#include "engine/attention_lanes.h"
#include "engine/kv_convert.h"

namespace pier::engine {

namespace internal {

// The portable loops are compiled for AVX2 as well as the baseline, chosen at load time.
// Both clones evaluate the same operations in the same order (the lanes are explicit, no
// fused multiply-adds: -ffp-contract=off), so the results are the same bits.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PIER_ATTENTION_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define PIER_ATTENTION_CLONES
#endif

namespace {

using attention::kLanes;

// The f32 values of a K/V row: an f32 row in place, an f16 row converted (exactly) into buf.
inline const float* RowAsF32(const std::byte* row, bool f16, int64_t head_dim, float* buf) {
  if (!f16) return reinterpret_cast<const float*>(row);
  ConvertF16ToF32(reinterpret_cast<const uint16_t*>(row), head_dim, buf);
  return buf;
}

}  // namespace

PIER_ATTENTION_CLONES void AttendPortable(const AttentionTask& task) {
  const KvLayout& layout = task.kv->layout();
  const int64_t hd = layout.head_dim;
  const int64_t n_kv = layout.n_kv_head;
  const int64_t group = task.n_head / n_kv;
  const int64_t chunks = (hd + kLanes - 1) / kLanes;
  const bool f16 = layout.dtype == KvDtype::kF16;
  const int64_t head_bytes = hd * static_cast<int64_t>(layout.element_bytes());
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t n_ctx = task.n_ctx;
  const int64_t n_padded = AttentionScoreStride(n_ctx);
  float buf[kAttentionMaxHeadDim];

  // Scores: lane l of position p's partial dot sums q[d] * k[d] over d = l, l + 16, ...
  // (zero past head_dim), then LaneTreeSum, then the scale; -inf past n_ctx.
  AttentionRowWalker keys(task, /*values=*/false);
  for (int64_t p = 0; p < n_ctx; ++p) {
    const std::byte* row = keys.Next();
    for (int64_t kvh = 0; kvh < n_kv; ++kvh) {
      const float* k = RowAsF32(row + kvh * head_bytes, f16, hd, buf);
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        const float* q = task.q + h * hd;
        float a[kLanes];
        for (int64_t c = 0; c < chunks; ++c) {
          for (int l = 0; l < kLanes; ++l) {
            const int64_t d = c * kLanes + l;
            const float prod = d < hd ? q[d] * k[d] : 0.0f;
            a[l] = c == 0 ? prod : a[l] + prod;
          }
        }
        task.scores[h * task.score_stride + p] = attention::LaneTreeSum(a) * scale;
      }
    }
  }
  // Softmax weights per head: lane-wise max over 16-position tiles, LaneTreeMax, then
  // e = Exp(score - max) with lane-wise sums over the tiles and LaneTreeSum.
  for (int64_t h = 0; h < task.n_head; ++h) {
    float* s = task.scores + h * task.score_stride;
    for (int64_t p = n_ctx; p < n_padded; ++p) s[p] = -std::numeric_limits<float>::infinity();
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
  // out = (sum over positions in order of e * v) * inv_sum, per value.
  std::fill(task.out, task.out + task.n_head * hd, 0.0f);
  AttentionRowWalker values(task, /*values=*/true);
  for (int64_t p = 0; p < n_ctx; ++p) {
    const std::byte* row = values.Next();
    for (int64_t kvh = 0; kvh < n_kv; ++kvh) {
      const float* v = RowAsF32(row + kvh * head_bytes, f16, hd, buf);
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        const float e = task.scores[h * task.score_stride + p];
        float* out = task.out + h * hd;
        for (int64_t d = 0; d < hd; ++d) out[d] = out[d] + e * v[d];
      }
    }
  }
  for (int64_t h = 0; h < task.n_head; ++h) {
    for (int64_t d = 0; d < hd; ++d) task.out[h * hd + d] *= task.inv_sum[h];
  }
}

PIER_ATTENTION_CLONES void ExpPortable(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = attention::Exp(x[i]);
}

namespace {
std::atomic<AttentionIsa> g_isa{AttentionIsa::kBest};
}  // namespace

void SetAttentionIsa(AttentionIsa isa) { g_isa.store(isa, std::memory_order_relaxed); }

}  // namespace internal

namespace {

struct Item {
  const AttentionSpan* span;
  int64_t token;  // index in the span
};

// Floats of one slot's scratch: scores [n_head][stride], then 1 / sum per head [n_head].
int64_t SlotScratchFloats(int64_t n_head, int64_t max_context) {
  return n_head * (internal::AttentionScoreStride(max_context) + 1);
}

}  // namespace

int64_t PagedAttentionScratchFloats(const KvLayout& /*layout*/, int64_t n_head, int64_t max_context,
                                    int64_t n_slots) {
  return n_slots * SlotScratchFloats(n_head, max_context);
}

void PagedAttention(const KvStore& kv, int64_t layer, std::span<const AttentionSpan> spans,
                    int64_t n_head, const float* q, float* out, int64_t max_context, float* scratch,
                    int64_t n_slots, ThreadPool& pool) {
  const KvLayout& layout = kv.layout();
  const int64_t n_kv = layout.n_kv_head;
  const int64_t hd = layout.head_dim;
  const int64_t group = n_head / n_kv;
  PIER_CHECK(group >= 1 && group * n_kv == n_head,
             "attention: query heads must be a multiple of K/V heads");
  PIER_CHECK(hd >= 1 && hd <= internal::kAttentionMaxHeadDim,
             "attention: head_dim must be between 1 and 256");
  internal::AttentionIsa isa = internal::g_isa.load(std::memory_order_relaxed);
  if (isa == internal::AttentionIsa::kBest) {
    isa = internal::CpuHasAvx512() ? internal::AttentionIsa::kAvx512
                                   : internal::AttentionIsa::kPortable;
  }
  PIER_CHECK(isa != internal::AttentionIsa::kAvx512 || internal::CpuHasAvx512(),
             "attention: AVX-512 kernel forced on a CPU without it");
  void (*attend)(const internal::AttentionTask&) =
      isa == internal::AttentionIsa::kAvx512 ? internal::AttendAvx512 : internal::AttendPortable;

  std::vector<Item> items;
  for (const AttentionSpan& span : spans) {
    PIER_CHECK(span.first_position + span.n_tokens <= max_context,
               "attention: a token's position is past max_context");
    for (int64_t t = 0; t < span.n_tokens; ++t) items.push_back({&span, t});
  }
  // Longest contexts first, dealt round-robin to the slots, so slots get similar work.
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return a.span->first_position + a.token > b.span->first_position + b.token;
  });
  const int64_t n_items = static_cast<int64_t>(items.size());
  n_slots = std::max<int64_t>(1, std::min(n_slots, n_items));
  const int64_t stride = internal::AttentionScoreStride(max_context);
  const int64_t slot_floats = SlotScratchFloats(n_head, max_context);
  pool.ParallelFor(n_slots, 1, [&](int64_t begin, int64_t end) {
    for (int64_t slot = begin; slot < end; ++slot) {
      float* slot_scratch = scratch + slot * slot_floats;
      for (int64_t i = slot; i < n_items; i += n_slots) {
        const Item& item = items[i];
        const int64_t row = item.span->first_row + item.token;
        internal::AttentionTask task;
        task.kv = &kv;
        task.layer = layer;
        task.block_table = item.span->block_table;
        task.n_ctx = item.span->first_position + item.token + 1;
        task.n_head = n_head;
        task.q = q + row * n_head * hd;
        task.out = out + row * n_head * hd;
        task.scores = slot_scratch;  // [n_head][stride]
        task.score_stride = stride;
        task.inv_sum = slot_scratch + n_head * stride;  // [n_head]
        // Planes are requested ahead for decode tokens and for a chunk's last token, the
        // first of its chunk to be run (its K/V are then in the cache for the others).
        task.prefetch = item.token == item.span->n_tokens - 1;
        if (i + n_slots < n_items) {
          const Item& next = items[i + n_slots];
          if (next.token == next.span->n_tokens - 1) {
            task.next_block_table = next.span->block_table;
            task.next_n_ctx = next.span->first_position + next.token + 1;
          }
        }
        task.first_planes_requested =
            i != slot && task.prefetch &&
            items[i - n_slots].token == items[i - n_slots].span->n_tokens - 1;
        attend(task);
      }
    }
  });
}

}  // namespace pier::engine

#include "engine/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/thread_pool.h"
#include "engine/cpu_ops.h"

namespace pier::engine {

int64_t PagedAttentionScratchFloats(const KvLayout& layout, int64_t n_head, int64_t max_context,
                                    int64_t n_slots) {
  return n_slots * (n_head / layout.n_kv_head) * max_context;
}

namespace {

struct Item {
  const AttentionSpan* span;
  int64_t token;    // index in the span
  int64_t kv_head;  // K/V head; query heads kv_head * group .. + group - 1
};

// One query token, one group of query heads sharing a K/V head.
//   scores: [group][max_context] scratch.
void AttendOne(const KvStore& kv, int64_t layer, const Item& item, int64_t n_head, const float* q,
               float* out, int64_t max_context, float* scores) {
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

  for (int64_t p = 0; p < n_ctx; ++p) {
    const float* k = kv.Keys(layer, table[p / layout.block_size]) +
                     ((p % layout.block_size) * n_kv + item.kv_head) * hd;
    for (int64_t j = 0; j < group; ++j) {
      scores[j * max_context + p] = ops::Dot(q_row + j * hd, k, hd) * scale;
    }
  }
  for (int64_t j = 0; j < group; ++j) {
    float* s = scores + j * max_context;
    float mx = s[0];
    for (int64_t p = 1; p < n_ctx; ++p) mx = std::max(mx, s[p]);
    float sum = 0.0f;
    for (int64_t p = 0; p < n_ctx; ++p) {
      s[p] = std::exp(s[p] - mx);
      sum += s[p];
    }
    float* o = out_row + j * hd;
    std::fill(o, o + hd, 0.0f);
    for (int64_t p = 0; p < n_ctx; ++p) {
      const float* v = kv.Values(layer, table[p / layout.block_size]) +
                       ((p % layout.block_size) * n_kv + item.kv_head) * hd;
      ops::Axpy(s[p], v, hd, o);
    }
    const float inv = 1.0f / sum;
    for (int64_t d = 0; d < hd; ++d) o[d] *= inv;
  }
}

}  // namespace

void PagedAttention(const KvStore& kv, int64_t layer, std::span<const AttentionSpan> spans,
                    int64_t n_head, const float* q, float* out, int64_t max_context, float* scratch,
                    int64_t n_slots, ThreadPool& pool) {
  const int64_t n_kv = kv.layout().n_kv_head;
  const int64_t group = n_head / n_kv;
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
  pool.ParallelFor(n_slots, 1, [&](int64_t begin, int64_t end) {
    for (int64_t slot = begin; slot < end; ++slot) {
      float* scores = scratch + slot * group * max_context;
      for (int64_t i = slot; i < n_items; i += n_slots) {
        AttendOne(kv, layer, items[i], n_head, q, out, max_context, scores);
      }
    }
  });
}

}  // namespace pier::engine

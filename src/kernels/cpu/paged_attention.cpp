#include "kernels/cpu/paged_attention.h"

#include <algorithm>
#include <vector>

#include "common/check.h"
#include "common/thread_pool.h"
#include "kernels/cpu/attention_kernel.h"

namespace pier::kernels {

namespace internal {

AttendFn AttentionKernelFor(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return AttendAvx512;
    case Isa::kAvx2:
      return AttendAvx2;
    case Isa::kScalar:
      break;
  }
  return AttendPortable;
}

}  // namespace internal

namespace {

// Up to queries_per_task consecutive tokens of one span: one task.
struct Item {
  const AttentionSpan* span;
  int64_t token;     // index in the span of the last
  int64_t n_tokens;  // tokens token - n_tokens + 1 .. token
};

// Floats of one slot's scratch: scores [queries][n_head][stride], 1 / sum per query and head
// [queries][n_head], then the portable kernel's work buffers [2][n_head][head_dim rounded up
// to 16].
int64_t SlotScratchFloats(const KvLayout& layout, int64_t n_head, int64_t max_context,
                          int64_t queries) {
  return queries * n_head * (internal::AttentionScoreStride(max_context) + 1) +
         internal::AttentionWorkFloats(layout, n_head);
}

// Scratch growth allowed for grouping queries, beyond one query's scores.
constexpr int64_t kGroupScratchBytes = int64_t{32} << 20;

}  // namespace

int64_t PagedAttentionQueriesPerTask(int64_t n_head, int64_t max_context, int64_t n_slots,
                                     int64_t longest_span) {
  // Bytes of scores each extra query per task adds.
  const int64_t per_query =
      std::max<int64_t>(1, n_slots * n_head * (internal::AttentionScoreStride(max_context) + 1) *
                               static_cast<int64_t>(sizeof(float)));
  const int64_t affordable = 1 + kGroupScratchBytes / per_query;
  return std::clamp<int64_t>(std::min(longest_span, affordable), 1, internal::kAttentionMaxQueries);
}

int64_t PagedAttentionScratchFloats(const KvLayout& layout, int64_t n_head, int64_t max_context,
                                    int64_t n_slots, int64_t queries_per_task) {
  return n_slots * SlotScratchFloats(layout, n_head, max_context, queries_per_task);
}

void PagedAttention(const PagedKvView& kv, int64_t layer, std::span<const AttentionSpan> spans,
                    int64_t n_head, const float* q, float* out, int64_t max_context, float* scratch,
                    int64_t n_slots, int64_t queries_per_task, ThreadPool& pool, int64_t window,
                    float softcap) {
  const KvLayout& layout = kv.layout();
  const int64_t n_kv = layout.n_kv_head;
  const int64_t hd = layout.head_dim;
  const int64_t group = n_head / n_kv;
  PIER_CHECK(group >= 1 && group * n_kv == n_head,
             "attention: query heads must be a multiple of K/V heads");
  PIER_CHECK(hd >= 1 && hd <= internal::kAttentionMaxHeadDim,
             "attention: head_dim must be between 1 and 256");
  PIER_CHECK(queries_per_task >= 1 && queries_per_task <= internal::kAttentionMaxQueries,
             "attention: 1 to 8 queries per task");
  const internal::AttendFn attend = internal::AttentionKernelFor(ActiveIsa());

  // A span's tokens in groups that read its K/V together, the last group first (the longest
  // contexts), so the first task of a chunk is a whole group.
  std::vector<Item> items;
  for (const AttentionSpan& span : spans) {
    PIER_CHECK(span.first_position + span.n_tokens <= max_context,
               "attention: a token's position is past max_context");
    for (int64_t last = span.n_tokens - 1; last >= 0; last -= queries_per_task) {
      items.push_back({&span, last, std::min(queries_per_task, last + 1)});
    }
  }
  // Longest contexts first, dealt round-robin to the slots, so slots get similar work.
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return a.span->first_position + a.token > b.span->first_position + b.token;
  });
  const int64_t n_items = static_cast<int64_t>(items.size());
  n_slots = std::max<int64_t>(1, std::min(n_slots, n_items));
  const int64_t stride = internal::AttentionScoreStride(max_context);
  const int64_t slot_floats = SlotScratchFloats(layout, n_head, max_context, queries_per_task);
  const int64_t queries_floats = queries_per_task * n_head * stride;
  pool.ParallelFor(n_slots, 1, [&](int64_t begin, int64_t end) {
    for (int64_t slot = begin; slot < end; ++slot) {
      float* slot_scratch = scratch + slot * slot_floats;
      for (int64_t i = slot; i < n_items; i += n_slots) {
        const Item& item = items[i];
        const int64_t row = item.span->first_row + item.token - (item.n_tokens - 1);
        internal::AttentionTask task;
        task.kv = &kv;
        task.layer = layer;
        task.block_table = item.span->block_table;
        task.n_ctx = item.span->first_position + item.token + 1;
        task.n_queries = item.n_tokens;
        task.window = window;
        task.softcap = softcap;
        task.n_head = n_head;
        task.q = q + row * n_head * hd;
        task.out = out + row * n_head * hd;
        task.scores = slot_scratch;  // [queries][n_head][stride]
        task.score_stride = stride;
        task.inv_sum = slot_scratch + queries_floats;  // [queries][n_head]
        task.work = task.inv_sum + queries_per_task * n_head;
        // Planes are requested ahead for every task: decode tokens' come from memory, and a
        // prefill group's have likely left the core's caches since the group before read them
        // (512-token prefill, 2 threads: 174 -> 131 ms).
        task.prefetch = true;
        // A sliding window's next task requests its own first planes (they are not block 0's).
        if (window <= 0 && i + n_slots < n_items) {
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

}  // namespace pier::kernels

// Causal multi-head attention over K/V read from a KvStore through block tables.
//
// Each query token attends to positions [0, its position] of its own sequence:
// scores q.k / sqrt(head_dim) in position order, a softmax (max, then exp and a
// sequential sum in position order), and the probability-weighted sum of V rows
// in position order. One (token, K/V head) item is computed by one thread, so a
// token's output depends only on its query, its position and the K/V it reads:
// not on the batch, the chunking or the thread count. Its cost is that of its
// own sequence's length. Grouped-query heads that share a K/V head are computed
// together so each K/V row is read once per group.
//
// Thread-safety: reads the store and q, writes out; one call at a time per scratch buffer.
#pragma once

#include <cstdint>
#include <span>

#include "engine/kv_store.h"

namespace pier {
class ThreadPool;
}

namespace pier::engine {

struct AttentionSpan {
  const int32_t* block_table = nullptr;  // the sequence's KV blocks
  int64_t first_position = 0;            // position of the span's first token
  int64_t n_tokens = 0;
  int64_t first_row = 0;  // row of the span's first token in q and out
};

// Floats of scratch PagedAttention needs: n_slots * (n_head / n_kv_head) * max_context,
// where max_context is the largest position + 1 of any token in the batch, plus, for an f16
// layout, n_slots * block_size * head_dim (K/V rows converted to f32: f16 -> f32 is exact,
// so the arithmetic and its bits do not depend on how the conversion is done).
int64_t PagedAttentionScratchFloats(const KvLayout& layout, int64_t n_head, int64_t max_context,
                                    int64_t n_slots);

// q, out: [n_rows, n_head, head_dim]. The K/V of every position a span reads (including
// its own tokens) must already be in the store. Work is spread over `n_slots` slots, each
// with its own part of `scratch`.
void PagedAttention(const KvStore& kv, int64_t layer, std::span<const AttentionSpan> spans,
                    int64_t n_head, const float* q, float* out, int64_t max_context, float* scratch,
                    int64_t n_slots, ThreadPool& pool);

}  // namespace pier::engine

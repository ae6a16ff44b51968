// Causal multi-head attention over K/V read from a KvStore through block tables.
//
// Each query token attends to positions [0, its position] of its own sequence (or the last
// `window` of them: sliding-window attention), in a fixed
// sequence of single-precision operations (attention_lanes.h writes them lane by lane):
//   score[p] = LaneTreeSum(16 lanes, lane l summing q[d] * k_p[d] over d = l, l + 16, ...)
//              * (1 / sqrt(head_dim));
//   max      = LaneTreeMax(lane-wise max of the scores in tiles of 16 positions);
//   e[p]     = Exp(score[p] - max)    (attention_lanes.h's Exp, not std::exp);
//   sum      = LaneTreeSum(lane-wise sums of e over the tiles of 16 positions);
//   out[d]   = (sum over p in position order of e[p] * v_p[d]) * (1 / sum).
// f16 and q8_0 K/V values are converted exactly to f32 first (q8_0: float(q) * d), so stores
// of any dtype that hold the same values give the same bits. One task (up to 8 consecutive query
// tokens of a sequence, all their heads) is computed by one thread, reading each K/V row once
// for all those tokens and heads (so a long prefill reads its K/V once per 8 tokens, not once per
// token); a token's result depends only on its query, its position and the K/V it reads: not on
// the batch, the chunking, the grouping, the thread count, the slot count or which
// implementation (attention_kernel.h: AVX-512, AVX2, or the portable loops) runs it. Its cost is
// that of its own sequence's length.
// Decode streams every K/V byte of the batch from memory once per layer: with an f32 store
// that bandwidth, not the arithmetic, bounds its speed (an f16 store halves it).
//
// Thread-safety: reads the store and q, writes out; one call at a time per scratch buffer.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/cpu/paged_kv.h"

namespace pier {
class ThreadPool;
}

namespace pier::kernels {

// The largest head size PagedAttention supports (runners refuse larger models at load).
inline constexpr int64_t kPagedAttentionMaxHeadDim = 256;

struct AttentionSpan {
  const int32_t* block_table = nullptr;  // the sequence's KV blocks
  int64_t first_position = 0;            // position of the span's first token
  int64_t n_tokens = 0;
  int64_t first_row = 0;  // row of the span's first token in q and out
};

// Query tokens per task for a batch whose longest span has `longest_span` tokens: that many, at
// most 8, and fewer where scores for 8 would make the scratch more than 32 MiB larger than for
// one (long contexts, many heads and slots: there the K/V rows read per query cost less than the
// scratch would).
int64_t PagedAttentionQueriesPerTask(int64_t n_head, int64_t max_context, int64_t n_slots,
                                     int64_t longest_span);

// Floats of scratch PagedAttention needs: n_slots * n_head * (queries_per_task * (max_context
// rounded up to a multiple of 16, plus 1) plus twice head_dim rounded up to a multiple of 16),
// where max_context is at least the largest position + 1 of any token in the batch (one task's
// scores and work buffers per slot).
int64_t PagedAttentionScratchFloats(const KvLayout& layout, int64_t n_head, int64_t max_context,
                                    int64_t n_slots, int64_t queries_per_task);

// q, out: [n_rows, n_head, head_dim]. The K/V of every position a span reads (including
// its own tokens) must already be in the store. n_head must be a multiple (at most 64) of
// the layout's n_kv_head, and head_dim at most 256. Work is spread over `n_slots` slots, each
// with its own part of `scratch` (sized for the same queries_per_task, 1 to 8); a span's tokens
// are taken that many per task. The results do not depend on queries_per_task.
// `window` > 0 makes it sliding-window attention: a token at position p attends only positions
// p - window + 1 .. p (the earlier positions' scores are -inf, so their weights are exactly 0;
// their K/V must still be in the store). `softcap` > 0 soft-caps every score (Gemma 2):
// s = softcap * tanh(s / softcap), with a tanh made of attention_lanes.h's Exp.
void PagedAttention(const PagedKvView& kv, int64_t layer, std::span<const AttentionSpan> spans,
                    int64_t n_head, const float* q, float* out, int64_t max_context, float* scratch,
                    int64_t n_slots, int64_t queries_per_task, ThreadPool& pool, int64_t window = 0,
                    float softcap = 0.0f);

}  // namespace pier::kernels

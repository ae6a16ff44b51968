// CUDA launchers of paged attention and of K/V writes into the paged cache (host side;
// kernels in attention.cu, arithmetic in attention_math.h).
//
// Queries are given one row each: n_queries rows of [n_head][head_dim] f32, each with its
// position and the offset of its sequence's block table in `block_tables` (queries of one
// sequence share a table). A query at position P attends positions 0..P of its sequence
// (causal), so a prefill chunk's queries are simply consecutive positions. Grouped-query
// attention: head h reads K/V head h / (n_head / n_kv_head).
//
// Two passes: a split pass (one warp per 256-position split of a query, and head) writes each
// split's max, sum and weighted values into `scratch`; a merge pass combines a query's splits
// in index order (attention_math.h). The positions and the split index must agree (both made
// by the caller from the same positions: attn::IndexSplits). Launchers queue work on
// `stream`; stateless, any thread.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/attention_math.h"

namespace pier::cuda {

struct PagedAttentionArgs {
  const float* q;                // [n_queries][n_head][head_dim]
  float* out;                    // [n_queries][n_head][head_dim]
  int64_t n_queries;             // at most 65,535 per launch
  int64_t n_head;                // a multiple of geometry.n_kv_head
  const int32_t* positions;      // [n_queries]
  const int32_t* table_offsets;  // [n_queries]: where each query's block table starts
  const int32_t* block_tables;   // the tables, one int32 block number per 16 positions
  const uint8_t* kv_base;        // block 0 of the cache
  attn::KvGeometry geometry;     // head_dim at most 256
  // The splits (attn::IndexSplits): query q's are split_first[q] .. + SplitsFor(position) - 1.
  const int32_t* split_first;  // [n_queries]
  const int32_t* split_query;  // [total_splits]
  int64_t total_splits;        // at most 2^31 - 1
  float* scratch;              // attn::ScratchFloats(total_splits, n_head, head_dim)
  // When set, the merge pass also writes each output row as 8-bit activation blocks (the
  // bytes LaunchQuantizeActivations writes from `out`), saving that launch: n_queries rows of
  // quant::ActivationRowBytes(n_head * head_dim) bytes, 16-byte aligned. head_dim must then
  // be a multiple of 32 (a block never spans two heads).
  uint8_t* out_xq;
};

// cudaErrorInvalidValue for bad shapes or null pointers; cudaSuccess without launching for
// no queries.
cudaError_t LaunchPagedAttention(const PagedAttentionArgs& args, cudaStream_t stream);

// Writes k and v ([n_tokens][n_kv_head][head_dim] f32) as f16 (round to nearest even) into
// the cache slots of their positions: block table[position / 16], slot position % 16. A
// negative position (a row padding a batch) writes nothing; such a query attends nothing and
// its output is NaN. A split_query entry of -1 is an unused slot of a fixed-size launch.
cudaError_t LaunchKvWrite(const float* k, const float* v, int64_t n_tokens,
                          const int32_t* positions, const int32_t* table_offsets,
                          const int32_t* block_tables, uint8_t* kv_base,
                          const attn::KvGeometry& geometry, cudaStream_t stream);

// What LaunchRope (on q, then on k) and LaunchKvWrite do, in one launch and with the same
// bits: q [n_tokens][n_head][head_dim] rotated in place, k [n_tokens][n_kv_head][head_dim]
// rotated on its way into the cache (k itself is left as it is) and v written, both as f16.
// RoPE pairs (2i, 2i + 1) for i < n_rot / 2 from cos_sin [n_tokens][n_rot / 2][2] (the llama
// form; n_rot even and at most head_dim, head_dim even).
cudaError_t LaunchRopeKvWrite(float* q, const float* k, const float* v, int64_t n_tokens,
                              int64_t n_head, int64_t n_rot, const float* cos_sin,
                              const int32_t* positions, const int32_t* table_offsets,
                              const int32_t* block_tables, uint8_t* kv_base,
                              const attn::KvGeometry& geometry, cudaStream_t stream);

}  // namespace pier::cuda

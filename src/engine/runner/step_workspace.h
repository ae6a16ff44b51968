// The buffers of one forward step of the Llama-family runner inside its Workspace, laid out
// by one function that both the runner (for every step) and admission (EstimateMemory, for
// the largest step) call, so that what is reserved is what the runner will ask for.
//
// Thread-safety: plain functions over values.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/kv/kv_store.h"
#include "model/model_info.h"

namespace pier::engine {

// What a step's buffer sizes depend on.
struct StepDims {
  int64_t n_tok = 0;        // tokens in the step
  int64_t n_out = 0;        // rows that want logits
  int64_t max_context = 0;  // the longest sequence's context once the step is done
  int64_t n_embd = 0, n_head = 0, n_kv_head = 0, head_dim = 0, n_ff = 0, n_rot = 0;
  int64_t n_vocab = 0;
  int64_t n_rope_tables = 1;  // 2 when sliding-window layers rotate by another base (gemma3)
  KvLayout kv;
  int64_t att_slots = 0;        // attention scratch slots (4 per compute thread)
  int64_t att_queries = 1;      // query tokens per attention task (PagedAttentionQueriesPerTask)
  size_t mm_scratch_bytes = 0;  // the largest MatMul scratch of the step's products
};

// Offsets in the workspace (64-byte aligned) and the bytes they span.
struct StepBuffers {
  size_t x = 0, h = 0;      // [T, n_embd] residual stream; normed / projected
  size_t q = 0, attn = 0;   // [T, n_head, hd]
  size_t k = 0, v = 0;      // [T, n_kv, hd]
  size_t gate = 0, up = 0;  // [T, n_ff]
  size_t cos_sin = 0;       // [n_rope_tables][T, n_rot/2, 2]
  size_t att_scratch = 0;   // paged attention's per-slot scratch
  size_t mm_scratch = 0;    // MatMul scratch (mm_scratch_bytes)
  size_t out_x = 0;         // [R, n_embd]
  size_t logits = 0;        // [R, n_vocab]
  size_t mm_scratch_bytes = 0;
  int64_t att_slots = 0;
  int64_t att_queries = 1;
  size_t bytes = 0;  // the whole layout
};

StepBuffers LayOutStep(const StepDims& dims);

// The dimensions of a model's step from its metadata (sizes of tokens, logit rows, context
// and scratch are left to the caller).
StepDims StepDimsOf(const model::ModelInfo& info, const KvLayout& kv);

}  // namespace pier::engine

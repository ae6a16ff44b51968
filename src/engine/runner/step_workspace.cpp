#include "engine/runner/step_workspace.h"

#include "kernels/cpu/paged_attention.h"
#include "memory/workspace.h"

namespace pier::engine {

StepBuffers LayOutStep(const StepDims& d) {
  const int64_t q_dim = d.n_head * d.head_dim, kv_dim = d.n_kv_head * d.head_dim;
  const int64_t half_rot = d.n_rot / 2;
  StepBuffers b;
  WorkspacePlan plan;
  b.x = plan.Add<float>(d.n_tok * d.n_embd);
  b.h = plan.Add<float>(d.n_tok * d.n_embd);
  b.q = plan.Add<float>(d.n_tok * q_dim);
  b.k = plan.Add<float>(d.n_tok * kv_dim);
  b.v = plan.Add<float>(d.n_tok * kv_dim);
  b.attn = plan.Add<float>(d.n_tok * q_dim);
  b.gate = plan.Add<float>(d.n_tok * d.n_ff);
  b.up = plan.Add<float>(d.n_tok * d.n_ff);
  b.cos_sin = plan.Add<float>(d.n_rope_tables * d.n_tok * half_rot * 2);
  b.att_slots = d.att_slots;
  b.att_queries = d.att_queries;
  b.att_scratch = plan.Add<float>(kernels::PagedAttentionScratchFloats(
      d.kv, d.n_head, d.max_context, d.att_slots, d.att_queries));
  b.mm_scratch_bytes = d.mm_scratch_bytes;
  b.mm_scratch = plan.Add<std::byte>(static_cast<int64_t>(d.mm_scratch_bytes));
  b.out_x = plan.Add<float>(d.n_out * d.n_embd);
  b.logits = plan.Add<float>(d.n_out * d.n_vocab);
  b.bytes = plan.bytes();
  return b;
}

StepDims StepDimsOf(const model::ModelInfo& info, const KvLayout& kv) {
  StepDims d;
  d.n_embd = info.embedding_length;
  d.n_head = info.head_count;
  d.n_kv_head = info.head_count_kv;
  d.head_dim = info.head_dim;
  d.n_ff = info.feed_forward_length;
  d.n_rot = info.rope_dimension_count;
  d.n_vocab = info.vocab_size;
  d.n_rope_tables = info.sliding_window > 0 ? 2 : 1;
  d.kv = kv;
  return d;
}

}  // namespace pier::engine

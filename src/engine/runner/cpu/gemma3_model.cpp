// Gemma 3: the Llama forward pass with scaled embeddings, per-head Q/K RMSNorm, a second
// RMSNorm on each block's output, GELU (tanh) gating, NeoX RoPE, and sliding-window attention
// on every layer but each 6th (layers 5, 11, ...), which attend every position. The local
// layers rotate by base 10,000 and the global ones by <arch>.rope.freq_base (Hugging Face's
// Gemma3TextConfig: sliding_window_pattern 6, rope_local_base_freq 10,000; llama.cpp's loader
// sets the same two constants). llama.cpp's converter stores each norm weight as Hugging
// Face's (1 + weight), so the norms are plain RMSNorms here. Queries are scaled by
// query_pre_attn_scalar^-1/2, which is head_dim^-1/2 except for the 27B model (62 layers:
// (n_embd / n_head)^-1/2), as llama.cpp derives it.

#include "engine/runner/cpu/llama_model.h"
#include "model/model_info.h"

namespace pier::engine {

namespace {

// What Gemma 2 and 3 share: NeoX RoPE, an RMSNorm on each block's output, embeddings times
// sqrt(n_embd), GELU-tanh gating, and 1/sqrt(n_embd / n_head) as the query scale for the
// largest model (`largest_layers` deep: 27B), 1/sqrt(head_dim) otherwise, as llama.cpp derives
// query_pre_attn_scalar.
LlamaVariant GemmaVariant(const model::ModelInfo& info, int64_t largest_layers) {
  LlamaVariant variant;
  variant.rope_style = kernels::ops::RopeStyle::kNeox;
  variant.post_norms = true;
  variant.scale_embeddings = true;
  variant.activation = FfnActivation::kGeluTanh;
  if (info.block_count == largest_layers) {
    variant.attn_scalar = static_cast<double>(info.embedding_length / info.head_count);
  }
  return variant;
}

}  // namespace

// Gemma 2: Gemma 3 without the Q/K norms; every other layer slides (layers 0, 2, ...), both
// kinds rotating by rope.freq_base; attention scores and output logits soft-capped as the
// file's attn_logit_softcapping / final_logit_softcapping say (Hugging Face's Gemma2Config:
// layer_types, query_pre_attn_scalar 144 = n_embd / n_head for the 46-layer 27B model).
Result<std::unique_ptr<ModelRunner>> CreateGemma2Runner(const model::GgufFile& file,
                                                        const CpuRunnerOptions& options) {
  PIER_ASSIGN_OR_RETURN(model::ModelInfo info, model::ReadModelInfo(file));
  LlamaVariant variant = GemmaVariant(info, 46);
  variant.swa_period = SlidingWindowPeriod("gemma2");
  variant.swa_rope_base = info.rope_freq_base;
  return CreateLlamaFamilyRunner(file, variant, options);
}

Result<std::unique_ptr<ModelRunner>> CreateGemma3Runner(const model::GgufFile& file,
                                                        const CpuRunnerOptions& options) {
  PIER_ASSIGN_OR_RETURN(model::ModelInfo info, model::ReadModelInfo(file));
  LlamaVariant variant = GemmaVariant(info, 62);
  variant.qk_norm = true;
  variant.swa_period = SlidingWindowPeriod("gemma3");
  variant.swa_rope_base = 10000.0;
  return CreateLlamaFamilyRunner(file, variant, options);
}

}  // namespace pier::engine

// The Llama forward pass's other families that differ from it only by a variant:
//  * Qwen2: biases on the Q, K and V projections and NeoX-style RoPE (llama.cpp converts Qwen2
//    without permuting Q/K rows, so the rotation pairs dimension i with i + n_rot/2, as in
//    Hugging Face's model).
//  * Qwen3: no biases; an RMSNorm over each head of q and k (attn_q_norm, attn_k_norm) before
//    RoPE, as Hugging Face's Qwen3Attention.
//  * Phi-3: Q|K|V in one matrix and gate|up in another (Hugging Face's qkv_proj and
//    gate_up_proj, which llama.cpp keeps fused), NeoX RoPE. Phi-3's long-context files carry
//    LongRoPE factors (rope_factors_long / rope_factors_short), which are refused.

#include <string>

#include "engine/runner/cpu/llama_model.h"

namespace pier::engine {

Result<std::unique_ptr<ModelRunner>> CreateQwen2Runner(const model::GgufFile& file,
                                                       const CpuRunnerOptions& options) {
  LlamaVariant variant;
  variant.qkv_bias = true;
  variant.rope_style = kernels::ops::RopeStyle::kNeox;
  return CreateLlamaFamilyRunner(file, variant, options);
}

Result<std::unique_ptr<ModelRunner>> CreateQwen3Runner(const model::GgufFile& file,
                                                       const CpuRunnerOptions& options) {
  LlamaVariant variant;
  variant.rope_style = kernels::ops::RopeStyle::kNeox;
  variant.qk_norm = true;
  return CreateLlamaFamilyRunner(file, variant, options);
}

Result<std::unique_ptr<ModelRunner>> CreatePhi3Runner(const model::GgufFile& file,
                                                      const CpuRunnerOptions& options) {
  for (const char* name : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
    if (file.FindTensor(name) != nullptr) {
      return UnsupportedError(file.path() + ": " + name +
                              " (Phi-3's LongRoPE scaling) is not supported");
    }
  }
  LlamaVariant variant;
  variant.rope_style = kernels::ops::RopeStyle::kNeox;
  variant.fused_projections = true;
  return CreateLlamaFamilyRunner(file, variant, options);
}

}  // namespace pier::engine

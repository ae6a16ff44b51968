// The Llama-family forward pass on the CPU (llama, SmolLM2, Qwen2, Gemma 3).
//
// Per step, over all T tokens of the batch at once:
//   x = token_embd[tokens]                                       // [T, n_embd]
//   per layer:
//     h = RMSNorm(x) * attn_norm                                 // [T, n_embd]
//     q, k, v = h Wq (+bq), h Wk (+bk), h Wv (+bv)               // [T, n_head|n_kv_head, hd]
//     RoPE(q, k) at each token's position; k, v -> KV store via block tables
//     a = causal attention per sequence over its K/V             // [T, n_head * hd]
//     x += a Wo
//     h = RMSNorm(x) * ffn_norm
//     x += (silu(h Wgate) * h Wup) Wdown                          // [T, n_ff] inside
//   logits = (RMSNorm(x[requested]) * output_norm) Woutput        // [R, n_vocab]
// Woutput is token_embd when the file has no output.weight (tied embeddings).
// Gemma 3 (LlamaVariant below) adds: x = token_embd[tokens] * sqrt(n_embd); per-head RMSNorm of
// q and k before RoPE; RMSNorm of each block's output before its residual add; GELU (tanh) in
// place of SiLU; and sliding-window attention with its own RoPE base on 5 layers of every 6.
// Matrix products use kernels::MatMul on the quantized weights in place.
//
// Thread-safety: see model_runner.h.
#pragma once

#include <memory>
#include <string>

#include "engine/runner/cpu/cpu_runner.h"
#include "kernels/cpu/row_ops.h"

namespace pier::engine {

enum class FfnActivation : uint8_t {
  kSilu,      // SwiGLU: silu(gate) * up
  kGeluTanh,  // GeGLU with GELU's tanh approximation (Gemma)
};

// What distinguishes the members of the family.
struct LlamaVariant {
  bool qkv_bias = false;  // blk.N.attn_{q,k,v}.bias are required
  kernels::ops::RopeStyle rope_style = kernels::ops::RopeStyle::kNormal;
  bool qk_norm = false;           // blk.N.attn_{q,k}_norm: RMSNorm of each head before RoPE
  bool post_norms = false;        // blk.N.post_attention_norm / post_ffw_norm on block outputs
  bool scale_embeddings = false;  // embeddings times sqrt(n_embd)
  FfnActivation activation = FfnActivation::kSilu;
  // When positive, layer il slides unless (il + 1) % swa_period == 0: it attends the last
  // ModelInfo::sliding_window positions and rotates by swa_rope_base.
  int64_t swa_period = 0;
  double swa_rope_base = 10000.0;
  // Attention scores are q.k / sqrt(attn_scalar) (0: head_dim, the kernel's own scale).
  double attn_scalar = 0;
  // blk.N.attn_qkv (Q|K|V rows) and blk.N.ffn_up (gate|up rows) instead of separate matrices
  // (phi3).
  bool fused_projections = false;
};
// A file's <arch>.attention.sliding_window, when the variant has no swa_period, makes every
// layer attend only that many positions (Mistral-style).

// The swa_period of `general.architecture` `arch`: gemma2 2 (layers 0, 2, ... slide), gemma3 6
// (all but layers 5, 11, ...); 0 for the others.
int64_t SlidingWindowPeriod(std::string_view arch);
// The positions layer il attends (0: all of them), for a variant's swa_period and the file's
// sliding_window (0: none).
int64_t LayerWindow(int64_t swa_period, int64_t sliding_window, int64_t il);

// `general.architecture` llama: no biases, adjacent-pair RoPE on GGUF's permuted Q/K rows.
[[nodiscard]] Result<std::unique_ptr<ModelRunner>> CreateLlamaRunner(
    const model::GgufFile& file, const CpuRunnerOptions& options);

// `general.architecture` qwen2: Q/K/V biases, half-split (NeoX) RoPE.
[[nodiscard]] Result<std::unique_ptr<ModelRunner>> CreateQwen2Runner(
    const model::GgufFile& file, const CpuRunnerOptions& options);

// `general.architecture` qwen3: qwen2 without biases, with per-head Q/K RMSNorm.
[[nodiscard]] Result<std::unique_ptr<ModelRunner>> CreateQwen3Runner(
    const model::GgufFile& file, const CpuRunnerOptions& options);

// `general.architecture` phi3: fused projections, NeoX RoPE; LongRoPE files are refused.
[[nodiscard]] Result<std::unique_ptr<ModelRunner>> CreatePhi3Runner(
    const model::GgufFile& file, const CpuRunnerOptions& options);

// `general.architecture` gemma2 (gemma3_model.cpp): Gemma 3 less the Q/K norms, every other
// layer sliding, soft-capped scores and logits.
[[nodiscard]] Result<std::unique_ptr<ModelRunner>> CreateGemma2Runner(
    const model::GgufFile& file, const CpuRunnerOptions& options);

// `general.architecture` gemma3 (gemma3_model.cpp).
[[nodiscard]] Result<std::unique_ptr<ModelRunner>> CreateGemma3Runner(
    const model::GgufFile& file, const CpuRunnerOptions& options);

// Any member of the family, given its variant.
[[nodiscard]] Result<std::unique_ptr<ModelRunner>> CreateLlamaFamilyRunner(
    const model::GgufFile& file, const LlamaVariant& variant, const CpuRunnerOptions& options);

}  // namespace pier::engine

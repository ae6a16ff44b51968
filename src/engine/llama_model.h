// The Llama-family forward pass on the CPU (llama, SmolLM2, Qwen2).
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
// Matrix products use kernels::MatMul on the quantized weights in place.
//
// Thread-safety: see model_runner.h.
#pragma once

#include <memory>
#include <string>

#include "engine/cpu_runner.h"
#include "kernels/cpu/row_ops.h"

namespace pier::engine {

// What distinguishes the members of the family.
struct LlamaVariant {
  bool qkv_bias = false;  // blk.N.attn_{q,k,v}.bias are required
  kernels::ops::RopeStyle rope_style = kernels::ops::RopeStyle::kNormal;
};

// `general.architecture` llama: no biases, adjacent-pair RoPE on GGUF's permuted Q/K rows.
[[nodiscard]] Result<std::unique_ptr<ModelRunner>> CreateLlamaRunner(
    const model::GgufFile& file, const CpuRunnerOptions& options);

// `general.architecture` qwen2: Q/K/V biases, half-split (NeoX) RoPE.
[[nodiscard]] Result<std::unique_ptr<ModelRunner>> CreateQwen2Runner(
    const model::GgufFile& file, const CpuRunnerOptions& options);

// Any member of the family, given its variant.
[[nodiscard]] Result<std::unique_ptr<ModelRunner>> CreateLlamaFamilyRunner(
    const model::GgufFile& file, const LlamaVariant& variant, const CpuRunnerOptions& options);

}  // namespace pier::engine

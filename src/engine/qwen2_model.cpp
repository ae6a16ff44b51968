// Qwen2: the Llama forward pass with biases on the Q, K and V projections and
// NeoX-style RoPE (llama.cpp converts Qwen2 without permuting Q/K rows, so the
// rotation pairs dimension i with i + n_rot/2, as in Hugging Face's model).

#include "engine/llama_model.h"

namespace pier::engine {

Result<std::unique_ptr<ModelRunner>> CreateQwen2Runner(const model::GgufFile& file,
                                                       const CpuRunnerOptions& options) {
  LlamaVariant variant;
  variant.qkv_bias = true;
  variant.rope_style = kernels::ops::RopeStyle::kNeox;
  return CreateLlamaFamilyRunner(file, variant, options);
}

}  // namespace pier::engine

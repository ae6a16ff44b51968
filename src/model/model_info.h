// ModelInfo: the hyper-parameters and size facts of a model, read from GGUF metadata.
//
// ReadModelInfo() reads `general.architecture` and the `<arch>.*` keys of a
// supported architecture (llama, qwen2, qwen3, phi3, gemma2, gemma3), checks that they are present,
// positive and consistent (heads divide evenly, sizes do not overflow), and
// sums what the tensors take. Errors name the file and the key. A plain value
// type; thread-safe to read.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"
#include "model/gguf_file.h"

namespace pier::model {

struct RopeScaling {
  std::string type;              // "linear", "yarn", ... ("none" is reported as absent)
  double factor = 1.0;           // <arch>.rope.scaling.factor
  int64_t original_context = 0;  // <arch>.rope.scaling.original_context_length; 0 if absent
};

struct ModelInfo {
  std::string architecture;  // general.architecture, e.g. "llama"
  std::string name;          // general.name; empty if absent

  int64_t context_length = 0;        // <arch>.context_length (trained context)
  int64_t embedding_length = 0;      // <arch>.embedding_length (n_embd)
  int64_t block_count = 0;           // <arch>.block_count (n_layer)
  int64_t feed_forward_length = 0;   // <arch>.feed_forward_length (n_ff)
  int64_t head_count = 0;            // <arch>.attention.head_count (n_head)
  int64_t head_count_kv = 0;         // <arch>.attention.head_count_kv (defaults to n_head)
  int64_t head_dim = 0;              // <arch>.attention.key_length, else n_embd / n_head
  int64_t rope_dimension_count = 0;  // <arch>.rope.dimension_count, else head_dim
  double rope_freq_base = 10000.0;   // <arch>.rope.freq_base
  std::optional<RopeScaling> rope_scaling;
  double rms_norm_eps = 0.0;  // <arch>.attention.layer_norm_rms_epsilon
  // <arch>.attention.sliding_window: positions a sliding-window layer attends (0: none). Which
  // layers slide is the architecture's (gemma3: all but every 6th).
  int64_t sliding_window = 0;
  // <arch>.attn_logit_softcapping / final_logit_softcapping (Gemma 2): scores and logits become
  // cap * tanh(x / cap); 0: absent.
  double attn_logit_softcapping = 0.0;
  double final_logit_softcapping = 0.0;
  int64_t vocab_size = 0;  // tokenizer.ggml.tokens length, else <arch>.vocab_size, else token_embd

  int64_t parameter_count = 0;            // sum of tensor element counts
  uint64_t weight_bytes = 0;              // sum of tensor sizes in the file
  std::map<DType, int64_t> tensor_types;  // number of tensors of each type
  // K and V of one token in f16 over all layers: 2 * n_layer * n_kv_heads * head_dim * 2 bytes.
  uint64_t kv_bytes_per_token = 0;
  bool has_chat_template = false;  // tokenizer.chat_template present
};

// The architectures ReadModelInfo accepts.
std::span<const std::string_view> SupportedArchitectures();

// Reads and validates the hyper-parameters of `file`. UNSUPPORTED for another
// architecture; NOT_FOUND / DATA_LOSS / INVALID_ARGUMENT for missing or bad keys.
Result<ModelInfo> ReadModelInfo(const GgufFile& file);

}  // namespace pier::model

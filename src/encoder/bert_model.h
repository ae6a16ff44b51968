// BertModel: the BERT encoder's forward pass on the CPU, from a GGUF file (architecture
// `bert`, tensors as llama.cpp's converter names them: token_embd, token_types,
// position_embd, token_embd_norm, blk.N.attn_{q,k,v,output}, attn_output_norm, ffn_up,
// ffn_down, layer_output_norm, each weight with its bias).
//
// Embed runs a batch of texts packed ragged (no padding): their tokens side by side in one
// activation matrix, every matrix product over all of them at once, attention within each
// text. Per token: word + position + token-type embedding, LayerNorm; per layer Q/K/V,
// bidirectional multi-head attention, output projection, residual + LayerNorm, GELU
// feed-forward, residual + LayerNorm; then each text's states are pooled (mean, cls or last,
// as the file says; none: every token's state is the output). A text's vector is bitwise identical
// whatever batch it is computed in: matrix products reduce each token alone (kernels/cpu/matmul.h),
// attention and pooling stay inside one text, and nothing is reduced across threads.
//
// Memory: Q8_0 / Q4_x matrices are packed into a governor block of the weights owner (the
// file's pages released); f16/bf16/f32 matrices are widened to f32 in a weights block for the
// encoder's own 16-lane kernel (float_matmul.h); the rest of the file (embeddings) is read in
// place from the mapping and charged to the weights owner; norms and biases go to f32 in a weights
// block; activations come from a workspace of the workspace owner sized for max_batch_tokens.
//
// Ownership: borrows the GgufFile, governor and pool, which must outlive it. Thread-safety:
// Embed from one thread at a time (it uses the workspace and the pool).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "encoder/encoder_info.h"
#include "memory/memory_governor.h"
#include "model/gguf_file.h"

namespace pier {
class ThreadPool;
}

namespace pier::encoder {

struct BertOptions {
  MemoryGovernor* governor = nullptr;
  OwnerId weights_owner;
  OwnerId workspace_owner;
  ThreadPool* pool = nullptr;
  // The most tokens one Embed call may hold (all texts together); the workspace is sized for
  // it at Create, so a batch never allocates.
  int64_t max_batch_tokens = 2048;
};

// One text's tokens ([CLS] ... [SEP]); type_ids empty means all 0.
struct EncoderInput {
  std::span<const int32_t> ids;
  std::span<const int32_t> type_ids = {};
};

class BertModel {
 public:
  // ReadEncoderInfo's errors; NOT_FOUND / INVALID_ARGUMENT for missing or misshapen tensors;
  // UNSUPPORTED for a weight type without a CPU kernel; the governor's refusal.
  [[nodiscard]] static Result<std::unique_ptr<BertModel>> Create(const model::GgufFile& file,
                                                                 const BertOptions& options);
  ~BertModel();

  const EncoderInfo& info() const;
  int64_t max_batch_tokens() const;
  // The bytes Create allocates for a file (weights it packs or converts, the workspace),
  // for admission before a load.
  [[nodiscard]] static Result<uint64_t> EstimateBytes(const model::GgufFile& file,
                                                      int64_t max_batch_tokens, int threads);

  // out: [inputs.size(), n_embd], each row the pooled (not normalized) vector of one input;
  // with pooling none, [total tokens, n_embd], every token's final state, input after input.
  // INVALID_ARGUMENT for an empty input, one longer than the context, ids or type ids out of
  // range, or more tokens in all than max_batch_tokens.
  [[nodiscard]] Status Embed(std::span<const EncoderInput> inputs, float* out);

 private:
  struct Impl;
  explicit BertModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Scales `v` (n values) to unit L2 norm (a zero vector stays zero).
void NormalizeL2(float* v, int64_t n);

}  // namespace pier::encoder

// What the CUDA runner allocates, known without a GPU: the model's sizes, each step's workspace
// layout, the weight block, the decode graphs' workspace, and from them the estimate that
// admission reserves (cuda_runner.h, cuda_runner_internal.h).
#include <algorithm>
#include <string>

#include "engine/runner/cuda/cuda_runner_internal.h"
#include "kernels/cuda/attention_math.h"
#include "kernels/cuda/quant_dot.h"
#include "kernels/cuda/quant_pack.h"
#include "model/model_info.h"

namespace pier::engine {
namespace cuda_runner {

Result<ModelDims> ReadModelDims(const model::GgufFile& file) {
  PIER_ASSIGN_OR_RETURN(const model::ModelInfo info, model::ReadModelInfo(file));
  if (info.architecture != "llama") {
    return UnsupportedError(file.path() + ": the CUDA runner runs the llama architecture, not '" +
                            info.architecture + "' (the CPU runner does)");
  }
  if (info.rope_scaling || info.sliding_window > 0 || info.attn_logit_softcapping > 0 ||
      info.final_logit_softcapping > 0 || file.FindTensor("rope_freqs.weight") != nullptr) {
    return UnsupportedError(file.path() +
                            ": RoPE scaling, rope_freqs, sliding windows and soft-capping are not "
                            "on the GPU yet (the CPU runner has them)");
  }
  ModelDims d;
  d.n_embd = info.embedding_length;
  d.n_layer = info.block_count;
  d.n_ff = info.feed_forward_length;
  d.n_head = info.head_count;
  d.n_kv = info.head_count_kv;
  d.head_dim = info.head_dim;
  d.n_rot = info.rope_dimension_count;
  d.n_ctx = info.context_length;
  if (d.head_dim > cuda::attn::kMaxHeadDim || d.n_rot > d.head_dim || d.n_rot % 2 != 0 || d.n_kv < 1 ||
      d.n_head % d.n_kv != 0) {
    return UnsupportedError(file.path() + ": head size " + std::to_string(d.head_dim) + ", " +
                            std::to_string(d.n_rot) + " rotated, " + std::to_string(d.n_head) +
                            " heads over " + std::to_string(d.n_kv) +
                            " K/V heads: the GPU attention takes head sizes up to 256");
  }
  if (d.n_embd % 32 != 0 || d.n_ff % 32 != 0 || (d.n_head * d.head_dim) % 32 != 0) {
    return UnsupportedError(file.path() + ": widths must be multiples of 32 on the GPU");
  }
  d.token_embd = file.FindTensor("token_embd.weight");
  if (d.token_embd == nullptr || d.token_embd->dims.size() != 2 || d.token_embd->dims[0] != d.n_embd) {
    return InvalidArgumentError(file.path() + ": token_embd.weight is missing or misshapen");
  }
  d.n_vocab = d.token_embd->dims[1];
  const auto embd_type = static_cast<int32_t>(d.token_embd->type);
  if (embd_type != 0 && embd_type != 1 && !cuda::quant::IsQuantType(embd_type)) {
    return UnsupportedError(file.path() + ": token_embd.weight is " +
                            std::string(DTypeName(d.token_embd->type)) + ", not read on the GPU");
  }
  return d;
}

StepLayout LayOutStep(const ModelDims& d, int64_t n_tok, int64_t n_out, int64_t n_table,
                      int64_t total_splits) {
  const auto T = static_cast<size_t>(n_tok);
  const int64_t q_dim = d.n_head * d.head_dim, kv_dim = d.n_kv * d.head_dim;
  const int64_t widest = std::max({d.n_embd, d.n_ff, q_dim});
  StepLayout s{};
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t offset = at;
    at += AlignUp(bytes);
    return offset;
  };
  s.x = take(T * d.n_embd * 4);
  s.add = take(T * d.n_embd * 4);
  s.xq = take(T * cuda::quant::ActivationRowBytes(widest));
  s.q = take(T * q_dim * 4);
  s.k = take(T * kv_dim * 4);
  s.v = take(T * kv_dim * 4);
  s.attn = take(T * q_dim * 4);
  s.gate = take(T * d.n_ff * 4);
  s.up = take(T * d.n_ff * 4);
  s.ids = take(T * 4);
  s.positions = take(T * 4);
  s.offsets = take(T * 4);
  s.tables = take(static_cast<size_t>(n_table) * 4);
  s.cos_sin = take(T * d.n_rot * 4);
  s.split_first = take(T * 4);
  s.split_query = take(static_cast<size_t>(total_splits) * 4);
  s.scratch = take(static_cast<size_t>(cuda::attn::ScratchFloats(total_splits, d.n_head, d.head_dim)) *
                   sizeof(float));
  s.out_xq = take(static_cast<size_t>(n_out) * cuda::quant::ActivationRowBytes(d.n_embd));
  s.logits = take(static_cast<size_t>(n_out * d.n_vocab) * 4);
  s.bytes = at;
  return s;
}

bool PacksMatrix(const model::GgufTensorInfo& t, const ModelDims& d, bool packed_weights) {
  return packed_weights && t.dims.size() == 2 && &t != d.token_embd &&
         cuda::quant::IsQuantType(static_cast<int32_t>(t.type)) &&
         cuda::quant::HasPackedLayout32(static_cast<cuda::quant::QuantType>(t.type));
}

size_t DeviceMatrixBytes(const model::GgufTensorInfo& t, const ModelDims& d, bool packed_weights) {
  if (!PacksMatrix(t, d, packed_weights)) return AlignUp(t.size_bytes);
  return AlignUp(static_cast<size_t>(
      cuda::quant::PackedBytes(static_cast<cuda::quant::QuantType>(t.type), t.dims[1], t.dims[0])));
}

size_t WeightBlockBytes(const model::GgufFile& file, const ModelDims& d, bool packed_weights) {
  const model::GgufTensorInfo* output = file.FindTensor("output.weight");
  size_t total = AlignUp(d.token_embd->size_bytes);
  if (output != nullptr) total += DeviceMatrixBytes(*output, d, packed_weights);
  total += AlignUp(d.n_embd * sizeof(float));  // output_norm
  const std::string names[] = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                               "ffn_gate", "ffn_up", "ffn_down"};
  for (int64_t il = 0; il < d.n_layer; ++il) {
    for (const std::string& n : names) {
      const model::GgufTensorInfo* t =
          file.FindTensor("blk." + std::to_string(il) + "." + n + ".weight");
      if (t != nullptr) total += DeviceMatrixBytes(*t, d, packed_weights);
    }
    total += 2 * AlignUp(d.n_embd * sizeof(float));  // attn_norm, ffn_norm
  }
  return total;
}

int64_t GraphMaxContext(const ModelDims& d) {
  return std::min<int64_t>(d.n_ctx, kGraphMaxContext) / cuda::attn::kBlockPositions *
         cuda::attn::kBlockPositions;
}

StepLayout GraphWorkspaceLayout(const ModelDims& d) {
  const int64_t tier = GraphMaxContext(d);
  return LayOutStep(d, kMaxGraphBatch, kMaxGraphBatch,
                    kMaxGraphBatch * (tier / cuda::attn::kBlockPositions),
                    kMaxGraphBatch * cuda::attn::SplitsFor(std::max<int64_t>(tier - 1, 0)));
}

}  // namespace cuda_runner

Result<CudaRunnerMemory> EstimateCudaRunnerMemory(const model::GgufFile& file,
                                                  const CudaRunnerMemoryOptions& options) {
  using namespace cuda_runner;
  if (options.max_step_tokens < 1 || options.max_logit_rows < 1 || options.context_tokens < 1) {
    return InvalidArgumentError("the largest step must have at least 1 token and 1 logit row");
  }
  PIER_ASSIGN_OR_RETURN(const ModelDims d, ReadModelDims(file));
  CudaRunnerMemory m;
  m.weight_bytes = WeightBlockBytes(file, d, options.packed_weights);
  // The largest step: every token in a sequence of its own over the whole context (each with
  // a full block table and every split), an upper bound on any step of this many tokens.
  const int64_t n_tok = options.max_step_tokens;
  const int64_t n_out = std::min(options.max_logit_rows, n_tok);
  const int64_t ctx = options.context_tokens;
  const int64_t blocks = (ctx + cuda::attn::kBlockPositions - 1) / cuda::attn::kBlockPositions;
  m.step_workspace_bytes =
      LayOutStep(d, n_tok, n_out, n_tok * blocks, n_tok * cuda::attn::SplitsFor(ctx - 1)).bytes;
  if (options.use_graphs) m.graph_workspace_bytes = GraphWorkspaceLayout(d).bytes;
  return m;
}

}  // namespace pier::engine

#include "engine/runner/cpu/llama_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/thread_pool.h"
#include "engine/runner/batch_check.h"
#include "engine/runner/step_workspace.h"
#include "kernels/cpu/kv_convert.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/packed_weights.h"
#include "kernels/cpu/paged_attention.h"
#include "memory/workspace.h"
#include "model/model_info.h"
#include "tensor/dequantize.h"

namespace pier::engine {
namespace {

using kernels::AttentionSpan;
using kernels::ConvertF32ToF16;
using kernels::ConvertF32ToQ8_0;
using kernels::kPagedAttentionMaxHeadDim;
using kernels::PagedAttention;
using kernels::WeightMatrix;
namespace ops = kernels::ops;

struct LayerWeights {
  const float* attn_norm = nullptr;  // [n_embd]
  WeightMatrix wq, wk, wv, wo;  // [n_head*hd, n_embd], [n_kv*hd, n_embd] x2, [n_embd, n_head*hd]
  const float* bq = nullptr;    // [n_head*hd] or null
  const float* bk = nullptr;    // [n_kv*hd] or null
  const float* bv = nullptr;    // [n_kv*hd] or null
  const float* ffn_norm = nullptr;        // [n_embd]
  WeightMatrix gate, up, down;            // [n_ff, n_embd] x2, [n_embd, n_ff]
  const float* q_norm = nullptr;          // [hd] or null (LlamaVariant::qk_norm)
  const float* k_norm = nullptr;          // [hd] or null
  const float* post_attn_norm = nullptr;  // [n_embd] or null (LlamaVariant::post_norms)
  const float* post_ffw_norm = nullptr;   // [n_embd] or null
  int64_t window = 0;                     // sliding window (0: attends every position)
  int64_t rope_table = 0;                 // 0: the model's RoPE base; 1: the sliding layers'
  // When packing left wq, wk, wv (gate, up) side by side: one matrix of their stacked
  // rows, multiplied at once (one activation quantization, one pass over the pool).
  std::optional<WeightMatrix> qkv;      // [n_head*hd + 2*n_kv*hd, n_embd]
  std::optional<WeightMatrix> gate_up;  // [2*n_ff, n_embd]
};

// The matrices `parts` as one, when they are packed, of one type and width, each but the
// last a whole number of 16-row groups, and stored back to back.
std::optional<WeightMatrix> Stacked(std::initializer_list<const WeightMatrix*> parts) {
  const WeightMatrix& first = **parts.begin();
  WeightMatrix stacked = first;
  stacked.n_rows = 0;
  const uint8_t* next = first.data;
  for (const WeightMatrix* w : parts) {
    if (w->layout != kernels::WeightLayout::kPacked16 || w->type != first.type ||
        w->n_cols != first.n_cols || w->data != next || stacked.n_rows % 16 != 0) {
      return std::nullopt;
    }
    stacked.n_rows += w->n_rows;
    next += kernels::PackedWeightBytes(*w);
  }
  return stacked;
}

struct Hyper {
  int64_t n_embd = 0, n_layer = 0, n_ff = 0, n_head = 0, n_kv = 0, hd = 0, n_rot = 0;
  int64_t n_vocab = 0, n_ctx = 0;
  float eps = 0;
};

class LlamaRunner final : public ModelRunner {
 public:
  LlamaRunner(const model::GgufFile& file, const LlamaVariant& variant,
              const CpuRunnerOptions& options)
      : file_(file),
        variant_(variant),
        options_(options),
        workspace_(*options.governor, options.workspace_owner) {}

  Status Init();
  const ModelShape& shape() const override { return shape_; }
  Result<StepOutput> Step(const Batch& batch) override;

 private:
  // A 2-D weight [rows, cols] by name; checks shape and that MatMul has a kernel for it.
  Result<WeightMatrix> Matrix(const std::string& name, int64_t rows, int64_t cols);
  // Packs every matrix CpuRunnerPacksTensor names into packed_weights_, releasing the
  // file's pages behind it; returns the bytes of the tensors packed.
  Result<uint64_t> PackMatrices();
  Status ValidateBatch(const Batch& batch, int64_t* n_tokens, int64_t* max_context) const;
  Status MatMul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y,
                const StepBuffers& b);
  Status MatMulToSlices(const WeightMatrix& w, const float* x, int64_t n_tokens,
                        std::span<const kernels::OutputSlice> slices, const StepBuffers& b);
  // Runs `fn(t)` for every t < n on the pool; `row_cost` (about the floats a row touches)
  // sets how many rows a thread takes at least, so that cheap rows are not handed out one
  // by one.
  void ForEachRow(int64_t n, int64_t row_cost, const std::function<void(int64_t)>& fn);
  // x += h per token row, h first RMS-normed by `post_norm` when it is not null (Gemma).
  void AddToResidual(int64_t n_tok, const float* post_norm, float* h, float* x);

  const model::GgufFile& file_;
  const LlamaVariant variant_;
  const CpuRunnerOptions options_;
  Hyper hp_;
  StepDims step_dims_;  // the model's part of every step's layout (set by Init)
  ModelShape shape_;
  std::vector<LayerWeights> layers_;
  const model::GgufTensorInfo* token_embd_ = nullptr;  // [n_vocab, n_embd], any dequantizable type
  WeightMatrix output_;                                // [n_vocab, n_embd]
  bool embd_packed_ = false;                           // token_embd_ rows come from output_
  const float* output_norm_ = nullptr;                 // [n_embd]
  std::vector<double> inv_freq_[2];  // [n_rot/2] angle per position: global, sliding layers
  int64_t n_rope_tables_ = 1;
  float q_scale_ = 1.0f;  // multiplies q so that the kernel's 1/sqrt(hd) gives 1/sqrt(scalar)
  float attn_softcap_ = 0.0f, final_softcap_ = 0.0f;  // the file's soft-capping (0: none)
  ExternalCharge weights_charge_;                     // the weights used in place (mapped)
  Block packed_weights_;  // packed copies of the matrices of packed types
  Block small_weights_;   // f32 copies of norms, biases: [sum of their sizes]
  Workspace workspace_;
};

Result<WeightMatrix> LlamaRunner::Matrix(const std::string& name, int64_t rows, int64_t cols) {
  PIER_ASSIGN_OR_RETURN(const model::GgufTensorInfo* t, file_.FindMatrix(name, rows, cols));
  WeightMatrix w{t->type, rows, cols, t->data, *RowBytes(t->type, cols)};
  // A zero-token product checks the type and shape without touching memory.
  Status supported = kernels::MatMul(w, nullptr, 0, nullptr, rows, {}, *options_.pool);
  if (!supported.ok()) {
    return supported.WithContext(file_.path() + ": tensor '" + name + "'");
  }
  return w;
}

Result<uint64_t> LlamaRunner::PackMatrices() {
  struct Packable {
    const model::GgufTensorInfo* tensor;
    WeightMatrix* matrix;
  };
  std::vector<Packable> todo;
  auto consider = [&](WeightMatrix* w) {
    for (const model::GgufTensorInfo& t : file_.tensors()) {
      if (t.data == w->data && CpuRunnerPacksTensor(file_, t, options_.weights_dtype)) {
        todo.push_back({&t, w});
      }
    }
  };
  for (LayerWeights& l : layers_) {
    for (WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down}) consider(w);
    if (variant_.fused_projections) {
      consider(&*l.qkv);
      consider(&*l.gate_up);
    }
  }
  consider(&output_);
  if (todo.empty()) return uint64_t{0};

  auto aligned = [](size_t n) { return (n + 63) / 64 * 64; };
  size_t total = 0;
  for (const Packable& p : todo) {
    total += aligned(CpuRunnerPackedBytes(*p.tensor, options_.weights_dtype));
  }
  MemoryResult<Block> block = options_.governor->Allocate(options_.weights_owner, total);
  if (!block.ok()) return block.status();
  packed_weights_ = std::move(block).value();
  std::byte* dst = packed_weights_.as<std::byte>();
  PIER_CHECK(reinterpret_cast<uintptr_t>(dst) % 64 == 0, "governor blocks are 64-byte aligned");
  uint64_t source_bytes = 0;
  for (const Packable& p : todo) {
    const WeightMatrix source = *p.matrix;
    const size_t bytes = CpuRunnerPackedBytes(*p.tensor, options_.weights_dtype);
    int64_t released = 0;
    auto release = [&](int64_t rows) {
      file_.ReleasePages(source.data + released * source.row_bytes,
                         (rows - released) * source.row_bytes);
      released = rows;
    };
    const std::span<std::byte> out(dst, bytes);
    Result<WeightMatrix> packed =
        kernels::HasPackedLayout(source.type)
            ? kernels::PackWeights(source, out, release)
            : kernels::QuantizeToPacked(source, *options_.weights_dtype, out, release);
    if (!packed.ok()) return packed.status().WithContext(file_.path() + ": " + p.tensor->name);
    *p.matrix = *packed;
    if (p.tensor == token_embd_) embd_packed_ = true;
    source_bytes += p.tensor->size_bytes;
    dst += aligned(bytes);
  }
  if (!variant_.fused_projections) {
    for (LayerWeights& l : layers_) {
      l.qkv = Stacked({&l.wq, &l.wk, &l.wv});
      l.gate_up = Stacked({&l.gate, &l.up});
    }
  }
  return source_bytes;
}

Status LlamaRunner::Init() {
  PIER_ASSIGN_OR_RETURN(model::ModelInfo info, model::ReadModelInfo(file_));
  hp_.n_embd = info.embedding_length;
  hp_.n_layer = info.block_count;
  hp_.n_ff = info.feed_forward_length;
  hp_.n_head = info.head_count;
  hp_.n_kv = info.head_count_kv;
  hp_.hd = info.head_dim;
  hp_.n_rot = info.rope_dimension_count;
  hp_.n_ctx = info.context_length;
  hp_.eps = static_cast<float>(info.rms_norm_eps);
  if (hp_.hd > kPagedAttentionMaxHeadDim) {
    return UnsupportedError(file_.path() + ": head size " + std::to_string(hp_.hd) +
                            " is above the CPU attention's limit of " +
                            std::to_string(kPagedAttentionMaxHeadDim));
  }
  if (hp_.n_rot % 2 != 0 || hp_.n_rot > hp_.hd) {
    return InvalidArgumentError(file_.path() + ": RoPE dimension count " +
                                std::to_string(hp_.n_rot) + " must be even and <= head size");
  }

  token_embd_ = file_.FindTensor("token_embd.weight");
  if (token_embd_ == nullptr || token_embd_->dims.size() != 2 ||
      token_embd_->dims[0] != hp_.n_embd) {
    return InvalidArgumentError(file_.path() + ": token_embd.weight missing or not [n_embd, *]");
  }
  if (!CanDequantize(token_embd_->type)) {
    return UnsupportedError(file_.path() + ": token_embd.weight has unsupported type " +
                            std::string(DTypeName(token_embd_->type)));
  }
  hp_.n_vocab = token_embd_->dims[1];
  const bool tied = file_.FindTensor("output.weight") == nullptr;
  PIER_ASSIGN_OR_RETURN(
      output_, Matrix(tied ? "token_embd.weight" : "output.weight", hp_.n_vocab, hp_.n_embd));

  // RoPE: angle(pos, i) = pos * freq_scale * base^(-2i/n_rot) / freq_factor[i].
  double freq_scale = 1.0;
  if (info.rope_scaling) {
    if (info.rope_scaling->type != "linear") {
      return UnsupportedError(file_.path() + ": RoPE scaling '" + info.rope_scaling->type +
                              "' is not supported (linear is)");
    }
    if (!(info.rope_scaling->factor > 0)) {
      return InvalidArgumentError(file_.path() + ": RoPE scaling factor must be positive");
    }
    freq_scale = 1.0 / info.rope_scaling->factor;
  }

  // Small tensors: norms, biases, RoPE frequency factors, copied to f32 in one block.
  struct SmallTensor {
    const model::GgufTensorInfo* tensor;
    const float** target;
  };
  std::vector<SmallTensor> small;
  auto vec = [&](const std::string& name, int64_t n, bool required,
                 const float** target) -> Status {
    const model::GgufTensorInfo* t = file_.FindTensor(name);
    if (t == nullptr) {
      if (!required) return Status::Ok();
      return NotFoundError(file_.path() + ": tensor '" + name + "' is missing");
    }
    if (t->element_count != n || t->row_count() != 1) {
      return InvalidArgumentError(file_.path() + ": tensor '" + name + "' should have " +
                                  std::to_string(n) + " elements in one row");
    }
    if (!CanDequantize(t->type)) {
      return UnsupportedError(file_.path() + ": tensor '" + name + "' has unsupported type " +
                              std::string(DTypeName(t->type)));
    }
    small.push_back({t, target});
    return Status::Ok();
  };

  const int64_t q_dim = hp_.n_head * hp_.hd, kv_dim = hp_.n_kv * hp_.hd;
  layers_.resize(hp_.n_layer);
  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    LayerWeights& l = layers_[il];
    const std::string p = "blk." + std::to_string(il) + ".";
    PIER_RETURN_IF_ERROR(vec(p + "attn_norm.weight", hp_.n_embd, true, &l.attn_norm));
    PIER_RETURN_IF_ERROR(vec(p + "ffn_norm.weight", hp_.n_embd, true, &l.ffn_norm));
    PIER_RETURN_IF_ERROR(vec(p + "attn_q.bias", q_dim, variant_.qkv_bias, &l.bq));
    PIER_RETURN_IF_ERROR(vec(p + "attn_k.bias", kv_dim, variant_.qkv_bias, &l.bk));
    PIER_RETURN_IF_ERROR(vec(p + "attn_v.bias", kv_dim, variant_.qkv_bias, &l.bv));
    if (variant_.qk_norm) {
      PIER_RETURN_IF_ERROR(vec(p + "attn_q_norm.weight", hp_.hd, true, &l.q_norm));
      PIER_RETURN_IF_ERROR(vec(p + "attn_k_norm.weight", hp_.hd, true, &l.k_norm));
    }
    if (variant_.post_norms) {
      PIER_RETURN_IF_ERROR(
          vec(p + "post_attention_norm.weight", hp_.n_embd, true, &l.post_attn_norm));
      PIER_RETURN_IF_ERROR(vec(p + "post_ffw_norm.weight", hp_.n_embd, true, &l.post_ffw_norm));
    }
    l.window = LayerWindow(variant_.swa_period, info.sliding_window, il);
    if (variant_.swa_period > 0 && l.window > 0) l.rope_table = 1;
    if (variant_.fused_projections) {
      // One matrix each for Q|K|V and gate|up (rows in that order), multiplied as one.
      PIER_ASSIGN_OR_RETURN(l.qkv, Matrix(p + "attn_qkv.weight", q_dim + 2 * kv_dim, hp_.n_embd));
      PIER_ASSIGN_OR_RETURN(l.gate_up, Matrix(p + "ffn_up.weight", 2 * hp_.n_ff, hp_.n_embd));
    } else {
      PIER_ASSIGN_OR_RETURN(l.wq, Matrix(p + "attn_q.weight", q_dim, hp_.n_embd));
      PIER_ASSIGN_OR_RETURN(l.wk, Matrix(p + "attn_k.weight", kv_dim, hp_.n_embd));
      PIER_ASSIGN_OR_RETURN(l.wv, Matrix(p + "attn_v.weight", kv_dim, hp_.n_embd));
      PIER_ASSIGN_OR_RETURN(l.gate, Matrix(p + "ffn_gate.weight", hp_.n_ff, hp_.n_embd));
      PIER_ASSIGN_OR_RETURN(l.up, Matrix(p + "ffn_up.weight", hp_.n_ff, hp_.n_embd));
    }
    PIER_ASSIGN_OR_RETURN(l.wo, Matrix(p + "attn_output.weight", hp_.n_embd, q_dim));
    PIER_ASSIGN_OR_RETURN(l.down, Matrix(p + "ffn_down.weight", hp_.n_embd, hp_.n_ff));
  }
  PIER_RETURN_IF_ERROR(vec("output_norm.weight", hp_.n_embd, true, &output_norm_));
  const float* freq_factors = nullptr;
  PIER_RETURN_IF_ERROR(vec("rope_freqs.weight", hp_.n_rot / 2, false, &freq_factors));

  int64_t small_floats = 0;
  for (const SmallTensor& s : small) small_floats += s.tensor->element_count;
  MemoryResult<Block> block = options_.governor->Allocate(
      options_.weights_owner, static_cast<size_t>(std::max<int64_t>(small_floats, 1)) * 4);
  if (!block.ok()) return block.status();
  small_weights_ = std::move(block).value();
  float* dst = small_weights_.as<float>();
  for (const SmallTensor& s : small) {
    PIER_RETURN_IF_ERROR(
        DequantizeRow(s.tensor->type, s.tensor->data, dst, s.tensor->element_count));
    *s.target = dst;
    dst += s.tensor->element_count;
  }

  // Sliding layers (gemma3) rotate by their own base, unscaled (as Hugging Face's
  // rope_local_base_freq and llama.cpp's rope_freq_base_train_swa).
  n_rope_tables_ = variant_.swa_period > 0 ? 2 : 1;
  if (variant_.swa_period > 0 && info.sliding_window == 0) {
    return InvalidArgumentError(file_.path() + ": sliding-window layers need " + info.architecture +
                                ".attention.sliding_window");
  }
  for (int64_t table = 0; table < n_rope_tables_; ++table) {
    const double base = table == 0 ? info.rope_freq_base : variant_.swa_rope_base;
    const double scale = table == 0 ? freq_scale : 1.0;
    inv_freq_[table].resize(hp_.n_rot / 2);
    for (int64_t i = 0; i < hp_.n_rot / 2; ++i) {
      inv_freq_[table][i] =
          scale * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(hp_.n_rot));
      if (freq_factors != nullptr && table == 0) {
        inv_freq_[table][i] /= static_cast<double>(freq_factors[i]);
      }
    }
  }
  attn_softcap_ = static_cast<float>(info.attn_logit_softcapping);
  final_softcap_ = static_cast<float>(info.final_logit_softcapping);
  if (variant_.attn_scalar > 0) {
    q_scale_ = static_cast<float>(std::sqrt(static_cast<double>(hp_.hd) / variant_.attn_scalar));
  }

  PIER_ASSIGN_OR_RETURN(const uint64_t packed_source_bytes, PackMatrices());
  if (info.weight_bytes > packed_source_bytes) {
    MemoryResult<ExternalCharge> charge = options_.governor->ChargeExternal(
        options_.weights_owner, info.weight_bytes - packed_source_bytes);
    if (!charge.ok()) return charge.status();
    weights_charge_ = std::move(charge).value();
  }

  shape_.n_vocab = hp_.n_vocab;
  shape_.n_embd = hp_.n_embd;
  shape_.context_length = hp_.n_ctx;
  PIER_ASSIGN_OR_RETURN(shape_.kv_groups, KvGroupsFor(file_));
  shape_.kv.n_layer = shape_.kv_groups.layers_per_block;
  shape_.kv.n_kv_head = hp_.n_kv;
  shape_.kv.head_dim = hp_.hd;
  shape_.kv.block_size = options_.kv->layout().block_size;
  shape_.kv.dtype = options_.kv->layout().dtype;  // any dtype the store offers
  if (!(options_.kv->layout() == shape_.kv)) {
    return InvalidArgumentError(file_.path() +
                                ": the KV store's layout does not match the model (layers per "
                                "block, K/V heads, head size)");
  }
  step_dims_.n_embd = hp_.n_embd;
  step_dims_.n_head = hp_.n_head;
  step_dims_.n_kv_head = hp_.n_kv;
  step_dims_.head_dim = hp_.hd;
  step_dims_.n_ff = hp_.n_ff;
  step_dims_.n_rot = hp_.n_rot;
  step_dims_.n_vocab = hp_.n_vocab;
  step_dims_.n_rope_tables = n_rope_tables_;
  step_dims_.kv = shape_.kv;
  return Status::Ok();
}

Status LlamaRunner::ValidateBatch(const Batch& batch, int64_t* n_tokens,
                                  int64_t* max_context) const {
  const BatchLimits limits{hp_.n_vocab, hp_.n_ctx, shape_.kv.block_size, options_.kv->num_blocks(),
                           &shape_.kv_groups};
  return CheckBatch(batch, limits, n_tokens, max_context);
}

void LlamaRunner::ForEachRow(int64_t n, int64_t row_cost, const std::function<void(int64_t)>& fn) {
  constexpr int64_t kMinChunkCost = 1 << 14;
  const int64_t min_rows = std::max<int64_t>(1, kMinChunkCost / std::max<int64_t>(1, row_cost));
  options_.pool->ParallelFor(n, min_rows, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) fn(t);
  });
}

void LlamaRunner::AddToResidual(int64_t n_tok, const float* post_norm, float* h, float* x) {
  const int64_t E = hp_.n_embd;
  ForEachRow(n_tok, E, [&](int64_t t) {
    if (post_norm != nullptr) ops::RmsNorm(h + t * E, post_norm, E, hp_.eps, h + t * E);
    ops::Add(h + t * E, E, x + t * E);
  });
}

Status LlamaRunner::MatMul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y,
                           const StepBuffers& b) {
  return kernels::MatMul(
      w, x, n_tokens, y, w.n_rows,
      std::span<std::byte>(workspace_.At<std::byte>(b.mm_scratch), b.mm_scratch_bytes),
      *options_.pool);
}

Status LlamaRunner::MatMulToSlices(const WeightMatrix& w, const float* x, int64_t n_tokens,
                                   std::span<const kernels::OutputSlice> slices,
                                   const StepBuffers& b) {
  return kernels::MatMulToSlices(
      w, x, n_tokens, slices,
      std::span<std::byte>(workspace_.At<std::byte>(b.mm_scratch), b.mm_scratch_bytes),
      *options_.pool);
}

Result<StepOutput> LlamaRunner::Step(const Batch& batch) {
  int64_t n_tok = 0, max_context = 0;
  PIER_RETURN_IF_ERROR(ValidateBatch(batch, &n_tok, &max_context));
  StepOutput output;
  output.n_vocab = hp_.n_vocab;
  if (n_tok == 0) return output;

  // Token rows, their positions, attention spans and the rows that produce logits.
  std::vector<int64_t> positions(n_tok);  // [T]
  std::vector<int32_t> ids(n_tok);        // [T]
  std::vector<AttentionSpan> spans(batch.sequences.size());
  // Each KV group's view of the block tables (kv_groups.h): entry i * G + g of a sequence's
  // table is group g's block i.
  const KvGroups& groups = shape_.kv_groups;
  const int64_t G = groups.n_groups();
  std::vector<std::vector<int32_t>> group_tables(G > 1 ? G * batch.sequences.size() : 0);
  std::vector<std::vector<AttentionSpan>> group_spans(static_cast<size_t>(G));
  std::vector<int64_t> logit_rows;  // [R] rows of x whose logits are wanted
  int64_t row = 0;
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceSpan& seq = batch.sequences[s];
    const int64_t n = static_cast<int64_t>(seq.tokens.size());
    spans[s] = {seq.block_table.data(), seq.first_position, n, row};
    if (G > 1) {
      const int64_t n_blocks =
          (seq.first_position + n + shape_.kv.block_size - 1) / shape_.kv.block_size;
      for (int64_t g = 0; g < G; ++g) {
        std::vector<int32_t>& table = group_tables[g * batch.sequences.size() + s];
        for (int64_t i = 0; i < n_blocks; ++i) table.push_back(seq.block_table[i * G + g]);
        group_spans[g].push_back({table.data(), seq.first_position, n, row});
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      positions[row + i] = seq.first_position + i;
      ids[row + i] = seq.tokens[i];
      if (seq.logits == LogitsWanted::kAll || (seq.logits == LogitsWanted::kLast && i == n - 1)) {
        logit_rows.push_back(row + i);
        output.rows.push_back({static_cast<int32_t>(s), seq.first_position + i});
      }
    }
    row += n;
  }
  const int64_t n_out = static_cast<int64_t>(logit_rows.size());
  if (G == 1) group_spans[0] = spans;

  const int64_t E = hp_.n_embd, q_dim = hp_.n_head * hp_.hd, kv_dim = hp_.n_kv * hp_.hd;
  const int64_t half_rot = hp_.n_rot / 2;
  // The layout admission reserved for (step_workspace.h), with this step's sizes.
  StepDims dims = step_dims_;
  dims.n_tok = n_tok;
  dims.n_out = n_out;
  dims.max_context = max_context;
  int64_t longest_span = 1;
  for (const SequenceSpan& s : batch.sequences) {
    longest_span = std::max(longest_span, static_cast<int64_t>(s.tokens.size()));
  }
  auto set_att_slots = [&](int64_t per_thread) {
    dims.att_slots = per_thread * options_.pool->num_threads();
    dims.att_queries = kernels::PagedAttentionQueriesPerTask(hp_.n_head, max_context,
                                                             dims.att_slots, longest_span);
  };
  set_att_slots(4);
  for (const LayerWeights& l : layers_) {
    for (const WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down}) {
      if (w->n_rows == 0) continue;  // fused into qkv / gate_up
      dims.mm_scratch_bytes =
          std::max(dims.mm_scratch_bytes, kernels::MatMulScratchBytes(*w, n_tok));
    }
    for (const auto& w : {l.qkv, l.gate_up}) {
      if (w.has_value()) {
        dims.mm_scratch_bytes =
            std::max(dims.mm_scratch_bytes, kernels::MatMulScratchBytes(*w, n_tok));
      }
    }
  }
  dims.mm_scratch_bytes =
      std::max(dims.mm_scratch_bytes, kernels::MatMulScratchBytes(output_, n_out));
  // A decode step of many sequences: 16 attention slots per thread instead of 4, so the threads
  // end the attention pass together (a slot's tasks are dealt to it up front; with 4 per
  // thread, 64 sequences left one thread idle for up to an eighth of the pass, every layer).
  // Only where the larger scratch fits the workspace already held (its short contexts' scores
  // are small beside a prefill step's buffers): it never asks the governor for more.
  if (longest_span == 1) {
    set_att_slots(16);
    if (LayOutStep(dims).bytes > workspace_.capacity()) set_att_slots(4);
  }
  const StepBuffers b = LayOutStep(dims);
  PIER_RETURN_IF_ERROR(workspace_.Reserve(b.bytes));

  float* x = workspace_.At<float>(b.x);
  float* h = workspace_.At<float>(b.h);
  float* q = workspace_.At<float>(b.q);
  float* k = workspace_.At<float>(b.k);
  float* v = workspace_.At<float>(b.v);
  float* attn = workspace_.At<float>(b.attn);
  float* gate = workspace_.At<float>(b.gate);
  float* up = workspace_.At<float>(b.up);
  float* cos_sin = workspace_.At<float>(b.cos_sin);
  float* att_scratch = workspace_.At<float>(b.att_scratch);
  float* out_x = workspace_.At<float>(b.out_x);
  float* logits = workspace_.At<float>(b.logits);

  // Embeddings and RoPE angles, per token.
  const size_t embd_row_bytes = *RowBytes(token_embd_->type, E);
  const float embd_scale = std::sqrt(static_cast<float>(E));
  Status embd_status;
  ForEachRow(n_tok, 4 * E, [&](int64_t t) {
    Status s = embd_packed_
                   ? kernels::DequantizePackedRow(output_, ids[t], x + t * E)
                   : DequantizeRow(token_embd_->type,
                                   token_embd_->data + static_cast<size_t>(ids[t]) * embd_row_bytes,
                                   x + t * E, E);
    PIER_CHECK(s.ok(), "token embedding: " + s.ToString());
    if (variant_.scale_embeddings) ops::Scale(embd_scale, E, x + t * E);
    for (int64_t table = 0; table < n_rope_tables_; ++table) {
      float* cs = cos_sin + (table * n_tok + t) * half_rot * 2;
      for (int64_t i = 0; i < half_rot; ++i) {
        const double angle = static_cast<double>(positions[t]) * inv_freq_[table][i];
        cs[2 * i] = static_cast<float>(std::cos(angle));
        cs[2 * i + 1] = static_cast<float>(std::sin(angle));
      }
    }
  });

  const int64_t bs = shape_.kv.block_size;
  KvStore& kv = *options_.kv;
  const KvDtype kv_dtype = shape_.kv.dtype;
  const size_t kv_row_bytes = shape_.kv.row_bytes();
  // Stopping is worth it only while most of the step is still ahead: past three quarters of
  // the layers, finishing costs the waiting request less than the step's redo costs the rest.
  const int64_t last_stop_layer = hp_.n_layer * 3 / 4;
  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    if (batch.stop_early != nullptr && il > 0 && il <= last_stop_layer &&
        batch.stop_early->load(std::memory_order_relaxed)) {
      StepOutput stopped;
      stopped.n_vocab = hp_.n_vocab;
      stopped.stopped_early = true;
      return stopped;
    }
    const LayerWeights& l = layers_[il];
    // This layer's K/V: plane `slot` of its group's blocks.
    const std::vector<AttentionSpan>& layer_spans = group_spans[groups.group_of_layer[il]];
    const int64_t slot = groups.slot_of_layer[il];
    // Attention block.
    ForEachRow(n_tok, E,
               [&](int64_t t) { ops::RmsNorm(x + t * E, l.attn_norm, E, hp_.eps, h + t * E); });
    if (l.qkv.has_value()) {
      const kernels::OutputSlice slices[] = {
          {q_dim, q, q_dim}, {kv_dim, k, kv_dim}, {kv_dim, v, kv_dim}};
      PIER_RETURN_IF_ERROR(MatMulToSlices(*l.qkv, h, n_tok, slices, b));
    } else {
      PIER_RETURN_IF_ERROR(MatMul(l.wq, h, n_tok, q, b));
      PIER_RETURN_IF_ERROR(MatMul(l.wk, h, n_tok, k, b));
      PIER_RETURN_IF_ERROR(MatMul(l.wv, h, n_tok, v, b));
    }
    ForEachRow(n_tok, 4 * (q_dim + kv_dim), [&](int64_t t) {
      float* qt = q + t * q_dim;
      float* kt = k + t * kv_dim;
      float* vt = v + t * kv_dim;
      if (l.bq != nullptr) ops::Add(l.bq, q_dim, qt);
      if (l.bk != nullptr) ops::Add(l.bk, kv_dim, kt);
      if (l.bv != nullptr) ops::Add(l.bv, kv_dim, vt);
      if (l.q_norm != nullptr) {
        for (int64_t hh = 0; hh < hp_.n_head; ++hh) {
          ops::RmsNorm(qt + hh * hp_.hd, l.q_norm, hp_.hd, hp_.eps, qt + hh * hp_.hd);
        }
        for (int64_t hh = 0; hh < hp_.n_kv; ++hh) {
          ops::RmsNorm(kt + hh * hp_.hd, l.k_norm, hp_.hd, hp_.eps, kt + hh * hp_.hd);
        }
      }
      const float* cs = cos_sin + (l.rope_table * n_tok + t) * half_rot * 2;
      ops::Rope(variant_.rope_style, qt, hp_.n_head, hp_.hd, hp_.n_rot, cs);
      ops::Rope(variant_.rope_style, kt, hp_.n_kv, hp_.hd, hp_.n_rot, cs);
      if (q_scale_ != 1.0f) ops::Scale(q_scale_, q_dim, qt);
    });
    // K/V of this step's tokens into their blocks, before any token attends: copied for
    // f32, rounded to nearest even for f16 (the same bits whichever path converts).
    for (const AttentionSpan& span : layer_spans) {
      for (int64_t i = 0; i < span.n_tokens; ++i) {
        const int64_t pos = span.first_position + i;
        const int32_t block = span.block_table[pos / bs];
        const size_t offset = static_cast<size_t>(pos % bs) * kv_row_bytes;
        const float* k_row = k + (span.first_row + i) * kv_dim;  // [n_kv, hd]
        const float* v_row = v + (span.first_row + i) * kv_dim;  // [n_kv, hd]
        std::byte* k_dst = kv.KeyPlane(slot, block) + offset;
        std::byte* v_dst = kv.ValuePlane(slot, block) + offset;
        switch (kv_dtype) {
          case KvDtype::kF16:
            ConvertF32ToF16(k_row, kv_dim, reinterpret_cast<uint16_t*>(k_dst));
            ConvertF32ToF16(v_row, kv_dim, reinterpret_cast<uint16_t*>(v_dst));
            break;
          case KvDtype::kQ8_0:  // heads are whole blocks (ValidateKvLayout)
            ConvertF32ToQ8_0(k_row, kv_dim, k_dst);
            ConvertF32ToQ8_0(v_row, kv_dim, v_dst);
            break;
          case KvDtype::kF32:
            std::memcpy(k_dst, k_row, kv_row_bytes);
            std::memcpy(v_dst, v_row, kv_row_bytes);
            break;
        }
      }
    }
    PagedAttention(kv.View(), slot, layer_spans, hp_.n_head, q, attn, max_context, att_scratch,
                   b.att_slots, b.att_queries, *options_.pool, l.window, attn_softcap_);
    PIER_RETURN_IF_ERROR(MatMul(l.wo, attn, n_tok, h, b));
    AddToResidual(n_tok, l.post_attn_norm, h, x);

    // Feed-forward block (SwiGLU).
    ForEachRow(n_tok, E,
               [&](int64_t t) { ops::RmsNorm(x + t * E, l.ffn_norm, E, hp_.eps, h + t * E); });
    if (l.gate_up.has_value()) {
      const kernels::OutputSlice slices[] = {{hp_.n_ff, gate, hp_.n_ff}, {hp_.n_ff, up, hp_.n_ff}};
      PIER_RETURN_IF_ERROR(MatMulToSlices(*l.gate_up, h, n_tok, slices, b));
    } else {
      PIER_RETURN_IF_ERROR(MatMul(l.gate, h, n_tok, gate, b));
      PIER_RETURN_IF_ERROR(MatMul(l.up, h, n_tok, up, b));
    }
    const bool gelu = variant_.activation == FfnActivation::kGeluTanh;
    ForEachRow(n_tok, 8 * hp_.n_ff, [&](int64_t t) {
      float* g = gate + t * hp_.n_ff;
      const float* u = up + t * hp_.n_ff;
      gelu ? ops::GeluMul(g, u, hp_.n_ff) : ops::SiluMul(g, u, hp_.n_ff);
    });
    PIER_RETURN_IF_ERROR(MatMul(l.down, gate, n_tok, h, b));
    AddToResidual(n_tok, l.post_ffw_norm, h, x);
  }

  // Output head, only for the rows that want logits.
  if (n_out > 0) {
    ForEachRow(n_out, E, [&](int64_t r) {
      ops::RmsNorm(x + logit_rows[r] * E, output_norm_, E, hp_.eps, out_x + r * E);
    });
    PIER_RETURN_IF_ERROR(MatMul(output_, out_x, n_out, logits, b));
    if (final_softcap_ > 0.0f) {
      ForEachRow(n_out, hp_.n_vocab, [&](int64_t r) {
        ops::Softcap(final_softcap_, hp_.n_vocab, logits + r * hp_.n_vocab);
      });
    }
  }
  output.logits = std::span<const float>(logits, static_cast<size_t>(n_out * hp_.n_vocab));
  return output;
}

}  // namespace

int64_t SlidingWindowPeriod(std::string_view arch) {
  if (arch == "gemma2") return 2;
  if (arch == "gemma3") return 6;
  return 0;
}

int64_t LayerWindow(int64_t swa_period, int64_t sliding_window, int64_t il) {
  if (swa_period > 0) return (il + 1) % swa_period != 0 ? sliding_window : 0;
  return sliding_window;  // Mistral-style: every layer, when the file sets one
}

Result<std::unique_ptr<ModelRunner>> CreateLlamaFamilyRunner(const model::GgufFile& file,
                                                             const LlamaVariant& variant,
                                                             const CpuRunnerOptions& options) {
  if (options.governor == nullptr || options.kv == nullptr || options.pool == nullptr) {
    return InvalidArgumentError("CPU runner: governor, KV store and thread pool are required");
  }
  auto runner = std::make_unique<LlamaRunner>(file, variant, options);
  PIER_RETURN_IF_ERROR(runner->Init());
  return std::unique_ptr<ModelRunner>(std::move(runner));
}

Result<std::unique_ptr<ModelRunner>> CreateLlamaRunner(const model::GgufFile& file,
                                                       const CpuRunnerOptions& options) {
  return CreateLlamaFamilyRunner(file, LlamaVariant{}, options);
}

}  // namespace pier::engine

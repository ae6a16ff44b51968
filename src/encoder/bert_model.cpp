#include "encoder/bert_model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <utility>

#include "common/check.h"
#include "common/thread_pool.h"
#include "kernels/cpu/encoder_ops.h"
#include "kernels/cpu/float_matmul.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/packed_weights.h"
#include "memory/workspace.h"
#include "tensor/dequantize.h"

namespace pier::encoder {

using kernels::AddBias;
using kernels::AttendHead;
using kernels::AttendScratchFloats;
using kernels::FloatMatMul;
using kernels::FloatMatrix;
using kernels::Gelu;
using kernels::LayerNorm;

namespace {

using kernels::WeightMatrix;

struct Layer {
  WeightMatrix wq, wk, wv, wo, up, down;
  // f32 copies of those stored as floats (f16, bf16, f32), used instead when set.
  FloatMatrix fq, fk, fv, fo, fup, fdown;
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr, *bo = nullptr;
  const float *bup = nullptr, *bdown = nullptr;
  const float *attn_norm_w = nullptr, *attn_norm_b = nullptr;
  const float *out_norm_w = nullptr, *out_norm_b = nullptr;
};

size_t Aligned(size_t n) { return (n + 63) / 64 * 64; }

// The workspace's buffers for `tokens` tokens.
struct Plan {
  size_t x, q, k, v, attn, tmp, ff, scores, scratch, bytes;
};

}  // namespace

struct BertModel::Impl {
  const model::GgufFile& file;
  BertOptions options;
  EncoderInfo info;
  std::vector<Layer> layers;
  const model::GgufTensorInfo* token_embd = nullptr;
  const model::GgufTensorInfo* position_embd = nullptr;
  const model::GgufTensorInfo* token_types = nullptr;
  const float* embd_norm_w = nullptr;
  const float* embd_norm_b = nullptr;
  Block packed;
  Block small;
  Block widened;  // the float matrices in f32
  ExternalCharge mapped_charge;
  std::unique_ptr<Workspace> workspace;
  size_t scratch_bytes = 0;

  Impl(const model::GgufFile& f, const BertOptions& o) : file(f), options(o) {}

  Plan PlanFor(int64_t tokens) const {
    WorkspacePlan p;
    const int64_t d = info.embedding_length;
    Plan plan{};
    plan.x = p.Add<float>(tokens * d);
    plan.q = p.Add<float>(tokens * d);
    plan.k = p.Add<float>(tokens * d);
    plan.v = p.Add<float>(tokens * d);
    plan.attn = p.Add<float>(tokens * d);
    plan.tmp = p.Add<float>(tokens * d);
    plan.ff = p.Add<float>(tokens * info.feed_forward_length);
    // Attention scratch: one slot per pool thread, each for the longest text.
    plan.scores = p.Add<float>(options.pool->num_threads() *
                               AttendScratchFloats(info.context_length, info.head_dim));
    plan.scratch = p.Add<std::byte>(static_cast<int64_t>(scratch_bytes));
    plan.bytes = p.bytes();
    return plan;
  }

  Result<WeightMatrix> Matrix(const std::string& name, int64_t rows, int64_t cols) const {
    const model::GgufTensorInfo* t = file.FindTensor(name);
    if (t == nullptr) return NotFoundError(file.path() + ": tensor '" + name + "' is missing");
    if (t->dims.size() != 2 || t->dims[0] != cols || t->dims[1] != rows) {
      return InvalidArgumentError(file.path() + ": tensor '" + name + "' should be [" +
                                  std::to_string(cols) + ", " + std::to_string(rows) + "]");
    }
    WeightMatrix w{.type = t->type,
                   .n_rows = rows,
                   .n_cols = cols,
                   .data = t->data,
                   .row_bytes = static_cast<size_t>(t->size_bytes / static_cast<uint64_t>(rows))};
    return w;
  }

  Status Init();
  Status Forward(std::span<const EncoderInput> inputs, float* out);
};

Status BertModel::Impl::Init() {
  PIER_ASSIGN_OR_RETURN(info, ReadEncoderInfo(file));
  const int64_t d = info.embedding_length, ff = info.feed_forward_length;
  auto table = [&](const std::string& name, int64_t min_rows,
                   bool required) -> Result<const model::GgufTensorInfo*> {
    const model::GgufTensorInfo* t = file.FindTensor(name);
    if (t == nullptr) {
      if (!required) return t;
      return NotFoundError(file.path() + ": tensor '" + name + "' is missing");
    }
    if (t->dims.size() != 2 || t->dims[0] != d || t->dims[1] < min_rows) {
      return InvalidArgumentError(file.path() + ": tensor '" + name + "' should be [" +
                                  std::to_string(d) + ", >= " + std::to_string(min_rows) + "]");
    }
    if (!CanDequantize(t->type)) {
      return UnsupportedError(file.path() + ": tensor '" + name + "' has unsupported type " +
                              std::string(DTypeName(t->type)));
    }
    return t;
  };
  PIER_ASSIGN_OR_RETURN(token_embd, table("token_embd.weight", 1, true));
  PIER_ASSIGN_OR_RETURN(position_embd, table("position_embd.weight", info.context_length, true));
  PIER_ASSIGN_OR_RETURN(token_types, table("token_types.weight", 1, false));

  // Norms and biases: f32 copies in one weights block.
  struct Small {
    const model::GgufTensorInfo* tensor;
    const float** target;
  };
  std::vector<Small> small_tensors;
  auto vec = [&](const std::string& name, int64_t n, const float** target) -> Status {
    const model::GgufTensorInfo* t = file.FindTensor(name);
    if (t == nullptr) return NotFoundError(file.path() + ": tensor '" + name + "' is missing");
    if (t->element_count != n || t->row_count() != 1 || !CanDequantize(t->type)) {
      return InvalidArgumentError(file.path() + ": tensor '" + name + "' should hold " +
                                  std::to_string(n) + " values in one row");
    }
    small_tensors.push_back({t, target});
    return Status::Ok();
  };
  PIER_RETURN_IF_ERROR(vec("token_embd_norm.weight", d, &embd_norm_w));
  PIER_RETURN_IF_ERROR(vec("token_embd_norm.bias", d, &embd_norm_b));
  layers.resize(static_cast<size_t>(info.block_count));
  for (int64_t il = 0; il < info.block_count; ++il) {
    Layer& l = layers[static_cast<size_t>(il)];
    const std::string p = "blk." + std::to_string(il) + ".";
    PIER_ASSIGN_OR_RETURN(l.wq, Matrix(p + "attn_q.weight", d, d));
    PIER_ASSIGN_OR_RETURN(l.wk, Matrix(p + "attn_k.weight", d, d));
    PIER_ASSIGN_OR_RETURN(l.wv, Matrix(p + "attn_v.weight", d, d));
    PIER_ASSIGN_OR_RETURN(l.wo, Matrix(p + "attn_output.weight", d, d));
    PIER_ASSIGN_OR_RETURN(l.up, Matrix(p + "ffn_up.weight", ff, d));
    PIER_ASSIGN_OR_RETURN(l.down, Matrix(p + "ffn_down.weight", d, ff));
    PIER_RETURN_IF_ERROR(vec(p + "attn_q.bias", d, &l.bq));
    PIER_RETURN_IF_ERROR(vec(p + "attn_k.bias", d, &l.bk));
    PIER_RETURN_IF_ERROR(vec(p + "attn_v.bias", d, &l.bv));
    PIER_RETURN_IF_ERROR(vec(p + "attn_output.bias", d, &l.bo));
    PIER_RETURN_IF_ERROR(vec(p + "ffn_up.bias", ff, &l.bup));
    PIER_RETURN_IF_ERROR(vec(p + "ffn_down.bias", d, &l.bdown));
    PIER_RETURN_IF_ERROR(vec(p + "attn_output_norm.weight", d, &l.attn_norm_w));
    PIER_RETURN_IF_ERROR(vec(p + "attn_output_norm.bias", d, &l.attn_norm_b));
    PIER_RETURN_IF_ERROR(vec(p + "layer_output_norm.weight", d, &l.out_norm_w));
    PIER_RETURN_IF_ERROR(vec(p + "layer_output_norm.bias", d, &l.out_norm_b));
  }
  int64_t small_floats = 0;
  for (const Small& s : small_tensors) small_floats += s.tensor->element_count;
  MemoryResult<Block> small_block = options.governor->Allocate(
      options.weights_owner, static_cast<size_t>(small_floats) * sizeof(float));
  if (!small_block.ok()) return small_block.status();
  small = std::move(small_block).value();
  float* dst = small.as<float>();
  for (const Small& s : small_tensors) {
    PIER_RETURN_IF_ERROR(
        DequantizeRow(s.tensor->type, s.tensor->data, dst, s.tensor->element_count));
    *s.target = dst;
    dst += s.tensor->element_count;
  }

  // Matrices with a packed layout are packed into one weights block; the rest (f16, f32) are
  // read from the mapping and charged as such.
  std::vector<WeightMatrix*> matrices;
  for (Layer& l : layers) {
    for (WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.up, &l.down}) matrices.push_back(w);
  }
  size_t packed_bytes = 0;
  uint64_t packed_source = 0;
  for (WeightMatrix* w : matrices) {
    if (kernels::HasPackedLayout(w->type)) packed_bytes += Aligned(kernels::PackedWeightBytes(*w));
  }
  if (packed_bytes > 0) {
    MemoryResult<Block> block = options.governor->Allocate(options.weights_owner, packed_bytes);
    if (!block.ok()) return block.status();
    packed = std::move(block).value();
    std::byte* out = packed.as<std::byte>();
    for (WeightMatrix* w : matrices) {
      if (!kernels::HasPackedLayout(w->type)) continue;
      const WeightMatrix source = *w;
      const size_t bytes = kernels::PackedWeightBytes(source);
      PIER_ASSIGN_OR_RETURN(*w, kernels::PackWeights(source, std::span<std::byte>(out, bytes)));
      file.ReleasePages(source.data, source.row_bytes * static_cast<size_t>(source.n_rows));
      packed_source += source.row_bytes * static_cast<uint64_t>(source.n_rows);
      out += Aligned(bytes);
    }
  }
  // Float matrices (f16 and the like) are widened to f32 once: the encoder's f32 kernel
  // (float_matmul.h) runs 16 lanes with fused multiply-adds, twice the shared kernel's 8.
  std::vector<std::pair<WeightMatrix*, FloatMatrix*>> floats;
  for (Layer& l : layers) {
    const std::pair<WeightMatrix*, FloatMatrix*> all[] = {{&l.wq, &l.fq},  {&l.wk, &l.fk},
                                                          {&l.wv, &l.fv},  {&l.wo, &l.fo},
                                                          {&l.up, &l.fup}, {&l.down, &l.fdown}};
    for (const auto& pair : all) {
      if (!kernels::HasPackedLayout(pair.first->type) && CanDequantize(pair.first->type) &&
          pair.first->n_cols % 16 == 0) {
        floats.push_back(pair);
      }
    }
  }
  size_t widened_floats = 0;
  for (const auto& [w, f] : floats) widened_floats += static_cast<size_t>(w->n_rows * w->n_cols);
  if (widened_floats > 0) {
    MemoryResult<Block> block =
        options.governor->Allocate(options.weights_owner, widened_floats * sizeof(float));
    if (!block.ok()) return block.status();
    widened = std::move(block).value();
    float* dst = widened.as<float>();
    for (const auto& [w, f] : floats) {
      for (int64_t r = 0; r < w->n_rows; ++r) {
        PIER_RETURN_IF_ERROR(
            DequantizeRow(w->type, w->data + r * w->row_bytes, dst + r * w->n_cols, w->n_cols));
      }
      file.ReleasePages(w->data, w->row_bytes * static_cast<size_t>(w->n_rows));
      packed_source += w->row_bytes * static_cast<uint64_t>(w->n_rows);
      *f = FloatMatrix{.data = dst, .n_rows = w->n_rows, .n_cols = w->n_cols};
      dst += w->n_rows * w->n_cols;
    }
  }
  const uint64_t mapped = info.weight_bytes - std::min(info.weight_bytes, packed_source);
  if (mapped > 0) {
    MemoryResult<ExternalCharge> charge =
        options.governor->ChargeExternal(options.weights_owner, mapped);
    if (!charge.ok()) return charge.status();
    mapped_charge = std::move(charge).value();
  }

  for (WeightMatrix* w : matrices) {
    // No tokens: only the type and shape are checked, so an unsupported type fails the load.
    Status usable = kernels::MatMul(*w, nullptr, 0, nullptr, w->n_rows, {}, *options.pool);
    if (!usable.ok()) return usable.WithContext(file.path());
    scratch_bytes =
        std::max(scratch_bytes, kernels::MatMulScratchBytes(*w, options.max_batch_tokens));
  }
  workspace = std::make_unique<Workspace>(*options.governor, options.workspace_owner);
  return workspace->Reserve(PlanFor(options.max_batch_tokens).bytes);
}

Status BertModel::Impl::Forward(std::span<const EncoderInput> inputs, float* out) {
  const int64_t d = info.embedding_length, ff = info.feed_forward_length;
  const int64_t n_head = info.head_count, hd = info.head_dim;
  std::vector<int64_t> starts;
  starts.reserve(inputs.size() + 1);
  int64_t total = 0;
  for (size_t s = 0; s < inputs.size(); ++s) {
    const EncoderInput& in = inputs[s];
    const auto n = static_cast<int64_t>(in.ids.size());
    if (n == 0) return InvalidArgumentError("input " + std::to_string(s) + " has no tokens");
    if (n > info.context_length) {
      return InvalidArgumentError("input " + std::to_string(s) + " has " + std::to_string(n) +
                                  " tokens, more than the model's context of " +
                                  std::to_string(info.context_length));
    }
    if (!in.type_ids.empty() && in.type_ids.size() != in.ids.size()) {
      return InvalidArgumentError("input " + std::to_string(s) +
                                  ": type_ids and ids differ in length");
    }
    for (int32_t id : in.ids) {
      if (id < 0 || id >= info.vocab_size) {
        return InvalidArgumentError("input " + std::to_string(s) + ": token id " +
                                    std::to_string(id) + " is outside the vocabulary of " +
                                    std::to_string(info.vocab_size));
      }
    }
    for (int32_t t : in.type_ids) {
      if (t < 0 || (t > 0 && t >= info.token_type_count)) {
        return InvalidArgumentError("input " + std::to_string(s) + ": token type " +
                                    std::to_string(t) + " is outside the model's " +
                                    std::to_string(std::max<int64_t>(info.token_type_count, 1)));
      }
    }
    starts.push_back(total);
    total += n;
  }
  starts.push_back(total);
  if (total > options.max_batch_tokens) {
    return InvalidArgumentError("a batch of " + std::to_string(total) +
                                " tokens is more than the model's max_batch_tokens " +
                                std::to_string(options.max_batch_tokens));
  }
  if (total == 0) return Status::Ok();
  const Plan plan = PlanFor(total);
  Workspace& ws = *workspace;
  float* x = ws.At<float>(plan.x);
  float* q = ws.At<float>(plan.q);
  float* k = ws.At<float>(plan.k);
  float* v = ws.At<float>(plan.v);
  float* attn = ws.At<float>(plan.attn);
  float* tmp = ws.At<float>(plan.tmp);
  float* hidden = ws.At<float>(plan.ff);
  float* scores = ws.At<float>(plan.scores);
  const std::span<std::byte> scratch(ws.At<std::byte>(plan.scratch), scratch_bytes);
  ThreadPool& pool = *options.pool;
  const float eps = static_cast<float>(info.layer_norm_eps);

  // Embeddings: word + position + token type, then LayerNorm; rows of one text are
  // positions 0..n-1.
  std::vector<int64_t> token_seq(static_cast<size_t>(total));
  for (size_t s = 0; s + 1 < starts.size(); ++s) {
    for (int64_t t = starts[s]; t < starts[s + 1]; ++t) token_seq[static_cast<size_t>(t)] = s;
  }
  // The first gather error, if any (each thread tests the flag; one writes the status).
  std::atomic_flag gather_failed;
  Status gather_status = Status::Ok();
  pool.ParallelFor(total, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(d));
    for (int64_t t = begin; t < end; ++t) {
      const size_t s = static_cast<size_t>(token_seq[static_cast<size_t>(t)]);
      const int64_t pos = t - starts[s];
      const EncoderInput& in = inputs[s];
      float* xt = tmp + t * d;
      Status st = model::DequantizeRows(*token_embd, in.ids[static_cast<size_t>(pos)], 1, xt);
      if (st.ok()) st = model::DequantizeRows(*position_embd, pos, 1, row.data());
      if (st.ok()) AddBias(row.data(), d, xt);
      if (st.ok() && token_types != nullptr) {
        const int32_t type = in.type_ids.empty() ? 0 : in.type_ids[static_cast<size_t>(pos)];
        st = model::DequantizeRows(*token_types, type, 1, row.data());
        if (st.ok()) AddBias(row.data(), d, xt);
      }
      if (!st.ok()) {
        if (!gather_failed.test_and_set()) gather_status = st;
        return;
      }
      LayerNorm(xt, embd_norm_w, embd_norm_b, d, eps, x + t * d);
    }
  });
  PIER_RETURN_IF_ERROR(gather_status);

  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t n_seqs = static_cast<int64_t>(inputs.size());
  // A layer's matrix product: the f32 copy when there is one, else the shared kernels.
  const auto product = [&](const WeightMatrix& w, const FloatMatrix& f, const float* in, float* y,
                           int64_t ldy) -> Status {
    if (f.data != nullptr) return FloatMatMul(f, in, total, y, ldy, pool);
    return kernels::MatMul(w, in, total, y, ldy, scratch, pool);
  };
  for (const Layer& l : layers) {
    PIER_RETURN_IF_ERROR(product(l.wq, l.fq, x, q, d));
    PIER_RETURN_IF_ERROR(product(l.wk, l.fk, x, k, d));
    PIER_RETURN_IF_ERROR(product(l.wv, l.fv, x, v, d));
    pool.ParallelFor(total, 16, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        AddBias(l.bq, d, q + t * d);
        AddBias(l.bk, d, k + t * d);
        AddBias(l.bv, d, v + t * d);
      }
    });
    // One task per (text, head), dealt round-robin to one slot per thread; each task writes its
    // own columns of its own rows, so which slot runs it changes nothing.
    const int64_t n_tasks = n_seqs * n_head;
    const int64_t slots = std::min<int64_t>(pool.num_threads(), n_tasks);
    const int64_t slot_floats = AttendScratchFloats(info.context_length, hd);
    pool.ParallelFor(slots, 1, [&](int64_t begin, int64_t end) {
      for (int64_t slot = begin; slot < end; ++slot) {
        float* slot_scores = scores + slot * slot_floats;
        for (int64_t task = slot; task < n_tasks; task += slots) {
          const int64_t s = task / n_head, h = task % n_head;
          const int64_t first = starts[static_cast<size_t>(s)];
          const int64_t n = starts[static_cast<size_t>(s) + 1] - first;
          const int64_t offset = first * d + h * hd;
          AttendHead(q + offset, k + offset, v + offset, n, hd, d, scale, slot_scores,
                     slot_scores + (n + 15) / 16 * 16, attn + offset);
        }
      }
    });
    PIER_RETURN_IF_ERROR(product(l.wo, l.fo, attn, tmp, d));
    pool.ParallelFor(total, 16, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        float* row = tmp + t * d;
        AddBias(l.bo, d, row);
        AddBias(x + t * d, d, row);  // residual
        LayerNorm(row, l.attn_norm_w, l.attn_norm_b, d, eps, x + t * d);
      }
    });
    PIER_RETURN_IF_ERROR(product(l.up, l.fup, x, hidden, ff));
    pool.ParallelFor(total, 8, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        AddBias(l.bup, ff, hidden + t * ff);
        Gelu(hidden + t * ff, ff);
      }
    });
    PIER_RETURN_IF_ERROR(product(l.down, l.fdown, hidden, tmp, d));
    pool.ParallelFor(total, 16, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        float* row = tmp + t * d;
        AddBias(l.bdown, d, row);
        AddBias(x + t * d, d, row);
        LayerNorm(row, l.out_norm_w, l.out_norm_b, d, eps, x + t * d);
      }
    });
  }

  // Pooling, per text in token order.
  for (int64_t s = 0; s < n_seqs; ++s) {
    const int64_t first = starts[static_cast<size_t>(s)];
    const int64_t n = starts[static_cast<size_t>(s) + 1] - first;
    float* o = out + s * d;
    switch (info.pooling) {
      case Pooling::kNone:  // every token's state, rows in the batch's token order
        std::copy(x + first * d, x + (first + n) * d, out + first * d);
        break;
      case Pooling::kMean: {
        std::fill(o, o + d, 0.0f);
        for (int64_t t = first; t < first + n; ++t) AddBias(x + t * d, d, o);
        const float inv = 1.0f / static_cast<float>(n);
        for (int64_t i = 0; i < d; ++i) o[i] *= inv;
        break;
      }
      case Pooling::kCls:
        std::copy(x + first * d, x + (first + 1) * d, o);
        break;
      case Pooling::kLast:
        std::copy(x + (first + n - 1) * d, x + (first + n) * d, o);
        break;
    }
  }
  return Status::Ok();
}

BertModel::BertModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BertModel::~BertModel() = default;

Result<std::unique_ptr<BertModel>> BertModel::Create(const model::GgufFile& file,
                                                     const BertOptions& options) {
  if (options.governor == nullptr || options.pool == nullptr) {
    return InvalidArgumentError("BertModel needs a governor and a thread pool");
  }
  if (options.max_batch_tokens <= 0) {
    return InvalidArgumentError("BertModel: max_batch_tokens must be positive");
  }
  auto impl = std::make_unique<Impl>(file, options);
  PIER_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<BertModel>(new BertModel(std::move(impl)));
}

const EncoderInfo& BertModel::info() const { return impl_->info; }
int64_t BertModel::max_batch_tokens() const { return impl_->options.max_batch_tokens; }

Result<uint64_t> BertModel::EstimateBytes(const model::GgufFile& file, int64_t max_batch_tokens,
                                          int threads) {
  PIER_ASSIGN_OR_RETURN(EncoderInfo info, ReadEncoderInfo(file));
  uint64_t bytes = info.weight_bytes;  // packed copies replace their source bytes
  // Float matrices are widened to f32: at most twice their f16 bytes more.
  for (const model::GgufTensorInfo& t : file.tensors()) {
    if (t.dims.size() == 2 && t.name.starts_with("blk.") && t.type == DType::kF16) {
      bytes += t.size_bytes;
    }
  }
  const int64_t d = info.embedding_length, ff = info.feed_forward_length;
  bytes += static_cast<uint64_t>(info.block_count) * static_cast<uint64_t>(10 * d + ff) * 4;
  const uint64_t tokens = static_cast<uint64_t>(max_batch_tokens);
  bytes += tokens * static_cast<uint64_t>(6 * d + ff) * 4;
  bytes += static_cast<uint64_t>(std::max(1, threads)) *
           static_cast<uint64_t>(AttendScratchFloats(info.context_length, info.head_dim)) * 4;
  bytes += tokens * static_cast<uint64_t>(ff + 256);  // the kernels' quantized activations
  return bytes;
}

Status BertModel::Embed(std::span<const EncoderInput> inputs, float* out) {
  return impl_->Forward(inputs, out);
}

void NormalizeL2(float* v, int64_t n) {
  double squares = 0;
  for (int64_t i = 0; i < n; ++i) squares += static_cast<double>(v[i]) * v[i];
  if (squares <= 0) return;
  const auto inv = static_cast<float>(1.0 / std::sqrt(squares));
  for (int64_t i = 0; i < n; ++i) v[i] *= inv;
}

}  // namespace pier::encoder

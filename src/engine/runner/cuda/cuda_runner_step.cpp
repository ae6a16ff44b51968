// One step of the CUDA runner without a graph: inputs staged in pinned memory and uploaded,
// every layer's kernels queued, the output head and the logits back (cuda_runner_internal.h).
#include <cmath>
#include <cstring>
#include <vector>

#include "common/check.h"
#include "engine/runner/batch_check.h"
#include "engine/runner/cuda/cuda_runner_internal.h"
#include "kernels/cuda/attention_math.h"
#include "kernels/cuda/quant_dot.h"

namespace pier::engine {
namespace cuda_runner {

Status CudaLlamaRunner::MatMul(const DeviceMatrix& w, const void* xq, int64_t n_tok, float* y) {
  if (w.packed) {
    return device_.PackedMatMul(w.type, w.data, w.rows, w.cols, xq, n_tok, y, w.rows, stream_);
  }
  if (options_.mma_min_tokens > 0 && n_tok >= options_.mma_min_tokens &&
      w.type != static_cast<int32_t>(cuda::quant::QuantType::kQ6_K)) {
    return device_.MmaMatMul(w.type, w.data, w.rows, w.cols, xq, n_tok, y, w.rows, stream_);
  }
  return device_.QuantMatMul(w.type, w.data, w.rows, w.cols, xq, n_tok, y, w.rows, stream_);
}

Status CudaLlamaRunner::MatMuls(
    std::initializer_list<std::pair<const DeviceMatrix*, float*>> products, const void* xq,
    int64_t n_tok) {
  const DeviceMatrix& first = *products.begin()->first;
  bool one_launch = options_.fuse_kernels && products.size() <= PIER_CUDA_MAX_MATRIX_SLICES;
  for (const auto& [w, y] : products) {
    one_launch = one_launch && w->type == first.type && w->cols == first.cols && !w->packed;
  }
  const bool on_tensor_cores = options_.mma_min_tokens > 0 && n_tok >= options_.mma_min_tokens &&
                               first.type != static_cast<int32_t>(cuda::quant::QuantType::kQ6_K);
  if (!one_launch || on_tensor_cores) {
    for (const auto& [w, y] : products) PIER_RETURN_IF_ERROR(MatMul(*w, xq, n_tok, y));
    return Status::Ok();
  }
  PierCudaMatrixSlice slices[PIER_CUDA_MAX_MATRIX_SLICES];
  int32_t count = 0;
  for (const auto& [w, y] : products) slices[count++] = {w->data, w->rows, y, w->rows};
  return device_.QuantMatMulSlices(first.type, slices, count, first.cols, xq, n_tok, stream_);
}

Status CudaLlamaRunner::EnsureHost(size_t bytes) {
  if (host_.ptr != nullptr && host_.bytes >= bytes) return Status::Ok();
  if (host_.ptr != nullptr) device_.FreePinnedHost(host_);
  host_ = {};
  PIER_ASSIGN_OR_RETURN(host_, device_.AllocatePinnedHost(std::max(bytes, size_t{1} << 20)));
  return Status::Ok();
}

// The step's token rows as they go to the GPU.
void CudaLlamaRunner::FillCosSin(StepInputs& in) const {
  const int64_t half_rot = n_rot_ / 2;
  const auto n = static_cast<int64_t>(in.positions.size());
  in.cos_sin.assign(static_cast<size_t>(n * n_rot_), 0.0f);
  for (int64_t t = 0; t < n; ++t) {  // as the CPU runner makes them; padding rows stay 0
    if (in.positions[t] < 0) continue;
    for (int64_t i = 0; i < half_rot; ++i) {
      const double angle = static_cast<double>(in.positions[t]) * inv_freq_[i];
      in.cos_sin[(t * half_rot + i) * 2] = static_cast<float>(std::cos(angle));
      in.cos_sin[(t * half_rot + i) * 2 + 1] = static_cast<float>(std::sin(angle));
    }
  }
}

std::vector<std::pair<const void*, size_t>> CudaLlamaRunner::Parts(const StepInputs& in) {
  auto part = [](const auto& v) {
    return std::pair<const void*, size_t>(v.data(), v.size() * sizeof(v[0]));
  };
  return {part(in.ids),     part(in.positions),   part(in.offsets),    part(in.tables),
          part(in.cos_sin), part(in.split_first), part(in.split_query)};
}

size_t CudaLlamaRunner::InputBytes(const StepLayout& L) { return L.scratch - L.ids; }

void CudaLlamaRunner::WriteStaging(const StepInputs& in, const StepLayout& L, uint8_t* staging) {
  // Each part where it goes in the workspace, relative to the first: the input region is then
  // one copy.
  const size_t targets[] = {L.ids,     L.positions,   L.offsets,    L.tables,
                            L.cos_sin, L.split_first, L.split_query};
  size_t k = 0;
  for (const auto& [data, n] : Parts(in)) {
    const size_t at = targets[k++] - L.ids;
    PIER_CHECK(at + n <= InputBytes(L), "CUDA runner: a step input outgrew its buffer");
    std::memcpy(staging + at, data, n);
  }
}

Status CudaLlamaRunner::QueueUploads(const StepLayout& L, uint8_t* base, const uint8_t* staging) {
  return device_.CopyHostToDevice(base + L.ids, staging, InputBytes(L), stream_);
}

Result<bool> CudaLlamaRunner::EnqueueLayers(const StepLayout& L, uint8_t* base, int64_t n_tok,
                                            int64_t total_splits,
                                            const std::atomic<bool>* stop_early) {
  auto f32 = [&](size_t offset) { return reinterpret_cast<float*>(base + offset); };
  auto i32 = [&](size_t offset) { return reinterpret_cast<int32_t*>(base + offset); };
  const int64_t q_dim = n_head_ * hd_;
  float* x = f32(L.x);
  float* add = f32(L.add);
  void* xq = base + L.xq;
  PIER_RETURN_IF_ERROR(device_.EmbeddingRows(static_cast<int32_t>(token_embd_->type),
                                             token_embd_device_, n_vocab_, E_, i32(L.ids), n_tok, x,
                                             stream_));
  const size_t plane = shape_.kv.plane_bytes();
  const int64_t last_stop_layer = n_layer_ * 3 / 4;
  for (int64_t il = 0; il < n_layer_; ++il) {
    if (stop_early != nullptr && il > 0 && il <= last_stop_layer &&
        stop_early->load(std::memory_order_relaxed)) {
      return false;
    }
    const Layer& l = layers_[il];
    // x += the previous layer's FFN output; h = RMSNorm(x) quantized.
    PIER_RETURN_IF_ERROR(device_.AddRmsNorm(x, il == 0 ? nullptr : add, l.attn_norm, n_tok, E_,
                                            eps_, nullptr, xq, stream_));
    PIER_RETURN_IF_ERROR(
        MatMuls({{&l.wq, f32(L.q)}, {&l.wk, f32(L.k)}, {&l.wv, f32(L.v)}}, xq, n_tok));
    const PierCudaKvGeometry g{static_cast<int64_t>(shape_.kv.bytes_per_block()),
                               static_cast<int64_t>(2 * il * plane),
                               static_cast<int64_t>((2 * il + 1) * plane), n_kv_, hd_};
    if (options_.fuse_kernels) {
      PIER_RETURN_IF_ERROR(device_.RopeKvWrite(f32(L.q), f32(L.k), f32(L.v), n_tok, n_head_, n_rot_,
                                               f32(L.cos_sin), i32(L.positions), i32(L.offsets),
                                               i32(L.tables), kv_base_, g, stream_));
    } else {
      PIER_RETURN_IF_ERROR(
          device_.Rope(f32(L.q), n_tok, n_head_, hd_, n_rot_, false, f32(L.cos_sin), stream_));
      PIER_RETURN_IF_ERROR(
          device_.Rope(f32(L.k), n_tok, n_kv_, hd_, n_rot_, false, f32(L.cos_sin), stream_));
      PIER_RETURN_IF_ERROR(device_.KvWrite(f32(L.k), f32(L.v), n_tok, i32(L.positions),
                                           i32(L.offsets), i32(L.tables), kv_base_, g, stream_));
    }
    PierCudaAttentionArgs args{};
    args.q = f32(L.q);
    args.out = f32(L.attn);
    args.n_queries = n_tok;
    args.n_head = n_head_;
    args.positions = i32(L.positions);
    args.table_offsets = i32(L.offsets);
    args.block_tables = i32(L.tables);
    args.kv_base = kv_base_;
    args.geometry = g;
    args.split_first = i32(L.split_first);
    args.split_query = i32(L.split_query);
    args.total_splits = total_splits;
    args.scratch = f32(L.scratch);
    // The merge quantizes its rows itself where a block never spans two heads.
    const bool merge_quantizes = options_.fuse_kernels && hd_ % cuda::quant::kBlock == 0;
    args.out_xq = merge_quantizes ? xq : nullptr;
    PIER_RETURN_IF_ERROR(device_.PagedAttention(args, stream_));
    if (!merge_quantizes) {
      PIER_RETURN_IF_ERROR(device_.QuantizeActivations(f32(L.attn), n_tok, q_dim, xq, stream_));
    }
    PIER_RETURN_IF_ERROR(MatMul(l.wo, xq, n_tok, add));
    // x += attention output; h = RMSNorm(x) quantized; the SwiGLU block.
    PIER_RETURN_IF_ERROR(
        device_.AddRmsNorm(x, add, l.ffn_norm, n_tok, E_, eps_, nullptr, xq, stream_));
    PIER_RETURN_IF_ERROR(MatMuls({{&l.gate, f32(L.gate)}, {&l.up, f32(L.up)}}, xq, n_tok));
    PIER_RETURN_IF_ERROR(
        device_.SiluMul(f32(L.gate), f32(L.up), n_tok, n_ff_, nullptr, xq, stream_));
    PIER_RETURN_IF_ERROR(MatMul(l.down, xq, n_tok, add));
  }
  return true;
}

Status CudaLlamaRunner::EnqueueHead(const StepLayout& L, uint8_t* base, int64_t n_tok,
                                    const std::vector<int64_t>& logit_rows, void* host_logits) {
  const auto n_out = static_cast<int64_t>(logit_rows.size());
  if (n_out == 0) return Status::Ok();
  float* x = reinterpret_cast<float*>(base + L.x);
  float* add = reinterpret_cast<float*>(base + L.add);
  void* xq = base + L.xq;
  // x += the last FFN output, the final norm quantized for every row, then the rows that want
  // logits gathered for the output head.
  PIER_RETURN_IF_ERROR(
      device_.AddRmsNorm(x, add, output_norm_, n_tok, E_, eps_, nullptr, xq, stream_));
  const size_t row_bytes = static_cast<size_t>(cuda::quant::ActivationRowBytes(E_));
  const void* head_input = xq;  // every row wants logits: no gather
  if (n_out < n_tok) {
    for (int64_t r = 0; r < n_out; ++r) {
      PIER_RETURN_IF_ERROR(device_.CopyDeviceToDevice(
          base + L.out_xq + r * row_bytes, static_cast<uint8_t*>(xq) + logit_rows[r] * row_bytes,
          row_bytes, stream_));
    }
    head_input = base + L.out_xq;
  }
  float* logits = reinterpret_cast<float*>(base + L.logits);
  PIER_RETURN_IF_ERROR(MatMul(output_, head_input, n_out, logits));
  return device_.CopyDeviceToHost(host_logits, logits,
                                  static_cast<size_t>(n_out * n_vocab_) * sizeof(float), stream_);
}

Result<StepOutput> CudaLlamaRunner::Step(const Batch& batch) {
  int64_t n_tok = 0, max_context = 0;
  const BatchLimits limits{n_vocab_, n_ctx_, shape_.kv.block_size, options_.kv->num_blocks(),
                           &shape_.kv_groups};
  PIER_RETURN_IF_ERROR(CheckBatch(batch, limits, &n_tok, &max_context));
  StepOutput output;
  output.n_vocab = n_vocab_;
  if (n_tok == 0) return output;
  if (n_tok > 65535) {
    return InvalidArgumentError("CUDA runner: at most 65,535 tokens per step, got " +
                                std::to_string(n_tok));
  }
  if (GraphEligible(batch, n_tok, max_context)) {
    Result<std::optional<StepOutput>> graphed = StepWithGraph(batch, n_tok, max_context);
    if (!graphed.ok()) return graphed.status();
    if (graphed->has_value()) return std::move(**graphed);
    // The bucket could not be captured: this step (and later ones of its size) run eagerly.
  }

  // The step's inputs, laid out on the host as they go up.
  StepInputs in;
  std::vector<int64_t> logit_rows;
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceSpan& seq = batch.sequences[s];
    const auto offset = static_cast<int32_t>(in.tables.size());
    const int64_t n = static_cast<int64_t>(seq.tokens.size());
    const int64_t n_blocks = (seq.first_position + n + 15) / 16;
    in.tables.insert(in.tables.end(), seq.block_table.begin(), seq.block_table.begin() + n_blocks);
    for (int64_t i = 0; i < n; ++i) {
      in.ids.push_back(seq.tokens[i]);
      in.positions.push_back(static_cast<int32_t>(seq.first_position + i));
      in.offsets.push_back(offset);
      if (seq.logits == LogitsWanted::kAll || (seq.logits == LogitsWanted::kLast && i == n - 1)) {
        logit_rows.push_back(static_cast<int64_t>(in.ids.size()) - 1);
        output.rows.push_back({static_cast<int32_t>(s), seq.first_position + i});
      }
    }
  }
  FillCosSin(in);
  // Each query's attention splits (its own, however long the others' contexts).
  in.split_first.resize(static_cast<size_t>(n_tok));
  in.split_query.resize(static_cast<size_t>(
      cuda::attn::IndexSplits(in.positions.data(), n_tok, in.split_first.data(), nullptr)));
  const int64_t total_splits = cuda::attn::IndexSplits(
      in.positions.data(), n_tok, in.split_first.data(), in.split_query.data());
  const int64_t n_out = static_cast<int64_t>(logit_rows.size());
  const StepLayout L = LayOut(n_tok, n_out, static_cast<int64_t>(in.tables.size()), total_splits);
  if (!workspace_ || workspace_.size() < L.bytes) {
    workspace_.Reset();
    PIER_ASSIGN_OR_RETURN(
        workspace_, options_.governor->Allocate(options_.workspace_owner, L.bytes, {stream_}));
  }
  auto* base = static_cast<uint8_t*>(workspace_.data());

  // Inputs up through pinned memory (one copy; the stream orders it before their use), the
  // logits back through the same buffer after them.
  const size_t up_bytes = AlignUp(InputBytes(L));
  const size_t down_bytes = static_cast<size_t>(n_out * n_vocab_) * sizeof(float);
  PIER_RETURN_IF_ERROR(device_.Synchronize(stream_));  // the pinned buffer is free again
  PIER_RETURN_IF_ERROR(EnsureHost(up_bytes + down_bytes));
  auto* staging = static_cast<uint8_t*>(host_.ptr);
  WriteStaging(in, L, staging);
  PIER_RETURN_IF_ERROR(QueueUploads(L, base, staging));
  PIER_ASSIGN_OR_RETURN(const bool finished,
                        EnqueueLayers(L, base, n_tok, total_splits, batch.stop_early));
  if (!finished) {
    StepOutput stopped;
    stopped.n_vocab = n_vocab_;
    stopped.stopped_early = true;
    PIER_RETURN_IF_ERROR(device_.Synchronize(stream_));
    return stopped;
  }
  PIER_RETURN_IF_ERROR(EnqueueHead(L, base, n_tok, logit_rows, staging + up_bytes));
  PIER_RETURN_IF_ERROR(device_.Synchronize(stream_));
  output.logits = std::span<const float>(reinterpret_cast<const float*>(staging + up_bytes),
                                         static_cast<size_t>(n_out * n_vocab_));
  return output;
}

// ---- CUDA graphs for decode -------------------------------------------------------------------

}  // namespace cuda_runner

CudaGraphStats GraphStatsOf(const ModelRunner& runner) {
  const auto* cuda = dynamic_cast<const cuda_runner::CudaLlamaRunner*>(&runner);
  return cuda != nullptr ? cuda->graph_stats_ : CudaGraphStats{};
}

}  // namespace pier::engine

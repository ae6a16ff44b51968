#include "engine/cuda_runner.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/batch_check.h"
#include "engine/cpu_runner.h"
#include "engine/kv_groups.h"
#include "kernels/cuda/attention_math.h"
#include "kernels/cuda/quant_dot.h"
#include "kernels/cuda/quant_pack.h"
#include "model/model_info.h"
#include "tensor/dequantize.h"

namespace pier::engine {
namespace {

constexpr size_t kAlign = 256;
// The longest context a decode graph covers: its block tables and attention splits are sized
// for it (a step reaching past it runs without a graph).
constexpr int64_t kGraphMaxContext = 8192;

size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// A weight matrix on the device: GGUF-layout rows of a GPU-product type.
struct DeviceMatrix {
  int32_t type = 0;  // ggml type number
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;
  bool packed = false;  // in quant_pack.h's GPU layout
};

struct Layer {
  const float* attn_norm = nullptr;  // [E] on the device
  const float* ffn_norm = nullptr;
  DeviceMatrix wq, wk, wv, wo, gate, up, down;
};

// Offsets of one step's device buffers inside the workspace block, for T tokens, R logits
// rows, S table entries and up to `splits` attention splits.
struct StepLayout {
  size_t x, add, xq, q, k, v, attn, gate, up, ids, positions, offsets, tables, cos_sin, split_first,
      split_query, scratch, out_xq, logits, bytes;
};

class CudaLlamaRunner final : public ModelRunner {
 public:
  CudaLlamaRunner(const model::GgufFile& file, const CudaRunnerOptions& options)
      : file_(file), options_(options), device_(*options.device) {}

  ~CudaLlamaRunner() override {
    // Work a failed step left queued finishes before its memory goes back to the pool, and
    // the blocks go back while their stream still exists.
    if (stream_.id != 0) (void)device_.Synchronize(stream_);
    for (const auto& [key, graph] : graphs_) device_.DestroyGraph(graph);
    graph_workspace_.Reset();
    if (graph_host_.ptr != nullptr) device_.FreePinnedHost(graph_host_);
    if (pack_staging_.ptr != nullptr) device_.FreePinnedHost(pack_staging_);
    workspace_.Reset();
    weights_.Reset();
    if (host_.ptr != nullptr) device_.FreePinnedHost(host_);
    if (stream_.id != 0) device_.DestroyStream(stream_);
  }

  Status Init();
  const ModelShape& shape() const override { return shape_; }
  Result<StepOutput> Step(const Batch& batch) override;

 private:
  Result<DeviceMatrix> Matrix(const std::string& name, int64_t rows, int64_t cols);
  Result<const float*> Vector(const std::string& name, int64_t n);
  Status Upload(const model::GgufTensorInfo& t, const void** device_ptr);
  // Whether a matrix goes to the GPU packed (CudaRunnerOptions::packed_weights), and the
  // bytes it takes there.
  bool Packs(const model::GgufTensorInfo& t) const;
  size_t DeviceBytes(const model::GgufTensorInfo& t) const;
  Status UploadPacked(const model::GgufTensorInfo& t, int64_t rows, int64_t cols,
                      const void** device_ptr);
  StepLayout LayOut(int64_t n_tok, int64_t n_out, int64_t n_table, int64_t total_splits) const;
  Status MatMul(const DeviceMatrix& w, const void* xq, int64_t n_tok, float* y);
  Status EnsureHost(size_t bytes);

  // One step's host-side inputs, in the order they are staged in pinned memory.
  struct StepInputs {
    std::vector<int32_t> ids, positions, offsets, tables;
    std::vector<float> cos_sin;
    std::vector<int32_t> split_first, split_query;
  };
  void FillCosSin(StepInputs& in) const;
  static std::vector<std::pair<const void*, size_t>> Parts(const StepInputs& in);
  static size_t StagedBytes(const StepInputs& in);
  static void WriteStaging(const StepInputs& in, uint8_t* staging);
  // Queues the staged inputs' copies to their workspace buffers.
  Status QueueUploads(const StepInputs& in, const StepLayout& L, uint8_t* base,
                      const uint8_t* staging);
  // Queues the embedding rows and every layer; false when stop_early asked to stop between
  // layers.
  Result<bool> EnqueueLayers(const StepLayout& L, uint8_t* base, int64_t n_tok,
                             int64_t total_splits, const std::atomic<bool>* stop_early);
  // Queues the final norm, the output head for `logit_rows` and the logits' copy to the host.
  Status EnqueueHead(const StepLayout& L, uint8_t* base, int64_t n_tok,
                     const std::vector<int64_t>& logit_rows, void* host_logits);

  // CUDA graphs for decode steps: batches of single tokens, padded to a bucket (1, 2, 4, then
  // multiples of 8 up to kMaxGraphBatch), each bucket captured at its first use and replayed.
  static constexpr int64_t kMaxGraphBatch = 64;
  static int64_t Bucket(int64_t n);
  // Graphs are also keyed by the longest context they cover (512, 2,048, then
  // graph_max_context_): their attention launch is sized for it, so short contexts do not pay
  // for the long ones' empty splits.
  int64_t ContextTier(int64_t max_context) const;
  bool GraphEligible(const Batch& batch, int64_t n_tok, int64_t max_context) const;
  StepInputs GraphInputs(const Batch& batch, int64_t bucket, int64_t tier) const;
  // The graphs' workspace and pinned buffer; false (graphs off from then on, counted) when
  // either cannot be had or the host memory is not page-locked.
  bool SetUpGraphMemory();
  // The step through its graph; nullopt when it cannot be captured (the step runs eagerly).
  Result<std::optional<StepOutput>> StepWithGraph(const Batch& batch, int64_t n_tok,
                                                  int64_t max_context);

  const model::GgufFile& file_;
  const CudaRunnerOptions options_;
  cuda::CudaDevice& device_;
  Stream stream_{};
  ModelShape shape_;
  int64_t E_ = 0, n_layer_ = 0, n_head_ = 0, n_kv_ = 0, hd_ = 0, n_rot_ = 0, n_ff_ = 0;
  int64_t n_vocab_ = 0, n_ctx_ = 0;
  float eps_ = 0.0f;
  std::vector<double> inv_freq_;  // [n_rot/2]
  Block weights_;                 // every tensor, 256-byte aligned, in file order of use
  size_t weights_used_ = 0;
  std::vector<float> small_host_;  // f32 staging of a norm weight
  std::vector<Layer> layers_;
  const model::GgufTensorInfo* token_embd_ = nullptr;
  const void* token_embd_device_ = nullptr;
  DeviceMatrix output_;
  const float* output_norm_ = nullptr;
  uint8_t* kv_base_ = nullptr;
  Block workspace_;
  HostAllocation host_;          // pinned: the step's inputs going up and its logits coming down
  HostAllocation pack_staging_;  // pinned, while packing weights at load
  // Graphs: the longest context a graph covers (longer steps run eagerly), their shared
  // workspace and pinned buffer (fixed for their lifetime), and the graphs per bucket.
  int64_t graph_max_context_ = 0;
  Block graph_workspace_;
  HostAllocation graph_host_;
  size_t graph_up_bytes_ = 0;
  std::map<std::pair<int64_t, int64_t>, PierCudaGraph> graphs_;  // by (bucket, context tier)
  std::set<std::pair<int64_t, int64_t>> eager_keys_;  // capture failed: these run eagerly
  bool graphs_disabled_ = false;                      // no memory for graphs

 public:
  CudaGraphStats graph_stats_;
};

Status CudaLlamaRunner::Upload(const model::GgufTensorInfo& t, const void** device_ptr) {
  const size_t offset = weights_used_;
  weights_used_ += AlignUp(t.size_bytes);
  if (weights_used_ > weights_.size()) return InternalError("weights block too small");
  void* dst = static_cast<uint8_t*>(weights_.data()) + offset;
  PIER_RETURN_IF_ERROR(device_.CopyHostToDevice(dst, t.data, t.size_bytes, stream_));
  *device_ptr = dst;
  return Status::Ok();
}

Result<DeviceMatrix> CudaLlamaRunner::Matrix(const std::string& name, int64_t rows, int64_t cols) {
  const model::GgufTensorInfo* t = file_.FindTensor(name);
  if (t == nullptr) return NotFoundError(file_.path() + ": tensor '" + name + "' is missing");
  if (t->dims.size() != 2 || t->dims[0] != cols || t->dims[1] != rows) {
    return InvalidArgumentError(file_.path() + ": tensor '" + name + "' should be [" +
                                std::to_string(cols) + ", " + std::to_string(rows) +
                                "] (ggml order)");
  }
  const auto type = static_cast<int32_t>(t->type);
  if (!cuda::quant::IsQuantType(type) ||
      cols % cuda::quant::GgufBlockElements(static_cast<cuda::quant::QuantType>(type)) != 0) {
    return UnsupportedError(file_.path() + ": tensor '" + name + "' is " +
                            std::string(DTypeName(t->type)) +
                            ", which the GPU product does not take (Q4_0, Q4_1, Q5_0, Q5_1, "
                            "Q8_0, Q4_K, Q5_K and Q6_K in whole blocks do)");
  }
  DeviceMatrix m{type, rows, cols, nullptr};
  if (Packs(*t)) {
    PIER_RETURN_IF_ERROR(UploadPacked(*t, rows, cols, &m.data));
    m.packed = true;
  } else {
    PIER_RETURN_IF_ERROR(Upload(*t, &m.data));
  }
  return m;
}

bool CudaLlamaRunner::Packs(const model::GgufTensorInfo& t) const {
  return options_.packed_weights && t.dims.size() == 2 && &t != token_embd_ &&
         cuda::quant::IsQuantType(static_cast<int32_t>(t.type)) &&
         cuda::quant::HasPackedLayout32(static_cast<cuda::quant::QuantType>(t.type));
}

size_t CudaLlamaRunner::DeviceBytes(const model::GgufTensorInfo& t) const {
  if (!Packs(t)) return AlignUp(t.size_bytes);
  return AlignUp(static_cast<size_t>(
      cuda::quant::PackedBytes(static_cast<cuda::quant::QuantType>(t.type), t.dims[1], t.dims[0])));
}

// Packs a matrix for the GPU (quant_pack.h) a piece of rows at a time through a pinned staging
// buffer: each piece is packed as a matrix of its own, then its three regions go to their
// places in the whole matrix's.
Status CudaLlamaRunner::UploadPacked(const model::GgufTensorInfo& t, int64_t rows, int64_t cols,
                                     const void** device_ptr) {
  namespace q = cuda::quant;
  const auto type = static_cast<q::QuantType>(t.type);
  const size_t bytes = static_cast<size_t>(q::PackedBytes(type, rows, cols));
  const size_t offset = weights_used_;
  weights_used_ += AlignUp(bytes);
  if (weights_used_ > weights_.size()) return InternalError("weights block too small");
  uint8_t* dst = static_cast<uint8_t*>(weights_.data()) + offset;
  const int64_t n_blocks = cols / q::kBlock;
  const int64_t qs_row = n_blocks * q::PackedQsBytes(type);
  const int64_t scales_row = n_blocks * 2 * q::PackedScaleHalves(type);
  const int64_t qh_row = q::HasHighBits(type) ? n_blocks * 4 : 0;
  const int64_t per_row = qs_row + scales_row + qh_row;
  // 16 MiB, or one row and the regions' padding where a row is larger.
  const size_t staging_bytes =
      std::max<size_t>(size_t{16} << 20, static_cast<size_t>(q::PackedBytes(type, 1, cols)));
  if (pack_staging_.ptr != nullptr && pack_staging_.bytes < staging_bytes) {
    device_.FreePinnedHost(pack_staging_);
    pack_staging_ = {};
  }
  if (pack_staging_.ptr == nullptr) {
    PIER_ASSIGN_OR_RETURN(pack_staging_, device_.AllocatePinnedHost(staging_bytes));
  }
  const int64_t piece =
      std::max<int64_t>(1, static_cast<int64_t>(pack_staging_.bytes) / per_row - 3);
  const int64_t row_bytes = q::GgufRowBytes(type, cols);
  auto* staging = static_cast<uint8_t*>(pack_staging_.ptr);
  for (int64_t r0 = 0; r0 < rows; r0 += piece) {
    const int64_t n = std::min(piece, rows - r0);
    PIER_RETURN_IF_ERROR(device_.Synchronize(stream_));  // the staging buffer is free again
    q::PackRows32(type, t.data + r0 * row_bytes, 0, n, n, cols, staging);
    PIER_RETURN_IF_ERROR(device_.CopyHostToDevice(dst + r0 * qs_row, staging, n * qs_row, stream_));
    PIER_RETURN_IF_ERROR(device_.CopyHostToDevice(
        dst + q::PackedScalesOffset(type, rows, n_blocks) + r0 * scales_row,
        staging + q::PackedScalesOffset(type, n, n_blocks), n * scales_row, stream_));
    if (qh_row > 0) {
      PIER_RETURN_IF_ERROR(device_.CopyHostToDevice(
          dst + q::PackedQhOffset(type, rows, n_blocks) + r0 * qh_row,
          staging + q::PackedQhOffset(type, n, n_blocks), n * qh_row, stream_));
    }
  }
  *device_ptr = dst;
  return Status::Ok();
}

Result<const float*> CudaLlamaRunner::Vector(const std::string& name, int64_t n) {
  const model::GgufTensorInfo* t = file_.FindTensor(name);
  if (t == nullptr) return NotFoundError(file_.path() + ": tensor '" + name + "' is missing");
  if (t->element_count != n || !CanDequantize(t->type)) {
    return InvalidArgumentError(file_.path() + ": tensor '" + name + "' should hold " +
                                std::to_string(n) + " values of a readable type");
  }
  small_host_.resize(static_cast<size_t>(n));
  PIER_RETURN_IF_ERROR(DequantizeRow(t->type, t->data, small_host_.data(), n));
  const size_t offset = weights_used_;
  weights_used_ += AlignUp(static_cast<size_t>(n) * sizeof(float));
  if (weights_used_ > weights_.size()) return InternalError("weights block too small");
  auto* dst = reinterpret_cast<float*>(static_cast<uint8_t*>(weights_.data()) + offset);
  PIER_RETURN_IF_ERROR(
      device_.CopyHostToDevice(dst, small_host_.data(), n * sizeof(float), stream_));
  // The staging vector is reused by the next norm: wait for this copy first.
  PIER_RETURN_IF_ERROR(device_.Synchronize(stream_));
  return dst;
}

Status CudaLlamaRunner::Init() {
  if (options_.device == nullptr || options_.governor == nullptr || options_.kv == nullptr) {
    return InvalidArgumentError("CUDA runner: device, governor and KV store are required");
  }
  if (&options_.governor->device() != static_cast<Device*>(options_.device)) {
    return InvalidArgumentError("CUDA runner: the governor must be the GPU's own");
  }
  PIER_ASSIGN_OR_RETURN(const model::ModelInfo info, model::ReadModelInfo(file_));
  if (info.architecture != "llama") {
    return UnsupportedError(file_.path() + ": the CUDA runner runs the llama architecture, not '" +
                            info.architecture + "' (the CPU runner does)");
  }
  if (info.rope_scaling || info.sliding_window > 0 || info.attn_logit_softcapping > 0 ||
      info.final_logit_softcapping > 0 || file_.FindTensor("rope_freqs.weight") != nullptr) {
    return UnsupportedError(file_.path() +
                            ": RoPE scaling, rope_freqs, sliding windows and soft-capping are not "
                            "on the GPU yet (the CPU runner has them)");
  }
  E_ = info.embedding_length;
  n_layer_ = info.block_count;
  n_ff_ = info.feed_forward_length;
  n_head_ = info.head_count;
  n_kv_ = info.head_count_kv;
  hd_ = info.head_dim;
  n_rot_ = info.rope_dimension_count;
  n_ctx_ = info.context_length;
  eps_ = static_cast<float>(info.rms_norm_eps);
  if (hd_ > cuda::attn::kMaxHeadDim || n_rot_ > hd_ || n_rot_ % 2 != 0 || n_kv_ < 1 ||
      n_head_ % n_kv_ != 0) {
    return UnsupportedError(file_.path() + ": head size " + std::to_string(hd_) + ", " +
                            std::to_string(n_rot_) + " rotated, " + std::to_string(n_head_) +
                            " heads over " + std::to_string(n_kv_) +
                            " K/V heads: the GPU attention takes head sizes up to 256");
  }
  if (E_ % 32 != 0 || n_ff_ % 32 != 0 || (n_head_ * hd_) % 32 != 0) {
    return UnsupportedError(file_.path() + ": widths must be multiples of 32 on the GPU");
  }
  token_embd_ = file_.FindTensor("token_embd.weight");
  if (token_embd_ == nullptr || token_embd_->dims.size() != 2 || token_embd_->dims[0] != E_) {
    return InvalidArgumentError(file_.path() + ": token_embd.weight is missing or misshapen");
  }
  n_vocab_ = token_embd_->dims[1];
  const auto embd_type = static_cast<int32_t>(token_embd_->type);
  if (embd_type != 0 && embd_type != 1 && !cuda::quant::IsQuantType(embd_type)) {
    return UnsupportedError(file_.path() + ": token_embd.weight is " +
                            std::string(DTypeName(token_embd_->type)) + ", not read on the GPU");
  }
  for (int64_t i = 0; i < n_rot_ / 2; ++i) {
    inv_freq_.push_back(1.0 * std::pow(info.rope_freq_base, -2.0 * static_cast<double>(i) /
                                                                static_cast<double>(n_rot_)));
  }

  // The KV store: the CPU layout with f16 values, all blocks at one device address range.
  KvStore& kv = *options_.kv;
  const KvLayout& layout = kv.layout();
  if (layout.dtype != KvDtype::kF16 || layout.block_size != cuda::attn::kBlockPositions ||
      layout.n_layer != n_layer_ || layout.n_kv_head != n_kv_ || layout.head_dim != hd_) {
    return InvalidArgumentError(
        "CUDA runner: the KV store must hold f16 K/V in blocks of 16 positions for " +
        std::to_string(n_layer_) + " layers of " + std::to_string(n_kv_) + " heads of " +
        std::to_string(hd_));
  }
  if (&kv.device() != static_cast<Device*>(options_.device)) {
    return InvalidArgumentError("CUDA runner: the KV store must live on " + device_.name() +
                                ", not on " + kv.device().name());
  }
  kv_base_ = reinterpret_cast<uint8_t*>(kv.BlockData(0));
  const int64_t n_blocks = kv.num_blocks();
  if (n_blocks > 1 &&
      reinterpret_cast<uint8_t*>(kv.BlockData(static_cast<int32_t>(n_blocks - 1))) !=
          kv_base_ + (n_blocks - 1) * static_cast<int64_t>(layout.bytes_per_block())) {
    return UnsupportedError(
        "CUDA runner: the KV store's blocks must lie at one address range (a leased store on "
        "a GPU with virtual memory)");
  }
  shape_.n_vocab = n_vocab_;
  shape_.n_embd = E_;
  shape_.context_length = n_ctx_;
  shape_.kv = layout;
  shape_.kv_groups = GroupLayersByWindow(std::vector<int64_t>(static_cast<size_t>(n_layer_), 0));

  PIER_ASSIGN_OR_RETURN(stream_, device_.CreateStream());
  graph_max_context_ = std::min<int64_t>(n_ctx_, kGraphMaxContext) / cuda::attn::kBlockPositions *
                       cuda::attn::kBlockPositions;

  // One block for every tensor; the governor refuses (with its breakdown) when the GPU's
  // budget cannot hold them.
  const model::GgufTensorInfo* output = file_.FindTensor("output.weight");
  size_t total = AlignUp(token_embd_->size_bytes);
  if (output != nullptr) total += DeviceBytes(*output);
  total += AlignUp(E_ * sizeof(float));
  const std::string names[] = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                               "ffn_gate", "ffn_up", "ffn_down"};
  for (int64_t il = 0; il < n_layer_; ++il) {
    for (const std::string& n : names) {
      const model::GgufTensorInfo* t =
          file_.FindTensor("blk." + std::to_string(il) + "." + n + ".weight");
      if (t != nullptr) total += DeviceBytes(*t);
    }
    total += 2 * AlignUp(E_ * sizeof(float));
  }
  PIER_ASSIGN_OR_RETURN(weights_,
                        options_.governor->Allocate(options_.weights_owner, total, {stream_}));

  PIER_RETURN_IF_ERROR(Upload(*token_embd_, &token_embd_device_));
  if (output != nullptr) {
    PIER_ASSIGN_OR_RETURN(output_, Matrix("output.weight", n_vocab_, E_));
  } else {
    if (!cuda::quant::IsQuantType(embd_type)) {
      return UnsupportedError(file_.path() + ": the tied output matrix is " +
                              std::string(DTypeName(token_embd_->type)) +
                              ", which the GPU product does not take");
    }
    output_ = {embd_type, n_vocab_, E_, token_embd_device_};
  }
  PIER_ASSIGN_OR_RETURN(output_norm_, Vector("output_norm.weight", E_));
  const int64_t q_dim = n_head_ * hd_, kv_dim = n_kv_ * hd_;
  for (int64_t il = 0; il < n_layer_; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    Layer l;
    PIER_ASSIGN_OR_RETURN(l.attn_norm, Vector(p + "attn_norm.weight", E_));
    PIER_ASSIGN_OR_RETURN(l.ffn_norm, Vector(p + "ffn_norm.weight", E_));
    PIER_ASSIGN_OR_RETURN(l.wq, Matrix(p + "attn_q.weight", q_dim, E_));
    PIER_ASSIGN_OR_RETURN(l.wk, Matrix(p + "attn_k.weight", kv_dim, E_));
    PIER_ASSIGN_OR_RETURN(l.wv, Matrix(p + "attn_v.weight", kv_dim, E_));
    PIER_ASSIGN_OR_RETURN(l.wo, Matrix(p + "attn_output.weight", E_, q_dim));
    PIER_ASSIGN_OR_RETURN(l.gate, Matrix(p + "ffn_gate.weight", n_ff_, E_));
    PIER_ASSIGN_OR_RETURN(l.up, Matrix(p + "ffn_up.weight", n_ff_, E_));
    PIER_ASSIGN_OR_RETURN(l.down, Matrix(p + "ffn_down.weight", E_, n_ff_));
    layers_.push_back(l);
  }
  PIER_RETURN_IF_ERROR(device_.Synchronize(stream_));
  if (pack_staging_.ptr != nullptr) {
    device_.FreePinnedHost(pack_staging_);
    pack_staging_ = {};
  }
  return Status::Ok();
}

StepLayout CudaLlamaRunner::LayOut(int64_t n_tok, int64_t n_out, int64_t n_table,
                                   int64_t total_splits) const {
  const auto T = static_cast<size_t>(n_tok);
  const int64_t q_dim = n_head_ * hd_, kv_dim = n_kv_ * hd_;
  const int64_t widest = std::max({E_, n_ff_, q_dim});
  StepLayout s{};
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t offset = at;
    at += AlignUp(bytes);
    return offset;
  };
  s.x = take(T * E_ * 4);
  s.add = take(T * E_ * 4);
  s.xq = take(T * cuda::quant::ActivationRowBytes(widest));
  s.q = take(T * q_dim * 4);
  s.k = take(T * kv_dim * 4);
  s.v = take(T * kv_dim * 4);
  s.attn = take(T * q_dim * 4);
  s.gate = take(T * n_ff_ * 4);
  s.up = take(T * n_ff_ * 4);
  s.ids = take(T * 4);
  s.positions = take(T * 4);
  s.offsets = take(T * 4);
  s.tables = take(static_cast<size_t>(n_table) * 4);
  s.cos_sin = take(T * n_rot_ * 4);
  s.split_first = take(T * 4);
  s.split_query = take(static_cast<size_t>(total_splits) * 4);
  s.scratch = take(static_cast<size_t>(cuda::attn::ScratchFloats(total_splits, n_head_, hd_)) *
                   sizeof(float));
  s.out_xq = take(static_cast<size_t>(n_out) * cuda::quant::ActivationRowBytes(E_));
  s.logits = take(static_cast<size_t>(n_out * n_vocab_) * 4);
  s.bytes = at;
  return s;
}

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

size_t CudaLlamaRunner::StagedBytes(const StepInputs& in) {
  size_t bytes = 0;
  for (const auto& [data, n] : Parts(in)) bytes += n;
  return bytes;
}

void CudaLlamaRunner::WriteStaging(const StepInputs& in, uint8_t* staging) {
  for (const auto& [data, n] : Parts(in)) {
    std::memcpy(staging, data, n);
    staging += n;
  }
}

Status CudaLlamaRunner::QueueUploads(const StepInputs& in, const StepLayout& L, uint8_t* base,
                                     const uint8_t* staging) {
  const size_t targets[] = {L.ids,     L.positions,   L.offsets,    L.tables,
                            L.cos_sin, L.split_first, L.split_query};
  size_t k = 0;
  for (const auto& [data, n] : Parts(in)) {
    PIER_RETURN_IF_ERROR(device_.CopyHostToDevice(base + targets[k++], staging, n, stream_));
    staging += n;
  }
  return Status::Ok();
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
    PIER_RETURN_IF_ERROR(MatMul(l.wq, xq, n_tok, f32(L.q)));
    PIER_RETURN_IF_ERROR(MatMul(l.wk, xq, n_tok, f32(L.k)));
    PIER_RETURN_IF_ERROR(MatMul(l.wv, xq, n_tok, f32(L.v)));
    PIER_RETURN_IF_ERROR(
        device_.Rope(f32(L.q), n_tok, n_head_, hd_, n_rot_, false, f32(L.cos_sin), stream_));
    PIER_RETURN_IF_ERROR(
        device_.Rope(f32(L.k), n_tok, n_kv_, hd_, n_rot_, false, f32(L.cos_sin), stream_));
    const PierCudaKvGeometry g{static_cast<int64_t>(shape_.kv.bytes_per_block()),
                               static_cast<int64_t>(2 * il * plane),
                               static_cast<int64_t>((2 * il + 1) * plane), n_kv_, hd_};
    PIER_RETURN_IF_ERROR(device_.KvWrite(f32(L.k), f32(L.v), n_tok, i32(L.positions),
                                         i32(L.offsets), i32(L.tables), kv_base_, g, stream_));
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
    PIER_RETURN_IF_ERROR(device_.PagedAttention(args, stream_));
    PIER_RETURN_IF_ERROR(device_.QuantizeActivations(f32(L.attn), n_tok, q_dim, xq, stream_));
    PIER_RETURN_IF_ERROR(MatMul(l.wo, xq, n_tok, add));
    // x += attention output; h = RMSNorm(x) quantized; the SwiGLU block.
    PIER_RETURN_IF_ERROR(
        device_.AddRmsNorm(x, add, l.ffn_norm, n_tok, E_, eps_, nullptr, xq, stream_));
    PIER_RETURN_IF_ERROR(MatMul(l.gate, xq, n_tok, f32(L.gate)));
    PIER_RETURN_IF_ERROR(MatMul(l.up, xq, n_tok, f32(L.up)));
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

  // Inputs up through pinned memory (one copy each; the stream orders them before use), the
  // logits back through the same buffer after them.
  const size_t up_bytes = AlignUp(StagedBytes(in));
  const size_t down_bytes = static_cast<size_t>(n_out * n_vocab_) * sizeof(float);
  PIER_RETURN_IF_ERROR(device_.Synchronize(stream_));  // the pinned buffer is free again
  PIER_RETURN_IF_ERROR(EnsureHost(up_bytes + down_bytes));
  auto* staging = static_cast<uint8_t*>(host_.ptr);
  WriteStaging(in, staging);
  PIER_RETURN_IF_ERROR(QueueUploads(in, L, base, staging));
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

int64_t CudaLlamaRunner::Bucket(int64_t n) {
  if (n <= 1) return 1;
  if (n <= 2) return 2;
  if (n <= 4) return 4;
  return (n + 7) / 8 * 8;
}

int64_t CudaLlamaRunner::ContextTier(int64_t max_context) const {
  for (int64_t tier : {int64_t{512}, int64_t{2048}}) {
    if (max_context <= tier && tier < graph_max_context_) return tier;
  }
  return graph_max_context_;
}

bool CudaLlamaRunner::GraphEligible(const Batch& batch, int64_t n_tok, int64_t max_context) const {
  if (!options_.use_graphs || graphs_disabled_ || n_tok > kMaxGraphBatch ||
      max_context > graph_max_context_) {
    return false;
  }
  for (const SequenceSpan& seq : batch.sequences) {
    if (seq.tokens.size() != 1 || seq.logits != LogitsWanted::kLast) return false;
  }
  return !eager_keys_.contains({Bucket(n_tok), ContextTier(max_context)});
}

// A decode batch padded to its bucket in the fixed shapes a captured graph reads: every row's
// block table gets tier / 16 entries, the split index SplitsFor(tier - 1) slots per row
// (unused ones -1), and padding rows sit at position -1 (they write no K/V, attend nothing, and
// their logits are dropped).
CudaLlamaRunner::StepInputs CudaLlamaRunner::GraphInputs(const Batch& batch, int64_t bucket,
                                                         int64_t tier) const {
  const int64_t max_blocks = tier / cuda::attn::kBlockPositions;
  const int64_t max_splits = cuda::attn::SplitsFor(tier - 1);
  StepInputs in;
  in.ids.assign(static_cast<size_t>(bucket), 0);
  in.positions.assign(static_cast<size_t>(bucket), -1);
  in.offsets.resize(static_cast<size_t>(bucket));
  in.tables.assign(static_cast<size_t>(bucket * max_blocks), 0);
  for (int64_t r = 0; r < bucket; ++r) in.offsets[r] = static_cast<int32_t>(r * max_blocks);
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceSpan& seq = batch.sequences[s];
    in.ids[s] = seq.tokens[0];
    in.positions[s] = static_cast<int32_t>(seq.first_position);
    const int64_t n_blocks = seq.first_position / cuda::attn::kBlockPositions + 1;
    std::copy(seq.block_table.begin(), seq.block_table.begin() + n_blocks,
              in.tables.begin() + static_cast<int64_t>(s) * max_blocks);
  }
  FillCosSin(in);
  in.split_first.resize(static_cast<size_t>(bucket));
  in.split_query.assign(static_cast<size_t>(bucket * max_splits), -1);
  cuda::attn::IndexSplits(in.positions.data(), bucket, in.split_first.data(),
                          in.split_query.data());
  return in;
}

bool CudaLlamaRunner::SetUpGraphMemory() {
  if (graph_workspace_ && graph_host_.ptr != nullptr) return true;
  const int64_t tier = graph_max_context_;
  const StepLayout largest =
      LayOut(kMaxGraphBatch, kMaxGraphBatch, kMaxGraphBatch * (tier / cuda::attn::kBlockPositions),
             kMaxGraphBatch * cuda::attn::SplitsFor(tier - 1));
  const size_t up_bytes = AlignUp(StagedBytes(GraphInputs(Batch{}, kMaxGraphBatch, tier)));
  const size_t host_bytes = up_bytes + static_cast<size_t>(kMaxGraphBatch * n_vocab_) * 4;
  MemoryResult<Block> workspace =
      options_.governor->Allocate(options_.workspace_owner, largest.bytes, {stream_});
  Result<HostAllocation> host = workspace.ok() ? device_.AllocatePinnedHost(host_bytes)
                                               : Result<HostAllocation>(workspace.status());
  std::string why;
  if (!workspace.ok()) {
    why = workspace.status().ToString();
  } else if (!host.ok()) {
    why = host.status().ToString();
  } else if (!host->locked) {
    // A capture may only copy from pinned memory.
    why = "no page-locked host memory for the graphs' inputs";
    device_.FreePinnedHost(*host);
  }
  if (!why.empty()) {
    graphs_disabled_ = true;
    ++graph_stats_.fallbacks;
    spdlog::warn("CUDA runner: decode steps run without graphs: {}", why);
    return false;
  }
  graph_workspace_ = std::move(workspace).value();
  graph_host_ = *host;
  graph_up_bytes_ = up_bytes;
  return true;
}

namespace {

// Ends a capture that an early return would otherwise leave open (the stream would refuse
// everything after it).
class CaptureGuard {
 public:
  CaptureGuard(cuda::CudaDevice& device, Stream stream) : device_(device), stream_(stream) {}
  ~CaptureGuard() {
    if (!open_) return;
    Result<PierCudaGraph> graph = device_.EndCapture(stream_);
    if (graph.ok()) device_.DestroyGraph(*graph);
  }
  void Opened() { open_ = true; }
  Result<PierCudaGraph> End() {
    open_ = false;
    return device_.EndCapture(stream_);
  }

 private:
  cuda::CudaDevice& device_;
  Stream stream_;
  bool open_ = false;
};

}  // namespace

Result<std::optional<StepOutput>> CudaLlamaRunner::StepWithGraph(const Batch& batch, int64_t n_tok,
                                                                 int64_t max_context) {
  // One workspace and one pinned buffer for every graph, sized for the largest, at fixed
  // addresses for as long as the graphs live; without them every step runs eagerly.
  if (!SetUpGraphMemory()) return std::optional<StepOutput>();
  const int64_t bucket = Bucket(n_tok);
  const int64_t tier = ContextTier(max_context);
  const int64_t max_blocks = tier / cuda::attn::kBlockPositions;
  const int64_t max_splits = cuda::attn::SplitsFor(tier - 1);
  const StepInputs in = GraphInputs(batch, bucket, tier);
  const StepLayout L = LayOut(bucket, bucket, bucket * max_blocks, bucket * max_splits);
  auto* base = static_cast<uint8_t*>(graph_workspace_.data());
  auto* staging = static_cast<uint8_t*>(graph_host_.ptr);
  uint8_t* host_logits = staging + graph_up_bytes_;
  PIER_RETURN_IF_ERROR(device_.Synchronize(stream_));  // the staging buffer is free again
  WriteStaging(in, staging);

  const std::pair<int64_t, int64_t> key{bucket, tier};
  auto found = graphs_.find(key);
  if (found == graphs_.end()) {
    std::vector<int64_t> all_rows(static_cast<size_t>(bucket));
    for (int64_t r = 0; r < bucket; ++r) all_rows[r] = r;
    CaptureGuard guard(device_, stream_);
    Status captured = device_.BeginCapture(stream_);
    if (captured.ok()) {
      guard.Opened();
      captured = QueueUploads(in, L, base, staging);
    }
    if (captured.ok())
      captured = EnqueueLayers(L, base, bucket, bucket * max_splits, nullptr).status();
    if (captured.ok()) captured = EnqueueHead(L, base, bucket, all_rows, host_logits);
    Result<PierCudaGraph> graph = captured.ok() ? guard.End() : Result<PierCudaGraph>(captured);
    if (!graph.ok()) {
      ++graph_stats_.fallbacks;
      eager_keys_.insert(key);
      spdlog::warn(
          "CUDA runner: capturing the graph of decode batch {} (contexts to {}) failed ({}); "
          "that size runs without a graph",
          bucket, tier, graph.status().ToString());
      return std::optional<StepOutput>();
    }
    ++graph_stats_.captures;
    found = graphs_.emplace(key, *graph).first;
  }
  PIER_RETURN_IF_ERROR(device_.LaunchGraph(found->second, stream_));
  ++graph_stats_.launches;
  PIER_RETURN_IF_ERROR(device_.Synchronize(stream_));
  StepOutput output;
  output.n_vocab = n_vocab_;
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    output.rows.push_back({static_cast<int32_t>(s), batch.sequences[s].first_position});
  }
  output.logits = std::span<const float>(reinterpret_cast<const float*>(host_logits),
                                         static_cast<size_t>(n_tok * n_vocab_));
  return std::optional<StepOutput>(std::move(output));
}

}  // namespace

CudaGraphStats GraphStatsOf(const ModelRunner& runner) {
  const auto* cuda = dynamic_cast<const CudaLlamaRunner*>(&runner);
  return cuda != nullptr ? cuda->graph_stats_ : CudaGraphStats{};
}

Result<std::unique_ptr<ModelRunner>> CreateCudaModelRunner(const model::GgufFile& file,
                                                           const CudaRunnerOptions& options) {
  auto runner = std::make_unique<CudaLlamaRunner>(file, options);
  PIER_RETURN_IF_ERROR(runner->Init());
  return std::unique_ptr<ModelRunner>(std::move(runner));
}

}  // namespace pier::engine

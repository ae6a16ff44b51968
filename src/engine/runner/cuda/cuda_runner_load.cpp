// The CUDA runner's set-up: the model's hyper-parameters, its weights uploaded (in place or
// packed for the GPU), the KV store checked (cuda_runner_internal.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "engine/kv/kv_groups.h"
#include "engine/runner/cuda/cuda_runner_internal.h"
#include "kernels/cuda/attention_math.h"
#include "kernels/cuda/quant_dot.h"
#include "kernels/cuda/quant_pack.h"
#include "model/model_info.h"
#include "tensor/dequantize.h"

namespace pier::engine {
namespace cuda_runner {

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
  PIER_ASSIGN_OR_RETURN(const model::GgufTensorInfo* t, file_.FindMatrix(name, rows, cols));
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
  PIER_ASSIGN_OR_RETURN(dims_, ReadModelDims(file_));
  E_ = dims_.n_embd;
  n_layer_ = dims_.n_layer;
  n_ff_ = dims_.n_ff;
  n_head_ = dims_.n_head;
  n_kv_ = dims_.n_kv;
  hd_ = dims_.head_dim;
  n_rot_ = dims_.n_rot;
  n_ctx_ = dims_.n_ctx;
  n_vocab_ = dims_.n_vocab;
  token_embd_ = dims_.token_embd;
  const auto embd_type = static_cast<int32_t>(token_embd_->type);
  eps_ = static_cast<float>(info.rms_norm_eps);
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
  graph_max_context_ = GraphMaxContext(dims_);

  // One block for every tensor; the governor refuses (with its breakdown) when the GPU's
  // budget cannot hold them.
  const model::GgufTensorInfo* output = file_.FindTensor("output.weight");
  const size_t total = WeightBlockBytes(file_, dims_, options_.packed_weights);
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

}  // namespace cuda_runner

Result<std::unique_ptr<ModelRunner>> CreateCudaModelRunner(const model::GgufFile& file,
                                                           const CudaRunnerOptions& options) {
  auto runner = std::make_unique<cuda_runner::CudaLlamaRunner>(file, options);
  PIER_RETURN_IF_ERROR(runner->Init());
  return std::unique_ptr<ModelRunner>(std::move(runner));
}

}  // namespace pier::engine

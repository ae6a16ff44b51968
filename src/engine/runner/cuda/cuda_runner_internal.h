// The CUDA runner's internals, shared by its files (cuda_runner_load.cpp: weights and set-up;
// cuda_runner_step.cpp: one step, eager; cuda_runner_graphs.cpp: decode through CUDA graphs).
// Not part of the runner's interface (cuda_runner.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/runner/cuda/cuda_runner.h"

namespace pier::engine::cuda_runner {

constexpr size_t kAlign = 256;
// The longest context a decode graph covers: its block tables and attention splits are sized
// for it (a step reaching past it runs without a graph).
constexpr int64_t kGraphMaxContext = 8192;
// The largest decode batch a graph runs (CudaLlamaRunner::Bucket).
constexpr int64_t kMaxGraphBatch = 64;

inline size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

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

// The model's sizes as the runner reads them, without a device (so admission can size what the
// runner will allocate: EstimateCudaRunnerMemory).
struct ModelDims {
  int64_t n_embd = 0, n_layer = 0, n_head = 0, n_kv = 0, head_dim = 0, n_rot = 0, n_ff = 0;
  int64_t n_vocab = 0, n_ctx = 0;
  const model::GgufTensorInfo* token_embd = nullptr;
};
// UNSUPPORTED for what the runner does not run (architecture, features, head sizes, widths,
// embedding type), INVALID_ARGUMENT for a misshapen token_embd.weight; ReadModelInfo's errors.
[[nodiscard]] Result<ModelDims> ReadModelDims(const model::GgufFile& file);
StepLayout LayOutStep(const ModelDims& d, int64_t n_tok, int64_t n_out, int64_t n_table,
                      int64_t total_splits);
// Whether matrix `t` goes to the GPU packed (CudaRunnerOptions::packed_weights), and the bytes
// it takes there; the weight block holding every tensor the runner uploads.
bool PacksMatrix(const model::GgufTensorInfo& t, const ModelDims& d, bool packed_weights);
size_t DeviceMatrixBytes(const model::GgufTensorInfo& t, const ModelDims& d, bool packed_weights);
size_t WeightBlockBytes(const model::GgufFile& file, const ModelDims& d, bool packed_weights);
// The longest context a decode graph covers for this model, and the graphs' shared workspace
// (the largest bucket at that context).
int64_t GraphMaxContext(const ModelDims& d);
StepLayout GraphWorkspaceLayout(const ModelDims& d);

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
  bool Packs(const model::GgufTensorInfo& t) const {
    return PacksMatrix(t, dims_, options_.packed_weights);
  }
  Status UploadPacked(const model::GgufTensorInfo& t, int64_t rows, int64_t cols,
                      const void** device_ptr);
  StepLayout LayOut(int64_t n_tok, int64_t n_out, int64_t n_table, int64_t total_splits) const {
    return LayOutStep(dims_, n_tok, n_out, n_table, total_splits);
  }
  Status MatMul(const DeviceMatrix& w, const void* xq, int64_t n_tok, float* y);
  // y[i] = w[i] . xq for 2-3 matrices sharing xq: one launch when fuse_kernels and they share a
  // type, GGUF layout and the warp-per-row product at this many tokens; else MatMul each.
  Status MatMuls(std::initializer_list<std::pair<const DeviceMatrix*, float*>> products,
                 const void* xq, int64_t n_tok);
  Status EnsureHost(size_t bytes);

  // One step's host-side inputs, in the order they are staged in pinned memory.
  struct StepInputs {
    std::vector<int32_t> ids, positions, offsets, tables;
    std::vector<float> cos_sin;
    std::vector<int32_t> split_first, split_query;
  };
  void FillCosSin(StepInputs& in) const;
  static std::vector<std::pair<const void*, size_t>> Parts(const StepInputs& in);
  // The step's inputs are one region of the workspace (ids .. split_query, in LayOutStep's
  // order): staged in pinned memory at the same offsets, they go up in one copy.
  static size_t InputBytes(const StepLayout& L);
  static void WriteStaging(const StepInputs& in, const StepLayout& L, uint8_t* staging);
  Status QueueUploads(const StepLayout& L, uint8_t* base, const uint8_t* staging);
  // Queues the embedding rows and every layer; false when stop_early asked to stop between
  // layers.
  Result<bool> EnqueueLayers(const StepLayout& L, uint8_t* base, int64_t n_tok,
                             int64_t total_splits, const std::atomic<bool>* stop_early);
  // Queues the final norm, the output head for `logit_rows` and the logits' copy to the host.
  Status EnqueueHead(const StepLayout& L, uint8_t* base, int64_t n_tok,
                     const std::vector<int64_t>& logit_rows, void* host_logits);

  // CUDA graphs for decode steps: batches of single tokens, padded to a bucket (1, 2, 4, then
  // multiples of 8 up to kMaxGraphBatch), each bucket captured at its first use and replayed.
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
  ModelDims dims_;
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

}  // namespace pier::engine::cuda_runner

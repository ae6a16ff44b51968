// CudaDevice: the Device (device/device.h) for one CUDA GPU, driven through the plugin ABI.
//
// Plain C++: every CUDA call goes through the loaded plugin (cuda_plugin.h), so this compiles
// and links without CUDA. Raw memory is cudaMalloc'd; pinned host memory is cudaHostAlloc'd;
// virtual-memory arenas reserve an address range once and map physical memory one
// granularity-sized chunk at a time (cuMemCreate + cuMemMap + cuMemSetAccess), so any
// granularity-aligned span can later be unmapped on its own. Streams are non-blocking CUDA
// streams; Stream{0} is the device's legacy default stream.
//
// Ownership: the device owns the bookkeeping of its address ranges; callers own what they
// allocate (see Device). The plugin must outlive the device (the process-wide plugin does).
// Thread-safety: all methods may be called concurrently; range bookkeeping is under a mutex.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "common/mutex.h"
#include "device/cuda/cuda_plugin.h"
#include "device/device.h"

namespace pier::cuda {

class CudaDevice final : public Device {
 public:
  // Opens device `index` of `plugin` (which must be usable). kInvalidArgument for an index
  // out of range; kUnavailable when the plugin reports no device.
  [[nodiscard]] static Result<std::unique_ptr<CudaDevice>> Open(const CudaPlugin& plugin,
                                                                int index);
  // Opens device `index` through the process-wide plugin; kUnavailable with the reason
  // (GetCudaStatus) when no GPU is usable.
  [[nodiscard]] static Result<std::unique_ptr<CudaDevice>> Open(int index);

  ~CudaDevice() override;

  const PierCudaDeviceInfo& info() const { return info_; }

  size_t TotalBytes() const override { return info_.total_bytes; }
  size_t FreeBytes() const override;

  Result<void*> AllocateRaw(size_t bytes, size_t alignment) override;
  void FreeRaw(void* ptr, size_t bytes) override;

  Result<HostAllocation> AllocatePinnedHost(size_t bytes) override;
  void FreePinnedHost(const HostAllocation& allocation) override;

  bool SupportsVirtualMemory() const override { return info_.virtual_memory != 0; }
  size_t VmGranularity() const override { return info_.vm_granularity_bytes; }
  Result<VirtualRange> ReserveAddressRange(size_t bytes) override;
  Status MapChunk(const VirtualRange& range, size_t offset, size_t bytes) override;
  Status UnmapChunk(const VirtualRange& range, size_t offset, size_t bytes) override;
  void ReleaseAddressRange(const VirtualRange& range) override;

  Result<Stream> CreateStream() override;
  void DestroyStream(Stream stream) override;
  Status Synchronize(Stream stream) override;

  Result<Event> CreateEvent() override;
  void DestroyEvent(Event event) override;
  Status RecordEvent(Event event, Stream stream) override;
  Result<bool> EventDone(Event event) override;
  Status StreamWaitEvent(Stream stream, Event event) override;
  Status SynchronizeEvent(Event event) override;

  Status CopyHostToDevice(void* device_dst, const void* host_src, size_t bytes,
                          Stream stream) override;
  Status CopyDeviceToHost(void* host_dst, const void* device_src, size_t bytes,
                          Stream stream) override;
  Status CopyDeviceToDevice(void* device_dst, const void* device_src, size_t bytes,
                            Stream stream) override;
  Status Memset(void* device_dst, uint8_t value, size_t bytes, Stream stream) override;

  // Milliseconds between two recorded events (both complete). For benchmarks and tests.
  [[nodiscard]] Result<float> ElapsedMs(Event start, Event end);

  // GGUF Q4_1 -> f32 on `stream` (see PierCudaPluginApi::dequantize_q4_1_f32).
  //   src: [n_blocks] device Q4_1 blocks; dst: [n_blocks * 32] device f32
  [[nodiscard]] Status DequantizeQ4_1(const void* src, float* dst, uint64_t n_blocks,
                                      Stream stream);

  // Quantizes x [n_tokens, n_cols] (device f32) into 8-bit activation blocks at xq (device,
  // n_tokens * quant::ActivationRowBytes(n_cols) bytes), on `stream`.
  [[nodiscard]] Status QuantizeActivations(const float* x, int64_t n_tokens, int64_t n_cols,
                                           void* xq, Stream stream);
  // y [n_tokens, ldy] = W . x on `stream`, W of ggml type `type` in GGUF layout on the
  // device and xq from QuantizeActivations (see PierCudaPluginApi::quant_matmul).
  [[nodiscard]] Status QuantMatMul(int32_t type, const void* weights, int64_t n_rows,
                                   int64_t n_cols, const void* xq, int64_t n_tokens, float* y,
                                   int64_t ldy, Stream stream);

  // QuantMatMul over 1-4 matrices of one type and width sharing xq, in one launch (see
  // PierCudaPluginApi::quant_matmul_slices).
  [[nodiscard]] Status QuantMatMulSlices(int32_t type, const PierCudaMatrixSlice* matrices,
                                         int32_t count, int64_t n_cols, const void* xq,
                                         int64_t n_tokens, Stream stream);
  // QuantMatMul over a matrix packed by quant::PackRows32 (kernels/cuda/quant_pack.h).
  [[nodiscard]] Status PackedMatMul(int32_t type, const void* packed, int64_t n_rows,
                                    int64_t n_cols, const void* xq, int64_t n_tokens, float* y,
                                    int64_t ldy, Stream stream);
  // QuantMatMul on the tensor cores (kernels/cuda/quant_matmul.h: every type but Q6_K).
  [[nodiscard]] Status MmaMatMul(int32_t type, const void* weights, int64_t n_rows, int64_t n_cols,
                                 const void* xq, int64_t n_tokens, float* y, int64_t ldy,
                                 Stream stream);
  // The per-token operations of kernels/cuda/row_kernels.h on `stream` (device pointers; see
  // PierCudaPluginApi for each).
  [[nodiscard]] Status AddRmsNorm(float* x, const float* add, const float* weight, int64_t n_tokens,
                                  int64_t n, float eps, float* y, void* xq, Stream stream);
  [[nodiscard]] Status SiluMul(const float* gate, const float* up, int64_t n_tokens, int64_t n,
                               float* h, void* xq, Stream stream);
  [[nodiscard]] Status Rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                            int64_t n_rot, bool neox, const float* cos_sin, Stream stream);
  [[nodiscard]] Status EmbeddingRows(int32_t type, const void* table, int64_t n_vocab,
                                     int64_t n_cols, const int32_t* ids, int64_t n_tokens,
                                     float* out, Stream stream);
  [[nodiscard]] Status Argmax(const float* logits, int64_t n_tokens, int64_t n_vocab, int64_t ld,
                              int32_t* out, Stream stream);
  // Graphs: Capture what the calling thread queues on `stream` between BeginCapture and
  // EndCapture into an executable graph, launched later as one unit (CUDA graphs).
  [[nodiscard]] Status BeginCapture(Stream stream);
  [[nodiscard]] Result<PierCudaGraph> EndCapture(Stream stream);
  [[nodiscard]] Status LaunchGraph(PierCudaGraph graph, Stream stream);
  void DestroyGraph(PierCudaGraph graph);
  // Paged attention and K/V writes (kernels/cuda/attention.h; device pointers).
  [[nodiscard]] Status PagedAttention(const PierCudaAttentionArgs& args, Stream stream);
  [[nodiscard]] Status KvWrite(const float* k, const float* v, int64_t n_tokens,
                               const int32_t* positions, const int32_t* table_offsets,
                               const int32_t* block_tables, void* kv_base,
                               const PierCudaKvGeometry& geometry, Stream stream);
  // Rope of q and k with the K/V write, one launch (PierCudaPluginApi::rope_kv_write).
  [[nodiscard]] Status RopeKvWrite(float* q, const float* k, const float* v, int64_t n_tokens,
                                   int64_t n_head, int64_t n_rot, const float* cos_sin,
                                   const int32_t* positions, const int32_t* table_offsets,
                                   const int32_t* block_tables, void* kv_base,
                                   const PierCudaKvGeometry& geometry, Stream stream);

 private:
  // One reserved address range: the physical handle of each granule (0 = unmapped).
  struct RangeState {
    void* base = nullptr;
    size_t bytes = 0;
    std::vector<uint64_t> granules;  // [bytes / granularity]
  };

  CudaDevice(const CudaPlugin& plugin, int index, std::string name, PierCudaDeviceInfo info);

  // Checks offset/bytes against the range and the granularity; returns its state.
  Result<RangeState*> FindSpan(const VirtualRange& range, size_t offset, size_t bytes)
      PIER_REQUIRES(ranges_mutex_);
  // Unmaps granules [first, last) of `state` (one of ranges_) that are mapped; stops at the
  // first failure.
  Status UnmapGranules(RangeState& state, size_t first, size_t last) PIER_REQUIRES(ranges_mutex_);
  Status Copy(void* dst, const void* src, size_t bytes, Stream stream, const char* what);

  const PierCudaPluginApi& api() const { return plugin_.api(); }

  const CudaPlugin& plugin_;
  const PierCudaDeviceInfo info_;

  Mutex ranges_mutex_;
  std::map<uintptr_t, RangeState> ranges_ PIER_GUARDED_BY(ranges_mutex_);
  uintptr_t next_range_id_ PIER_GUARDED_BY(ranges_mutex_) = 1;
};

}  // namespace pier::cuda

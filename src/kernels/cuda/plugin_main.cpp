// The CUDA plugin's entry point and its runtime-API functions (see cuda_plugin_api.h).
//
// Built into libpier_cuda.so with the CUDA runtime linked statically; the runtime loads the
// driver (libcuda.so.1) itself when first used, so the plugin loads on a machine without a
// driver and then reports PIER_CUDA_ERROR_NO_DRIVER. Only pier_cuda_plugin_api is exported.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#include "device/cuda/cuda_plugin_api.h"
#include "device/cuda/plugin_internal.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/dequantize.h"
#include "kernels/cuda/quant_dot.h"
#include "kernels/cuda/quant_matmul.h"
#include "kernels/cuda/row_kernels.h"

#ifndef PIER_CUDA_ARCHS
#define PIER_CUDA_ARCHS "unknown"
#endif

namespace pier::cuda_plugin {
namespace {

thread_local std::string t_last_error;

cudaStream_t ToCuda(PierCudaStream stream) { return reinterpret_cast<cudaStream_t>(stream); }
cudaEvent_t ToCuda(PierCudaEvent event) { return reinterpret_cast<cudaEvent_t>(event); }

const char* BuildInfo() {
  static const std::string info = [] {
    char text[128];
    std::snprintf(text, sizeof(text), "CUDA runtime %d.%d, built for sm_%s", CUDART_VERSION / 1000,
                  (CUDART_VERSION % 1000) / 10, PIER_CUDA_ARCHS);
    return std::string(text);
  }();
  return info.c_str();
}

const char* LastError() { return t_last_error.c_str(); }

PierCudaResult Versions(int32_t* runtime_version, int32_t* driver_version) {
  if (runtime_version == nullptr || driver_version == nullptr) {
    return Fail(PIER_CUDA_ERROR_INVALID_ARGUMENT, "versions: null output");
  }
  int runtime = 0;
  int driver = 0;
  if (PierCudaResult rc = FromCuda(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion")) {
    return rc;
  }
  // Reports 0 without failing when no driver is installed.
  if (PierCudaResult rc = FromCuda(cudaDriverGetVersion(&driver), "cudaDriverGetVersion")) {
    return rc;
  }
  *runtime_version = runtime;
  *driver_version = driver;
  return PIER_CUDA_OK;
}

PierCudaResult DeviceCount(int32_t* count) {
  if (count == nullptr) return Fail(PIER_CUDA_ERROR_INVALID_ARGUMENT, "device_count: null");
  int n = 0;
  if (PierCudaResult rc = FromCuda(cudaGetDeviceCount(&n), "cudaGetDeviceCount")) return rc;
  if (n <= 0) return Fail(PIER_CUDA_ERROR_NO_DEVICE, "cudaGetDeviceCount: no CUDA device");
  *count = n;
  return PIER_CUDA_OK;
}

PierCudaResult DeviceInfo(int32_t device, PierCudaDeviceInfo* info) {
  if (info == nullptr) return Fail(PIER_CUDA_ERROR_INVALID_ARGUMENT, "device_info: null");
  if (PierCudaResult rc = UseDevice(device)) return rc;
  cudaDeviceProp prop{};
  if (PierCudaResult rc = FromCuda(cudaGetDeviceProperties(&prop, device), "device_info")) {
    return rc;
  }
  *info = PierCudaDeviceInfo{};
  std::snprintf(info->name, sizeof(info->name), "%s", prop.name);
  info->compute_major = prop.major;
  info->compute_minor = prop.minor;
  info->multiprocessors = prop.multiProcessorCount;
  info->total_bytes = prop.totalGlobalMem;
  int32_t vm = 0;
  uint64_t granularity = 0;
  // A device without virtual-memory support is still usable; only arenas need it.
  if (VmSupport(device, &vm, &granularity) == PIER_CUDA_OK) {
    info->virtual_memory = vm;
    info->vm_granularity_bytes = vm ? granularity : 0;
  }
  t_last_error.clear();
  return PIER_CUDA_OK;
}

PierCudaResult MemoryInfo(int32_t device, uint64_t* free_bytes, uint64_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) {
    return Fail(PIER_CUDA_ERROR_INVALID_ARGUMENT, "memory_info: null output");
  }
  if (PierCudaResult rc = UseDevice(device)) return rc;
  size_t free_now = 0;
  size_t total = 0;
  if (PierCudaResult rc = FromCuda(cudaMemGetInfo(&free_now, &total), "cudaMemGetInfo")) {
    return rc;
  }
  *free_bytes = free_now;
  *total_bytes = total;
  return PIER_CUDA_OK;
}

PierCudaResult DeviceAlloc(int32_t device, uint64_t bytes, void** ptr) {
  if (ptr == nullptr || bytes == 0) {
    return Fail(PIER_CUDA_ERROR_INVALID_ARGUMENT, "device_alloc: zero size or null output");
  }
  if (PierCudaResult rc = UseDevice(device)) return rc;
  *ptr = nullptr;
  return FromCuda(cudaMalloc(ptr, bytes), "cudaMalloc");
}

PierCudaResult DeviceFree(int32_t device, void* ptr) {
  if (PierCudaResult rc = UseDevice(device)) return rc;
  return FromCuda(cudaFree(ptr), "cudaFree");
}

PierCudaResult HostAlloc(uint64_t bytes, void** ptr) {
  if (ptr == nullptr || bytes == 0) {
    return Fail(PIER_CUDA_ERROR_INVALID_ARGUMENT, "host_alloc: zero size or null output");
  }
  *ptr = nullptr;
  return FromCuda(cudaHostAlloc(ptr, bytes, cudaHostAllocPortable), "cudaHostAlloc");
}

PierCudaResult HostFree(void* ptr) { return FromCuda(cudaFreeHost(ptr), "cudaFreeHost"); }

PierCudaResult MemcpyAsync(int32_t device, void* dst, const void* src, uint64_t bytes,
                           PierCudaStream stream) {
  if (bytes == 0) return PIER_CUDA_OK;
  if (PierCudaResult rc = UseDevice(device)) return rc;
  return FromCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ToCuda(stream)),
                  "cudaMemcpyAsync");
}

PierCudaResult MemsetAsync(int32_t device, void* dst, int32_t value, uint64_t bytes,
                           PierCudaStream stream) {
  if (bytes == 0) return PIER_CUDA_OK;
  if (PierCudaResult rc = UseDevice(device)) return rc;
  return FromCuda(cudaMemsetAsync(dst, value, bytes, ToCuda(stream)), "cudaMemsetAsync");
}

PierCudaResult StreamCreate(int32_t device, PierCudaStream* stream) {
  if (stream == nullptr) return Fail(PIER_CUDA_ERROR_INVALID_ARGUMENT, "stream_create: null");
  if (PierCudaResult rc = UseDevice(device)) return rc;
  cudaStream_t s = nullptr;
  if (PierCudaResult rc =
          FromCuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate")) {
    return rc;
  }
  *stream = reinterpret_cast<PierCudaStream>(s);
  return PIER_CUDA_OK;
}

PierCudaResult StreamDestroy(int32_t device, PierCudaStream stream) {
  if (stream == nullptr) return PIER_CUDA_OK;  // the default stream is never destroyed
  if (PierCudaResult rc = UseDevice(device)) return rc;
  return FromCuda(cudaStreamDestroy(ToCuda(stream)), "cudaStreamDestroy");
}

PierCudaResult StreamSynchronize(int32_t device, PierCudaStream stream) {
  if (PierCudaResult rc = UseDevice(device)) return rc;
  return FromCuda(cudaStreamSynchronize(ToCuda(stream)), "cudaStreamSynchronize");
}

PierCudaResult EventCreate(int32_t device, PierCudaEvent* event) {
  if (event == nullptr) return Fail(PIER_CUDA_ERROR_INVALID_ARGUMENT, "event_create: null");
  if (PierCudaResult rc = UseDevice(device)) return rc;
  cudaEvent_t e = nullptr;
  if (PierCudaResult rc = FromCuda(cudaEventCreate(&e), "cudaEventCreate")) return rc;
  *event = reinterpret_cast<PierCudaEvent>(e);
  return PIER_CUDA_OK;
}

PierCudaResult EventDestroy(int32_t device, PierCudaEvent event) {
  if (PierCudaResult rc = UseDevice(device)) return rc;
  return FromCuda(cudaEventDestroy(ToCuda(event)), "cudaEventDestroy");
}

PierCudaResult EventRecord(int32_t device, PierCudaEvent event, PierCudaStream stream) {
  if (PierCudaResult rc = UseDevice(device)) return rc;
  return FromCuda(cudaEventRecord(ToCuda(event), ToCuda(stream)), "cudaEventRecord");
}

PierCudaResult EventQuery(int32_t device, PierCudaEvent event, int32_t* done) {
  if (done == nullptr) return Fail(PIER_CUDA_ERROR_INVALID_ARGUMENT, "event_query: null");
  if (PierCudaResult rc = UseDevice(device)) return rc;
  const cudaError_t error = cudaEventQuery(ToCuda(event));
  if (error == cudaErrorNotReady) {
    cudaGetLastError();  // not an error: the work is still running
    *done = 0;
    return PIER_CUDA_OK;
  }
  if (PierCudaResult rc = FromCuda(error, "cudaEventQuery")) return rc;
  *done = 1;
  return PIER_CUDA_OK;
}

PierCudaResult EventSynchronize(int32_t device, PierCudaEvent event) {
  if (PierCudaResult rc = UseDevice(device)) return rc;
  return FromCuda(cudaEventSynchronize(ToCuda(event)), "cudaEventSynchronize");
}

PierCudaResult StreamWaitEvent(int32_t device, PierCudaStream stream, PierCudaEvent event) {
  if (PierCudaResult rc = UseDevice(device)) return rc;
  return FromCuda(cudaStreamWaitEvent(ToCuda(stream), ToCuda(event), 0), "cudaStreamWaitEvent");
}

PierCudaResult EventElapsedMs(int32_t device, PierCudaEvent start, PierCudaEvent end, float* ms) {
  if (ms == nullptr) return Fail(PIER_CUDA_ERROR_INVALID_ARGUMENT, "event_elapsed_ms: null");
  if (PierCudaResult rc = UseDevice(device)) return rc;
  return FromCuda(cudaEventElapsedTime(ms, ToCuda(start), ToCuda(end)), "cudaEventElapsedTime");
}

PierCudaResult DequantizeQ4_1F32(int32_t device, const void* src, float* dst, uint64_t n_blocks,
                                 PierCudaStream stream) {
  if (PierCudaResult rc = UseDevice(device)) return rc;
  const cudaError_t error = pier::cuda::LaunchDequantizeQ4_1(src, dst, n_blocks, ToCuda(stream));
  if (error == cudaErrorInvalidValue) {
    return Fail(PIER_CUDA_ERROR_INVALID_ARGUMENT,
                "dequantize_q4_1_f32: src must be 4-byte and dst 16-byte aligned, non-null");
  }
  return FromCuda(error, "dequantize_q4_1_f32 launch");
}

PierCudaResult QuantizeActivations(int32_t device, const float* x, int64_t n_tokens, int64_t n_cols,
                                   void* xq, PierCudaStream stream) {
  if (PierCudaResult rc = UseDevice(device)) return rc;
  const cudaError_t error =
      pier::cuda::LaunchQuantizeActivations(x, n_tokens, n_cols, xq, ToCuda(stream));
  if (error == cudaErrorInvalidValue) {
    return Fail(PIER_CUDA_ERROR_INVALID_ARGUMENT,
                "quantize_activations: " + std::to_string(n_tokens) + " tokens of " +
                    std::to_string(n_cols) +
                    " columns: needs a positive multiple of 32 columns and non-null, "
                    "16-byte aligned x and xq");
  }
  return FromCuda(error, "quantize_activations launch");
}

PierCudaResult QuantMatMul(int32_t device, int32_t type, const void* weights, int64_t n_rows,
                           int64_t n_cols, const void* xq, int64_t n_tokens, float* y, int64_t ldy,
                           PierCudaStream stream) {
  if (PierCudaResult rc = UseDevice(device)) return rc;
  const cudaError_t error = pier::cuda::LaunchQuantMatMul(type, weights, n_rows, n_cols, xq,
                                                          n_tokens, y, ldy, ToCuda(stream));
  if (error == cudaErrorInvalidValue) {
    if (!pier::cuda::quant::IsQuantType(type)) {
      return Fail(PIER_CUDA_ERROR_INVALID_ARGUMENT,
                  "quant_matmul: ggml type " + std::to_string(type) +
                      " has no GPU product (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K do)");
    }
    return Fail(
        PIER_CUDA_ERROR_INVALID_ARGUMENT,
        "quant_matmul: bad shape or pointer (" + std::to_string(n_rows) + " x " +
            std::to_string(n_cols) + ", " + std::to_string(n_tokens) + " tokens, ldy " +
            std::to_string(ldy) +
            "): columns must be whole GGUF blocks, ldy >= rows, xq 16-byte aligned, at most "
            "524,280 tokens");
  }
  return FromCuda(error, "quant_matmul launch");
}

// A launch's result, with `refusal` as the message when the launcher refused its arguments.
PierCudaResult FromLaunch(cudaError_t error, const char* what, const std::string& refusal) {
  if (error == cudaErrorInvalidValue) {
    return Fail(PIER_CUDA_ERROR_INVALID_ARGUMENT, std::string(what) + ": " + refusal);
  }
  return FromCuda(error, what);
}

std::string Shape(int64_t n_tokens, int64_t n) {
  return std::to_string(n_tokens) + " tokens of " + std::to_string(n);
}

PierCudaResult AddRmsNorm(int32_t device, float* x, const float* add, const float* weight,
                          int64_t n_tokens, int64_t n, float eps, float* y, void* xq,
                          PierCudaStream stream) {
  if (PierCudaResult rc = UseDevice(device)) return rc;
  return FromLaunch(
      pier::cuda::LaunchAddRmsNorm(x, add, weight, n_tokens, n, eps, y, xq, ToCuda(stream)),
      "add_rms_norm",
      Shape(n_tokens, n) + ": needs a positive multiple of 32, x and weight, xq 16-byte aligned");
}

PierCudaResult SiluMul(int32_t device, const float* gate, const float* up, int64_t n_tokens,
                       int64_t n, float* h, void* xq, PierCudaStream stream) {
  if (PierCudaResult rc = UseDevice(device)) return rc;
  return FromLaunch(
      pier::cuda::LaunchSiluMul(gate, up, n_tokens, n, h, xq, ToCuda(stream)), "silu_mul",
      Shape(n_tokens, n) + ": needs a positive multiple of 32, gate and up, xq 16-byte aligned");
}

PierCudaResult Rope(int32_t device, float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                    int64_t n_rot, int32_t neox, const float* cos_sin, PierCudaStream stream) {
  if (PierCudaResult rc = UseDevice(device)) return rc;
  return FromLaunch(pier::cuda::LaunchRope(x, n_tokens, n_heads, head_dim, n_rot, neox != 0,
                                           cos_sin, ToCuda(stream)),
                    "rope",
                    "n_rot " + std::to_string(n_rot) + " of head_dim " + std::to_string(head_dim) +
                        ": needs an even n_rot <= head_dim");
}

PierCudaResult EmbeddingRows(int32_t device, int32_t type, const void* table, int64_t n_vocab,
                             int64_t n_cols, const int32_t* ids, int64_t n_tokens, float* out,
                             PierCudaStream stream) {
  if (PierCudaResult rc = UseDevice(device)) return rc;
  return FromLaunch(pier::cuda::LaunchEmbeddingRows(type, table, n_vocab, n_cols, ids, n_tokens,
                                                    out, ToCuda(stream)),
                    "embedding_rows",
                    "ggml type " + std::to_string(type) + ", " + std::to_string(n_vocab) +
                        " rows of " + std::to_string(n_cols) +
                        ": needs F32, F16 or a quantized type with a GPU product, whole blocks");
}

PierCudaResult Argmax(int32_t device, const float* logits, int64_t n_tokens, int64_t n_vocab,
                      int64_t ld, int32_t* out, PierCudaStream stream) {
  if (PierCudaResult rc = UseDevice(device)) return rc;
  return FromLaunch(
      pier::cuda::LaunchArgmax(logits, n_tokens, n_vocab, ld, out, ToCuda(stream)), "argmax",
      Shape(n_tokens, n_vocab) + " (ld " + std::to_string(ld) + "): needs ld >= n_vocab > 0");
}

pier::cuda::attn::KvGeometry ToGeometry(const PierCudaKvGeometry& g) {
  return {g.bytes_per_block, g.key_offset, g.value_offset, g.n_kv_head, g.head_dim};
}

std::string Describe(const PierCudaKvGeometry& g) {
  return std::to_string(g.n_kv_head) + " K/V heads of " + std::to_string(g.head_dim) +
         ", blocks of " + std::to_string(g.bytes_per_block) + " bytes";
}

PierCudaResult PagedAttention(int32_t device, const PierCudaAttentionArgs* args,
                              PierCudaStream stream) {
  if (PierCudaResult rc = UseDevice(device)) return rc;
  if (args == nullptr) return Fail(PIER_CUDA_ERROR_INVALID_ARGUMENT, "paged_attention: no args");
  const pier::cuda::PagedAttentionArgs a{args->q,
                                         args->out,
                                         args->n_queries,
                                         args->n_head,
                                         args->positions,
                                         args->table_offsets,
                                         args->block_tables,
                                         static_cast<const uint8_t*>(args->kv_base),
                                         ToGeometry(args->geometry),
                                         args->split_first,
                                         args->split_query,
                                         args->total_splits,
                                         args->scratch,
                                         static_cast<uint8_t*>(args->out_xq)};
  return FromLaunch(pier::cuda::LaunchPagedAttention(a, ToCuda(stream)), "paged_attention",
                    std::to_string(args->n_queries) + " queries of " +
                        std::to_string(args->n_head) + " heads, " + Describe(args->geometry) +
                        ", " + std::to_string(args->total_splits) +
                        " splits: needs at most 65,535 queries, head_dim <= 256, heads a "
                        "multiple of the K/V heads, every pointer set, and with out_xq a "
                        "head_dim that is a multiple of 32 and a 16-byte aligned out_xq");
}

PierCudaResult KvWrite(int32_t device, const float* k, const float* v, int64_t n_tokens,
                       const int32_t* positions, const int32_t* table_offsets,
                       const int32_t* block_tables, void* kv_base,
                       const PierCudaKvGeometry* geometry, PierCudaStream stream) {
  if (PierCudaResult rc = UseDevice(device)) return rc;
  if (geometry == nullptr) return Fail(PIER_CUDA_ERROR_INVALID_ARGUMENT, "kv_write: no geometry");
  return FromLaunch(pier::cuda::LaunchKvWrite(k, v, n_tokens, positions, table_offsets,
                                              block_tables, static_cast<uint8_t*>(kv_base),
                                              ToGeometry(*geometry), ToCuda(stream)),
                    "kv_write",
                    std::to_string(n_tokens) + " tokens, " + Describe(*geometry) +
                        ": needs head_dim <= 256, even offsets and every pointer set");
}

PierCudaResult QuantMatMulSlices(int32_t device, int32_t type, const PierCudaMatrixSlice* matrices,
                                 int32_t count, int64_t n_cols, const void* xq, int64_t n_tokens,
                                 PierCudaStream stream) {
  if (PierCudaResult rc = UseDevice(device)) return rc;
  if (matrices == nullptr || count < 1 || count > pier::cuda::kMaxMatrixSlices) {
    return Fail(PIER_CUDA_ERROR_INVALID_ARGUMENT,
                "quant_matmul_slices: " + std::to_string(count) + " matrices (1 to " +
                    std::to_string(pier::cuda::kMaxMatrixSlices) + " in one launch)");
  }
  static_assert(pier::cuda::kMaxMatrixSlices == PIER_CUDA_MAX_MATRIX_SLICES);
  pier::cuda::MatrixSlice slices[pier::cuda::kMaxMatrixSlices];
  for (int32_t i = 0; i < count; ++i) {
    slices[i] = {matrices[i].weights, matrices[i].n_rows, matrices[i].y, matrices[i].ldy};
  }
  const cudaError_t error = pier::cuda::LaunchQuantMatMulSlices(type, slices, count, n_cols, xq,
                                                                n_tokens, ToCuda(stream));
  if (error == cudaErrorInvalidValue) {
    return Fail(PIER_CUDA_ERROR_INVALID_ARGUMENT,
                "quant_matmul_slices: ggml type " + std::to_string(type) + ", " +
                    std::to_string(count) + " matrices of " + std::to_string(n_cols) +
                    " columns, " + std::to_string(n_tokens) +
                    " tokens: needs a GPU product type, whole blocks, ldy >= rows and non-null, "
                    "aligned pointers");
  }
  return FromCuda(error, "quant_matmul_slices launch");
}

PierCudaResult RopeKvWrite(int32_t device, float* q, const float* k, const float* v,
                           int64_t n_tokens, int64_t n_head, int64_t n_rot, const float* cos_sin,
                           const int32_t* positions, const int32_t* table_offsets,
                           const int32_t* block_tables, void* kv_base,
                           const PierCudaKvGeometry* geometry, PierCudaStream stream) {
  if (PierCudaResult rc = UseDevice(device)) return rc;
  if (geometry == nullptr) {
    return Fail(PIER_CUDA_ERROR_INVALID_ARGUMENT, "rope_kv_write: no geometry");
  }
  return FromLaunch(
      pier::cuda::LaunchRopeKvWrite(q, k, v, n_tokens, n_head, n_rot, cos_sin, positions,
                                    table_offsets, block_tables, static_cast<uint8_t*>(kv_base),
                                    ToGeometry(*geometry), ToCuda(stream)),
      "rope_kv_write",
      std::to_string(n_tokens) + " tokens of " + std::to_string(n_head) + " heads, " +
          std::to_string(n_rot) + " rotated, " + Describe(*geometry) +
          ": needs an even head_dim <= 256, an even n_rot <= head_dim, heads a "
          "multiple of the K/V heads and every pointer set");
}

PierCudaResult BeginCapture(int32_t device, PierCudaStream stream) {
  if (PierCudaResult rc = UseDevice(device)) return rc;
  return FromCuda(cudaStreamBeginCapture(ToCuda(stream), cudaStreamCaptureModeRelaxed),
                  "cudaStreamBeginCapture");
}

PierCudaResult EndCapture(int32_t device, PierCudaStream stream, PierCudaGraph* graph) {
  if (graph == nullptr) return Fail(PIER_CUDA_ERROR_INVALID_ARGUMENT, "end_capture: null");
  if (PierCudaResult rc = UseDevice(device)) return rc;
  cudaGraph_t captured = nullptr;
  if (PierCudaResult rc =
          FromCuda(cudaStreamEndCapture(ToCuda(stream), &captured), "cudaStreamEndCapture")) {
    if (captured != nullptr) cudaGraphDestroy(captured);
    return rc;
  }
  cudaGraphExec_t exec = nullptr;
  const PierCudaResult rc =
      FromCuda(cudaGraphInstantiate(&exec, captured, 0), "cudaGraphInstantiate");
  cudaGraphDestroy(captured);
  if (rc != PIER_CUDA_OK) return rc;
  *graph = reinterpret_cast<PierCudaGraph>(exec);
  return PIER_CUDA_OK;
}

PierCudaResult GraphLaunch(int32_t device, PierCudaGraph graph, PierCudaStream stream) {
  if (graph == nullptr) return Fail(PIER_CUDA_ERROR_INVALID_ARGUMENT, "graph_launch: null");
  if (PierCudaResult rc = UseDevice(device)) return rc;
  return FromCuda(cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(graph), ToCuda(stream)),
                  "cudaGraphLaunch");
}

PierCudaResult GraphDestroy(int32_t device, PierCudaGraph graph) {
  if (graph == nullptr) return PIER_CUDA_OK;
  if (PierCudaResult rc = UseDevice(device)) return rc;
  return FromCuda(cudaGraphExecDestroy(reinterpret_cast<cudaGraphExec_t>(graph)),
                  "cudaGraphExecDestroy");
}

PierCudaResult PackedMatMul(int32_t device, int32_t type, const void* packed, int64_t n_rows,
                            int64_t n_cols, const void* xq, int64_t n_tokens, float* y, int64_t ldy,
                            PierCudaStream stream) {
  if (PierCudaResult rc = UseDevice(device)) return rc;
  return FromLaunch(pier::cuda::LaunchPackedMatMul(type, packed, n_rows, n_cols, xq, n_tokens, y,
                                                   ldy, ToCuda(stream)),
                    "packed_matmul",
                    "ggml type " + std::to_string(type) + ", " + std::to_string(n_rows) + " x " +
                        std::to_string(n_cols) + ", " + std::to_string(n_tokens) +
                        " tokens: needs Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0, whole blocks of 32, "
                        "ldy >= rows, packed and xq 16-byte aligned");
}

PierCudaResult MmaMatMul(int32_t device, int32_t type, const void* weights, int64_t n_rows,
                         int64_t n_cols, const void* xq, int64_t n_tokens, float* y, int64_t ldy,
                         PierCudaStream stream) {
  if (PierCudaResult rc = UseDevice(device)) return rc;
  return FromLaunch(pier::cuda::LaunchMmaMatMul(type, weights, n_rows, n_cols, xq, n_tokens, y, ldy,
                                                ToCuda(stream)),
                    "mma_matmul",
                    "ggml type " + std::to_string(type) + ", " + std::to_string(n_rows) + " x " +
                        std::to_string(n_cols) + ", " + std::to_string(n_tokens) +
                        " tokens: needs a GPU of compute capability 8.0 or later, a type with a "
                        "GPU product other than Q6_K, whole blocks, ldy >= rows, xq 16-byte "
                        "aligned");
}

const PierCudaPluginApi kApi = {
    PIER_CUDA_PLUGIN_ABI_VERSION,
    sizeof(PierCudaPluginApi),
    BuildInfo,
    LastError,
    Versions,
    DeviceCount,
    DeviceInfo,
    MemoryInfo,
    DeviceAlloc,
    DeviceFree,
    HostAlloc,
    HostFree,
    MemcpyAsync,
    MemsetAsync,
    StreamCreate,
    StreamDestroy,
    StreamSynchronize,
    EventCreate,
    EventDestroy,
    EventRecord,
    EventQuery,
    EventSynchronize,
    StreamWaitEvent,
    EventElapsedMs,
    VmReserve,
    VmRelease,
    VmMap,
    VmUnmap,
    DequantizeQ4_1F32,
    QuantizeActivations,
    QuantMatMul,
    AddRmsNorm,
    SiluMul,
    Rope,
    EmbeddingRows,
    Argmax,
    PagedAttention,
    KvWrite,
    BeginCapture,
    EndCapture,
    GraphLaunch,
    GraphDestroy,
    PackedMatMul,
    MmaMatMul,
    QuantMatMulSlices,
    RopeKvWrite,
};

}  // namespace

PierCudaResult Fail(PierCudaResult result, std::string message) {
  t_last_error = std::move(message);
  return result;
}

PierCudaResult FromCuda(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return PIER_CUDA_OK;
  cudaGetLastError();  // reset the non-sticky error state
  std::string message =
      std::string(what) + ": " + cudaGetErrorName(error) + ": " + cudaGetErrorString(error);
  switch (error) {
    case cudaErrorInsufficientDriver:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
      return Fail(PIER_CUDA_ERROR_NO_DRIVER, std::move(message));
    case cudaErrorNoDevice:
    case cudaErrorDevicesUnavailable:
      return Fail(PIER_CUDA_ERROR_NO_DEVICE, std::move(message));
    case cudaErrorMemoryAllocation:
      return Fail(PIER_CUDA_ERROR_OUT_OF_MEMORY, std::move(message));
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle:
      return Fail(PIER_CUDA_ERROR_INVALID_ARGUMENT, std::move(message));
    case cudaErrorNotSupported:
      return Fail(PIER_CUDA_ERROR_UNSUPPORTED, std::move(message));
    default:
      return Fail(PIER_CUDA_ERROR_FAILED, std::move(message));
  }
}

PierCudaResult UseDevice(int32_t device) {
  return FromCuda(cudaSetDevice(device), "cudaSetDevice");
}

}  // namespace pier::cuda_plugin

extern "C" __attribute__((visibility("default"))) const PierCudaPluginApi* pier_cuda_plugin_api(
    uint32_t abi_version) {
  if (abi_version != PIER_CUDA_PLUGIN_ABI_VERSION) return nullptr;
  return &pier::cuda_plugin::kApi;
}

/* The C ABI between Pier and its CUDA plugin (libpier_cuda.so).
 *
 * `pier` links no CUDA library. At start the loader (cuda_plugin.h) dlopens the plugin and
 * calls its one exported symbol, pier_cuda_plugin_api(), which returns a table of plain C
 * function pointers. Everything CUDA (runtime, driver API, kernels) stays behind this table.
 * This header is shared by both sides and includes no CUDA header.
 *
 * Versioning: PIER_CUDA_PLUGIN_ABI_VERSION changes whenever a field is removed, reordered or
 * changes meaning; the plugin returns NULL for any version but its own, and the loader then
 * says the plugin does not match. New functions are only appended, with a version bump.
 *
 * Conventions: every function returns a PierCudaResult (0 = success). On failure the plugin
 * keeps a message for the calling thread, read with last_error(), valid until that thread's
 * next call. Stream and event handles are opaque; a handle is only used with the plugin
 * that made it. A NULL stream means the legacy default stream of the given device.
 *
 * Thread-safety: every function may be called from any thread; the table itself is
 * immutable and lives as long as the process (the plugin is never unloaded).
 */
#ifndef PIER_DEVICE_CUDA_CUDA_PLUGIN_API_H_
#define PIER_DEVICE_CUDA_CUDA_PLUGIN_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PIER_CUDA_PLUGIN_ABI_VERSION 3u
#define PIER_CUDA_PLUGIN_ENTRY_SYMBOL "pier_cuda_plugin_api"

typedef int32_t PierCudaResult;
#define PIER_CUDA_OK 0
#define PIER_CUDA_ERROR_NO_DRIVER 1        /* libcuda missing or older than the runtime */
#define PIER_CUDA_ERROR_NO_DEVICE 2        /* a driver but no usable GPU */
#define PIER_CUDA_ERROR_OUT_OF_MEMORY 3    /* device (or pinned host) memory exhausted */
#define PIER_CUDA_ERROR_INVALID_ARGUMENT 4 /* bad size, alignment, handle or device number */
#define PIER_CUDA_ERROR_UNSUPPORTED 5      /* e.g. the device has no virtual-memory support */
#define PIER_CUDA_ERROR_FAILED 6           /* any other CUDA error; last_error() has details */

typedef struct PierCudaStream_* PierCudaStream;
typedef struct PierCudaGraph_* PierCudaGraph; /* an instantiated (executable) CUDA graph */
typedef struct PierCudaEvent_* PierCudaEvent;

typedef struct PierCudaDeviceInfo {
  char name[256];        /* "NVIDIA H200" */
  int32_t compute_major; /* 9 for sm_90 */
  int32_t compute_minor;
  int32_t multiprocessors;
  int32_t virtual_memory;        /* 1 when cuMemCreate/cuMemMap arenas are supported */
  uint64_t total_bytes;          /* global memory */
  uint64_t vm_granularity_bytes; /* physical chunk size for arenas; 0 without support */
} PierCudaDeviceInfo;

/* Where one layer's K/V rows are in a paged cache (kernels/cuda/attention_math.h): blocks of
 * 16 positions, bytes_per_block apart, [16][n_kv_head][head_dim] f16 per plane. */
typedef struct PierCudaKvGeometry {
  int64_t bytes_per_block;
  int64_t key_offset;   /* bytes from a block's start to the layer's K plane */
  int64_t value_offset; /* ... to its V plane */
  int64_t n_kv_head;
  int64_t head_dim; /* at most 256 */
} PierCudaKvGeometry;

/* One paged-attention launch (kernels/cuda/attention.h). */
typedef struct PierCudaAttentionArgs {
  const float* q;               /* [n_queries][n_head][head_dim] */
  float* out;                   /* [n_queries][n_head][head_dim] */
  int64_t n_queries;            /* at most 65,535 */
  int64_t n_head;               /* a multiple of geometry.n_kv_head */
  const int32_t* positions;     /* [n_queries]: each attends 0..position (causal) */
  const int32_t* table_offsets; /* [n_queries]: start of its sequence's table */
  const int32_t* block_tables;
  const void* kv_base; /* block 0 */
  PierCudaKvGeometry geometry;
  /* The launch's 256-position splits numbered query by query (attention_math.h's IndexSplits):
   * query q's are split_first[q] .. split_first[q] + position / 256. */
  const int32_t* split_first; /* [n_queries] */
  const int32_t* split_query; /* [total_splits]: the query of each split */
  int64_t total_splits;
  float* scratch; /* total_splits * n_head * (head_dim + 2) floats */
  /* ABI 3. NULL, or where the merge also writes each output row as 8-bit activation blocks
   * (what quantize_activations would write from `out`); head_dim then a multiple of 32. */
  void* out_xq;
} PierCudaAttentionArgs;

/* One matrix of quant_matmul_slices (ABI 3): n_rows rows in GGUF layout, results y
 * [n_tokens, ldy]. At most PIER_CUDA_MAX_MATRIX_SLICES in one launch. */
#define PIER_CUDA_MAX_MATRIX_SLICES 4
typedef struct PierCudaMatrixSlice {
  const void* weights;
  int64_t n_rows;
  float* y;
  int64_t ldy;
} PierCudaMatrixSlice;

typedef struct PierCudaPluginApi {
  uint32_t abi_version; /* PIER_CUDA_PLUGIN_ABI_VERSION the plugin was built with */
  uint32_t struct_size; /* sizeof(PierCudaPluginApi) in the plugin */

  /* "CUDA runtime 13.0, built for sm_90": static, never NULL. */
  const char* (*build_info)(void);
  /* Message of the calling thread's last failed call ("" when none). */
  const char* (*last_error)(void);

  /* ---- Discovery --------------------------------------------------------------------- */
  /* Runtime version the plugin carries and the driver's (0 when no driver is loaded). */
  PierCudaResult (*versions)(int32_t* runtime_version, int32_t* driver_version);
  /* NO_DRIVER or NO_DEVICE when there is nothing to run on; count > 0 on success. */
  PierCudaResult (*device_count)(int32_t* count);
  PierCudaResult (*device_info)(int32_t device, PierCudaDeviceInfo* info);
  PierCudaResult (*memory_info)(int32_t device, uint64_t* free_bytes, uint64_t* total_bytes);

  /* ---- Memory ------------------------------------------------------------------------ */
  /* cudaMalloc on `device` (256-byte aligned). OUT_OF_MEMORY when it does not fit. */
  PierCudaResult (*device_alloc)(int32_t device, uint64_t bytes, void** ptr);
  PierCudaResult (*device_free)(int32_t device, void* ptr);
  /* Page-locked host memory usable by every device (cudaHostAlloc, portable). */
  PierCudaResult (*host_alloc)(uint64_t bytes, void** ptr);
  PierCudaResult (*host_free)(void* ptr);
  /* Copy of `bytes` between any two of host, pinned host and device memory (unified
   * addressing decides the direction), queued on `stream`. */
  PierCudaResult (*memcpy_async)(int32_t device, void* dst, const void* src, uint64_t bytes,
                                 PierCudaStream stream);
  PierCudaResult (*memset_async)(int32_t device, void* dst, int32_t value, uint64_t bytes,
                                 PierCudaStream stream);

  /* ---- Streams and events ------------------------------------------------------------ */
  PierCudaResult (*stream_create)(int32_t device, PierCudaStream* stream);
  PierCudaResult (*stream_destroy)(int32_t device, PierCudaStream stream);
  PierCudaResult (*stream_synchronize)(int32_t device, PierCudaStream stream);
  /* Events are created with timing enabled so that event_elapsed_ms works. */
  PierCudaResult (*event_create)(int32_t device, PierCudaEvent* event);
  PierCudaResult (*event_destroy)(int32_t device, PierCudaEvent event);
  PierCudaResult (*event_record)(int32_t device, PierCudaEvent event, PierCudaStream stream);
  /* *done = 1 when the recorded work has completed, 0 when it is still pending. */
  PierCudaResult (*event_query)(int32_t device, PierCudaEvent event, int32_t* done);
  PierCudaResult (*event_synchronize)(int32_t device, PierCudaEvent event);
  PierCudaResult (*stream_wait_event)(int32_t device, PierCudaStream stream, PierCudaEvent event);
  PierCudaResult (*event_elapsed_ms)(int32_t device, PierCudaEvent start, PierCudaEvent end,
                                     float* ms);

  /* ---- Virtual memory (driver API, resolved at run time) ----------------------------- */
  /* Reserves `bytes` (a multiple of the granularity) of device address space. */
  PierCudaResult (*vm_reserve)(int32_t device, uint64_t bytes, void** base);
  /* Releases a reservation; everything in it must be unmapped first. */
  PierCudaResult (*vm_release)(int32_t device, void* base, uint64_t bytes);
  /* Creates `bytes` of physical memory on `device`, maps it at `address` (inside a
   * reservation, granularity-aligned) and makes it readable and writable by the device.
   * *handle identifies the physical memory for vm_unmap. OUT_OF_MEMORY when it does not fit;
   * nothing stays mapped or allocated on failure. */
  PierCudaResult (*vm_map)(int32_t device, void* address, uint64_t bytes, uint64_t* handle);
  /* Unmaps what vm_map mapped at `address` and frees its physical memory. */
  PierCudaResult (*vm_unmap)(int32_t device, void* address, uint64_t bytes, uint64_t handle);

  /* ---- Kernels ----------------------------------------------------------------------- */
  /* GGUF Q4_1 -> f32. src: [n_blocks] blocks of {half d; half m; uint8 qs[16]} (20 bytes,
   * 4-byte aligned); dst: [n_blocks * 32] floats (16-byte aligned); x = d * q + m with
   * low nibbles of qs as elements 0..15 and high nibbles as 16..31. Queued on `stream`. */
  PierCudaResult (*dequantize_q4_1_f32)(int32_t device, const void* src, float* dst,
                                        uint64_t n_blocks, PierCudaStream stream);

  /* ---- Quantized matrix products (ABI 2; kernels/cuda/quant_matmul.h) ----------------- */
  /* Quantizes x [n_tokens, n_cols] f32 (n_cols a multiple of 32; x and xq 16-byte aligned)
   * into 8-bit activation blocks: n_tokens rows of ActivationRowBytes(n_cols) bytes. */
  PierCudaResult (*quantize_activations)(int32_t device, const float* x, int64_t n_tokens,
                                         int64_t n_cols, void* xq, PierCudaStream stream);
  /* y [n_tokens, ldy] = W . x for weights W of ggml type `type` (Q4_0, Q4_1, Q5_0, Q5_1,
   * Q8_0, Q4_K, Q5_K, Q6_K) in GGUF layout, n_rows rows of n_cols, and xq as written by
   * quantize_activations. Bitwise equal to Pier's CPU MatMul and independent of n_tokens. */
  PierCudaResult (*quant_matmul)(int32_t device, int32_t type, const void* weights, int64_t n_rows,
                                 int64_t n_cols, const void* xq, int64_t n_tokens, float* y,
                                 int64_t ldy, PierCudaStream stream);

  /* ---- Per-token operations (ABI 2; kernels/cuda/row_kernels.h, same bits as the CPU) --- */
  /* x += add (add may be NULL); y = RmsNorm(x) * weight as f32 (y may be NULL) and/or 8-bit
   * activation blocks (xq may be NULL). x, add, y: [n_tokens, n], n a multiple of 32. */
  PierCudaResult (*add_rms_norm)(int32_t device, float* x, const float* add, const float* weight,
                                 int64_t n_tokens, int64_t n, float eps, float* y, void* xq,
                                 PierCudaStream stream);
  /* h = silu(gate) * up as f32 (h may be NULL) and/or activation blocks (xq may be NULL). */
  PierCudaResult (*silu_mul)(int32_t device, const float* gate, const float* up, int64_t n_tokens,
                             int64_t n, float* h, void* xq, PierCudaStream stream);
  /* In-place RoPE of x [n_tokens, n_heads, head_dim] from cos_sin [n_tokens, n_rot/2, 2];
   * neox != 0 pairs (i, i + n_rot/2), else (2i, 2i + 1). */
  PierCudaResult (*rope)(int32_t device, float* x, int64_t n_tokens, int64_t n_heads,
                         int64_t head_dim, int64_t n_rot, int32_t neox, const float* cos_sin,
                         PierCudaStream stream);
  /* out [n_tokens, n_cols] = rows ids[t] of a GGUF table of ggml type `type` (F32, F16 or a
   * quant_matmul type) with n_vocab rows; a bad id gives a NaN row. */
  PierCudaResult (*embedding_rows)(int32_t device, int32_t type, const void* table, int64_t n_vocab,
                                   int64_t n_cols, const int32_t* ids, int64_t n_tokens, float* out,
                                   PierCudaStream stream);
  /* out[t] = lowest index of the largest of logits[t, :n_vocab] (rows ld apart); -1 for a
   * row with a NaN. */
  PierCudaResult (*argmax)(int32_t device, const float* logits, int64_t n_tokens, int64_t n_vocab,
                           int64_t ld, int32_t* out, PierCudaStream stream);

  /* ---- Paged attention (ABI 2; kernels/cuda/attention.h) ------------------------------ */
  PierCudaResult (*paged_attention)(int32_t device, const PierCudaAttentionArgs* args,
                                    PierCudaStream stream);
  /* k, v [n_tokens][n_kv_head][head_dim] f32 -> f16 into the slots of their positions. */
  PierCudaResult (*kv_write)(int32_t device, const float* k, const float* v, int64_t n_tokens,
                             const int32_t* positions, const int32_t* table_offsets,
                             const int32_t* block_tables, void* kv_base,
                             const PierCudaKvGeometry* geometry, PierCudaStream stream);

  /* ---- Graphs (ABI 2) ------------------------------------------------------------------ */
  /* Starts capturing what the calling thread queues on `stream` (relaxed mode) instead of
   * running it. */
  PierCudaResult (*begin_capture)(int32_t device, PierCudaStream stream);
  /* Ends the capture and instantiates it. On failure (e.g. OUT_OF_MEMORY) nothing is kept
   * and the stream is no longer capturing. */
  PierCudaResult (*end_capture)(int32_t device, PierCudaStream stream, PierCudaGraph* graph);
  /* Queues the whole graph on `stream`. */
  PierCudaResult (*graph_launch)(int32_t device, PierCudaGraph graph, PierCudaStream stream);
  PierCudaResult (*graph_destroy)(int32_t device, PierCudaGraph graph);

  /* quant_matmul over a matrix in the packed GPU layout (kernels/cuda/quant_pack.h: Q4_0,
   * Q4_1, Q5_0, Q5_1, Q8_0; 16-byte aligned): the same bits, whole-block loads. */
  PierCudaResult (*packed_matmul)(int32_t device, int32_t type, const void* packed, int64_t n_rows,
                                  int64_t n_cols, const void* xq, int64_t n_tokens, float* y,
                                  int64_t ldy, PierCudaStream stream);
  /* quant_matmul on the tensor cores (int8 mma; every type but Q6_K): the same bits. */
  PierCudaResult (*mma_matmul)(int32_t device, int32_t type, const void* weights, int64_t n_rows,
                               int64_t n_cols, const void* xq, int64_t n_tokens, float* y,
                               int64_t ldy, PierCudaStream stream);

  /* ---- Fused launches (ABI 3): fewer kernels per decode step, the same bits --------------- */
  /* quant_matmul over 1-4 matrices of one type and width sharing xq (Q, K and V; gate and
   * up) in one launch: each row's result is the one quant_matmul gives for its own matrix. */
  PierCudaResult (*quant_matmul_slices)(int32_t device, int32_t type,
                                        const PierCudaMatrixSlice* matrices, int32_t count,
                                        int64_t n_cols, const void* xq, int64_t n_tokens,
                                        PierCudaStream stream);
  /* rope (pairs 2i, 2i + 1) of q [n_tokens][n_head][head_dim] in place and of k on its way into
   * the cache, then kv_write of k and v: one launch, the same bits (k itself is not changed). */
  PierCudaResult (*rope_kv_write)(int32_t device, float* q, const float* k, const float* v,
                                  int64_t n_tokens, int64_t n_head, int64_t n_rot,
                                  const float* cos_sin, const int32_t* positions,
                                  const int32_t* table_offsets, const int32_t* block_tables,
                                  void* kv_base, const PierCudaKvGeometry* geometry,
                                  PierCudaStream stream);
} PierCudaPluginApi;

/* The plugin's only exported symbol. Returns NULL when abi_version is not the plugin's. */
typedef const PierCudaPluginApi* (*PierCudaPluginEntryFn)(uint32_t abi_version);

#ifdef __cplusplus
}
#endif

#endif /* PIER_DEVICE_CUDA_CUDA_PLUGIN_API_H_ */

// The Llama forward pass on one NVIDIA GPU, through the CUDA plugin.
//
// Same model_runner.h contract and the same step as the CPU's LlamaRunner (llama_model.h),
// each operation a kernel of kernels/cuda: embedding rows; per layer the fused residual add,
// RMSNorm and activation quantization, the Q/K/V products, RoPE, K/V writes into the paged
// cache, paged attention, the output product, again the fused add and norm, the gate and up
// products, SwiGLU with quantization, the down product; then the final norm and the output
// head for the rows that want logits, copied to the host. Every kernel but attention gives
// the CPU runner's bits for the same inputs, and attention differs from the CPU's by float
// rounding only (attention_math.h), so GPU and CPU logits agree closely; and a token's
// logits are bitwise the same alone or in any batch.
//
// Memory: the weights are uploaded once, still quantized, into one governor block charged to
// the weights owner (a GPU too small for the model is refused there, with the governor's
// breakdown); each step's activations live in a workspace block charged to the workspace
// owner, kept between steps and grown when a larger step needs it; K/V live in the caller's
// KvStore, whose blocks must be device memory at one address range (a LeasedKvStore with
// virtual memory on the GPU's governor: elastic KV works as on the CPU). Logits come back
// through pinned host memory from the device.
//
// What it runs: the plain Llama family (general.architecture "llama": Llama, SmolLM2,
// Mistral-style files without a sliding window) with matrices of a type the GPU product has
// (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K), f32/f16 norms, f16 K/V and head_dim up to
// 256. Anything else is UNSUPPORTED at creation, naming what.
//
// Ownership: borrows the file, the device, the governor and the KV store; all must outlive
// it. Thread-safety: see model_runner.h.
#pragma once

#include <memory>

#include "common/status.h"
#include "device/cuda/cuda_device.h"
#include "engine/kv/kv_store.h"
#include "engine/runner/model_runner.h"
#include "memory/memory_governor.h"
#include "model/gguf_file.h"

namespace pier::engine {

struct CudaRunnerOptions {
  cuda::CudaDevice* device = nullptr;
  MemoryGovernor* governor = nullptr;  // the GPU's: governor->device() is `device`
  OwnerId weights_owner;
  OwnerId workspace_owner;
  KvStore* kv = nullptr;  // layout KvLayoutFor(file, 16) with f16 values, on the GPU
  // Decode steps (batches of single tokens, up to 64, contexts up to 8,192) replay a CUDA
  // graph per batch-size bucket (1, 2, 4, then multiples of 8) and context tier (512, 2,048,
  // 8,192), captured at its first use, padded with rows that write nothing: one launch instead
  // of ~14 per layer, the same bits as without (every real row takes the same operations;
  // padding rows are independent). A graph whose capture fails runs without a graph from then
  // on; without memory for the graphs' workspace, or page-locked host memory, no step uses
  // one (each counted in GraphStatsOf). Graphs ignore Batch::stop_early (a decode step is
  // short). Serving leaves this on; tests turn it off to compare.
  bool use_graphs = true;
  // Layer matrices of Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 packed at load into the GPU layout of
  // kernels/cuda/quant_pack.h (whole-block aligned loads; the same bytes, the same bits). Off
  // until a GPU run shows it faster than reading the GGUF blocks in place (docs/benchmarks.md).
  bool packed_weights = false;
  // Steps of at least this many tokens multiply on the tensor cores (int8 mma; every matrix
  // type but Q6_K, GGUF layout): the same bits. 0: never, until a GPU run sets the crossover.
  int64_t mma_min_tokens = 0;
  // Fewer launches per layer, the same bits: Q, K and V in one product launch (and gate with
  // up) when they share a type and the warp-per-row product runs them; RoPE with the K/V
  // writes; attention's merge writing the quantized rows the output product reads. 10
  // launches per layer instead of 16, which is what a small model's decode is bound by. Tests
  // turn it off to compare.
  bool fuse_kernels = true;
};

// How often a CUDA runner captured, replayed and gave up on graphs (zeros for another runner).
struct CudaGraphStats {
  int64_t captures = 0;
  int64_t launches = 0;
  int64_t fallbacks = 0;  // captures that failed: those buckets run eagerly
};
CudaGraphStats GraphStatsOf(const ModelRunner& runner);

// What a CUDA runner for a file will allocate from the GPU's governor, known without a GPU:
// admission reserves it before loading (EstimateMemory in local_model.h).
struct CudaRunnerMemoryOptions {
  int64_t max_step_tokens = 512;  // the largest step's tokens
  int64_t max_logit_rows = 1;     // and rows that want logits
  int64_t context_tokens = 4096;  // the KV capacity: the longest context a step attends over
  bool packed_weights = false;    // as CudaRunnerOptions
  bool use_graphs = true;
};
struct CudaRunnerMemory {
  uint64_t weight_bytes = 0;  // the one weight block: every tensor as uploaded, 256-aligned
  // The eager workspace of the largest step (an upper bound: every token its own sequence at
  // the whole context), and the decode graphs' shared workspace (0 without graphs).
  uint64_t step_workspace_bytes = 0;
  uint64_t graph_workspace_bytes = 0;
};
// The runner's refusals for a file it does not run (UNSUPPORTED, INVALID_ARGUMENT), so a
// model that cannot run on the GPU is refused before anything is reserved.
[[nodiscard]] Result<CudaRunnerMemory> EstimateCudaRunnerMemory(
    const model::GgufFile& file, const CudaRunnerMemoryOptions& options);

// UNSUPPORTED for what the runner does not run (see above); NOT_FOUND / INVALID_ARGUMENT for
// missing or misshapen tensors or a KV store that does not fit; the governor's refusal when
// the GPU's budget cannot hold the weights; the plugin's error when a copy fails.
[[nodiscard]] Result<std::unique_ptr<ModelRunner>> CreateCudaModelRunner(
    const model::GgufFile& file, const CudaRunnerOptions& options);

}  // namespace pier::engine

// LocalModel: one LLM instance with everything it runs on, on the CPU or a GPU (runner/cpu/ or
// runner/cuda/), for `pier run`, `pier serve` (in its process, or in each `pier worker`
// process), tests and benchmarks.
//
// Open() maps the GGUF file and adds the model's owners ("<name>/weights", "<name>/workspace",
// "<name>/kv") to the governor of the device it runs on, which it borrows: one governor per
// device, created once per process (serving::DeviceSet) and shared by every model there, so
// each model's admission sees what the others hold. Then comes admission: the memory the
// model will need (EstimateMemory: packed and mapped weights, KV for the requested context, the
// workspace of the largest step) is reserved from the governor before anything is
// allocated, and a model that does not fit is refused with the breakdown and the budget
// (RESOURCE_EXHAUSTED). Only then come a thread pool, a PooledKvStore of the requested
// size and dtype (--kv-dtype) and the architecture's runner; an Engine builds its paged KV
// cache (engine/kv/) on the same pieces instead.
//
// Ownership: owns all of it but the governor; members are destroyed in reverse order of
// creation (runner, KV, pool, reservations, file), then the model's owners are removed from
// the governor (its budget is free for other models); the governor must outlive the model.
// Thread-safety: one thread uses it (see model_runner.h); the governor itself may be read (Stats)
// from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/thread_pool.h"
#include "device/device.h"
#include "engine/kv/kv_size.h"
#include "engine/kv/kv_store.h"
#include "engine/runner/model_runner.h"
#include "memory/byte_size.h"
#include "memory/memory_governor.h"
#include "model/gguf_file.h"

namespace pier::engine {

struct LocalModelOptions {
  std::string path;  // GGUF file
  int threads = 2;   // compute threads, counting the caller
  // KV capacity in positions (rounded up to whole blocks), unless kv_max is set.
  int64_t kv_tokens = 4096;
  int64_t block_size = 16;  // positions per KV block
  // `--kv-dtype`: how K/V are stored. f16 (the default, as llama.cpp's) halves the KV memory
  // and the bytes decode attention streams; its logits differ slightly from f32's (no less
  // accurate against the float64 reference) and stay batch invariant.
  KvDtype kv_dtype = KvDtype::kF16;
  // `--weights-dtype`: quantize f32/f16/bf16 matrices at load into Q8_0 or Q4_0 (see
  // CpuRunnerOptions); unset: weights are used as the file stores them.
  std::optional<DType> weights_dtype;
  // The largest step the caller will run: tokens in one batch and rows that want logits.
  // They size the workspace that admission reserves; a larger step still runs when the
  // budget has room for the bigger workspace, and is refused with the governor's error
  // otherwise.
  int64_t max_step_tokens = 512;
  int64_t max_logit_rows = 1;
  // Prefix of the model's governor owners ("<name>/weights", ...): the served name when a
  // server hosts several models; empty: the file's general.name. Made unique ("name#2").
  std::string owner_name;
  int owner_priority = 0;  // the owners' governor priority (higher keeps memory longer)
  // How the KV cache holds memory. kStatic: one store of kv_tokens, reserved at load (what
  // `pier run` and the tests use). kElastic: a LeasedKvStore that grows in chunks of
  // kv_chunk_tokens on demand up to kv_tokens and gives chunks back when the governor asks
  // (other models need the memory), never below kv_min (unset: one chunk; at most the whole
  // cache); admission then needs only the minimum.
  KvPolicy kv_policy = KvPolicy::kStatic;
  KvSize kv_min;
  // The KV capacity in tokens or bytes (kv_size.h), in place of kv_tokens; kv_min above it is
  // an error.
  KvSize kv_max;
  int64_t kv_chunk_tokens = 256;
  // The device the model runs on: admission sizes what that device's runner allocates (the
  // CPU's packed and mapped weights, or the GPU's weight block, step and graph workspaces).
  // LocalModel::Create takes it from its governor's device.
  DeviceKind device = DeviceKind::kCpu;
};

// What loading a model reserves from its device's budget, in bytes as the governor will
// hold them (pool allocations rounded up to the pool's segments). Shared by admission
// (LocalModel::Create) and `pier inspect --memory`.
struct MemoryEstimate {
  uint64_t tensor_bytes = 0;         // all tensor bytes of the file
  uint64_t mapped_weight_bytes = 0;  // tensor bytes used in place (mapped)
  uint64_t packed_weight_bytes = 0;  // packed copies of matrices (pool segment; same bytes)
  uint64_t small_weight_bytes = 0;   // f32 copies of norms and biases (pool segment)
  uint64_t gpu_weight_bytes = 0;     // on a GPU: every tensor in one block (the rest are 0)
  KvDtype kv_dtype = KvDtype::kF16;  // what the KV store holds
  uint64_t kv_bytes_per_token = 0;   // K and V of one position, all layers, in kv_dtype
  int64_t kv_tokens = 0;             // KV capacity, rounded up to whole blocks
  uint64_t kv_bytes = 0;             // the KV store (pool segment) at kv_tokens
  // Elastic KV: the minimum held from load on (the lease's floor), in tokens and bytes.
  bool kv_elastic = false;
  int64_t kv_min_tokens = 0;
  uint64_t kv_min_bytes = 0;
  // Sliding-window layers (kv_groups.h): how many of the kv_layers layers attend only the last
  // kv_window positions; their blocks are released behind the window, so one sequence of
  // kv_tokens positions holds at most kv_sequence_bytes (kv_bytes without such layers).
  int64_t kv_layers = 0;
  int64_t kv_sliding_layers = 0;
  int64_t kv_window = 0;
  uint64_t kv_sequence_bytes = 0;
  uint64_t workspace_step_bytes = 0;   // the largest step's buffers, as the runner lays them out
  uint64_t workspace_bytes = 0;        // the pool segment holding them (and a GPU's graphs')
  uint64_t graph_workspace_bytes = 0;  // of which the GPU's decode graphs' workspace
  int64_t max_step_tokens = 0;
  int threads = 0;

  uint64_t weight_bytes() const {
    return mapped_weight_bytes + packed_weight_bytes + small_weight_bytes + gpu_weight_bytes;
  }
  // What admission needs: all of it, or with elastic KV only the KV minimum.
  uint64_t total_bytes() const {
    return weight_bytes() + (kv_elastic ? kv_min_bytes : kv_bytes) + workspace_bytes;
  }
  // "weights 0 B mapped + 94.0 MiB packed + 2.0 MiB converted, KV cache for 4096 tokens 90.0 MiB
  // (22.5 KiB per token, f16), workspace 20.0 MiB (steps of 512 tokens)"
  std::string Breakdown() const;
};

// The estimate for `file` under `options` (the path is ignored).
// Errors as ReadModelInfo's, and INVALID_ARGUMENT for non-positive sizes or counts; on a GPU,
// the CUDA runner's refusals (EstimateCudaRunnerMemory) and UNSUPPORTED for --weights-dtype or
// a KV dtype other than f16, so such a model is refused before anything is reserved.
[[nodiscard]] Result<MemoryEstimate> EstimateMemory(const model::GgufFile& file,
                                                    const LocalModelOptions& options);

// The model a LocalModel's governor owner belongs to: "chat" for "chat/kv", and for "chat#2/kv"
// (a second instance on the device). The inverse of how LocalModel names its owners, for
// whoever groups owners by model (/admin/models, /metrics).
std::string_view OwnerModelName(std::string_view owner);

// The owner-name prefix for a new instance of `name` on `governor`: `name`, or "name#2",
// "name#3", ... (the first that no owner uses) when another instance already charges under it,
// such as a second instance or a reload's new version beside the old: owners of one governor
// have distinct names. Read from the governor's owners at the call; a caller that adds owners
// from several threads must serialize.
std::string UniqueOwnerPrefix(const MemoryGovernor& governor, const std::string& name);

// `requested` context tokens, capped at the model's trained context length when the file
// gives one (what `pier run --ctx` and `pier inspect --memory --ctx` use).
int64_t ClampContext(const model::GgufFile& file, int64_t requested);

class LocalModel {
 public:
  // The file's errors, the runner's (unsupported architecture or types), a model that does
  // not fit what is left of the budget (RESOURCE_EXHAUSTED: what it needs, broken down, and
  // what there is), or the governor's later refusal; INVALID_ARGUMENT for threads < 1,
  // kv_tokens < 1 or a null governor. `governor`: the device's (borrowed, must outlive it).
  [[nodiscard]] static Result<std::unique_ptr<LocalModel>> Open(const LocalModelOptions& options,
                                                                MemoryGovernor* governor);
  // The same for a file already opened (options.path is ignored), e.g. an in-memory image
  // in tests (its bytes must outlive the LocalModel).
  [[nodiscard]] static Result<std::unique_ptr<LocalModel>> Create(
      std::unique_ptr<model::GgufFile> file, const LocalModelOptions& options,
      MemoryGovernor* governor);
  ~LocalModel();

  const model::GgufFile& file() const { return *file_; }
  ModelRunner& runner() { return *runner_; }
  KvStore& kv() { return *kv_; }
  ThreadPool& pool() { return *pool_; }
  MemoryGovernor& governor() { return *governor_; }
  Device& device() { return governor_->device(); }
  // What admission reserved.
  const MemoryEstimate& estimate() const { return estimate_; }

 private:
  LocalModel() = default;

  MemoryGovernor* governor_ = nullptr;  // not owned: the device's, shared
  std::vector<OwnerId> owners_;         // removed from the governor at the end
  std::unique_ptr<model::GgufFile> file_;
  MemoryEstimate estimate_;
  std::vector<Reservation> reservations_;  // weights, workspace, KV: held for the lifetime
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<KvStore> kv_;
  std::unique_ptr<ModelRunner> runner_;
};

}  // namespace pier::engine

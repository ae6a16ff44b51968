#include "engine/runner/local_model.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "engine/kv/leased_kv_store.h"
#include "engine/runner/cpu/cpu_runner.h"
#include "engine/runner/cuda/cuda_runner.h"
#include "engine/runner/step_workspace.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/packed_weights.h"
#include "kernels/cpu/paged_attention.h"
#include "model/model_info.h"
#include "tensor/dtype.h"

namespace pier::engine {
namespace {

// How long a load waits for other models' leases to give back lent KV. Past the governor's
// shrink deadline (2 s) a lease that has not shrunk is marked unresponsive and the wait ends.
constexpr std::chrono::milliseconds kLoadReclaimWait{5000};

uint64_t RoundUp(uint64_t bytes, uint64_t multiple) {
  return (bytes + multiple - 1) / multiple * multiple;
}

// Bytes the governor's pool holds for one block of `bytes`: the segment it is carved from
// (a small block shares its segment, so counting the whole segment is an upper bound).
uint64_t PoolFootprint(uint64_t bytes, const CachingAllocatorOptions& pool) {
  const uint64_t rounded = RoundUp(std::max<uint64_t>(bytes, 1), pool.alignment);
  if (rounded <= pool.small_block_max_bytes) return pool.small_segment_bytes;
  if (rounded < pool.large_segment_bytes) return pool.large_segment_bytes;
  return RoundUp(rounded, pool.large_round_bytes);
}

// The largest step's workspace, laid out as the runner lays out every step
// (step_workspace.h). The MatMul scratch is the largest any of the step's products needs: the
// block matrices see every token, the output matrix only the logit rows.
uint64_t StepWorkspaceBytes(const model::GgufFile& file, const model::ModelInfo& info,
                            const KvLayout& layout, int64_t n_tok, int64_t n_out,
                            int64_t max_context, int threads) {
  StepDims dims = StepDimsOf(info, layout);
  dims.n_tok = n_tok;
  dims.n_out = n_out;
  dims.max_context = max_context;
  dims.att_slots = 4 * int64_t{threads};
  // The worst case: one span of n_tok tokens.
  dims.att_queries =
      kernels::PagedAttentionQueriesPerTask(info.head_count, max_context, dims.att_slots, n_tok);
  for (const model::GgufTensorInfo& t : file.tensors()) {
    if (t.dims.size() != 2) continue;
    const std::optional<uint64_t> row_bytes = RowBytes(t.type, t.dims[0]);
    if (!row_bytes) continue;
    const kernels::WeightMatrix w{t.type, t.dims[1], t.dims[0], t.data,
                                  static_cast<size_t>(*row_bytes)};
    dims.mm_scratch_bytes =
        std::max(dims.mm_scratch_bytes, kernels::MatMulScratchBytes(w, std::max(n_tok, n_out)));
  }
  return LayOutStep(dims).bytes;
}

// Reads a file's general.name, for owner names.
std::string ModelName(const model::GgufFile& file) {
  if (const model::GgufValue* v = file.Find("general.name"); v != nullptr) {
    if (auto s = v->AsString(); s && !s->empty()) return std::string(*s);
  }
  return "model";
}

// Blocks per chunk of an elastic KV lease over `n_blocks` blocks: kv_chunk_tokens' worth, but
// no more than the cache itself (a small context must not get a larger one through its chunk).
int64_t ElasticChunkBlocks(const LocalModelOptions& o, int64_t n_blocks) {
  return std::clamp<int64_t>(o.kv_chunk_tokens / o.block_size, 1, std::max<int64_t>(1, n_blocks));
}

// Chunks an elastic lease over `n_blocks` may hold, and keeps at least (`min_tokens`, at
// least one chunk, at most all of them).
int64_t ElasticMaxChunks(const LocalModelOptions& o, int64_t n_blocks) {
  const int64_t per_chunk = ElasticChunkBlocks(o, n_blocks);
  return (n_blocks + per_chunk - 1) / per_chunk;
}
int64_t ElasticMinChunks(const LocalModelOptions& o, int64_t n_blocks, int64_t min_tokens) {
  const int64_t chunk_tokens = ElasticChunkBlocks(o, n_blocks) * o.block_size;
  const int64_t wanted = (min_tokens + chunk_tokens - 1) / chunk_tokens;
  return std::clamp<int64_t>(wanted, 1, ElasticMaxChunks(o, n_blocks));
}

// A model's KV bounds in positions: the capacity (kv_max, else kv_tokens) and the elastic
// minimum (kv_min).
struct KvBounds {
  int64_t capacity_tokens = 0;
  int64_t min_tokens = 0;
};
Result<KvBounds> ResolveKvBounds(const LocalModelOptions& o, uint64_t bytes_per_token) {
  KvBounds b;
  b.capacity_tokens = o.kv_tokens;
  const std::string per_token = " (" + FormatBytes(bytes_per_token) + " per token)";
  if (o.kv_max.is_set()) {
    b.capacity_tokens = o.kv_max.TokensAt(bytes_per_token);
    // A maximum in bytes is never exceeded: whole blocks only (blocks round up otherwise).
    if (o.kv_max.in_bytes) b.capacity_tokens -= b.capacity_tokens % o.block_size;
    if (b.capacity_tokens < 1) {
      return InvalidArgumentError("kv_max " + o.kv_max.ToString() + " holds less than one block (" +
                                  std::to_string(o.block_size) + " tokens of " +
                                  FormatBytes(bytes_per_token) + " each)");
    }
  }
  b.min_tokens = o.kv_min.TokensAt(bytes_per_token);
  if (o.kv_max.is_set() && b.min_tokens > b.capacity_tokens) {
    return InvalidArgumentError("kv_min " + o.kv_min.ToString() + " (" +
                                std::to_string(b.min_tokens) + " tokens) is more than kv_max " +
                                o.kv_max.ToString() + " (" + std::to_string(b.capacity_tokens) +
                                " tokens)" + per_token);
  }
  return b;
}

// The GPU's side of EstimateMemory: the CUDA runner's weight block in place of the CPU's packed
// and mapped weights, its step and graph workspaces in place of the CPU's (K/V are the same).
Status EstimateOnGpu(const model::GgufFile& file, const LocalModelOptions& options,
                     const CachingAllocatorOptions& pool, MemoryEstimate& e) {
  if (options.weights_dtype.has_value()) {
    return UnsupportedError(
        "--weights-dtype is not available on a GPU (it quantizes on the CPU); run the GGUF's "
        "own types there");
  }
  if (options.kv_dtype != KvDtype::kF16) {
    return UnsupportedError("a GPU holds K/V in f16 (kv_dtype f16), not " +
                            std::string(KvDtypeName(options.kv_dtype)));
  }
  if (options.block_size != 16) {
    return UnsupportedError("a GPU holds K/V in blocks of 16 positions, not " +
                            std::to_string(options.block_size));
  }
  CudaRunnerMemoryOptions gpu;
  gpu.max_step_tokens = e.max_step_tokens;
  gpu.max_logit_rows = std::min(options.max_logit_rows, e.max_step_tokens);
  gpu.context_tokens = e.kv_tokens;
  PIER_ASSIGN_OR_RETURN(const CudaRunnerMemory runner, EstimateCudaRunnerMemory(file, gpu));
  e.mapped_weight_bytes = 0;
  e.packed_weight_bytes = 0;
  e.small_weight_bytes = 0;
  e.gpu_weight_bytes = PoolFootprint(runner.weight_bytes, pool);
  e.workspace_step_bytes = runner.step_workspace_bytes;
  e.graph_workspace_bytes =
      runner.graph_workspace_bytes > 0 ? PoolFootprint(runner.graph_workspace_bytes, pool) : 0;
  e.workspace_bytes = PoolFootprint(runner.step_workspace_bytes, pool) + e.graph_workspace_bytes;
  return Status::Ok();
}

}  // namespace

std::string_view OwnerModelName(std::string_view owner) {
  const std::string_view prefix = owner.substr(0, owner.find('/'));
  return prefix.substr(0, prefix.find('#'));
}

std::string MemoryEstimate::Breakdown() const {
  const std::string kv =
      kv_elastic ? "KV cache elastic, at least " + std::to_string(kv_min_tokens) + " tokens " +
                       FormatBytes(kv_min_bytes) + " and up to " + std::to_string(kv_tokens) +
                       " tokens " + FormatBytes(kv_bytes)
                 : "KV cache for " + std::to_string(kv_tokens) + " tokens " + FormatBytes(kv_bytes);
  if (gpu_weight_bytes > 0) {
    return "weights " + FormatBytes(gpu_weight_bytes) + " on the GPU (as the file stores them), " +
           kv + " (" + FormatBytes(kv_bytes_per_token) + " per token, " +
           std::string(KvDtypeName(kv_dtype)) + "), workspace " + FormatBytes(workspace_bytes) +
           " (steps of " + std::to_string(max_step_tokens) + " tokens, decode graphs " +
           FormatBytes(graph_workspace_bytes) + ")";
  }
  return "weights " + FormatBytes(mapped_weight_bytes) + " mapped + " +
         FormatBytes(packed_weight_bytes) + " packed + " + FormatBytes(small_weight_bytes) +
         " converted, " + kv + " (" + FormatBytes(kv_bytes_per_token) + " per token, " +
         std::string(KvDtypeName(kv_dtype)) + "), workspace " + FormatBytes(workspace_bytes) +
         " (steps of " + std::to_string(max_step_tokens) + " tokens)";
}

Result<MemoryEstimate> EstimateMemory(const model::GgufFile& file,
                                      const LocalModelOptions& options) {
  if (options.threads < 1) return InvalidArgumentError("threads must be at least 1");
  if (options.kv_tokens < 1) return InvalidArgumentError("KV capacity must be at least 1 token");
  if (options.block_size < 1) return InvalidArgumentError("KV block size must be positive");
  if (options.max_step_tokens < 1 || options.max_logit_rows < 1) {
    return InvalidArgumentError("the largest step must have at least 1 token and 1 logit row");
  }
  PIER_ASSIGN_OR_RETURN(model::ModelInfo info, model::ReadModelInfo(file));
  PIER_ASSIGN_OR_RETURN(KvLayout layout, KvLayoutFor(file, options.block_size));
  layout.dtype = options.kv_dtype;
  PIER_RETURN_IF_ERROR(ValidateKvLayout(layout).WithContext(file.path()));
  PIER_ASSIGN_OR_RETURN(const KvGroups groups, KvGroupsFor(file));
  // The K/V of block_size positions of every layer: one block of each group.
  const uint64_t position_block_bytes =
      layout.bytes_per_block() * static_cast<uint64_t>(groups.n_groups());
  const CachingAllocatorOptions pool = GovernorOptions{}.pool;

  MemoryEstimate e;
  e.threads = options.threads;
  e.tensor_bytes = info.weight_bytes;
  e.mapped_weight_bytes = info.weight_bytes;
  int64_t small_floats = 0;
  uint64_t packed = 0;
  for (const model::GgufTensorInfo& t : file.tensors()) {
    if (t.row_count() == 1) small_floats += t.element_count;
    if (CpuRunnerPacksTensor(file, t, options.weights_dtype)) {
      e.mapped_weight_bytes -= std::min<uint64_t>(e.mapped_weight_bytes, t.size_bytes);
      // As the runner lays them out.
      packed += RoundUp(CpuRunnerPackedBytes(t, options.weights_dtype), 64);
    }
  }
  if (packed > 0) e.packed_weight_bytes = PoolFootprint(packed, pool);
  e.small_weight_bytes =
      PoolFootprint(static_cast<uint64_t>(std::max<int64_t>(small_floats, 1)) * 4, pool);

  e.kv_dtype = options.kv_dtype;
  e.kv_bytes_per_token = position_block_bytes / static_cast<uint64_t>(options.block_size);
  PIER_ASSIGN_OR_RETURN(const KvBounds bounds, ResolveKvBounds(options, e.kv_bytes_per_token));
  const int64_t n_blocks = (bounds.capacity_tokens + options.block_size - 1) / options.block_size;
  e.kv_tokens = n_blocks * options.block_size;
  e.kv_bytes = PoolFootprint(position_block_bytes * static_cast<uint64_t>(n_blocks), pool);
  if (options.kv_policy == KvPolicy::kElastic) {
    if (options.kv_chunk_tokens < options.block_size) {
      return InvalidArgumentError("elastic KV: a chunk holds at least one block");
    }
    const int64_t chunk = ElasticChunkBlocks(options, n_blocks) * options.block_size;
    const int64_t min_chunks = ElasticMinChunks(options, n_blocks, bounds.min_tokens);
    e.kv_elastic = true;
    e.kv_min_tokens = std::min(min_chunks * chunk, e.kv_tokens);
    e.kv_min_bytes = static_cast<uint64_t>(min_chunks * ElasticChunkBlocks(options, n_blocks)) *
                     position_block_bytes;
  }

  e.kv_layers = info.block_count;
  for (int64_t g = 0; g < groups.n_groups(); ++g) {
    if (groups.windows[g] <= 0) continue;
    e.kv_sliding_layers += groups.layers_per_block;
    e.kv_window = std::max(e.kv_window, groups.windows[g]);
  }
  e.kv_sequence_bytes =
      layout.bytes_per_block() *
      static_cast<uint64_t>(groups.MaxBlocksHeld(e.kv_tokens, options.block_size,
                                                 std::min(options.max_step_tokens, e.kv_tokens)));

  // The largest step: max_step_tokens tokens attending over the whole context.
  const int64_t n_tok = std::min(options.max_step_tokens, e.kv_tokens);
  const int64_t n_out = std::min(options.max_logit_rows, n_tok);
  e.max_step_tokens = n_tok;
  e.workspace_step_bytes =
      StepWorkspaceBytes(file, info, layout, n_tok, n_out, e.kv_tokens, options.threads);
  e.workspace_bytes = PoolFootprint(e.workspace_step_bytes, pool);
  if (options.device == DeviceKind::kCuda) {
    PIER_RETURN_IF_ERROR(EstimateOnGpu(file, options, pool, e));
  }
  return e;
}

int64_t ClampContext(const model::GgufFile& file, int64_t requested) {
  if (const model::GgufValue* arch = file.Find("general.architecture"); arch != nullptr) {
    if (auto name = arch->AsString()) {
      if (auto trained = file.GetInt(std::string(*name) + ".context_length"); trained.ok()) {
        return std::min(requested, *trained);
      }
    }
  }
  return requested;
}

std::string UniqueOwnerPrefix(const MemoryGovernor& governor, const std::string& name) {
  const GovernorStats stats = governor.Stats();
  auto taken = [&stats](const std::string& prefix) {
    for (const OwnerStats& o : stats.owners) {
      if (o.name.starts_with(prefix + "/")) return true;
    }
    return false;
  };
  if (!taken(name)) return name;
  for (int n = 2;; ++n) {
    const std::string candidate = name + "#" + std::to_string(n);
    if (!taken(candidate)) return candidate;
  }
}

LocalModel::~LocalModel() {
  runner_.reset();
  kv_.reset();
  pool_.reset();
  reservations_.clear();
  file_.reset();
  // The governor is shared: give its budget back by removing this model's owners.
  for (OwnerId owner : owners_) {
    if (Status removed = governor_->RemoveOwner(owner); !removed.ok()) {
      spdlog::warn("model unload: {}", removed.ToString());
    }
  }
}

Result<std::unique_ptr<LocalModel>> LocalModel::Open(const LocalModelOptions& options,
                                                     MemoryGovernor* governor) {
  PIER_ASSIGN_OR_RETURN(std::unique_ptr<model::GgufFile> file, model::GgufFile::Open(options.path));
  return Create(std::move(file), options, governor);
}

Result<std::unique_ptr<LocalModel>> LocalModel::Create(std::unique_ptr<model::GgufFile> file,
                                                       const LocalModelOptions& options,
                                                       MemoryGovernor* governor) {
  if (governor == nullptr) return InvalidArgumentError("a model needs its device's governor");
  if (options.threads < 1) return InvalidArgumentError("threads must be at least 1");
  if (options.kv_tokens < 1) return InvalidArgumentError("KV capacity must be at least 1 token");
  std::unique_ptr<LocalModel> m(new LocalModel());
  m->governor_ = governor;
  m->file_ = std::move(file);

  // Admission: reserve what the model needs before any of it is allocated.
  LocalModelOptions sized = options;
  sized.device = governor->device().kind();
  PIER_ASSIGN_OR_RETURN(m->estimate_, EstimateMemory(*m->file_, sized));
  const MemoryEstimate& e = m->estimate_;
  const std::string name = UniqueOwnerPrefix(
      *m->governor_, options.owner_name.empty() ? ModelName(*m->file_) : options.owner_name);
  PIER_ASSIGN_OR_RETURN(
      OwnerId weights,
      m->governor_->AddOwner({.name = name + "/weights", .priority = options.owner_priority}));
  m->owners_.push_back(weights);
  PIER_ASSIGN_OR_RETURN(
      OwnerId workspace,
      m->governor_->AddOwner({.name = name + "/workspace", .priority = options.owner_priority}));
  m->owners_.push_back(workspace);
  PIER_ASSIGN_OR_RETURN(
      OwnerId kv_owner,
      m->governor_->AddOwner({.name = name + "/kv", .priority = options.owner_priority}));
  m->owners_.push_back(kv_owner);
  GovernorStats before = m->governor_->Stats();
  uint64_t free_bytes = before.budget_bytes - std::min(before.budget_bytes, before.committed_bytes);
  auto refuse = [&](const std::string& detail) {
    std::string budget =
        FormatBytes(before.budget_bytes) + " (" + std::to_string(before.budget_bytes) + " bytes";
    if (m->governor_->budget_spec().is_percent) {
      budget += ", " + m->governor_->budget_spec().ToString() + " of a device of " +
                FormatBytes(before.capacity_bytes);
    }
    budget += ")";
    return ResourceExhaustedError(m->file_->path() + " needs " + FormatBytes(e.total_bytes()) +
                                  " (" + std::to_string(e.total_bytes()) +
                                  " bytes: " + e.Breakdown() + ") but the memory budget is " +
                                  budget + ", of which " + FormatBytes(free_bytes) + " is free" +
                                  detail + "; lower --ctx or raise --memory-budget");
  };
  if (e.total_bytes() > free_bytes) {
    // Other models' KV beyond their minimum is lent, not owned: an idle model gives it back
    // (as the reclaim policy allows) before this load is refused or a model is evicted for it.
    const MemoryStatus room = m->governor_->MakeRoom(weights, e.total_bytes(), kLoadReclaimWait);
    if (!room.ok()) return refuse(" (" + room.status().message() + ")");
    before = m->governor_->Stats();
    free_bytes = before.budget_bytes - std::min(before.budget_bytes, before.committed_bytes);
  }
  // Elastic KV is not reserved: its lease holds its minimum from the start and grows later.
  for (const auto& [owner, bytes] :
       {std::pair{weights, e.weight_bytes()}, std::pair{workspace, e.workspace_bytes},
        std::pair{kv_owner, e.kv_elastic ? uint64_t{0} : e.kv_bytes}}) {
    if (bytes == 0) continue;
    MemoryResult<Reservation> reservation = m->governor_->Reserve(owner, bytes);
    if (!reservation.ok()) return refuse(" (" + reservation.status().message() + ")");
    m->reservations_.push_back(std::move(reservation).value());
  }

  m->pool_ = std::make_unique<ThreadPool>(options.threads);
  PIER_ASSIGN_OR_RETURN(KvLayout layout, KvLayoutFor(*m->file_, options.block_size));
  layout.dtype = options.kv_dtype;
  const int64_t n_blocks = e.kv_tokens / options.block_size;  // of block_size positions
  // Each block_size positions take one block of each group of layers (kv_groups.h).
  PIER_ASSIGN_OR_RETURN(const KvGroups groups, KvGroupsFor(*m->file_));
  const int64_t n_groups = groups.n_groups();
  if (e.kv_elastic) {
    LeasedKvOptions lease;
    lease.name = name + "/kv";
    lease.blocks_per_chunk = ElasticChunkBlocks(options, n_blocks) * n_groups;
    lease.max_chunks = static_cast<size_t>(ElasticMaxChunks(options, n_blocks));
    PIER_ASSIGN_OR_RETURN(const KvBounds bounds, ResolveKvBounds(options, e.kv_bytes_per_token));
    lease.min_chunks = static_cast<size_t>(ElasticMinChunks(options, n_blocks, bounds.min_tokens));
    lease.initial_chunks = lease.min_chunks;
    Result<std::unique_ptr<LeasedKvStore>> store =
        LeasedKvStore::Create(layout, lease, *m->governor_, kv_owner);
    if (!store.ok()) return refuse(" (" + store.status().message() + ")");
    m->kv_ = std::move(store).value();
  } else {
    PIER_ASSIGN_OR_RETURN(
        m->kv_, PooledKvStore::Create(layout, n_blocks * n_groups, *m->governor_, kv_owner));
  }

  if (m->governor_->device().kind() == DeviceKind::kCuda) {
    CudaRunnerOptions cuda_options;
    cuda_options.device = static_cast<cuda::CudaDevice*>(&m->governor_->device());
    cuda_options.governor = m->governor_;
    cuda_options.weights_owner = weights;
    cuda_options.workspace_owner = workspace;
    cuda_options.kv = m->kv_.get();
    PIER_ASSIGN_OR_RETURN(m->runner_, CreateCudaModelRunner(*m->file_, cuda_options));
    return m;
  }
  CpuRunnerOptions runner_options;
  runner_options.governor = m->governor_;
  runner_options.weights_owner = weights;
  runner_options.workspace_owner = workspace;
  runner_options.kv = m->kv_.get();
  runner_options.pool = m->pool_.get();
  runner_options.weights_dtype = options.weights_dtype;
  PIER_ASSIGN_OR_RETURN(m->runner_, CreateCpuModelRunner(*m->file_, runner_options));
  return m;
}

}  // namespace pier::engine

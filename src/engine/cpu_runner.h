// Creating a CPU model runner for a GGUF file.
//
// CreateCpuModelRunner reads `general.architecture` and builds the runner of that
// architecture (llama_model.cpp for llama and SmolLM2, qwen2_model.cpp for
// qwen2). Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K matrices are packed once for the fastest kernels
// (kernels/cpu/packed_weights.h: the same bytes, in a governor block; the file's pages
// are released as they are packed); other weights are used in place from the file's
// mapping and charged to the governor as an external charge; the few small tensors
// (norm weights, biases) are converted to f32 in a governor block; activations come from
// a workspace block; K/V live in the caller's KvStore.
//
// Ownership: the runner borrows everything in CpuRunnerOptions and the GgufFile;
// all must outlive it. Thread-safety: see model_runner.h.
#pragma once

#include <memory>

#include "common/status.h"
#include "engine/kv_store.h"
#include "engine/model_runner.h"
#include "memory/memory_governor.h"
#include "model/gguf_file.h"

namespace pier {
class ThreadPool;
}

namespace pier::engine {

struct CpuRunnerOptions {
  MemoryGovernor* governor = nullptr;
  OwnerId weights_owner;    // packed, mapped and converted weights
  OwnerId workspace_owner;  // activations, kernel scratch and logits
  KvStore* kv = nullptr;    // its layout must be KvLayoutFor(the model)
  ThreadPool* pool = nullptr;
};

// The KV layout a model needs, with `block_size` positions per block. Errors as
// ReadModelInfo's.
[[nodiscard]] Result<KvLayout> KvLayoutFor(const model::GgufFile& file, int64_t block_size);

// Whether the CPU runner keeps a packed copy of `tensor` rather than reading it from the
// mapping: the 2-D matrices it multiplies whose type has a packed layout. The token
// embedding counts only when it doubles as the output matrix (tied embeddings); its rows
// are then read from the packed copy. Admission (EstimateMemory) uses the same rule.
bool CpuRunnerPacksTensor(const model::GgufFile& file, const model::GgufTensorInfo& tensor);

// UNSUPPORTED for an architecture without a runner, a weight type without a CPU kernel or
// unsupported RoPE scaling; NOT_FOUND / INVALID_ARGUMENT for missing or misshapen tensors;
// INVALID_ARGUMENT when the KV store's layout does not fit the model; the governor's
// refusal when memory is short.
[[nodiscard]] Result<std::unique_ptr<ModelRunner>> CreateCpuModelRunner(
    const model::GgufFile& file, const CpuRunnerOptions& options);

}  // namespace pier::engine

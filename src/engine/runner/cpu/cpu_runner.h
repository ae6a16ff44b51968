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
#include <optional>
#include <string_view>

#include "common/status.h"
#include "engine/kv/kv_store.h"
#include "engine/runner/model_runner.h"
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
  // `--weights-dtype`: f32/f16/bf16 matrices quantized at load into this packed type (Q8_0 or
  // Q4_0; kernels::QuantizeToPacked) and charged as what they become; unset: used as they are.
  std::optional<DType> weights_dtype;
};

// How the model's layers share KV blocks (kv_groups.h): grouped by the window each attends.
// Errors as ReadModelInfo's.
[[nodiscard]] Result<KvGroups> KvGroupsFor(const model::GgufFile& file);

// The KV layout a model needs, with `block_size` positions per block: one KvGroupsFor group of
// layers per block. Errors as ReadModelInfo's.
[[nodiscard]] Result<KvLayout> KvLayoutFor(const model::GgufFile& file, int64_t block_size);

// Whether the CPU runner keeps a packed copy of `tensor` rather than reading it from the
// mapping: the 2-D matrices it multiplies whose type has a packed layout. The token
// embedding counts only when it doubles as the output matrix (tied embeddings); its rows
// are then read from the packed copy. Admission (EstimateMemory) uses the same rule.
// With `weights_dtype`, float matrices (whose rows are whole blocks of 32) count too.
bool CpuRunnerPacksTensor(const model::GgufFile& file, const model::GgufTensorInfo& tensor,
                          std::optional<DType> weights_dtype = std::nullopt);

// Bytes of the packed copy of `tensor` (one CpuRunnerPacksTensor names): its own packed
// layout, or weights_dtype's for a float matrix.
size_t CpuRunnerPackedBytes(const model::GgufTensorInfo& tensor,
                            std::optional<DType> weights_dtype);

// "q8_0" or "q4_0" (`--weights-dtype`); INVALID_ARGUMENT naming them otherwise.
[[nodiscard]] Result<DType> ParseWeightsDtype(std::string_view name);

// UNSUPPORTED for an architecture without a runner, a weight type without a CPU kernel or
// unsupported RoPE scaling; NOT_FOUND / INVALID_ARGUMENT for missing or misshapen tensors;
// INVALID_ARGUMENT when the KV store's layout does not fit the model; the governor's
// refusal when memory is short.
[[nodiscard]] Result<std::unique_ptr<ModelRunner>> CreateCpuModelRunner(
    const model::GgufFile& file, const CpuRunnerOptions& options);

}  // namespace pier::engine

// CheckBatch: whether a Batch is one a runner may compute, shared by the CPU and CUDA runners
// (model_runner.h: a malformed batch is refused with INVALID_ARGUMENT and nothing written).
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "engine/kv/kv_groups.h"
#include "engine/runner/batch.h"

namespace pier::engine {

// What a batch must fit: the model's vocabulary and context, and the KV store.
struct BatchLimits {
  int64_t n_vocab = 0;
  int64_t context_length = 0;  // positions must stay below it
  int64_t block_size = 16;     // positions per KV block
  int64_t n_blocks = 0;        // blocks the KV store has
  const KvGroups* groups = nullptr;
};

// INVALID_ARGUMENT naming the sequence for an empty span, a negative position, a position at
// or past the context length, a token outside the vocabulary, or a block table too short or
// naming a block outside the store (a sliding group's released blocks excepted). On success
// *n_tokens is the batch's token count and *max_context its largest position + 1.
[[nodiscard]] Status CheckBatch(const Batch& batch, const BatchLimits& limits, int64_t* n_tokens,
                                int64_t* max_context);

}  // namespace pier::engine

// ModelRunner: computes one step of a ragged batch on one model instance.
//
// Step() embeds every token of the batch, runs the transformer over all of them
// at once (each matrix product sees the whole batch), writes their K/V into the
// KV store through the sequences' block tables, attends per sequence, and
// returns logits for the requested positions only.
//
// Batch invariance (see docs/architecture.md): a token's logits and K/V are
// bitwise identical whatever else is in the batch, however its prompt was
// chunked and whether the K/V it reads were written by a prefill or by decode
// steps. Every reduction runs in an order fixed by the token's own data and
// position; threads split outputs, never reductions; a batch of one takes the
// same code as a batch of 64.
//
// Ownership: a runner borrows the model file (weights are read in place from the
// mapping), the KV store, the memory governor and the thread pool given at
// creation; all must outlive it. Thread-safety: one thread (the engine thread)
// calls Step at a time.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "engine/kv/kv_groups.h"
#include "engine/kv/kv_store.h"
#include "engine/runner/batch.h"

namespace pier::engine {

// Facts about the model a scheduler needs.
struct ModelShape {
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t context_length = 0;  // largest position + 1 a sequence may reach
  KvLayout kv;                 // what one KV block holds (n_layer: the layers of one group)
  KvGroups kv_groups;          // which group holds each layer's K/V (default: one group)
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  virtual const ModelShape& shape() const = 0;

  // Runs one step. INVALID_ARGUMENT (nothing written) for a malformed batch: an empty span,
  // a token id outside the vocabulary, a position at or past the context length, a block
  // table too short or naming a block the KV store does not have. RESOURCE_EXHAUSTED when
  // the workspace for the batch cannot be had from the memory governor. An empty batch
  // returns no rows.
  [[nodiscard]] virtual Result<StepOutput> Step(const Batch& batch) = 0;
};

}  // namespace pier::engine

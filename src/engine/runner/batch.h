// Batch and StepOutput: what one model-runner step computes, as plain data.
//
// A step runs a ragged batch: several sequences, each contributing a span of
// consecutive tokens (a whole prompt, a chunk of one, or one decode token) that
// starts at `first_position`. The K/V of positions [0, first_position) are
// already in the KV store, reached through the sequence's block table; the step
// writes the K/V of its own tokens there and returns logits only for the
// positions asked for. The engine (scheduler, paged KV cache) builds Batches;
// the runner never keeps them.
//
// Thread-safety: plain values.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

namespace pier::engine {

// Which positions of a span produce logits.
enum class LogitsWanted : uint8_t {
  kNone,  // an intermediate prefill chunk: only K/V are written
  kLast,  // the last token of the span (sampling the next token)
  kAll,   // every token of the span (prompt logprobs, `echo`)
};

struct SequenceSpan {
  int64_t sequence_id = 0;      // the caller's id; echoed back in LogitsRow
  std::vector<int32_t> tokens;  // [n_tokens] token ids computed this step (n_tokens >= 1)
  int64_t first_position = 0;   // position of tokens[0]
  // KV block ids of the sequence: position p lives in block block_table[p / block_size] at
  // slot p % block_size. Must cover every position up to first_position + n_tokens - 1.
  std::vector<int32_t> block_table;
  LogitsWanted logits = LogitsWanted::kLast;
};

struct Batch {
  // Two spans may read the same blocks (a shared prefix) but must never write the same
  // (block, slot): the runner writes each span's K/V before any attention of the layer.
  std::vector<SequenceSpan> sequences;
  // Set while the step runs, it asks the runner to stop between layers (StepOutput::
  // stopped_early): the engine stops a step that reads no critical prompt when a critical
  // request arrives, so the request waits for a layer instead of the step. Null: run to the end.
  const std::atomic<bool>* stop_early = nullptr;
};

// Where one row of StepOutput::logits comes from.
struct LogitsRow {
  int32_t sequence_index = 0;  // index into Batch::sequences
  int64_t position = 0;        // position of the token whose logits these are
};

struct StepOutput {
  int64_t n_vocab = 0;
  // One entry per logits row, in batch order (sequence by sequence, positions ascending).
  std::vector<LogitsRow> rows;
  // [rows.size(), n_vocab] f32, row-major. Points into the runner's workspace: valid until
  // the runner's next Step (copy what must outlive it).
  std::span<const float> logits;
  // The runner stopped between layers at Batch::stop_early's request: no rows, and the step
  // counts as never run (some of its K/V may be written; nothing may read them as computed).
  bool stopped_early = false;

  std::span<const float> Row(size_t i) const {
    return logits.subspan(i * static_cast<size_t>(n_vocab), static_cast<size_t>(n_vocab));
  }
};

}  // namespace pier::engine

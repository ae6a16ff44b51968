// EmbeddingBatcher: dynamic batching for an encoder model. Requests (each one or more texts
// already tokenized) queue per model; one thread forms batches and runs them on the BertModel.
//
// A batch closes when its oldest text has waited the window, or when what waits fills a batch
// (max_batch_tokens or max_batch_texts). Texts are packed ragged (no padding). When more waits
// than one batch holds, the oldest text of the highest class anchors the batch and the texts
// within `length_similarity` (15%) of its length join it first; then, only while the batch is
// under half full, texts shorter than that. A short anchor never pulls long texts in, so short
// requests are not held behind long ones.
// Higher classes are taken first, FIFO within a class. A request whose deadline (its class's
// max queue time) passes before it starts fails with RESOURCE_EXHAUSTED rather than being
// served late; and one whose predicted wait (the tokens queued at its class or above, at the
// measured rate, plus the window) already passes its deadline is refused at Submit.
//
// The window adapts: it halves (down to 0) when a batch closes with nothing else waiting (a
// lone request is not held for company that is not coming) and doubles (up to
// max_queue_delay) when a batch fills before its window ends. The window in use, batch sizes
// and times are in Stats().
//
// Thread-safety: Submit and Stats from any thread; callbacks run on the batcher's thread (or on
// CancelQueued's caller), must not block, and must not hold the last reference to what owns
// the batcher (it cannot be destroyed from its own thread). Destruction fails what is still queued
// (UNAVAILABLE) and joins the thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/buckets.h"
#include "common/status.h"
#include "encoder/bert_model.h"

namespace pier::encoder {

struct BatcherOptions {
  std::chrono::microseconds max_queue_delay{10'000};
  int64_t max_batch_texts = 64;
  double length_similarity = 0.15;
  int64_t max_queued_texts = 4096;  // beyond: RESOURCE_EXHAUSTED at Submit
  // A waiting text rises one class per `aging` waited (0: never), so lower classes are not
  // starved by a steady stream of higher ones.
  std::chrono::milliseconds aging{250};
  // Off: every batch waits the whole max_queue_delay (unless it fills), as fixed batchers do.
  bool adaptive_window = true;
};

struct EmbedRequest {
  std::vector<std::vector<int32_t>> texts = {};  // token ids, [CLS] ... [SEP]
  bool normalize = true;                         // L2-normalize each vector
  int priority = 0;                              // higher first
  // Not started by then: fails with RESOURCE_EXHAUSTED. Default: no deadline.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

struct EmbedResult {
  Status status = Status::Ok();
  std::vector<float> vectors = {};  // [texts, dim] when ok
  // A model with pooling none: a vector per token, `vectors` is [total tokens, dim], text after
  // text, and this holds each text's token count; empty for one vector per text.
  std::vector<int64_t> tokens_per_text = {};
  int64_t dim = 0;
  int64_t prompt_tokens = 0;
  double queue_seconds = 0;    // longest wait of its texts
  double compute_seconds = 0;  // sum over the batches its texts ran in
};

// The largest answer a pooling-none model gives one request: its texts' vectors, one per
// token, padded to the longest text (Submit refuses more with INVALID_ARGUMENT).
inline constexpr size_t kMaxPerTokenOutputBytes = size_t{64} << 20;

// Per-token vectors (result.tokens_per_text not empty) as one rectangular tensor, [texts,
// *longest, dim]: each text's rows, then zero vectors up to the longest text's count.
std::vector<float> PaddedTokenVectors(const EmbedResult& result, int64_t* longest);

using Buckets = pier::Buckets;  // common/buckets.h

struct BatcherStats {
  int64_t queued_texts = 0;
  int64_t running_texts = 0;
  int64_t batches = 0;
  int64_t texts = 0;
  int64_t tokens = 0;
  int64_t expired = 0;             // texts refused past their deadline
  double window_seconds = 0;       // the window in use
  int64_t predicted_refusals = 0;  // requests refused at once: their predicted wait was too long
  Buckets batch_texts;             // texts per batch
  Buckets batch_tokens;            // tokens per batch
  Buckets queue_seconds;           // per text: from Submit to its batch's start
  Buckets compute_seconds;         // per batch: the forward pass
};

class EmbeddingBatcher {
 public:
  // Borrows `model`, which must outlive it; starts the batching thread.
  EmbeddingBatcher(BertModel& model, BatcherOptions options);
  ~EmbeddingBatcher();
  EmbeddingBatcher(const EmbeddingBatcher&) = delete;
  EmbeddingBatcher& operator=(const EmbeddingBatcher&) = delete;

  // Validates (no texts, an empty text, one over the context or the batch budget, ids out of
  // the vocabulary, more texts than the queue holds: INVALID_ARGUMENT; a full queue:
  // RESOURCE_EXHAUSTED; shutting down:
  // UNAVAILABLE) and queues; `done` is called once, later, with the vectors or the failure.
  [[nodiscard]] Status Submit(EmbedRequest request, std::function<void(EmbedResult)> done);

  // Fails every queued request with UNAVAILABLE and `reason` (a model being unloaded after its
  // grace period); the batch running finishes.
  void CancelQueued(const std::string& reason);

  BatcherStats Stats() const;
  const EncoderInfo& info() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pier::encoder

// Embedder: how the front end (api/'s OpenAI and KServe embedding routes, the gRPC adapter)
// reaches an embedding model: submit token ids, get the vectors later; read the queue's
// figures. The front end names the encoder's request and result types through here and never
// drives a batcher itself, so what runs behind this interface (today EncoderHost's in-process
// EmbeddingBatcher) can change without touching the routes.
//
// Thread-safety: Submit and Stats may be called from any thread.
#pragma once

#include <functional>

#include "common/status.h"
#include "encoder/embedding_batcher.h"

namespace pier::serving {

using EmbedRequest = encoder::EmbedRequest;
using EmbedResult = encoder::EmbedResult;
using EmbedderStats = encoder::BatcherStats;
using LatencyBuckets = encoder::Buckets;

class Embedder {
 public:
  virtual ~Embedder() = default;
  // Validates and queues (INVALID_ARGUMENT: bad input; RESOURCE_EXHAUSTED: the queue is
  // full; UNAVAILABLE: shutting down); `done` is called once, later, with the vectors or the
  // failure (INVALID_ARGUMENT, RESOURCE_EXHAUSTED for a request that outwaited its deadline,
  // UNAVAILABLE).
  [[nodiscard]] virtual Status Submit(EmbedRequest request,
                                      std::function<void(EmbedResult)> done) = 0;
  virtual EmbedderStats Stats() const = 0;
};

// A result's per-token vectors as [texts, longest, dim], shorter texts padded with zero
// vectors (pooling none); `longest` receives the longest text's tokens.
using encoder::PaddedTokenVectors;
// Scales v[0..n) to unit length (a vector cut to OpenAI's `dimensions`).
using encoder::NormalizeL2;

}  // namespace pier::serving

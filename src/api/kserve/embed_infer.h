// The one run of a KServe v2 infer request for an embedding model, after each transport has
// read it (kserve_infer_request.h): tokenize the texts or check the given ids against the
// model's context, take the caller's key limits (cost = input tokens), and queue the ids on
// the model's Embedder with the class's queue deadline. The HTTP route (kserve_api.h) and the
// gRPC service (grpc/kserve_grpc_server.h) both call StartEmbedInfer, so they refuse alike
// and differ only in how they write the answer.
//
// Thread-safety: StartEmbedInfer may be called from any thread; `done` runs on the batcher's
// thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "api/auth/api_keys.h"
#include "api/kserve/kserve_infer_request.h"
#include "common/status.h"
#include "serving/model_registry.h"
#include "serving/request_policy.h"

namespace pier::api {

// The "embedding" output tensor: [texts, dim], or [texts, longest, dim] for a model with
// pooling none (a vector per token, shorter texts padded with zero vectors).
struct EmbedInferOutput {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// Why a request was not queued: INVALID_ARGUMENT (its input, naming the model), a key's
// refusal (KeyRefusal's status and Retry-After), or the Embedder's (RESOURCE_EXHAUSTED: its
// queue is full, retry after 1 s; UNAVAILABLE).
struct EmbedInferRefusal {
  Status status;
  std::optional<int64_t> retry_after_s = std::nullopt;
};

// Queues `request` for `model` (an embedding model: kind kEmbed with an embedder) as
// `principal`; nullopt when queued, and then `done` is called once, later, with the output or
// the batcher's failure (INVALID_ARGUMENT, RESOURCE_EXHAUSTED, UNAVAILABLE). `done` must not
// hold the model (the batcher's thread would then be the one to destroy it).
std::optional<EmbedInferRefusal> StartEmbedInfer(
    const serving::ServedModel& model, const Principal& principal, EmbedInferRequest request,
    const serving::ClassQueueLimits& class_max_queue,
    std::function<void(Result<EmbedInferOutput>)> done);

}  // namespace pier::api

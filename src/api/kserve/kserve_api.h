// KServeApi: the KServe v2 / Open Inference Protocol over HTTP, for every model Pier serves.
//
//   GET  /v2/health/live                 200 {"live": true}
//   GET  /v2/health/ready                200 {"ready": true} when /ready would be 200; else 503
//   GET  /v2                             {"name": "pier", "version", "extensions": [...]}
//   GET  /v2/models/{m}                  metadata: platform, versions ["1"], inputs, outputs
//                                        (a tensor model's own: tensor_model_json.h)
//   GET  /v2/models/{m}/config           Triton's model configuration, the part tritonclient
//                                        reads (tensor_model_json.h)
//   GET  /v2/models/{m}/ready            200 {"name", "ready": true} when loaded; else 503
//   POST /v2/models/{m}/infer            embedding models: one BYTES input of texts (shape [n]
//                                        or [n, 1]), output "embedding" FP32 [n, dim]; tensor
//                                        models: their own inputs and outputs, any KServe
//                                        datatype (tensor_infer_request.h, tensor_infer.h);
//                                        LLMs: 400 naming the model's kind
//   POST /v2/models/{m}/infer            with Content-Type image/*: the body is one encoded image
//                                        for a tensor model whose one input takes images
//                                        (`preprocess:`); the answer is every output as JSON
//   POST /v1/classify                    a classifier's top classes with their labels, for an
//                                        image (raw body, or JSON with base64): classify_api.h
//   POST /v2/models/{m}/generate[_stream] LLMs: Triton's generate extension (kserve_generate.h)
// (also under /v2/models/{m}/versions/1/...; Pier serves one version of each model). Infer
// accepts Triton's binary tensor extension both ways: a request with an
// Inference-Header-Content-Length header carries its JSON header, then each input with a
// `binary_data_size` parameter as raw bytes (BYTES elements as a 4-byte little-endian length
// and the bytes); the response is binary (the same header, then the float32 bytes) when the
// request asks for it (`binary_data_output`, or `binary_data` on the output). Request
// parameters: `truncate` (default true, as /v1/embeddings) and `priority` (Triton's: 1 is the
// highest). Errors are {"error": "..."} with 400 / 404 / 429 / 503. A tensor model's infer body
// may be larger than the server's max_body_bytes: its route's limit comes from the model's
// inputs (TensorInferBodyLimit, set through Router::SetBodyLimit), so that a full
// max_batch_size batch is accepted; the client going away cancels its request in the runner.
// A tensor model's answer carries Server-Timing (decode, queue, compute) and, when its
// fallback answered (tensor_fallback.h), X-Pier-Fallback naming the primary.
//
// Ownership: borrows the registry and keys; `ready` reports the server's readiness.
// Thread-safety: handlers on any I/O thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "api/auth/api_keys.h"
#include "api/http_types.h"
#include "serving/fallback_switch.h"
#include "serving/live/request_board.h"
#include "serving/model_registry.h"
#include "serving/request_policy.h"
#include "serving/serving_metrics.h"

namespace pier::api {

struct KServeApiOptions {
  // The live request board (GET /admin/requests): infer requests (tensor and embedding
  // models) while they wait and run; null: not shown there.
  serving::RequestBoard* board = nullptr;
  // Whether the server is ready, and why not (the same check as GET /ready).
  std::function<bool(std::string* reason)> ready;
  // The /v1/completions handler: generate and generate_stream run through it
  // (kserve_generate.h). Null: they are refused.
  std::function<HttpResponse(const HttpRequest&)> completions;
  serving::ClassQueueLimits class_max_queue = {};  // infer: past it a waiting request gets 429
  // The server's body limit (HttpServerOptions::max_body_bytes): the floor of a tensor
  // model's infer limit.
  int64_t max_body_bytes = int64_t{4} << 20;
  // infer for an on_demand model that is unloaded (or one loading): how long the request
  // waits for the load (as the /v1 routes do: pending_response.h's ModelNotReady); 0: 503 at
  // once.
  std::chrono::milliseconds load_wait{0};
  // A tensor model's fallback under load (tensor_fallback.h), from its spec; null: none.
  std::function<std::optional<serving::FallbackRoute>(const std::string& model_id)> fallback_of;
  // Shared with ClassifyApi, so both routes see one switch per model (null: no fallback).
  serving::FallbackSwitch* fallback_switch = nullptr;
  serving::ServingMetrics* metrics = nullptr;  // fallbacks counted here (may be null)
  // A pipeline's routes (api/pipelines/pipeline_api.h) under its name, tried before the
  // models'; nullopt when `name` is no pipeline. Null: no pipelines.
  std::function<std::optional<HttpResponse>(const HttpRequest& http, const std::string& name,
                                            const std::string& action, const Principal& principal)>
      pipeline_route = nullptr;
};

// Shared by the HTTP and gRPC forms of infer. The texts tensor must be BYTES with shape [n] or
// [n, 1], n at most kMaxInferTexts, holding `texts` elements: INVALID_ARGUMENT naming the
// tensor otherwise.
Status CheckTextTensor(std::string_view model, std::string_view name, std::string_view datatype,
                       const std::vector<int64_t>& shape, size_t texts);
// The most texts one infer request may carry (OpenAI's limit for /v1/embeddings too).
inline constexpr size_t kMaxInferTexts = 2048;
// BYTES elements in Triton's binary form (a 4-byte little-endian length, then the bytes);
// false when `bytes` is not a whole sequence of them or holds more than `max_count`.
bool ParseBinaryStrings(std::string_view bytes, std::vector<std::string>* out,
                        size_t max_count = kMaxInferTexts);
// Triton's request priority (1 the highest, 0 the default) on the batcher's scale (3 critical
// .. 0 low), capped by the key's ceiling.
int BatcherPriority(uint64_t triton_level, engine::Priority ceiling);
// The class of a batcher priority (3 critical .. 0 low), for its queue limit.
inline engine::Priority ClassOfBatcherPriority(int priority) {
  return static_cast<engine::Priority>(3 - std::clamp(priority, 0, 3));
}

// A KServe infer request's row on the live request board (GET /admin/requests) while it waits
// and runs: the ticket takes it off when destroyed. Null when `board` is. Shared by the HTTP and
// gRPC forms (`route`: "/v2/models/{model}/infer", or the gRPC method's full name).
std::shared_ptr<serving::RequestBoard::Ticket> OpenInferTicket(serving::RequestBoard* board,
                                                               std::string request_id,
                                                               std::string model, std::string route,
                                                               const Principal& principal,
                                                               int batcher_priority);

class KServeApi {
 public:
  KServeApi(KServeApiOptions options, serving::ModelRegistry* registry, const ApiKeys* keys);
  ~KServeApi();

  void Register(Router& router);

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace pier::api

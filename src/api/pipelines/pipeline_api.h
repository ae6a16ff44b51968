// The routes of the server's pipelines (issue #46), over serving/pipeline_set.h:
//
//   POST /v1/pipelines/{name}   JSON in, JSON out:
//       {"inputs": {"image": {"b64": "..."}, "note": "text", "many": ["a", {"b64": ".."}]},
//        "priority": "critical" | "high" | "normal" | "low", "id": "..."}
//     A BYTES input takes a string (its UTF-8 bytes), {"b64": ...} (the bytes) or a list of
//     those (shape [n]); an input of another type takes {"shape": [...], "data": [...]}. The
//     answer: {"id", "pipeline", "outputs": {"lines": ["..", ..], ...}, "timing": [{"step",
//     "queue_ms", "compute_ms", "start_unix_us", "end_unix_us", "items", "batch_size"}, ...]}
//     with BYTES outputs as strings (or {"b64"} when not UTF-8) and others as {"shape",
//     "datatype", "data"}.
//   KServe v2 on the pipeline's name (KServeApiOptions::pipeline_route): GET /v2/models/{name}
//     (metadata: the declared inputs and outputs), GET .../ready, POST .../infer (JSON or the
//     binary extension, outputs JSON unless binary is asked for); and over gRPC
//     (KServeGrpcOptions::pipelines: ModelReady, ModelMetadata, ModelInfer through StartInfer).
//   GET /admin/pipelines (AdminRoutesOptions::pipelines): {"object": "list", "data": [{"id",
//     "inputs", "outputs", "max_inflight", "waiting", "inside", "requests", ..., "stages":
//     [{"step", "kind", "max_inflight", "waiting", "running", "requests", "items",
//     "queue_ms_mean", "compute_ms_mean", "batch_size_mean"}, ...]}]}.
//   /metrics: pier_pipeline_* families per pipeline and stage (PipelineMetricsText).
//
// Every answer carries Server-Timing with each stage's queue and compute time
// ("detect-queue;dur=0.1, detect;dur=31.2, ..."). A W3C traceparent header reaches every
// stage's log line. A client that goes away cancels the request in whatever stage it is.
//
// Thread-safety: the routes may run on any thread; the API borrows the set and keys.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "api/auth/api_keys.h"
#include "api/http_types.h"
#include "api/kserve/tensor_infer_request.h"
#include "serving/live/request_board.h"
#include "serving/pipeline_set.h"
#include "serving/request_policy.h"

namespace pier::api {

struct PipelineApiOptions {
  // A request's deadline: its class's max queue time from its arrival. It is checked at every
  // stage's queue (a request still waiting then is refused, 429) and reaches each model.
  serving::ClassQueueLimits class_max_queue = {};
  // The live request board (GET /admin/requests): each request with the stage it is in;
  // null: not shown there.
  serving::RequestBoard* board = nullptr;
};

class PipelineApi {
 public:
  // `pipelines` may be null (no pipelines: every route answers 404); `keys` may be null. A
  // request takes one slot and one request of its key's limits until it is answered.
  PipelineApi(PipelineApiOptions options, const serving::PipelineSet* pipelines,
              const ApiKeys* keys);

  void Register(Router& router);
  // KServe v2's routes for `name` when it is a pipeline; nullopt otherwise (a model's).
  std::optional<HttpResponse> KServeRoute(const HttpRequest& http, const std::string& name,
                                          const std::string& action,
                                          const Principal& principal) const;
  // The pipeline called `name`, or null (for the gRPC service, which answers its own way).
  std::shared_ptr<pipelines::Pipeline> Find(const std::string& name) const;
  // KServe infer on `pipeline` for a transport that waits (gRPC), as the HTTP route runs it
  // (the key's limits, the class's deadline, the same outputs): `request` as
  // ReadTensorInferRequest read it; `cancelled` is checked at every stage. A refusal is
  // returned (INVALID_ARGUMENT for an unknown output, the key's, a full queue); otherwise
  // `done` is called once with the outputs asked for (every declared one when none) or the
  // failure.
  [[nodiscard]] Status StartInfer(const std::shared_ptr<pipelines::Pipeline>& pipeline,
                                  TensorInferRequest request, const Principal& principal,
                                  std::shared_ptr<const std::atomic<bool>> cancelled,
                                  std::function<void(Result<std::vector<HostTensor>>)> done) const;
  nlohmann::json AdminList() const;
  std::string MetricsText() const;

 private:
  HttpResponse Submit(const std::shared_ptr<pipelines::Pipeline>& pipeline,
                      pipelines::PipelineRequest request, const Principal& principal,
                      std::function<HttpResponse(pipelines::PipelineResult)> write) const;

  PipelineApiOptions options_;
  const serving::PipelineSet* pipelines_;
  const ApiKeys* keys_;
};

}  // namespace pier::api

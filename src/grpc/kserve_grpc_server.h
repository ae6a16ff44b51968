// KServeGrpcServer: the KServe v2 gRPC API (GRPCInferenceService, grpc_predict_v2.proto) on its
// own port, for the models in the registry: ServerLive, ServerReady (the same check as GET
// /ready), ModelReady, ServerMetadata, ModelMetadata and ModelInfer. Infer serves embedding
// models as the HTTP form does (http/kserve_api.h), through the same reading of the request
// (http/kserve_infer_request.h): one BYTES input of texts, in `raw_input_contents` (Triton's
// length-prefixed form) or `contents.bytes_contents`, or token ids; raw contents are one per
// input or none, never beside `contents`. The output "embedding" FP32 [n, dim] is in
// `raw_output_contents`. Tensor models (ONNX graphs) as the HTTP form serves them
// (api/kserve/tensor_infer_request.h, tensor_infer.h): their own inputs from each datatype's
// `contents` field (bool_contents, int_contents for INT8..INT32, uint_contents for
// UINT8..UINT32, int64/uint64/fp32/fp64/bytes_contents; FP16 and BF16 only raw) or from
// raw_input_contents, every output in raw_output_contents (BYTES length-prefixed), the
// `classification` output parameter, and ModelMetadata with the model's real tensors; a call
// the client cancels stops waiting in the runner. Messages may be as large as a tensor model's
// full batch needs (api::TensorInferBodyLimit, binary form); any other model's are held to
// max_message_bytes. An LLM's infer is INVALID_ARGUMENT naming its kind. API keys come as
// `authorization: Bearer <key>` metadata.
//
// Status codes: INVALID_ARGUMENT (bad tensors, texts, parameters, a model of another kind),
// NOT_FOUND (unknown model or version), UNAVAILABLE (not ready, shutting down),
// RESOURCE_EXHAUSTED (a message past max_message_bytes, the queue is full, a class's max queue
// time passed, the key's limits), UNAUTHENTICATED.
//
// Ownership: borrows the registry and keys, which must outlive it. Thread-safety: gRPC's
// threads call in; Start and Shutdown from one thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "api/auth/api_keys.h"
#include "api/kserve/tensor_fallback.h"
#include "api/pipelines/pipeline_api.h"
#include "common/status.h"
#include "serving/live/request_board.h"
#include "serving/model_registry.h"
#include "serving/request_policy.h"

namespace pier::grpc_api {

struct KServeGrpcOptions {
  std::string host = "127.0.0.1";
  int port = 0;                                    // 0: any free port (port() tells which)
  std::function<bool(std::string* reason)> ready;  // null: always ready
  // The largest request message (a tensor model's: at least this, see above); larger is
  // RESOURCE_EXHAUSTED. `pier serve` passes the HTTP server's body cap (max_body_bytes), so
  // both take the same sizes.
  int64_t max_message_bytes = int64_t{4} << 20;
  serving::ClassQueueLimits class_max_queue = {};  // infer: past it RESOURCE_EXHAUSTED
  // A tensor model's fallback under load, as on HTTP (api/kserve/tensor_fallback.h; the same
  // switch): the answer's model_name is the model that served it, and the initial metadata
  // `x-pier-fallback` names the primary. route_of null: none.
  api::TensorFallbackContext fallback;
  // The server's pipelines (api/pipelines/pipeline_api.h), answered under their names before
  // the models: ModelReady, ModelMetadata (the declared tensors) and ModelInfer (outputs as
  // raw_output_contents). Null: none.
  const api::PipelineApi* pipelines = nullptr;
  // The live request board (GET /admin/requests): each infer while it waits and runs, under
  // the route "/inference.GRPCInferenceService/ModelInfer" (a pipeline's is on it through
  // `pipelines`). Null: not shown there.
  serving::RequestBoard* board = nullptr;
};

class KServeGrpcServer {
 public:
  KServeGrpcServer(KServeGrpcOptions options, serving::ModelRegistry* registry,
                   const api::ApiKeys* keys);
  ~KServeGrpcServer();

  // Binds and starts serving. UNAVAILABLE when the address cannot be bound.
  [[nodiscard]] Status Start();
  int port() const;
  // Stops accepting calls and waits for those running (up to `grace_seconds`).
  void Shutdown(double grace_seconds);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pier::grpc_api

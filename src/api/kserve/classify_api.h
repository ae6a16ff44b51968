// ClassifyApi: a classifier's answer as labels, for clients that are not KServe clients
// (issue #45, "Images and labels"):
//
//   POST /v1/classify              JSON {"model": M, "image": BASE64 | [BASE64, ...],
//                                        "top_k": 5, "output": NAME, "priority": 0}
//   POST /v1/classify?model=M&top_k=5   with Content-Type image/*: the body is one image
//
// The model is a tensor model whose one input takes images (`preprocess:`); its classified
// output is `output`, else the output `labels:` names, else its only output. The answer:
//
//   {"object": "classification", "model": M,
//    "data": [{"index": 0, "classes": [{"class": 3, "label": "270", "score": 0.93}, ...]}],
//    "timing": {"decode_ms": 1.9, "queue_ms": 0.1, "compute_ms": 5.3}}
//
// one entry of `data` per image, classes highest score first (`label` only where the model has
// labels). The same refusals as KServe infer (400 naming the problem, 404, 429 with
// Retry-After, 503), the same on-demand load wait, fallback (X-Pier-Fallback) and
// Server-Timing header; errors are OpenAI-shaped ({"error": {"message", "type", "param"}}).
//
// Ownership: borrows the registry, keys and the fallback context's parts.
// Thread-safety: handlers on any I/O thread.
#pragma once

#include <chrono>
#include <memory>

#include "api/auth/api_keys.h"
#include "api/http_types.h"
#include "api/kserve/tensor_fallback.h"
#include "serving/live/request_board.h"
#include "serving/model_registry.h"
#include "serving/request_policy.h"

namespace pier::api {

struct ClassifyApiOptions {
  serving::ClassQueueLimits class_max_queue = {};
  std::chrono::milliseconds load_wait{0};  // an on_demand model's load, waited for
  int64_t max_body_bytes = int64_t{64} << 20;
  int64_t max_top_k = 1000;
  TensorFallbackContext fallback;  // route_of null: no fallback
  // The live request board (GET /admin/requests); null: requests are not shown there.
  serving::RequestBoard* board = nullptr;
};

class ClassifyApi {
 public:
  ClassifyApi(ClassifyApiOptions options, serving::ModelRegistry* registry, const ApiKeys* keys);
  ~ClassifyApi();
  void Register(Router& router);

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace pier::api

// OpenAiApi: the OpenAI-compatible routes POST /v1/chat/completions and POST /v1/completions.
//
// A handler authenticates (ApiKeys), parses and validates the JSON body (openai_request.h),
// looks its `model` up in the ModelRegistry (absent: the default model; unknown: 404
// model_not_found; an on_demand model not loaded yet: the request asks for the load and waits
// for it, up to load_wait, without holding a thread (a DeferredResponse, then handled again);
// a model in another state than ready: 503 model_unavailable with the state and its reason),
// resolves the priority class and tenant (serving/request_policy.h; the response header
// X-Priority-Applied says what was used, on every answer given after that, 429s included),
// applies that model's chat template
// and tokenizes, then submits one engine Request per prompt to the model's EngineClient and
// returns at once with a ResponseStream: SSE chunks when `stream` is set, else the whole JSON
// response when every choice has finished. Cancelling the stream (client gone, slow reader,
// shutdown) aborts the engine requests. Finished requests are recorded in ServingMetrics.
//
// Ownership: borrows the registry, keys and metrics, which must outlive it and every stream it
// returned; each stream holds its model (ModelRef) until it ends. Thread-safety: handlers run on
// any I/O thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "api/auth/api_keys.h"
#include "api/http_types.h"
#include "serving/fallback_switch.h"
#include "serving/live/request_board.h"
#include "serving/model_registry.h"
#include "serving/request_policy.h"
#include "serving/serving_metrics.h"

namespace pier::api {

struct OpenAiApiOptions {
  int32_t max_n = 8;               // largest `n` (and prompts x n for completions)
  int32_t default_max_tokens = 0;  // when the request gives none; 0: up to the limit
  int32_t max_tokens_limit = 0;    // largest max_tokens a request may ask; 0: no limit
  // A request for an on_demand model that is not loaded waits this long for its load (0: it
  // gets 503 at once).
  std::chrono::milliseconds load_wait{60'000};
  // QoS (serving/request_policy.h): each class's max queue time and deadline action (a
  // request's queue deadline, shortened by its deadline_ms / X-Request-Deadline-Ms; a request
  // whose predicted wait is already past it is refused at once with 429 and Retry-After), and
  // its SLO targets (the attainment metrics).
  serving::ClassQueueLimits class_max_queue = {};
  serving::ClassSloTargets class_slo = {};
  // The live request board (GET /admin/requests); null: requests are not shown there.
  serving::RequestBoard* board = nullptr;
  // A model's fallback, by model id (the configuration as it is now; null or nullopt: none).
  // While the model is loaded past its policy's threshold, requests that allow it are
  // answered by the fallback (serving/fallback_switch.h): its id in `model`, and the header
  // X-Pier-Fallback: <primary>. A fallback that is not ready leaves them on the primary.
  std::function<std::optional<serving::FallbackRoute>(const std::string& model_id)> fallback_of =
      nullptr;
};

class OpenAiApi {
 public:
  // `keys` and `metrics` may be null (open API, no metrics).
  OpenAiApi(OpenAiApiOptions options, serving::ModelRegistry* registry, const ApiKeys* keys,
            serving::ServingMetrics* metrics);
  ~OpenAiApi();

  // Adds POST /v1/chat/completions and POST /v1/completions, and the same routes without
  // /v1 (clients configured with a base URL that lacks it).
  void Register(Router& router);
  // Each model's fallback switch seen so far: engaged or not (the event log's fallback_on/off).
  std::map<std::string, bool> FallbackStates() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared with the streams it returns
};

}  // namespace pier::api

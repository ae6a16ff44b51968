// OpenAiApi: the OpenAI-compatible routes POST /v1/chat/completions and POST /v1/completions.
//
// A handler parses and validates the JSON body (openai_request.h; a body without `model` is
// served by this server's model, another name gets 404 model_not_found), authenticates (ApiKeys),
// resolves the priority (body field `priority` or header X-Priority, clamped to the key's
// ceiling; the response header X-Priority-Applied says what was used), applies the chat
// template and tokenizes, then submits one engine Request per prompt and returns at once with
// a ResponseStream: SSE chunks when `stream` is set, else the whole JSON response when every
// choice has finished. Cancelling the stream (client gone, slow reader, shutdown) aborts the
// engine requests. Finished requests are recorded in ServingMetrics.
//
// Ownership: borrows the client, tokenizer, chat template, keys and metrics, which must
// outlive it and every stream it returned. Thread-safety: handlers run on any I/O thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/engine_client.h"
#include "http/api_keys.h"
#include "http/http_types.h"
#include "metrics/serving_metrics.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace pier::http {

struct OpenAiApiOptions {
  std::string model_id;              // what /v1/models lists and requests must name
  int64_t created_unix_seconds = 0;  // the model's `created`
  int32_t max_n = 8;                 // largest `n` (and prompts x n for completions)
  int64_t max_request_tokens = 0;    // prompt + max_tokens limit (the engine's)
  int32_t default_max_tokens = 0;    // when the request gives none; 0: up to the limit
  int32_t max_tokens_limit = 0;      // largest max_tokens a request may ask; 0: no limit
};

class OpenAiApi {
 public:
  // `chat_template` may be null (chat requests then get 400 saying the model has none);
  // `keys` and `metrics` may be null (open API, no metrics).
  OpenAiApi(OpenAiApiOptions options, engine::EngineClient* client,
            const tokenizer::Tokenizer* tokenizer, const tokenizer::ChatTemplate* chat_template,
            const ApiKeys* keys, metrics::ServingMetrics* metrics);
  ~OpenAiApi();

  // Adds POST /v1/chat/completions and POST /v1/completions, and the same routes without
  // /v1 (clients configured with a base URL that lacks it).
  void Register(Router& router);

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared with the streams it returns
};

}  // namespace pier::http

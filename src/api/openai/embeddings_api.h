// EmbeddingsApi: POST /v1/embeddings (OpenAI) for the embedding models in the registry.
//
// Body: `model` (absent: the default model), `input` (a string, a list of strings, a list of
// token ids or a list of lists of ids; at most 2048 inputs, none empty), `encoding_format`
// (`float`, default, or `base64`: the little-endian float32 bytes), `dimensions` (1..the
// model's: the vector's first N values, normalized again), `user` (accepted, unused),
// `truncate` (Pier's, as TEI: true by default cuts an input longer than the model's context to
// it, [SEP] kept; false refuses it with 400) and `priority` (as the chat routes; also the
// X-Priority header). Token ids are the text's WordPiece ids; [CLS] and [SEP] are added when
// they are not already at the ends.
//
// Texts are tokenized here and queued on the model's EmbeddingBatcher; the response waits
// (a PendingResponse, no thread held) until every input's vector is done:
// {"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model",
//  "usage": {"prompt_tokens", "total_tokens"}}. Errors in the OpenAI shape: 400 for bad input
// or an LLM (naming its kind), 404 unknown model, 429 with Retry-After when the batcher's
// queue is full or a request outwaited its class, 503 when the model is not ready.
//
// Ownership: borrows the registry, keys and metrics. Thread-safety: handlers on any I/O thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "api/auth/api_keys.h"
#include "api/http_types.h"
#include "serving/live/request_board.h"
#include "serving/model_registry.h"
#include "serving/request_policy.h"
#include "serving/serving_metrics.h"
#include "tokenizer/tokenizer.h"

namespace pier::api {

struct EmbeddingsApiOptions {
  int64_t max_inputs = 2048;                       // OpenAI's limit per request
  std::chrono::milliseconds load_wait{60'000};     // for an on_demand model not loaded yet
  serving::ClassQueueLimits class_max_queue = {};  // past it a waiting request gets 429
  // The live request board (GET /admin/requests); null: requests are not shown there.
  serving::RequestBoard* board = nullptr;
};

class EmbeddingsApi {
 public:
  EmbeddingsApi(EmbeddingsApiOptions options, serving::ModelRegistry* registry, const ApiKeys* keys,
                serving::ServingMetrics* metrics);
  ~EmbeddingsApi();

  // POST /v1/embeddings and /embeddings.
  void Register(Router& router);

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// The token ids of texts for an embedding model: [CLS] text [SEP] (special tokens written in
// the text are matched), cut to `limit` tokens ([SEP] kept) when `truncate`, else refused with
// FAILED_PRECONDITION; an empty text or invalid UTF-8 is INVALID_ARGUMENT. Messages name input[i].
Result<std::vector<std::vector<int32_t>>> TokenizeTexts(const tokenizer::Tokenizer& tokenizer,
                                                        std::span<const std::string> texts,
                                                        int64_t limit, bool truncate);
// Token ids given by the client: checked against the vocabulary, [CLS] and [SEP] added when
// not already at the ends, then cut or refused as TokenizeTexts does.
Result<std::vector<std::vector<int32_t>>> PrepareTokenIds(
    const tokenizer::Tokenizer& tokenizer, std::vector<std::vector<int32_t>> id_lists,
    int64_t limit, bool truncate);

// The little-endian bytes of `values` as float32, base64-encoded (OpenAI's base64 format).
std::string Base64Floats(const float* values, size_t n);

}  // namespace pier::api

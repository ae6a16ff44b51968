// Triton's generate extension for LLMs, part of KServeApi (kserve_api.h):
//
//   POST /v2/models/{m}/generate         {"text_input": "...", "parameters": {...}}
//                                        -> {"model_name", "model_version": "1", "text_output"}
//   POST /v2/models/{m}/generate_stream  the same as SSE: `data: {"model_name", "model_version",
//                                        "text_output": DELTA}` per piece of text
//
// Sampling settings may be top-level keys or under "parameters" (both forms are in use):
// max_tokens, temperature, top_p, top_k, min_p, seed, stop, presence_penalty,
// frequency_penalty, repetition_penalty, ignore_eos; `stream` is taken from the route. Any other
// key is a 400 naming it. The request runs as a /v1/completions request of the same body
// (through `completions`), so the engine-facing work (events, aborts, metrics, key limits) exists
// once; its answer is translated. Errors are KServe's {"error": "..."} (in the stream: an event
// with "error").
//
// Thread-safety: the translated stream may be polled from any thread (one at a time, as every
// ResponseStream).
#pragma once

#include <functional>
#include <string>

#include "api/http_types.h"

namespace pier::api {

// Runs `http` (a generate request for `model`) through `completions` (the /v1/completions
// handler) and translates its answer. `stream`: generate_stream.
HttpResponse ServeGenerate(const HttpRequest& http, const std::string& model, bool stream,
                           const std::function<HttpResponse(const HttpRequest&)>& completions);

}  // namespace pier::api

// One benchmark request to an OpenAI-compatible server: the JSON body it sends, the
// streamed response it reads, and the timestamps it takes.
//
// Requests ask for `stream: true` with `stream_options: {include_usage: true}`, so the
// server's final usage chunk gives the exact output token count; servers that do not send
// usage are measured by counting text-carrying chunks (one token per chunk, which is what
// Pier, vLLM and llama.cpp's server send). A chunk counts as a token when its text
// (`choices[0].text`, or `choices[0].delta.content` / `reasoning_content` for chat) is not
// empty: a chat role-only first chunk, or a final chunk with only a finish_reason, is not a
// token and does not stop TTFT's clock.
//
// Thread-safety: StreamAccumulator is used by one thread; SendStreamingRequest and
// FetchFirstModelId keep no shared state.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "loadgen/http_client.h"
#include "loadgen/response_parser.h"
#include "loadgen/run_metrics.h"
#include "loadgen/workload.h"

namespace pier::loadgen {

using loadgen::SseEvent;
using loadgen::SseParser;

enum class ApiKind { kCompletions, kChat };

// kChat for an endpoint whose path contains "chat", else kCompletions.
ApiKind ApiKindForEndpoint(std::string_view endpoint);

struct RequestOptions {
  ApiKind api = ApiKind::kCompletions;
  std::string target = "/v1/completions";  // path, with the base URL's prefix
  std::string model;
  std::string api_key;  // sent as "Authorization: Bearer KEY" when not empty
  bool ignore_eos = false;
  double temperature = 0.0;
  nlohmann::json extra_body = nlohmann::json::object();  // merged into every body
};

// The JSON request body for one workload request.
std::string MakeRequestBody(const RequestOptions& options, const WorkloadRequest& request);

// Turns the body of a streamed response into a RequestResult's timing and token fields.
// Feed it body bytes as they arrive; it stamps each text chunk with Clock::now().
class StreamAccumulator {
 public:
  StreamAccumulator(ApiKind api, Clock::time_point start, RequestResult* result);

  void Feed(std::string_view bytes) { sse_.Feed(bytes); }
  // Ends the stream; sets result->success, or result->error saying what was wrong.
  void Finish(Clock::time_point end);

  bool saw_done() const { return saw_done_; }

 private:
  void OnEvent(const SseEvent& event);

  ApiKind api_;
  Clock::time_point start_;
  Clock::time_point last_token_;
  RequestResult* result_;
  SseParser sse_;
  bool saw_done_ = false;
  bool saw_event_ = false;
  std::string error_;
};

// Sends one request and waits for its whole streamed response, or the deadline. Never
// fails: a refused connection, an HTTP error, an error event or a timeout is a result with
// success = false and the reason in `error`. `result.send_offset_s` is left to the caller.
RequestResult SendStreamingRequest(const Endpoint& endpoint, const RequestOptions& options,
                                   const WorkloadRequest& request, Clock::time_point deadline);

// The `id` of the first model listed by GET {prefix}/v1/models.
Result<std::string> FetchFirstModelId(const Endpoint& endpoint, const std::string& api_key,
                                      Clock::time_point deadline);

}  // namespace pier::loadgen

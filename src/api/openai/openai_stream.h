// OpenAiStream: the ResponseStream of one OpenAI request, over the engine requests it submitted
// (one per prompt; each with n choices).
//
// Streaming (`stream: true`): every Poll drains the engine events and turns them into SSE
// events, `data: {json}\n\n`, in OpenAI's chunk shape ("chat.completion.chunk" with deltas, the
// first delta of each choice carrying role "assistant"; or "text_completion"), one id across
// chunks, finish_reason set only on the last chunk of each choice, then the usage chunk (with
// stream_options.include_usage) and `data: [DONE]`. An engine error becomes one
// `data: {"error": ...}` event that ends the stream. Non-streaming: events are accumulated and
// the whole response JSON comes in the last chunk (status 500/503 for an engine failure).
//
// Choice numbering: the choice i of prompt p is index p * n + i. Stop strings are handled by
// the engine (held back text is never streamed), so Event::text pieces are sent as they are.
// Each engine request is recorded in ServingMetrics when its choices have finished.
//
// Ownership: shares ownership of the RequestHandles (and of options.keep_alive); borrows the
// client, tokenizer and metrics, which must outlive the stream (or be kept by keep_alive).
// Thread-safety: Start, Poll, backlog and Cancel may be called from any thread (a mutex guards the
// stream's state); the wake callback is called from the engine thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/http_types.h"
#include "api/openai/openai_request.h"
#include "api/openai/tool_calls.h"
#include "common/mutex.h"
#include "engine/engine_client.h"
#include "engine/request.h"
#include "serving/live/request_board.h"
#include "serving/serving_metrics.h"
#include "tokenizer/tokenizer.h"

namespace pier::api {

struct OpenAiStreamOptions {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
  std::string id;  // "chatcmpl-<hex>" or "cmpl-<hex>"
  std::string model;
  int64_t created_unix_seconds = 0;
  bool stream = false;
  bool include_usage = false;
  int32_t n = 1;                    // choices per prompt
  std::optional<int32_t> logprobs;  // alternatives per token; unset: no logprobs
  bool echo = false;                // completions: the prompt before the text
  std::string system_fingerprint;   // the build (common/build_info.h); empty: null
  // Chat with tools (tool_choice not none): each choice's output is read for calls in this
  // family's form; a choice that made calls answers with `tool_calls` and finish reason
  // "tool_calls" (streamed: content deltas until a call may begin, then one delta per call).
  std::optional<ToolCallFormat> tool_format;
  std::vector<FunctionTool> tools;
  bool parallel_tool_calls = true;  // false: a choice answers its first call only
  // Keeps the client and tokenizer alive as long as the stream (the served model: an unload
  // waits until its last stream is gone before the model's memory is returned).
  std::shared_ptr<const void> keep_alive = nullptr;
  // QoS: the request's tenant and class for the per-tenant metrics, and its class's SLO
  // targets in ms (0: none) for the attainment gauge.
  std::string tenant;
  std::string priority_class;
  int64_t slo_ttft_ms = 0;
  int64_t slo_tpot_ms = 0;
  // Its line on the live request board (GET /admin/requests) while the stream lives; null:
  // none. Each sampled token counts.
  std::shared_ptr<serving::RequestBoard::Ticket> live = nullptr;
};

// One submitted engine request (one prompt).
struct OpenAiStreamPrompt {
  std::string engine_id;  // what Abort takes
  std::shared_ptr<engine::RequestHandle> handle;
  std::vector<int32_t> prompt_tokens;  // [n_prompt]
  std::string echo_text;               // with echo: the prompt as text
};

class OpenAiStream final : public ResponseStream {
 public:
  OpenAiStream(OpenAiStreamOptions options, std::vector<OpenAiStreamPrompt> prompts,
               engine::EngineClient* client, const tokenizer::Tokenizer* tokenizer,
               serving::ServingMetrics* metrics);
  // Aborts engine requests that have not finished and removes the listeners.
  ~OpenAiStream() override;

  void Start(std::function<void()> wake) override;
  [[nodiscard]] StreamChunk Poll() override;
  size_t backlog() const override;
  void Cancel(std::string_view reason) override;
  // Cancel; a streaming response then ends with an error event (503, code
  // "server_shutting_down") and `data: [DONE]`. Unfinished requests are recorded in the
  // metrics with finish reason "abort".
  std::string CancelWithEnding(std::string_view reason) override;

 private:
  struct Choice;
  struct Group;
  struct Failure {
    int status = 500;
    std::string message;
    std::string finish_reason = "error";  // for the metrics: "error" or "expired"
    bool retry_after = false;             // a full queue's 429: Retry-After, as at Submit
  };

  void HandleEvent(Group& group, engine::Event& event, std::string& out) PIER_REQUIRES(mutex_);
  void AppendTokenLogprobs(Choice& choice, const engine::Event& event,
                           nlohmann::ordered_json* piece);
  void AppendPromptLogprobs(Group& group, Choice& choice, nlohmann::ordered_json* piece);
  void FinishGroupIfDone(Group& group);
  // Records one finished engine request (all its choices) in the metrics.
  void RecordGroup(const Group& group, std::string_view finish_reason);
  void AbortAll() PIER_REQUIRES(mutex_);
  std::string ChunkJson(nlohmann::ordered_json choices) const;
  // The calls as OpenAI's `tool_calls` (with `index` in stream deltas).
  nlohmann::ordered_json ToolCallsJson(const Choice& choice, const std::vector<ToolCall>& calls,
                                       bool with_index) const;
  nlohmann::ordered_json Fingerprint() const;
  nlohmann::ordered_json UsageJson() const;
  std::string FullResponse() const;

  const OpenAiStreamOptions options_;
  engine::EngineClient* client_;                // not owned
  const tokenizer::Tokenizer* tokenizer_;       // not owned
  serving::ServingMetrics* metrics_;            // not owned; may be null
  std::vector<std::unique_ptr<Group>> groups_;  // fixed after construction

  mutable Mutex mutex_;
  bool roles_sent_ PIER_GUARDED_BY(mutex_) = false;
  bool done_ PIER_GUARDED_BY(mutex_) = false;
  bool aborted_ PIER_GUARDED_BY(mutex_) = false;
  std::optional<Failure> failure_ PIER_GUARDED_BY(mutex_);
};

}  // namespace pier::api

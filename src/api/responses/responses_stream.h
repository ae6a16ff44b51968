// ResponsesStream: the answer of POST /v1/responses, made from the chat completions stream
// of the same request (OpenAiStream, always asked with usage), so the engine-facing work
// (events, aborts, metrics, tool-call parsing) exists once.
//
// Non-streaming: the chat completion becomes one Response object: {"object": "response",
// "status": "completed" | "incomplete", "output": [message item with output_text, then one
// function_call item per call], "usage": {input_tokens, output_tokens, ...}} plus the request's
// settings echoed. Errors pass through unchanged (same status, OpenAI's error shape).
//
// Streaming: chat chunks become the Responses API's typed SSE events (`event: TYPE` +
// `data: {"type": TYPE, "sequence_number": n, ...}`): response.created, response.in_progress,
// then for text response.output_item.added, response.content_part.added,
// response.output_text.delta..., response.output_text.done, response.content_part.done,
// response.output_item.done; for each call response.output_item.added,
// response.function_call_arguments.delta, response.function_call_arguments.done,
// response.output_item.done; last response.completed (or response.incomplete at the length
// limit) with the whole Response. An engine failure becomes an `error` event, then
// response.failed. No `[DONE]`: the Responses API has none.
//
// Ownership: owns the inner stream. Thread-safety: any method from any thread; the
// translation state is guarded by a mutex (Poll and CancelWithEnding both translate).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "api/http_types.h"
#include "common/mutex.h"

namespace pier::api {

struct ResponsesStreamOptions {
  std::string id;  // "resp_" + hex
  std::string model;
  int64_t created_at = 0;  // Unix seconds
  bool stream = false;
  // The request's settings as the Response object repeats them (instructions, tools,
  // tool_choice, temperature, top_p, max_output_tokens, text, parallel_tool_calls, metadata).
  nlohmann::ordered_json settings = nlohmann::ordered_json::object();
};

class ResponsesStream final : public ResponseStream {
 public:
  ResponsesStream(std::shared_ptr<ResponseStream> chat, ResponsesStreamOptions options);

  void Start(std::function<void()> wake) override { chat_->Start(std::move(wake)); }
  [[nodiscard]] StreamChunk Poll() override;
  size_t backlog() const override { return chat_->backlog(); }
  void Cancel(std::string_view reason) override { chat_->Cancel(reason); }
  std::string CancelWithEnding(std::string_view reason) override;

 private:
  using json = nlohmann::ordered_json;

  // Streaming: the events for the chat stream's SSE bytes, and for one of its events (its
  // `data:` payload).
  std::string TranslateEvents(std::string_view data) PIER_REQUIRES(mutex_);
  std::string Translate(std::string_view payload) PIER_REQUIRES(mutex_);
  std::string Event(std::string_view type, json fields) PIER_REQUIRES(mutex_);
  std::string OpenMessage() PIER_REQUIRES(mutex_);
  std::string CloseMessage() PIER_REQUIRES(mutex_);
  std::string Finish(std::string_view status) PIER_REQUIRES(mutex_);
  // The Response object as it stands ("in_progress", "completed", "incomplete", "failed").
  json Response(std::string_view status) const PIER_REQUIRES(mutex_);
  // Non-streaming: a whole chat completion as a Response.
  std::string FromChatCompletion(std::string_view body) PIER_REQUIRES(mutex_);

  std::shared_ptr<ResponseStream> chat_;
  const ResponsesStreamOptions options_;
  mutable Mutex mutex_;
  int64_t sequence_ PIER_GUARDED_BY(mutex_) = 0;
  bool started_ PIER_GUARDED_BY(mutex_) = false;
  bool ended_ PIER_GUARDED_BY(mutex_) = false;
  // The output so far: finished items, and the message being written.
  json output_ PIER_GUARDED_BY(mutex_) = json::array();
  std::string message_id_ PIER_GUARDED_BY(mutex_);  // non-empty while a message item is open
  std::string text_ PIER_GUARDED_BY(mutex_);
  std::string finish_reason_ PIER_GUARDED_BY(mutex_);
  json usage_ PIER_GUARDED_BY(mutex_);  // the chat usage, once seen
  int64_t next_item_ PIER_GUARDED_BY(mutex_) = 0;
};

}  // namespace pier::api

// OpenAI request bodies: parsing and validation of POST /v1/chat/completions and
// POST /v1/completions into a plain OpenAiRequest, before anything touches the tokenizer or
// the engine.
//
// Every problem becomes an OpenAiError carrying the HTTP status (400 for the client's
// mistakes), a message a user can act on and, for a known field with a wrong type or value,
// `param` naming it (e.g. "temperature", "messages", "stream_options"). Unknown top-level
// fields are ignored; a JSON null counts as "not given". Features Pier does not implement
// (functions, suffix, best_of > 1, audio, ...) are refused with "X is not
// supported" rather than silently ignored. Malformed JSON, invalid UTF-8 and a body that is not
// an object are 400s too. Nothing here throws.
//
// What stays for the route (openai_api.cpp): the model name check (and the default model
// when the body names none), logit_bias ids against the vocabulary, tokenization and the chat
// template, max_tokens against the prompt length, the random seed when none is given, and
// the priority ceiling of the caller's key (serving/request_policy.h).
//
// Thread-safety: free functions over plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "api/openai/tool_calls.h"
#include "engine/request.h"
#include "grammar/output_constraint.h"

namespace pier::api {

// An error to answer with ErrorResponse(status, message, param, code).
struct OpenAiError {
  int status = 400;
  std::string message;
  std::string param;  // the offending field, or empty
  std::string code;   // OpenAI's error code, or empty
};

struct ChatMessage {
  std::string role;     // system, user, assistant, tool or developer
  std::string content;  // text parts joined with "\n"; "" for an assistant's null content
  std::optional<std::string> name;
  std::vector<ToolCall> tool_calls;         // assistant: the calls it made (arguments: JSON text)
  std::optional<std::string> tool_call_id;  // tool: the call this message answers
};

// One completion prompt: text, or token ids given by the client.
struct CompletionPrompt {
  std::string text;             // when !is_tokens
  std::vector<int32_t> tokens;  // when is_tokens
  bool is_tokens = false;
};

enum class OpenAiEndpoint : uint8_t { kChatCompletions, kCompletions };

struct OpenAiRequest {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
  std::string model;  // empty: not given (the server's default model)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int32_t n = 1;
  // max_completion_tokens wins over max_tokens; unset: the route's default.
  std::optional<int64_t> max_tokens;
  float temperature = 1.0f;
  float top_p = 1.0f;
  int32_t top_k = 0;  // 0 (or -1 in the body): disabled
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;  // extension
  std::optional<uint64_t> seed;     // unset: the route picks a random one
  // Token id -> bias in [-100, 100]; ids are checked against the vocabulary by the route.
  std::vector<std::pair<int32_t, float>> logit_bias;
  std::vector<std::string> stop;  // at most 4, none empty
  // Alternatives per token to return: unset returns no logprobs; 0 only the sampled token's.
  // Chat: `logprobs: true` plus `top_logprobs`; completions: the integer `logprobs`.
  std::optional<int32_t> logprobs;
  bool echo = false;                         // completions: prompt text before the generated text
  bool ignore_eos = false;                   // extension
  std::optional<engine::Priority> priority;  // extension: the body's `priority`
  // Extension: the client's own queue deadline in ms from now (1..3600000); shortens the
  // class's max queue time, never lengthens it (serving/request_policy.h).
  std::optional<int64_t> deadline_ms;
  // Extension: false forbids answering from the model's fallback (like X-Pier-No-Fallback).
  bool fallback = true;
  // response_format json_object / json_schema (validated: the schema compiles); kNone for text.
  grammar::OutputConstraint constraint;
  // Chat: function tools, and whether / which the model must call (none when no tools).
  std::vector<FunctionTool> tools;
  ToolChoice tool_choice{ToolChoiceKind::kNone, ""};
  bool parallel_tool_calls = true;
  std::vector<ChatMessage> messages;      // chat, non-empty
  std::vector<CompletionPrompt> prompts;  // completions, non-empty
  // How the route's own errors name the body's fields: chat messages (the Responses API's
  // `input`) and the output limit the client gave (max_completion_tokens, max_output_tokens).
  std::string messages_param = "messages";
  std::string max_tokens_param = "max_tokens";
};

struct OpenAiRequestLimits {
  int32_t max_n = 8;  // largest n, and for completions largest prompts x n
};

using OpenAiParseResult = std::variant<OpenAiRequest, OpenAiError>;

// The body of POST /v1/chat/completions.
OpenAiParseResult ParseChatCompletionRequest(std::string_view body,
                                             const OpenAiRequestLimits& limits = {});
// The body of POST /v1/completions.
OpenAiParseResult ParseCompletionRequest(std::string_view body,
                                         const OpenAiRequestLimits& limits = {});

}  // namespace pier::api

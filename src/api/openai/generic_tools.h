// Generic tool calling: tools for a chat model whose template does not show them (the
// per-model key tool_format, serving/model_settings.h), in one form Pier defines:
//
//   - the tools reach the model in a system message (appended to the conversation's first
//     system or developer message, else a new first message) that lists them, one compact JSON
//     object each ({"name", "description"?, "parameters"?}), and the two answers it may give;
//   - the model answers with one JSON object, which the grammar engine enforces: either
//       {"tool_calls":[{"name":"<tool>","arguments":{...}}, ...]}
//     or (tool_choice auto only)
//       {"response":"<text>"};
//   - the history renders in the same form: an assistant turn that called tools becomes the
//     {"tool_calls":[...]} object it would have written, and each run of `tool` messages one
//     user message {"tool_results":[{"tool_call_id","name","content"}, ...]} (a user turn,
//     which every template accepts, where a `tool` role is often refused).
//
// The answer reads back as tool calls, or as content: the response's text, unwrapped. While
// streaming, GenericOutputReader releases that text as it arrives (decoding its JSON escapes)
// and holds a tool_calls answer until the end.
//
// Thread-safety: free functions over values; a reader belongs to one stream.
#pragma once

#include <cstddef>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "api/openai/openai_request.h"
#include "api/openai/tool_calls.h"

namespace pier::api {

// The text of the system message that shows `tools` (described above; under tool_choice
// required or named it asks for a call only).
std::string GenericToolsSystemText(const std::vector<FunctionTool>& tools,
                                   const ToolChoice& choice);

// The conversation as the template receives it (TemplateMessages' form) with the tools and the
// tool turns in the generic form; no `tools` variable is passed beside it.
nlohmann::ordered_json GenericToolMessages(const std::vector<ChatMessage>& messages,
                                           const std::vector<FunctionTool>& tools,
                                           const ToolChoice& choice);

// One choice's whole output read back: its calls (to tools of `tools`), or the response's
// text as content. An output cut short (max_tokens) reads as the response's text so far, or,
// if it is no response, as the text itself, with no calls.
ParsedToolCalls ParseGenericToolOutput(std::string_view text,
                                       const std::vector<FunctionTool>& tools);

// A streamed output as it arrives: the response's text, decoded, as soon as it is certain;
// nothing of a tool_calls answer.
class GenericOutputReader {
 public:
  // Appends `piece`; returns the response text now certain (may be empty).
  std::string Push(std::string_view piece);
  // Whether the output is (or may still be) a tool_calls answer: held until the end.
  bool holding() const { return phase_ != Phase::kResponse; }
  // Everything pushed.
  const std::string& text() const { return text_; }

 private:
  enum class Phase : uint8_t { kUndecided, kResponse, kOther };
  Phase phase_ = Phase::kUndecided;
  std::string text_;
  size_t decoded_ = 0;  // kResponse: bytes of text_ decoded so far
  bool ended_ = false;  // kResponse: the closing quote was read
};

}  // namespace pier::api

// Tool calling: the OpenAI `tools` / `tool_choice` fields on the way in, and a model's output
// read back as tool calls on the way out, per chat-template family.
//
// A model writes its calls in the form its chat template taught it. The family is detected
// from the template's source (DetectToolCallFormat). There are four:
//   kHermes   <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, one block a call
//             (Qwen 2.5 / 3, Hermes 2 Pro / 3, SmolLM3 and most ChatML tool templates);
//   kLlama3   {"name": ..., "parameters": {...}}, a bare JSON object, after <|python_tag|> or
//             not (Llama 3.1 - 3.3 JSON tool calling);
//   kMistral  [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] or the newer
//             [TOOL_CALLS]name[ARGS]{...} (a bare list at the start too: where [TOOL_CALLS]
//             is a control token, the text leaves it out);
//   kJson     a bare JSON object {"name", "arguments"} or a list of them (the fallback for
//             templates that take `tools` without a family marker);
//   kGeneric  Pier's own form for templates that do not show tools (generic_tools.h):
//             {"tool_calls": [{"name", "arguments"}, ...]} or {"response": "..."}.
// Only names of the request's tools count as calls: any other output is content.
//
// tool_choice "required" and a named function are enforced, not hoped for: ToolCallConstraint
// is the grammar constraint under which the only possible output is one call, in the family's
// form, to an allowed function, with arguments valid against its `parameters` schema (whose
// local references, "#/$defs/..." or "#", resolve within that schema, as they do alone).
//
// Streaming: ToolCallSplitter tells, as text arrives, how much of it is certainly content (sent
// as deltas at once) and holds the rest back while it may be a call; at the end, the held text
// is parsed into calls or released as content.
//
// Thread-safety: free functions over values; a splitter belongs to one stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/output_constraint.h"

namespace pier::api {

// One entry of the request's `tools` (type "function").
struct FunctionTool {
  std::string name;
  std::string description;  // empty when absent
  std::string parameters;   // its JSON Schema as JSON text in the client's key order; "" if absent
  bool operator==(const FunctionTool&) const = default;
};

enum class ToolChoiceKind : uint8_t {
  kNone,      // never call a tool (tools are not shown to the template)
  kAuto,      // the model decides; its output is parsed for calls
  kRequired,  // exactly one call to one of the tools, enforced
  kNamed,     // exactly one call to `name`, enforced
};

struct ToolChoice {
  ToolChoiceKind kind = ToolChoiceKind::kAuto;
  std::string name;  // kNamed
  bool operator==(const ToolChoice&) const = default;
};

// One call of the model's output. `arguments` is JSON text (an object), as OpenAI returns it.
struct ToolCall {
  std::string id;  // "call_" + hex, assigned by whoever answers the request
  std::string name;
  std::string arguments;
};

enum class ToolCallFormat : uint8_t { kHermes, kLlama3, kMistral, kJson, kGeneric };

std::string_view ToolCallFormatName(ToolCallFormat format);

// The family of a chat template, from the markers its source contains (never kGeneric).
ToolCallFormat DetectToolCallFormat(std::string_view template_source);

struct ParsedToolCalls {
  std::string content;          // the text outside the calls, trimmed (the whole text if none)
  std::vector<ToolCall> calls;  // in output order, ids empty
};

// Reads `text` (the whole output of one choice) as the family writes calls. Calls to
// functions not among `tools`, and malformed blocks, make the whole text content.
ParsedToolCalls ParseToolCalls(ToolCallFormat format, std::string_view text,
                               const std::vector<FunctionTool>& tools);

// The constraint for tool_choice required (any of `tools`) or named (that one), in the
// family's form. Tools without `parameters` take any JSON object as arguments. (kGeneric:
// GenericToolConstraint.)
grammar::OutputConstraint ToolCallConstraint(ToolCallFormat format,
                                             const std::vector<FunctionTool>& tools,
                                             const ToolChoice& choice);

// The generic form's constraint (generic_tools.h), for every tool_choice but none: required
// and named, exactly {"tool_calls":[CALL]} with the frame written as literal text (no
// whitespace in it); auto, that (one or more calls with `parallel`, else one) or
// {"response":"<any text>"}.
grammar::OutputConstraint GenericToolConstraint(const std::vector<FunctionTool>& tools,
                                                const ToolChoice& choice, bool parallel);

// The `tools` value a chat template receives, as transformers passes it:
// [{"type": "function", "function": {"name", "description", "parameters"}}].
std::string ToolsJsonForTemplate(const std::vector<FunctionTool>& tools);

class GenericOutputReader;

class ToolCallSplitter {
 public:
  explicit ToolCallSplitter(ToolCallFormat format);
  ~ToolCallSplitter();
  ToolCallSplitter(ToolCallSplitter&&) noexcept;
  ToolCallSplitter& operator=(ToolCallSplitter&&) noexcept;

  // Appends `piece` to the output; returns the text that is now certainly content (may be
  // empty). Once a call may have begun, everything after it is held.
  std::string Push(std::string_view piece);
  // The end of the output: the held text, parsed. Its `content` is what was held and is not a
  // call (to be sent as content); `calls` the calls.
  ParsedToolCalls Finish(const std::vector<FunctionTool>& tools);

 private:
  ToolCallFormat format_;
  std::string text_;      // everything pushed
  size_t released_ = 0;   // bytes of text_ returned as content
  bool in_call_ = false;  // a call may have begun at released_: hold everything
  bool plain_ = false;    // kLlama3 / kJson: the output began as text, so it is all content
  std::unique_ptr<GenericOutputReader> generic_;  // kGeneric: unwraps a response as it comes
};

}  // namespace pier::api

// POST /v1/responses bodies (OpenAI's Responses API), read by translating them into the chat
// completions form and parsing that with the chat parser, so both routes share one set of
// rules for sampling, tools, schemas and messages.
//
// What is translated:
//   instructions                       -> a leading system message
//   input: a string                    -> one user message
//   input: items                       -> messages:
//     {"type": "message"?, "role", "content": string | [input_text | output_text parts]}
//     {"type": "function_call", "call_id", "name", "arguments"} -> an assistant tool call
//       (consecutive calls join one assistant turn)
//     {"type": "function_call_output", "call_id", "output"}     -> a tool message
//   max_output_tokens                  -> max_completion_tokens
//   tools: [{"type": "function", "name", "description", "parameters", "strict"}]
//                                      -> chat tools ({"type": "function", "function": {...}})
//   tool_choice {"type": "function", "name"} -> the chat form; strings as they are
//   text.format (text | json_object | json_schema with name/schema/strict inline)
//                                      -> response_format
//   temperature, top_p, stream, parallel_tool_calls, user, seed and Pier's extensions
//   (priority, top_k, ...) pass through.
// Refused with 400 naming the field or type: item types other than the above (input_image,
// file_search_call, reasoning, ...), tools other than functions, previous_response_id and
// conversation (Pier stores no responses: send the whole conversation), background mode,
// reasoning, prompt templates, truncation other than "disabled", and `n`.
// Errors name the fields as this body has them (input[3].call_id, max_output_tokens,
// text.format.schema, tools[0].parameters), never the chat form's; so do the route's own
// (OpenAiRequest::messages_param and max_tokens_param).
//
// Thread-safety: free functions over values.
#pragma once

#include <string_view>

#include "api/openai/openai_request.h"

namespace pier::api {

// The body of POST /v1/responses as the chat request it amounts to (endpoint chat).
OpenAiParseResult ParseResponsesRequest(std::string_view body,
                                        const OpenAiRequestLimits& limits = {});

}  // namespace pier::api

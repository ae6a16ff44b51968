// TemplateMessages: a chat request's messages as the chat template receives them, in the form
// transformers' apply_chat_template takes (and Pier's Jinja engine was checked against):
// {"role", "content", "name"?, "tool_calls"?, "tool_call_id"?}, with a tool call's arguments as
// a mapping (templates write `tool_call.arguments | tojson`) and null content for an assistant
// turn that only called tools.
//
// Thread-safety: a free function over values.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <vector>

#include "api/openai/openai_request.h"

namespace pier::api {

nlohmann::ordered_json TemplateMessages(const std::vector<ChatMessage>& messages);

}  // namespace pier::api

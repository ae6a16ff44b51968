#include "api/openai/chat_messages.h"

#include <nlohmann/json.hpp>
#include <utility>

namespace pier::api {

nlohmann::ordered_json TemplateMessages(const std::vector<ChatMessage>& messages) {
  using ojson = nlohmann::ordered_json;
  ojson out = ojson::array();
  for (const ChatMessage& m : messages) {
    ojson message = {{"role", m.role}, {"content", m.content}};
    if (m.content.empty() && !m.tool_calls.empty()) message["content"] = nullptr;
    if (m.name.has_value()) message["name"] = *m.name;
    if (!m.tool_calls.empty()) {
      ojson calls = ojson::array();
      for (const ToolCall& call : m.tool_calls) {
        // The request parser checked that the arguments are a JSON object.
        calls.push_back(
            {{"id", call.id},
             {"type", "function"},
             {"function", {{"name", call.name}, {"arguments", ojson::parse(call.arguments)}}}});
      }
      message["tool_calls"] = std::move(calls);
    }
    if (m.tool_call_id.has_value()) message["tool_call_id"] = *m.tool_call_id;
    out.push_back(std::move(message));
  }
  return out;
}

}  // namespace pier::api

#include "api/responses/responses_request.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "api/json_shape.h"
#include "api/request_json.h"

namespace pier::api {
namespace {

using json = nlohmann::ordered_json;

using request_json::Bad;
using request_json::Field;
using request_json::NotSupported;
using request_json::Show;

// A message item's content: a string, or input_text / output_text parts (joined by the chat
// parser); other part types are refused by name.
std::optional<OpenAiError> TranslateContent(const json& content, const std::string& at, json* out) {
  if (content.is_string()) {
    *out = content;
    return std::nullopt;
  }
  if (!content.is_array()) {
    return Bad("input", at + ".content must be a string or an array of content parts");
  }
  json parts = json::array();
  for (size_t k = 0; k < content.size(); ++k) {
    const json& part = content[k];
    const json* type = part.is_object() ? Field(part, "type") : nullptr;
    const json* text = part.is_object() ? Field(part, "text") : nullptr;
    if (type == nullptr || !type->is_string()) {
      return Bad("input", at + ".content[" + std::to_string(k) + "] needs a string type");
    }
    if (*type != "input_text" && *type != "output_text" && *type != "text") {
      return Bad("input", "content part type " + Show(*type) + " in " + at +
                              " is not supported (input_text and output_text are)");
    }
    if (text == nullptr || !text->is_string()) {
      return Bad("input", at + ".content[" + std::to_string(k) + "].text must be a string");
    }
    parts.push_back({{"type", "text"}, {"text", *text}});
  }
  *out = std::move(parts);
  return std::nullopt;
}

std::optional<OpenAiError> TranslateInput(const json& body, json* messages) {
  if (const json* instructions = Field(body, "instructions"); instructions != nullptr) {
    if (!instructions->is_string()) return Bad("instructions", "instructions must be a string");
    messages->push_back({{"role", "system"}, {"content", *instructions}});
  }
  const json* input = Field(body, "input");
  if (input == nullptr) return Bad("input", "input is required");
  if (input->is_string()) {
    messages->push_back({{"role", "user"}, {"content", *input}});
    return std::nullopt;
  }
  if (!input->is_array() || input->empty()) {
    return Bad("input", "input must be a string or a non-empty array of items");
  }
  json* open_calls = nullptr;         // the assistant turn consecutive function_call items join
  std::vector<std::string> call_ids;  // of the function_call items so far
  for (size_t i = 0; i < input->size(); ++i) {
    const std::string at = "input[" + std::to_string(i) + "]";
    const json& item = (*input)[i];
    if (!item.is_object()) return Bad("input", at + " must be an object");
    const json* type = Field(item, "type");
    const std::string kind =
        type == nullptr ? "message" : (type->is_string() ? type->get<std::string>() : "");
    if (kind == "message") {
      const json* role = Field(item, "role");
      const json* content = Field(item, "content");
      if (role == nullptr || !role->is_string()) return Bad("input", at + ".role must be a string");
      if (*role != "user" && *role != "assistant" && *role != "system" && *role != "developer") {
        return Bad("input",
                   at + ".role must be user, assistant, system or developer, got " + Show(*role));
      }
      if (content == nullptr) return Bad("input", at + ".content is required");
      json message = {{"role", *role}};
      if (auto error = TranslateContent(*content, at, &message["content"])) return error;
      messages->push_back(std::move(message));
      open_calls = nullptr;
    } else if (kind == "function_call") {
      const json* call_id = Field(item, "call_id");
      const json* name = Field(item, "name");
      const json* arguments = Field(item, "arguments");
      if (call_id == nullptr || !call_id->is_string() || name == nullptr || !name->is_string() ||
          arguments == nullptr || !arguments->is_string()) {
        return Bad("input", at + " (function_call) needs string call_id, name and arguments");
      }
      const std::string& text = arguments->get_ref<const std::string&>();
      if (!json::parse(text.begin(), text.end(), nullptr, false).is_object()) {
        return Bad("input", at + ".arguments must be a JSON object (as text)");
      }
      call_ids.push_back(call_id->get<std::string>());
      if (open_calls == nullptr) {
        messages->push_back(
            {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array()}});
        open_calls = &messages->back()["tool_calls"];
      }
      open_calls->push_back({{"id", *call_id},
                             {"type", "function"},
                             {"function", {{"name", *name}, {"arguments", *arguments}}}});
    } else if (kind == "function_call_output") {
      const json* call_id = Field(item, "call_id");
      const json* output = Field(item, "output");
      if (call_id == nullptr || !call_id->is_string() || output == nullptr ||
          !output->is_string()) {
        return Bad("input", at + " (function_call_output) needs string call_id and output");
      }
      if (std::find(call_ids.begin(), call_ids.end(), call_id->get_ref<const std::string&>()) ==
          call_ids.end()) {
        return Bad("input", at + ".call_id " + Show(*call_id) +
                                " does not match the call_id of an earlier function_call item");
      }
      messages->push_back({{"role", "tool"}, {"tool_call_id", *call_id}, {"content", *output}});
      open_calls = nullptr;
    } else {
      return Bad("input", "input item type " + (type != nullptr ? Show(*type) : "?") + " in " + at +
                              " is not supported (message, function_call and "
                              "function_call_output are)");
    }
  }
  return std::nullopt;
}

std::optional<OpenAiError> TranslateTools(const json& body, json* chat) {
  if (const json* tools = Field(body, "tools"); tools != nullptr) {
    if (!tools->is_array()) return Bad("tools", "tools must be an array");
    json out = json::array();
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      const json* type = t.is_object() ? Field(t, "type") : nullptr;
      if (type == nullptr || *type != "function") {
        return Bad("tools", "tools[" + std::to_string(i) + "] of type " +
                                (type != nullptr ? Show(*type) : std::string("?")) +
                                " is not supported (function is)");
      }
      json function = json::object();
      for (const char* key : {"name", "description", "parameters", "strict"}) {
        if (const json* v = Field(t, key); v != nullptr) function[key] = *v;
      }
      out.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
    (*chat)["tools"] = std::move(out);
  }
  if (const json* choice = Field(body, "tool_choice"); choice != nullptr) {
    if (choice->is_object()) {
      const json* type = Field(*choice, "type");
      const json* name = Field(*choice, "name");
      if (type == nullptr || *type != "function" || name == nullptr) {
        return Bad("tool_choice",
                   "tool_choice must be none, auto, required or {\"type\": \"function\", "
                   "\"name\": ...}");
      }
      (*chat)["tool_choice"] = {{"type", "function"}, {"function", {{"name", *name}}}};
    } else {
      (*chat)["tool_choice"] = *choice;
    }
  }
  return std::nullopt;
}

std::optional<OpenAiError> TranslateTextFormat(const json& body, json* chat) {
  const json* text = Field(body, "text");
  if (text == nullptr) return std::nullopt;
  if (!text->is_object()) return Bad("text", "text must be an object");
  const json* format = Field(*text, "format");
  if (format == nullptr) return std::nullopt;
  if (!format->is_object()) return Bad("text", "text.format must be an object");
  const json* type = Field(*format, "type");
  if (type != nullptr && *type == "json_schema") {
    json spec = json::object();
    for (const char* key : {"name", "description", "schema", "strict"}) {
      if (const json* v = Field(*format, key); v != nullptr) spec[key] = *v;
    }
    (*chat)["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(spec)}};
  } else {
    (*chat)["response_format"] = *format;
  }
  return std::nullopt;
}

// The Responses body as a chat completions body.
std::optional<OpenAiError> Translate(const json& body, json* chat) {
  for (const char* name : {"previous_response_id", "conversation"}) {
    if (Field(body, name) != nullptr) {
      return NotSupported(name, std::string(name) +
                                    " (Pier stores no responses: send the whole conversation "
                                    "as input)");
    }
  }
  if (const json* v = Field(body, "background"); v != nullptr && *v != false) {
    return NotSupported("background", "background mode");
  }
  for (const char* name : {"reasoning", "prompt", "n"}) {
    if (Field(body, name) != nullptr) return NotSupported(name, name);
  }
  if (const json* v = Field(body, "truncation"); v != nullptr && *v != "disabled") {
    return NotSupported("truncation", "truncation other than disabled");
  }
  json messages = json::array();
  if (auto error = TranslateInput(body, &messages)) return error;
  (*chat)["messages"] = std::move(messages);
  if (const json* v = Field(body, "max_output_tokens"); v != nullptr) {
    if (!v->is_number_integer() || v->get<int64_t>() < 1) {
      return Bad("max_output_tokens",
                 "max_output_tokens must be a positive integer, got " + Show(*v));
    }
    (*chat)["max_completion_tokens"] = *v;
  }
  if (auto error = TranslateTools(body, chat)) return error;
  if (auto error = TranslateTextFormat(body, chat)) return error;
  // The rest means the same on both routes (sampling, stream, Pier's extensions).
  for (const char* name :
       {"model", "temperature", "top_p", "stream", "parallel_tool_calls", "user", "seed",
        "priority", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty",
        "stop", "ignore_eos", "logit_bias"}) {
    if (auto it = body.find(name); it != body.end()) (*chat)[name] = *it;
  }
  return std::nullopt;
}

// The chat parser's error about a field Translate() wrote, named as the Responses body has it:
// max_completion_tokens is max_output_tokens, response_format is text.format and
// tools[i].function.X is tools[i].X. (Input items are checked before translation, so that no
// error names a chat message.)
OpenAiError InResponsesTerms(OpenAiError e) {
  auto replace_prefix = [&](std::string_view from, std::string_view to) {
    if (e.message.compare(0, from.size(), from) != 0) return false;
    e.message.replace(0, from.size(), to);
    return true;
  };
  if (e.param == "max_completion_tokens") {
    e.param = "max_output_tokens";
    replace_prefix("max_completion_tokens", "max_output_tokens");
  } else if (e.param == "response_format") {
    e.param = "text";
    if (!replace_prefix("response_format.json_schema.", "text.format.")) {
      replace_prefix("response_format", "text.format");
    }
  } else if (e.param == "tools" && e.message.rfind("tools[", 0) == 0) {
    constexpr std::string_view kFunction = "].function.";
    if (const size_t at = e.message.find(kFunction);
        at != std::string::npos && e.message.find_first_not_of("0123456789", 6) == at) {
      e.message.replace(at, kFunction.size(), "].");
    }
  } else if (e.param == "tool_choice") {
    constexpr std::string_view kFormat = "response_format json_object or json_schema";
    if (e.message.size() >= kFormat.size() &&
        e.message.compare(e.message.size() - kFormat.size(), kFormat.size(), kFormat) == 0) {
      e.message.replace(e.message.size() - kFormat.size(), kFormat.size(),
                        "text.format json_object or json_schema");
    }
  }
  return e;
}

}  // namespace

OpenAiParseResult ParseResponsesRequest(std::string_view body, const OpenAiRequestLimits& limits) {
  if (std::optional<std::string> shape = CheckJsonShape(body)) return Bad("", *shape);
  json parsed = json::parse(body.begin(), body.end(), nullptr, false);
  if (parsed.is_discarded()) return Bad("", "invalid JSON in the request body");
  if (!parsed.is_object()) return Bad("", "the request body must be a JSON object");
  json chat = json::object();
  if (auto error = Translate(parsed, &chat)) return *std::move(error);
  OpenAiParseResult parsed_chat =
      ParseChatCompletionRequest(chat.dump(-1, ' ', false, json::error_handler_t::strict), limits);
  if (auto* error = std::get_if<OpenAiError>(&parsed_chat)) return InResponsesTerms(*error);
  OpenAiRequest& r = std::get<OpenAiRequest>(parsed_chat);
  r.messages_param = "input";
  if (r.max_tokens.has_value()) r.max_tokens_param = "max_output_tokens";
  return parsed_chat;
}

}  // namespace pier::api

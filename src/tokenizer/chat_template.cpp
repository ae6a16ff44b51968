#include "tokenizer/chat_template.h"

#include <nlohmann/json.hpp>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/eval.h"
#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/value.h"

namespace pier::tokenizer {
namespace {

// Names a message's reasoning is passed under; transformers fills them from one another.
constexpr const char* kReasoningFields[] = {"reasoning_content", "thinking", "reasoning"};

// transformers' _normalize_chat_messages + _alias_reasoning_fields for one message.
Result<jinja::Value> PrepareMessage(const nlohmann::ordered_json& message, size_t index) {
  if (!message.is_object()) {
    return InvalidArgumentError("chat message " + std::to_string(index) +
                                " must be a JSON object, got " + message.type_name());
  }
  const nlohmann::ordered_json* reasoning = nullptr;
  for (const char* field : kReasoningFields) {
    auto it = message.find(field);
    if (it != message.end() && !it->is_null()) {
      reasoning = &*it;
      break;
    }
  }
  jinja::DictData dict;
  jinja::Value reasoning_value;
  if (reasoning != nullptr) {
    PIER_ASSIGN_OR_RETURN(reasoning_value, jinja::FromJson(*reasoning));
    dict.Set("thinking", reasoning_value);
  }
  for (const auto& [key, value] : message.items()) {
    if (value.is_null()) continue;
    PIER_ASSIGN_OR_RETURN(jinja::Value v, jinja::FromJson(value));
    dict.Set(jinja::EncodeStringKey(key), std::move(v));
  }
  if (reasoning != nullptr) dict.Set("reasoning_content", reasoning_value);
  return jinja::Value::Dict(std::move(dict));
}

}  // namespace

ChatTemplate::ChatTemplate(std::string source, std::shared_ptr<const jinja::TemplateAst> ast)
    : source_(std::move(source)), ast_(std::move(ast)) {}

Result<ChatTemplate> ChatTemplate::Parse(std::string source) {
  PIER_ASSIGN_OR_RETURN(jinja::TemplateAst ast, jinja::ParseTemplate(source));
  return ChatTemplate(std::move(source),
                      std::make_shared<const jinja::TemplateAst>(std::move(ast)));
}

Result<std::string> ChatTemplate::Apply(const nlohmann::ordered_json& messages,
                                        const ChatTemplateOptions& options) const {
  if (!messages.is_array()) {
    return InvalidArgumentError("chat messages must be a JSON array, got " +
                                std::string(messages.type_name()));
  }
  if (messages.empty()) {
    return InvalidArgumentError(
        "Cannot apply chat template to an empty conversation. Provide at least one message.");
  }
  std::vector<jinja::Value> prepared;
  prepared.reserve(messages.size());
  for (size_t i = 0; i < messages.size(); ++i) {
    PIER_ASSIGN_OR_RETURN(jinja::Value m, PrepareMessage(messages[i], i));
    prepared.push_back(std::move(m));
  }

  // Same precedence as transformers: special tokens, then keyword arguments, then the
  // fixed render arguments.
  jinja::DictData context;
  if (!options.bos_token.empty()) context.Set("bos_token", jinja::Value::String(options.bos_token));
  if (!options.eos_token.empty()) context.Set("eos_token", jinja::Value::String(options.eos_token));
  if (options.date_string) context.Set("date_string", jinja::Value::String(*options.date_string));
  if (options.extra_context != nullptr) {
    if (!options.extra_context->is_object()) {
      return InvalidArgumentError("chat template extra context must be a JSON object");
    }
    for (const auto& [key, value] : options.extra_context->items()) {
      PIER_ASSIGN_OR_RETURN(jinja::Value v, jinja::FromJson(value));
      context.Set(key, std::move(v));
    }
  }
  context.Set("messages", jinja::Value::List(std::move(prepared)));
  jinja::Value tools = jinja::Value::None();
  if (options.tools != nullptr && !options.tools->is_null()) {
    if (!options.tools->is_array()) return InvalidArgumentError("chat tools must be a JSON array");
    PIER_ASSIGN_OR_RETURN(tools, jinja::FromJson(*options.tools));
  }
  context.Set("tools", std::move(tools));
  context.Set("documents", jinja::Value::None());
  context.Set("add_generation_prompt", jinja::Value::Bool(options.add_generation_prompt));

  jinja::RenderOptions render_options;
  render_options.now_unix_seconds = options.now_unix_seconds;
  render_options.limits.max_output_bytes = options.max_output_bytes;
  render_options.limits.max_loop_iterations = options.max_loop_iterations;
  return jinja::Render(*ast_, context, render_options);
}

Result<std::string> ChatTemplate::Apply(const nlohmann::json& messages,
                                        const ChatTemplateOptions& options) const {
  nlohmann::ordered_json ordered;
  try {
    ordered = nlohmann::ordered_json::parse(messages.dump());
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgumentError(std::string("chat messages are not valid JSON: ") + e.what());
  }
  return Apply(ordered, options);
}

bool PromptStartsWithBos(std::string_view prompt, std::string_view bos_token) {
  return !bos_token.empty() && prompt.substr(0, bos_token.size()) == bos_token;
}

}  // namespace pier::tokenizer

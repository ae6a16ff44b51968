#include "api/openai/tool_calls.h"

#include <algorithm>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "api/openai/generic_tools.h"
#include "grammar/json_schema.h"

namespace pier::api {
namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralMarker = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

std::optional<json> ParseJson(std::string_view text) {
  json v = json::parse(text.begin(), text.end(), nullptr, false);
  if (v.is_discarded()) return std::nullopt;
  return v;
}

bool IsTool(const std::vector<FunctionTool>& tools, const std::string& name) {
  return std::any_of(tools.begin(), tools.end(),
                     [&](const FunctionTool& t) { return t.name == name; });
}

// {"name": ..., "arguments" | "parameters": {...} or its JSON text} to a call of a known tool.
std::optional<ToolCall> ReadCall(const json& v, const std::vector<FunctionTool>& tools) {
  if (!v.is_object()) return std::nullopt;
  auto name = v.find("name");
  if (name == v.end() || !name->is_string() || !IsTool(tools, name->get<std::string>())) {
    return std::nullopt;
  }
  ToolCall call;
  call.name = name->get<std::string>();
  auto args = v.find("arguments");
  if (args == v.end()) args = v.find("parameters");
  if (args == v.end() || args->is_null()) {
    call.arguments = "{}";
  } else if (args->is_object()) {
    call.arguments = args->dump(-1, ' ', false, json::error_handler_t::replace);
  } else if (args->is_string()) {
    std::optional<json> inner = ParseJson(args->get_ref<const std::string&>());
    if (!inner.has_value() || !inner->is_object()) return std::nullopt;
    call.arguments = inner->dump(-1, ' ', false, json::error_handler_t::replace);
  } else {
    return std::nullopt;
  }
  return call;
}

// One call object or a non-empty list of them.
std::optional<std::vector<ToolCall>> ReadCalls(std::string_view text,
                                               const std::vector<FunctionTool>& tools) {
  std::optional<json> v = ParseJson(text);
  if (!v.has_value()) return std::nullopt;
  std::vector<ToolCall> calls;
  if (v->is_array()) {
    if (v->empty()) return std::nullopt;
    for (const json& item : *v) {
      std::optional<ToolCall> call = ReadCall(item, tools);
      if (!call.has_value()) return std::nullopt;
      calls.push_back(std::move(*call));
    }
    return calls;
  }
  std::optional<ToolCall> call = ReadCall(*v, tools);
  if (!call.has_value()) return std::nullopt;
  calls.push_back(std::move(*call));
  return calls;
}

ParsedToolCalls Content(std::string_view text) { return {std::string(text), {}}; }

ParsedToolCalls ParseHermes(std::string_view text, const std::vector<FunctionTool>& tools) {
  ParsedToolCalls out;
  std::string content;
  size_t last = 0;
  size_t open = text.find(kHermesOpen);
  if (open == std::string_view::npos) return Content(text);
  while (open != std::string_view::npos) {
    content += text.substr(last, open - last);
    const size_t body = open + kHermesOpen.size();
    const size_t close = text.find(kHermesClose, body);
    const std::string_view block =
        text.substr(body, close == std::string_view::npos ? std::string_view::npos : close - body);
    std::optional<std::vector<ToolCall>> calls = ReadCalls(Trim(block), tools);
    if (!calls.has_value() || calls->size() != 1) return Content(text);
    out.calls.push_back(std::move(calls->front()));
    last = close == std::string_view::npos ? text.size() : close + kHermesClose.size();
    open = text.find(kHermesOpen, last);
  }
  content += text.substr(last);
  out.content = std::string(Trim(content));
  return out;
}

ParsedToolCalls ParseBareJson(std::string_view text, const std::vector<FunctionTool>& tools) {
  std::string_view body = Trim(text);
  if (StartsWith(body, kPythonTag)) body = Trim(body.substr(kPythonTag.size()));
  // A fenced block (```json ... ```), as chat models like to write it.
  if (StartsWith(body, "```")) {
    const size_t line = body.find('\n');
    const size_t fence_end = body.rfind("```");
    if (line != std::string_view::npos && fence_end != std::string_view::npos && fence_end > line) {
      body = Trim(body.substr(line + 1, fence_end - line - 1));
    }
  }
  std::optional<std::vector<ToolCall>> calls = ReadCalls(body, tools);
  if (!calls.has_value()) return Content(text);
  return {"", std::move(*calls)};
}

ParsedToolCalls ParseMistral(std::string_view text, const std::vector<FunctionTool>& tools) {
  const size_t marker = text.find(kMistralMarker);
  // Where [TOOL_CALLS] is a control token, skip_special_tokens left it out of the text: the
  // calls are then the bare list.
  if (marker == std::string_view::npos) {
    return StartsWith(Trim(text), "[") ? ParseBareJson(text, tools) : Content(text);
  }
  ParsedToolCalls out;
  out.content = std::string(Trim(text.substr(0, marker)));
  std::string_view rest = Trim(text.substr(marker + kMistralMarker.size()));
  if (StartsWith(rest, "[") || StartsWith(rest, "{")) {
    std::optional<std::vector<ToolCall>> calls = ReadCalls(rest, tools);
    if (!calls.has_value()) return Content(text);
    out.calls = std::move(*calls);
    return out;
  }
  // The newer form: name[ARGS]{...}, each call after its own [TOOL_CALLS].
  while (!rest.empty()) {
    const size_t next = rest.find(kMistralMarker);
    const std::string_view one = rest.substr(0, next);
    const size_t args = one.find(kMistralArgs);
    if (args == std::string_view::npos) return Content(text);
    json call = {{"name", std::string(Trim(one.substr(0, args)))}};
    std::optional<json> arguments = ParseJson(Trim(one.substr(args + kMistralArgs.size())));
    if (!arguments.has_value()) return Content(text);
    call["arguments"] = std::move(*arguments);
    std::optional<ToolCall> read = ReadCall(call, tools);
    if (!read.has_value()) return Content(text);
    out.calls.push_back(std::move(*read));
    rest = next == std::string_view::npos ? std::string_view()
                                          : Trim(rest.substr(next + kMistralMarker.size()));
  }
  return out;
}

// Keywords whose value maps names to schemas: a member there named like a keyword ("$ref",
// "enum") is a name, and its value a schema.
constexpr std::string_view kSchemaMaps[] = {"properties", "patternProperties", "$defs",
                                            "definitions", "dependentSchemas"};
// Keywords whose value is data, not a schema: a "$ref" member inside is part of a value.
constexpr std::string_view kDataKeywords[] = {"const", "enum", "default", "examples"};

bool IsOneOf(std::string_view key, const auto& keywords) {
  return std::find(std::begin(keywords), std::end(keywords), key) != std::end(keywords);
}

// A tool's parameters schema is written against its own root ("#", "#/$defs/s"), but the
// grammar resolves every reference against the root of the whole constraint it is embedded
// in: each local reference gets `base`, the JSON pointer of where the parameters now sit.
// Every tool is rebased to its own place, so tools whose $defs share names do not clash.
void RebaseRefs(json& schema, const std::string& base) {
  if (schema.is_array()) {
    for (json& item : schema) RebaseRefs(item, base);
    return;
  }
  if (!schema.is_object()) return;
  for (auto member : schema.items()) {
    const std::string& key = member.key();
    json& value = member.value();
    if (key == "$ref") {
      if (value.is_string()) {
        const std::string& ref = value.get_ref<const std::string&>();
        if (ref == "#" || StartsWith(ref, "#/")) value = "#" + base + ref.substr(1);
      }
    } else if (IsOneOf(key, kSchemaMaps) && value.is_object()) {
      for (auto named : value.items()) RebaseRefs(named.value(), base);
    } else if (!IsOneOf(key, kDataKeywords)) {
      RebaseRefs(value, base);  // a subschema, a list of them, or an unknown keyword's value
    }
  }
}

// The call object a tool's constraint allows: {"name": const, "<args_key>": its parameters}.
json CallSchema(const FunctionTool& tool, const char* args_key) {
  json parameters = json{{"type", "object"}};
  if (!tool.parameters.empty()) {
    std::optional<json> given = ParseJson(tool.parameters);
    if (given.has_value()) parameters = std::move(*given);
  }
  return json{{"type", "object"},
              {"properties", {{"name", {{"const", tool.name}}}, {args_key, std::move(parameters)}}},
              {"required", {"name", args_key}},
              {"additionalProperties", false}};
}

}  // namespace

std::string_view ToolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kLlama3:
      return "llama3_json";
    case ToolCallFormat::kMistral:
      return "mistral";
    case ToolCallFormat::kJson:
      return "json";
    case ToolCallFormat::kGeneric:
      return "generic";
  }
  return "json";
}

ToolCallFormat DetectToolCallFormat(std::string_view source) {
  if (source.find(kHermesOpen) != std::string_view::npos) return ToolCallFormat::kHermes;
  if (source.find(kMistralMarker) != std::string_view::npos) return ToolCallFormat::kMistral;
  if (source.find(kPythonTag) != std::string_view::npos ||
      source.find("ipython") != std::string_view::npos) {
    return ToolCallFormat::kLlama3;
  }
  return ToolCallFormat::kJson;
}

ParsedToolCalls ParseToolCalls(ToolCallFormat format, std::string_view text,
                               const std::vector<FunctionTool>& tools) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return ParseHermes(text, tools);
    case ToolCallFormat::kMistral:
      return ParseMistral(text, tools);
    case ToolCallFormat::kLlama3:
    case ToolCallFormat::kJson:
      return ParseBareJson(text, tools);
    case ToolCallFormat::kGeneric:
      return ParseGenericToolOutput(text, tools);
  }
  return Content(text);
}

grammar::OutputConstraint ToolCallConstraint(ToolCallFormat format,
                                             const std::vector<FunctionTool>& tools,
                                             const ToolChoice& choice) {
  const char* args_key = format == ToolCallFormat::kLlama3 ? "parameters" : "arguments";
  json options = json::array();
  for (const FunctionTool& tool : tools) {
    if (choice.kind == ToolChoiceKind::kNamed && tool.name != choice.name) continue;
    options.push_back(CallSchema(tool, args_key));
  }
  const size_t count = options.size();
  json call = count == 1 ? std::move(options[0]) : json{{"anyOf", std::move(options)}};
  grammar::OutputConstraint constraint;
  constraint.kind = grammar::OutputConstraint::Kind::kJsonSchema;
  switch (format) {
    case ToolCallFormat::kHermes:
      constraint.prefix = std::string(kHermesOpen) + "\n";
      constraint.suffix = "\n" + std::string(kHermesClose);
      break;
    case ToolCallFormat::kMistral:
      constraint.prefix = std::string(kMistralMarker);
      call = json{{"type", "array"}, {"items", std::move(call)}, {"minItems", 1}, {"maxItems", 1}};
      break;
    case ToolCallFormat::kLlama3:
    case ToolCallFormat::kJson:
    case ToolCallFormat::kGeneric:  // GenericToolConstraint frames the call
      break;
  }
  // Where each tool's parameters ended up, for their references.
  const std::string wrapper = format == ToolCallFormat::kMistral ? "/items" : "";
  for (size_t k = 0; k < count; ++k) {
    const std::string base =
        wrapper + (count == 1 ? "" : "/anyOf/" + std::to_string(k)) + "/properties/" + args_key;
    RebaseRefs(call.at(json::json_pointer(base)), base);
  }
  constraint.schema = call.dump(-1, ' ', false, json::error_handler_t::replace);
  return constraint;
}

grammar::OutputConstraint GenericToolConstraint(const std::vector<FunctionTool>& tools,
                                                const ToolChoice& choice, bool parallel) {
  if (choice.kind != ToolChoiceKind::kAuto) {
    std::vector<const FunctionTool*> allowed;
    for (const FunctionTool& tool : tools) {
      if (choice.kind != ToolChoiceKind::kNamed || tool.name == choice.name)
        allowed.push_back(&tool);
    }
    if (allowed.size() == 1) {
      // The name is known: all but the arguments is literal text, so the model writes only
      // the arguments (their references resolve at the root, where the parameters now are).
      const FunctionTool& tool = *allowed.front();
      grammar::OutputConstraint constraint;
      constraint.kind = grammar::OutputConstraint::Kind::kJsonSchema;
      std::optional<json> parameters;
      if (!tool.parameters.empty()) parameters = ParseJson(tool.parameters);
      if (!parameters.has_value() || !parameters->is_object()) {
        parameters = json{{"type", "object"}};
      }
      (*parameters)[grammar::kCompactKeyword] = true;
      constraint.schema = parameters->dump(-1, ' ', false, json::error_handler_t::replace);
      constraint.prefix = "{\"tool_calls\":[{\"name\":" +
                          json(tool.name).dump(-1, ' ', false, json::error_handler_t::replace) +
                          ",\"arguments\":";
      constraint.suffix = "}]}";
      return constraint;
    }
    // One call to one of several tools, the list's frame literal.
    grammar::OutputConstraint constraint = ToolCallConstraint(ToolCallFormat::kJson, tools, choice);
    json call = json::parse(constraint.schema);
    call[grammar::kCompactKeyword] = true;
    constraint.schema = call.dump(-1, ' ', false, json::error_handler_t::replace);
    constraint.prefix = "{\"tool_calls\":[";
    constraint.suffix = "]}";
    return constraint;
  }
  const grammar::OutputConstraint one =
      ToolCallConstraint(ToolCallFormat::kJson, tools, ToolChoice{ToolChoiceKind::kRequired, ""});
  json call = json::parse(one.schema);
  const std::string base = "/anyOf/0/properties/tool_calls/items";
  RebaseRefs(call, base);
  json calls = {{"type", "array"}, {"items", std::move(call)}, {"minItems", 1}};
  if (!parallel) calls["maxItems"] = 1;
  json schema = {{grammar::kCompactKeyword, true},
                 {"anyOf",
                  {{{"type", "object"},
                    {"properties", {{"tool_calls", std::move(calls)}}},
                    {"required", {"tool_calls"}},
                    {"additionalProperties", false}},
                   {{"type", "object"},
                    {"properties", {{"response", {{"type", "string"}}}}},
                    {"required", {"response"}},
                    {"additionalProperties", false}}}}};
  grammar::OutputConstraint constraint;
  constraint.kind = grammar::OutputConstraint::Kind::kJsonSchema;
  constraint.schema = schema.dump(-1, ' ', false, json::error_handler_t::replace);
  return constraint;
}

std::string ToolsJsonForTemplate(const std::vector<FunctionTool>& tools) {
  json out = json::array();
  for (const FunctionTool& tool : tools) {
    json function = {{"name", tool.name}};
    if (!tool.description.empty()) function["description"] = tool.description;
    if (!tool.parameters.empty()) {
      std::optional<json> parameters = ParseJson(tool.parameters);
      if (parameters.has_value()) function["parameters"] = std::move(*parameters);
    }
    out.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

ToolCallSplitter::ToolCallSplitter(ToolCallFormat format) : format_(format) {
  if (format == ToolCallFormat::kGeneric) generic_ = std::make_unique<GenericOutputReader>();
}
ToolCallSplitter::~ToolCallSplitter() = default;
ToolCallSplitter::ToolCallSplitter(ToolCallSplitter&&) noexcept = default;
ToolCallSplitter& ToolCallSplitter::operator=(ToolCallSplitter&&) noexcept = default;

std::string ToolCallSplitter::Push(std::string_view piece) {
  if (generic_ != nullptr) {
    // The response's text as it is decoded; a tool_calls answer stays with the reader.
    std::string out = generic_->Push(piece);
    text_ += piece;
    released_ = text_.size();
    in_call_ = generic_->holding();
    return out;
  }
  text_ += piece;
  if (in_call_) return "";
  size_t until = text_.size();
  switch (format_) {
    case ToolCallFormat::kHermes:
    case ToolCallFormat::kMistral: {
      if (format_ == ToolCallFormat::kMistral && !plain_) {
        // A bare list at the start is a call whose control-token marker was left out.
        const size_t first = text_.find_first_not_of(" \n\t\r");
        if (first == std::string::npos) return "";
        if (text_[first] == '[') {
          in_call_ = true;
          return "";
        }
        plain_ = true;
      }
      const std::string_view marker =
          format_ == ToolCallFormat::kHermes ? kHermesOpen : kMistralMarker;
      const size_t found = text_.find(marker, released_);
      if (found != std::string::npos) {
        until = found;
        in_call_ = true;
        break;
      }
      // Hold back a tail that may be the marker's beginning.
      for (size_t k = std::min(marker.size() - 1, text_.size() - released_); k > 0; --k) {
        if (std::string_view(text_).substr(text_.size() - k) == marker.substr(0, k)) {
          until = text_.size() - k;
          break;
        }
      }
      break;
    }
    case ToolCallFormat::kGeneric:  // handled by generic_ above
      break;
    case ToolCallFormat::kLlama3:
    case ToolCallFormat::kJson: {
      if (plain_) break;
      const size_t first = text_.find_first_not_of(" \n\t\r");
      if (first == std::string::npos) return "";  // only whitespace so far: undecided
      const std::string_view rest = std::string_view(text_).substr(first);
      if (format_ == ToolCallFormat::kLlama3 && rest.size() < kPythonTag.size() &&
          StartsWith(kPythonTag, rest)) {
        return "";  // may still become <|python_tag|>: undecided
      }
      if (rest.front() == '{' || rest.front() == '[' || StartsWith(rest, "```") ||
          (format_ == ToolCallFormat::kLlama3 && StartsWith(rest, kPythonTag))) {
        in_call_ = true;
        return "";
      }
      if (rest.size() < 3 && rest.front() == '`') return "";  // may become a fence
      plain_ = true;
      break;
    }
  }
  std::string out = text_.substr(released_, until - released_);
  released_ = until;
  return out;
}

ParsedToolCalls ToolCallSplitter::Finish(const std::vector<FunctionTool>& tools) {
  if (generic_ != nullptr) {
    // A response was released as it came (an escape cut short by the end is dropped).
    if (!generic_->holding()) return {};
    return ParseGenericToolOutput(generic_->text(), tools);
  }
  const std::string_view held = std::string_view(text_).substr(released_);
  released_ = text_.size();
  if (!in_call_) return Content(held);
  return ParseToolCalls(format_, held, tools);
}

}  // namespace pier::api

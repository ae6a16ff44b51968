#include "api/openai/openai_request.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "api/json_shape.h"
#include "api/request_json.h"
#include "engine/sampling/sampling_params.h"
#include "grammar/constraint.h"
#include "serving/request_policy.h"

namespace pier::api {
namespace {

// Objects keep their members in the body's order: a response_format schema's properties are
// generated in the order the client wrote them.
using json = nlohmann::ordered_json;
using Err = std::optional<OpenAiError>;

// Returns from the enclosing function when `expr` yields an error.
#define PIER_OPENAI_TRY(expr)       \
  do {                              \
    if (Err pier_err_ = (expr)) {   \
      return *std::move(pier_err_); \
    }                               \
  } while (false)

using request_json::Bad;
using request_json::Field;
using request_json::NotSupported;
using request_json::Show;

std::string TypeName(const json& value) {
  if (value.is_number_integer()) return "an integer";
  if (value.is_number()) return "a number";
  if (value.is_string()) return "a string";
  if (value.is_boolean()) return "a boolean";
  if (value.is_array()) return "an array";
  if (value.is_object()) return "an object";
  return "null";
}

OpenAiError WrongType(const std::string& name, std::string_view expected, const json& value) {
  return Bad(name, name + " must be " + std::string(expected) + ", got " + TypeName(value));
}

Err ReadBool(const json& body, const std::string& name, bool* out) {
  const json* v = Field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) return WrongType(name, "a boolean", *v);
  *out = v->get<bool>();
  return std::nullopt;
}

// An integer in [lo, hi] (JSON integers only: 2.0 is a number, not an integer).
Err ReadIntValue(const json& v, const std::string& name, int64_t lo, int64_t hi, int64_t* out) {
  if (!v.is_number_integer()) return WrongType(name, "an integer", v);
  const bool too_big =
      v.is_number_unsigned() &&
      v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  const int64_t x = too_big ? std::numeric_limits<int64_t>::max() : v.get<int64_t>();
  if (too_big || x < lo || x > hi) {
    return Bad(name, name + " must be between " + std::to_string(lo) + " and " +
                         std::to_string(hi) + ", got " + Show(v));
  }
  *out = x;
  return std::nullopt;
}

Err ReadInt(const json& body, const std::string& name, int64_t lo, int64_t hi,
            std::optional<int64_t>* out) {
  const json* v = Field(body, name);
  if (v == nullptr) return std::nullopt;
  int64_t x = 0;
  PIER_OPENAI_TRY(ReadIntValue(*v, name, lo, hi, &x));
  *out = x;
  return std::nullopt;
}

// A finite number in [lo, hi], or (lo, hi] when lo_open; `range` is how the message names it.
Err ReadFloat(const json& body, const std::string& name, double lo, double hi, bool lo_open,
              std::string_view range, float* out) {
  const json* v = Field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) return WrongType(name, "a number", *v);
  const double x = v->get<double>();
  const bool in_range = std::isfinite(x) && (lo_open ? x > lo : x >= lo) && x <= hi;
  if (!in_range) {
    return Bad(name, name + " must be " + std::string(range) + ", got " + Show(*v));
  }
  *out = static_cast<float>(x);
  return std::nullopt;
}

Err ReadStop(const json& body, std::vector<std::string>* out) {
  const json* v = Field(body, "stop");
  if (v == nullptr) return std::nullopt;
  if (v->is_string()) {
    if (v->get_ref<const std::string&>().empty()) return Bad("stop", "stop must not be empty");
    out->push_back(v->get<std::string>());
    return std::nullopt;
  }
  if (!v->is_array()) return WrongType("stop", "a string or an array of strings", *v);
  if (v->size() > 4) {
    return Bad("stop", "stop may list at most 4 strings, got " + std::to_string(v->size()));
  }
  for (const json& s : *v) {
    if (!s.is_string()) return WrongType("stop", "a string or an array of strings", s);
    if (s.get_ref<const std::string&>().empty()) {
      return Bad("stop", "stop strings must not be empty");
    }
    out->push_back(s.get<std::string>());
  }
  return std::nullopt;
}

Err ReadSeed(const json& body, std::optional<uint64_t>* out) {
  const json* v = Field(body, "seed");
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer()) return WrongType("seed", "an integer", *v);
  // Negative seeds are accepted as OpenAI does; they wrap to the same 64 bits.
  *out = v->is_number_unsigned() ? v->get<uint64_t>() : static_cast<uint64_t>(v->get<int64_t>());
  return std::nullopt;
}

// {"50256": -100, "15339": 5.5}: token ids as decimal strings to biases in [-100, 100]
// (OpenAI refuses values outside that range, and so does Pier).
Err ReadLogitBias(const json& body, std::vector<std::pair<int32_t, float>>* out) {
  const json* v = Field(body, "logit_bias");
  if (v == nullptr) return std::nullopt;
  if (!v->is_object()) return WrongType("logit_bias", "an object of token id to bias", *v);
  constexpr size_t kMaxEntries = 1024;
  if (v->size() > kMaxEntries) {
    return Bad("logit_bias", "logit_bias may hold at most " + std::to_string(kMaxEntries) +
                                 " tokens, got " + std::to_string(v->size()));
  }
  for (const auto& [key, value] : v->items()) {
    int64_t id = -1;
    auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (key.empty() || ec != std::errc() || end != key.data() + key.size() || id < 0 ||
        id > std::numeric_limits<int32_t>::max()) {
      return Bad("logit_bias",
                 "logit_bias keys must be token ids (non-negative integers as "
                 "strings), got " +
                     Show(json(key.substr(0, 40))));
    }
    if (!value.is_number()) return WrongType("logit_bias", "a number for each token", value);
    const double bias = value.get<double>();
    if (!(std::isfinite(bias) && bias >= -100 && bias <= 100)) {
      return Bad("logit_bias", "logit_bias values must be between -100 and 100, got " +
                                   Show(value) + " for token " + key);
    }
    out->emplace_back(static_cast<int32_t>(id), static_cast<float>(bias));
  }
  return std::nullopt;
}

Err ReadPriority(const json& body, std::optional<engine::Priority>* out) {
  const json* v = Field(body, "priority");
  if (v == nullptr) return std::nullopt;
  std::optional<engine::Priority> p;
  if (v->is_string()) {
    p = serving::ParsePriorityValue(v->get_ref<const std::string&>());
  } else if (v->is_number_integer()) {
    int64_t x = 0;
    if (!ReadIntValue(*v, "priority", 0, 3, &x).has_value()) {
      p = static_cast<engine::Priority>(x);
    }
  } else {
    return WrongType("priority", "a string or an integer", *v);
  }
  if (!p.has_value()) {
    return Bad("priority", "priority must be critical, high, normal, low or 0..3, got " + Show(*v));
  }
  *out = p;
  return std::nullopt;
}

// Fields refused on both routes when given a meaningful value.
Err CheckUnsupported(const json& body) {
  if (const json* v = Field(body, "functions"); v != nullptr && !(v->is_array() && v->empty())) {
    return NotSupported("functions", "functions (the legacy form of tools)");
  }
  if (const json* v = Field(body, "function_call"); v != nullptr && *v != "none") {
    return NotSupported("function_call", "function_call");
  }
  if (Field(body, "audio") != nullptr) return NotSupported("audio", "audio");
  if (const json* v = Field(body, "modalities"); v != nullptr) {
    if (!v->is_array()) return WrongType("modalities", "an array of strings", *v);
    for (const json& m : *v) {
      if (!m.is_string()) return WrongType("modalities", "an array of strings", m);
      if (m != "text") return NotSupported("modalities", "modalities other than text");
    }
  }
  return std::nullopt;
}

// response_format: text (unconstrained), json_object (any JSON object) or json_schema
// ({"json_schema": {"name", "description", "schema", "strict"}}: a value valid against the
// schema). The constraint is compiled here once so that a schema Pier cannot enforce is a 400
// naming the keyword, never an unconstrained answer; `strict` is accepted either way because
// Pier always enforces the schema.
Err ReadResponseFormat(const json& body, grammar::OutputConstraint* out) {
  const json* v = Field(body, "response_format");
  if (v == nullptr) return std::nullopt;
  if (!v->is_object()) return WrongType("response_format", "an object", *v);
  const json* type = Field(*v, "type");
  if (type == nullptr || !type->is_string()) {
    return Bad("response_format", "response_format.type must be a string");
  }
  const std::string& kind = type->get_ref<const std::string&>();
  if (kind == "text") return std::nullopt;
  if (kind == "json_object") {
    out->kind = grammar::OutputConstraint::Kind::kJsonObject;
  } else if (kind == "json_schema") {
    const json* spec = Field(*v, "json_schema");
    if (spec == nullptr || !spec->is_object()) {
      return Bad("response_format",
                 "response_format.json_schema must be an object with the schema under \"schema\"");
    }
    for (const char* name : {"name", "description"}) {
      if (const json* f = Field(*spec, name); f != nullptr && !f->is_string()) {
        return Bad("response_format",
                   std::string("response_format.json_schema.") + name + " must be a string");
      }
    }
    if (const json* strict = Field(*spec, "strict"); strict != nullptr && !strict->is_boolean()) {
      return Bad("response_format", "response_format.json_schema.strict must be a boolean");
    }
    const json* schema = Field(*spec, "schema");
    if (schema == nullptr) {
      return Bad("response_format", "response_format.json_schema.schema is required");
    }
    if (!schema->is_object() && !schema->is_boolean()) {
      return Bad("response_format",
                 "response_format.json_schema.schema must be an object, got " + TypeName(*schema));
    }
    out->kind = grammar::OutputConstraint::Kind::kJsonSchema;
    out->schema = schema->dump(-1, ' ', false, json::error_handler_t::replace);
  } else {
    return Bad("response_format",
               "response_format.type must be text, json_object or json_schema, got " + Show(*type));
  }
  if (Status valid = grammar::CheckConstraint(*out); !valid.ok()) {
    OpenAiError error = Bad("response_format", "response_format: " + valid.message());
    error.code = "invalid_schema";
    return error;
  }
  return std::nullopt;
}

// Fields both routes share.
Err ReadCommon(const json& body, const OpenAiRequestLimits& limits, OpenAiRequest* r) {
  // Absent: the server's default model (the route decides).
  if (const json* model = Field(body, "model"); model != nullptr) {
    if (!model->is_string()) return WrongType("model", "a string", *model);
    r->model = model->get<std::string>();
    if (r->model.empty()) return Bad("model", "model must not be empty");
  }

  PIER_OPENAI_TRY(CheckUnsupported(body));
  PIER_OPENAI_TRY(ReadResponseFormat(body, &r->constraint));
  PIER_OPENAI_TRY(ReadBool(body, "stream", &r->stream));
  if (const json* options = Field(body, "stream_options"); options != nullptr) {
    if (!options->is_object()) return WrongType("stream_options", "an object", *options);
    if (!r->stream) {
      return Bad("stream_options", "stream_options is only allowed when stream is true");
    }
    if (const json* usage = Field(*options, "include_usage"); usage != nullptr) {
      if (!usage->is_boolean()) {
        return WrongType("stream_options", "an object whose include_usage is a boolean", *usage);
      }
      r->include_usage = usage->get<bool>();
    }
  }

  std::optional<int64_t> n;
  PIER_OPENAI_TRY(ReadInt(body, "n", 1, limits.max_n, &n));
  r->n = static_cast<int32_t>(n.value_or(1));

  constexpr int64_t kMaxTokens = std::numeric_limits<int32_t>::max();
  std::optional<int64_t> max_tokens, max_completion_tokens;
  PIER_OPENAI_TRY(ReadInt(body, "max_tokens", 1, kMaxTokens, &max_tokens));
  PIER_OPENAI_TRY(ReadInt(body, "max_completion_tokens", 1, kMaxTokens, &max_completion_tokens));
  r->max_tokens = max_completion_tokens.has_value() ? max_completion_tokens : max_tokens;
  if (max_completion_tokens.has_value()) r->max_tokens_param = "max_completion_tokens";

  PIER_OPENAI_TRY(ReadFloat(body, "temperature", 0, 2, false, "between 0 and 2", &r->temperature));
  PIER_OPENAI_TRY(ReadFloat(body, "top_p", 0, 1, true, "in (0, 1]", &r->top_p));
  std::optional<int64_t> top_k;
  PIER_OPENAI_TRY(ReadInt(body, "top_k", -1, std::numeric_limits<int32_t>::max(), &top_k));
  r->top_k = top_k.has_value() && *top_k > 0 ? static_cast<int32_t>(*top_k) : 0;
  PIER_OPENAI_TRY(ReadFloat(body, "min_p", 0, 1, false, "between 0 and 1", &r->min_p));
  PIER_OPENAI_TRY(
      ReadFloat(body, "presence_penalty", -2, 2, false, "between -2 and 2", &r->presence_penalty));
  PIER_OPENAI_TRY(ReadFloat(body, "frequency_penalty", -2, 2, false, "between -2 and 2",
                            &r->frequency_penalty));
  PIER_OPENAI_TRY(ReadFloat(body, "repetition_penalty", 0, std::numeric_limits<float>::max(), true,
                            "positive", &r->repetition_penalty));
  PIER_OPENAI_TRY(ReadStop(body, &r->stop));
  PIER_OPENAI_TRY(ReadSeed(body, &r->seed));
  PIER_OPENAI_TRY(ReadLogitBias(body, &r->logit_bias));
  if (const json* user = Field(body, "user"); user != nullptr && !user->is_string()) {
    return WrongType("user", "a string", *user);
  }
  PIER_OPENAI_TRY(ReadBool(body, "ignore_eos", &r->ignore_eos));
  PIER_OPENAI_TRY(ReadPriority(body, &r->priority));
  PIER_OPENAI_TRY(ReadInt(body, "deadline_ms", 1, 3'600'000, &r->deadline_ms));
  PIER_OPENAI_TRY(ReadBool(body, "fallback", &r->fallback));
  return std::nullopt;
}

bool IsFunctionName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

// An assistant message's tool_calls: [{"id", "type": "function", "function": {"name",
// "arguments"}}], arguments as JSON text (OpenAI's form) or an object.
Err ReadMessageToolCalls(const json& calls, const std::string& at, ChatMessage* out) {
  if (!calls.is_array()) return Bad("messages", at + ".tool_calls must be an array");
  if (!calls.empty() && out->role != "assistant") {
    return Bad("messages", at + ".tool_calls is only allowed in assistant messages");
  }
  for (size_t j = 0; j < calls.size(); ++j) {
    const std::string where = at + ".tool_calls[" + std::to_string(j) + "]";
    const json& c = calls[j];
    const json* id = c.is_object() ? Field(c, "id") : nullptr;
    const json* function = c.is_object() ? Field(c, "function") : nullptr;
    if (id == nullptr || !id->is_string() || function == nullptr || !function->is_object()) {
      return Bad("messages", where + " must be an object with a string id and a function");
    }
    if (const json* type = Field(c, "type"); type != nullptr && *type != "function") {
      return Bad("messages", where + ".type must be function, got " + Show(*type));
    }
    const json* name = Field(*function, "name");
    if (name == nullptr || !name->is_string()) {
      return Bad("messages", where + ".function.name must be a string");
    }
    ToolCall call{id->get<std::string>(), name->get<std::string>(), "{}"};
    if (const json* args = Field(*function, "arguments"); args != nullptr) {
      json parsed = *args;
      if (args->is_string()) {
        const std::string& text = args->get_ref<const std::string&>();
        parsed = json::parse(text.begin(), text.end(), nullptr, false);
      }
      if (!parsed.is_object()) {
        return Bad("messages", where + ".function.arguments must be a JSON object (as text)");
      }
      call.arguments = parsed.dump(-1, ' ', false, json::error_handler_t::replace);
    }
    out->tool_calls.push_back(std::move(call));
  }
  return std::nullopt;
}

// tools: [{"type": "function", "function": {"name", "description"?, "parameters"?,
// "strict"?}}]; tool_choice: "none" | "auto" | "required" | {"type": "function", "function":
// {"name"}}; parallel_tool_calls. A tool's parameters must be an object; under required or a
// named choice the call's constraint must compile (it is what decoding enforces).
Err ReadTools(const json& body, OpenAiRequest* r) {
  constexpr size_t kMaxTools = 128;
  if (const json* tools = Field(body, "tools"); tools != nullptr) {
    if (!tools->is_array()) return WrongType("tools", "an array", *tools);
    if (tools->size() > kMaxTools) {
      return Bad("tools", "tools may list at most " + std::to_string(kMaxTools) +
                              " functions, got " + std::to_string(tools->size()));
    }
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string at = "tools[" + std::to_string(i) + "]";
      const json& t = (*tools)[i];
      const json* type = t.is_object() ? Field(t, "type") : nullptr;
      if (type == nullptr || *type != "function") {
        return Bad("tools", at + ".type must be function" +
                                (type != nullptr ? ", got " + Show(*type) : std::string()));
      }
      const json* function = Field(t, "function");
      if (function == nullptr || !function->is_object()) {
        return Bad("tools", at + ".function must be an object");
      }
      const json* name = Field(*function, "name");
      if (name == nullptr || !name->is_string() || !IsFunctionName(name->get<std::string>())) {
        return Bad("tools", at + ".function.name must be 1 to 64 letters, digits, _ or -");
      }
      FunctionTool tool;
      tool.name = name->get<std::string>();
      for (const FunctionTool& other : r->tools) {
        if (other.name == tool.name) {
          return Bad("tools", at + ": the function name " + Show(*name) + " is used twice");
        }
      }
      if (const json* d = Field(*function, "description"); d != nullptr) {
        if (!d->is_string()) return Bad("tools", at + ".function.description must be a string");
        tool.description = d->get<std::string>();
      }
      if (const json* p = Field(*function, "parameters"); p != nullptr) {
        if (!p->is_object()) {
          return Bad("tools",
                     at + ".function.parameters must be a JSON Schema object, got " + TypeName(*p));
        }
        tool.parameters = p->dump(-1, ' ', false, json::error_handler_t::replace);
        // Not a valid schema at all: refused whatever the choice. Valid but beyond what Pier
        // enforces (UNSUPPORTED): fine under auto, refused below when a call is forced.
        const Result<grammar::ExprPtr> schema =
            grammar::ConstraintExpr(grammar::OutputConstraint::JsonSchema(tool.parameters));
        if (!schema.ok() && schema.status().code() == StatusCode::kInvalidArgument) {
          return Bad("tools", at + ".function.parameters is not a valid JSON Schema: " +
                                  schema.status().message());
        }
      }
      if (const json* strict = Field(*function, "strict");
          strict != nullptr && !strict->is_boolean()) {
        return Bad("tools", at + ".function.strict must be a boolean");
      }
      r->tools.push_back(std::move(tool));
    }
  }
  r->tool_choice = {r->tools.empty() ? ToolChoiceKind::kNone : ToolChoiceKind::kAuto, ""};
  if (const json* choice = Field(body, "tool_choice"); choice != nullptr) {
    if (choice->is_string()) {
      const std::string& kind = choice->get_ref<const std::string&>();
      if (kind == "none") {
        r->tool_choice.kind = ToolChoiceKind::kNone;
      } else if (kind == "auto") {
        r->tool_choice.kind = ToolChoiceKind::kAuto;
      } else if (kind == "required") {
        r->tool_choice.kind = ToolChoiceKind::kRequired;
      } else {
        return Bad("tool_choice",
                   "tool_choice must be none, auto, required or a function, got " + Show(*choice));
      }
    } else if (choice->is_object()) {
      const json* function = Field(*choice, "function");
      const json* name =
          function != nullptr && function->is_object() ? Field(*function, "name") : nullptr;
      if (name == nullptr || !name->is_string()) {
        return Bad("tool_choice",
                   "tool_choice must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
      }
      r->tool_choice = {ToolChoiceKind::kNamed, name->get<std::string>()};
      if (!std::any_of(r->tools.begin(), r->tools.end(),
                       [&](const FunctionTool& t) { return t.name == r->tool_choice.name; })) {
        return Bad("tool_choice", "tool_choice names the function " + Show(*name) +
                                      ", which is not among the tools");
      }
    } else {
      return WrongType("tool_choice", "a string or an object", *choice);
    }
    if (r->tools.empty() && r->tool_choice.kind != ToolChoiceKind::kNone) {
      return Bad("tool_choice", "tool_choice " + Show(*choice) + " needs tools");
    }
  }
  PIER_OPENAI_TRY(ReadBool(body, "parallel_tool_calls", &r->parallel_tool_calls));
  const bool forced = r->tool_choice.kind == ToolChoiceKind::kRequired ||
                      r->tool_choice.kind == ToolChoiceKind::kNamed;
  if (forced && r->constraint.active()) {
    return Bad("tool_choice",
               "tool_choice required or a named function cannot be combined with "
               "response_format json_object or json_schema");
  }
  if (forced) {
    // The family does not change what is enforceable: check with the plain JSON form.
    const grammar::OutputConstraint c =
        ToolCallConstraint(ToolCallFormat::kJson, r->tools, r->tool_choice);
    if (Status valid = grammar::CheckConstraint(c); !valid.ok()) {
      return Bad("tools", "a tool's parameters cannot be enforced: " + valid.message());
    }
  }
  return std::nullopt;
}

// Every tool message answers a call an earlier assistant message made.
Err CheckToolCallIds(const std::vector<ChatMessage>& messages) {
  std::vector<std::string> ids;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    for (const ToolCall& call : m.tool_calls) ids.push_back(call.id);
    if (m.role != "tool") continue;
    if (std::find(ids.begin(), ids.end(), *m.tool_call_id) == ids.end()) {
      return Bad("messages", "messages[" + std::to_string(i) + "].tool_call_id " +
                                 Show(json(*m.tool_call_id)) +
                                 " does not match a tool call of an earlier assistant message");
    }
  }
  return std::nullopt;
}

bool IsRole(const std::string& role) {
  return role == "system" || role == "user" || role == "assistant" || role == "tool" ||
         role == "developer";
}

Err ReadMessage(const json& m, size_t index, ChatMessage* out) {
  const std::string at = "messages[" + std::to_string(index) + "]";
  if (!m.is_object()) return Bad("messages", at + " must be an object, got " + TypeName(m));
  const json* role = Field(m, "role");
  if (role == nullptr || !role->is_string()) {
    return Bad("messages", at + ".role must be a string");
  }
  out->role = role->get<std::string>();
  if (!IsRole(out->role)) {
    return Bad("messages",
               at + ".role must be system, user, assistant, tool or developer, got " + Show(*role));
  }
  if (const json* calls = Field(m, "tool_calls"); calls != nullptr) {
    PIER_OPENAI_TRY(ReadMessageToolCalls(*calls, at, out));
  }
  if (const json* id = Field(m, "tool_call_id"); id != nullptr) {
    if (!id->is_string()) return Bad("messages", at + ".tool_call_id must be a string");
    out->tool_call_id = id->get<std::string>();
  }
  if (out->role == "tool" && !out->tool_call_id.has_value()) {
    return Bad("messages", at + ".tool_call_id is required for a tool message");
  }
  if (const json* name = Field(m, "name"); name != nullptr) {
    if (!name->is_string()) return Bad("messages", at + ".name must be a string");
    out->name = name->get<std::string>();
  }
  const json* content = Field(m, "content");
  if (content == nullptr) {
    if (out->role == "assistant") return std::nullopt;  // e.g. a turn that only called tools
    return Bad("messages", at + ".content is required");
  }
  if (content->is_string()) {
    out->content = content->get<std::string>();
    return std::nullopt;
  }
  if (!content->is_array()) {
    return Bad("messages", at + ".content must be a string or an array of content parts");
  }
  bool first = true;
  for (const json& part : *content) {
    const json* type = part.is_object() ? Field(part, "type") : nullptr;
    if (type == nullptr || !type->is_string()) {
      return Bad("messages", at + ".content parts must be objects with a string type");
    }
    if (*type != "text") {
      return Bad("messages", "unsupported content part type " +
                                 type->get<std::string>().substr(0, 40) + " in " + at);
    }
    const json* text = Field(part, "text");
    if (text == nullptr || !text->is_string()) {
      return Bad("messages", at + ".content text parts need a string text");
    }
    if (!first) out->content += "\n";
    out->content += text->get_ref<const std::string&>();
    first = false;
  }
  return std::nullopt;
}

Err ReadTokenList(const json& list, const std::string& at, std::vector<int32_t>* out) {
  if (list.empty()) return Bad("prompt", at + " must not be empty");
  for (const json& t : list) {
    int64_t id = 0;
    if (!t.is_number_integer()) {
      return Bad("prompt", at + " must hold token ids (integers), got " + TypeName(t));
    }
    if (ReadIntValue(t, "prompt", 0, std::numeric_limits<int32_t>::max(), &id).has_value()) {
      return Bad("prompt", at + " holds a token id out of range: " + Show(t));
    }
    out->push_back(static_cast<int32_t>(id));
  }
  return std::nullopt;
}

CompletionPrompt TextPrompt(std::string text) {
  CompletionPrompt p;
  p.text = std::move(text);
  return p;
}

CompletionPrompt TokenPrompt() {
  CompletionPrompt p;
  p.is_tokens = true;
  return p;
}

Err ReadPrompts(const json& body, std::vector<CompletionPrompt>* out) {
  const json* v = Field(body, "prompt");
  if (v == nullptr) return Bad("prompt", "prompt is required");
  if (v->is_string()) {
    out->push_back(TextPrompt(v->get<std::string>()));
    return std::nullopt;
  }
  constexpr std::string_view kForms =
      "a string, an array of strings, an array of token ids or an array of token-id arrays";
  if (!v->is_array()) return WrongType("prompt", kForms, *v);
  if (v->empty()) return Bad("prompt", "prompt must not be an empty array");
  const json& first = v->front();
  if (first.is_number_integer()) {
    CompletionPrompt p = TokenPrompt();
    PIER_OPENAI_TRY(ReadTokenList(*v, "prompt", &p.tokens));
    out->push_back(std::move(p));
    return std::nullopt;
  }
  for (size_t i = 0; i < v->size(); ++i) {
    const json& item = (*v)[i];
    const std::string at = "prompt[" + std::to_string(i) + "]";
    if (first.is_string() && item.is_string()) {
      out->push_back(TextPrompt(item.get<std::string>()));
    } else if (first.is_array() && item.is_array()) {
      CompletionPrompt p = TokenPrompt();
      PIER_OPENAI_TRY(ReadTokenList(item, at, &p.tokens));
      out->push_back(std::move(p));
    } else {
      return Bad("prompt",
                 "prompt must be " + std::string(kForms) + "; " + at + " is " + TypeName(item));
    }
  }
  return std::nullopt;
}

// The body as a JSON object, or the error to answer.
std::variant<json, OpenAiError> ParseBody(std::string_view body) {
  return request_json::ParseObjectBody(body);
}

OpenAiParseResult ParseChat(const json& body, const OpenAiRequestLimits& limits) {
  OpenAiRequest r;
  r.endpoint = OpenAiEndpoint::kChatCompletions;
  PIER_OPENAI_TRY(ReadCommon(body, limits, &r));
  const json* messages = Field(body, "messages");
  if (messages == nullptr) return Bad("messages", "messages is required");
  if (!messages->is_array() || messages->empty()) {
    return Bad("messages", "messages must be a non-empty array");
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    ChatMessage m;
    PIER_OPENAI_TRY(ReadMessage((*messages)[i], i, &m));
    r.messages.push_back(std::move(m));
  }
  PIER_OPENAI_TRY(CheckToolCallIds(r.messages));
  PIER_OPENAI_TRY(ReadTools(body, &r));
  bool logprobs = false;
  PIER_OPENAI_TRY(ReadBool(body, "logprobs", &logprobs));
  std::optional<int64_t> top_logprobs;
  PIER_OPENAI_TRY(ReadInt(body, "top_logprobs", 0, sampling::kMaxLogprobs, &top_logprobs));
  if (top_logprobs.has_value() && !logprobs) {
    return Bad("top_logprobs", "top_logprobs requires logprobs to be true");
  }
  if (logprobs) r.logprobs = static_cast<int32_t>(top_logprobs.value_or(0));
  return r;
}

OpenAiParseResult ParseCompletion(const json& body, const OpenAiRequestLimits& limits) {
  OpenAiRequest r;
  r.endpoint = OpenAiEndpoint::kCompletions;
  PIER_OPENAI_TRY(ReadCommon(body, limits, &r));
  for (const char* name : {"tools", "tool_choice"}) {
    const json* v = Field(body, name);
    if (v != nullptr && !(v->is_array() && v->empty()) && *v != "none") {
      return NotSupported(name, std::string(name) + " on /v1/completions (use chat completions)");
    }
  }
  if (const json* suffix = Field(body, "suffix"); suffix != nullptr) {
    if (!suffix->is_string()) return WrongType("suffix", "a string", *suffix);
    if (!suffix->get_ref<const std::string&>().empty()) return NotSupported("suffix", "suffix");
  }
  std::optional<int64_t> best_of;
  PIER_OPENAI_TRY(ReadInt(body, "best_of", 1, std::numeric_limits<int32_t>::max(), &best_of));
  if (best_of.value_or(1) > 1) return NotSupported("best_of", "best_of > 1");
  std::optional<int64_t> logprobs;
  PIER_OPENAI_TRY(ReadInt(body, "logprobs", 0, sampling::kMaxLogprobs, &logprobs));
  if (logprobs.has_value()) r.logprobs = static_cast<int32_t>(*logprobs);
  PIER_OPENAI_TRY(ReadBool(body, "echo", &r.echo));
  PIER_OPENAI_TRY(ReadPrompts(body, &r.prompts));
  const int64_t choices = static_cast<int64_t>(r.prompts.size()) * r.n;
  if (choices > limits.max_n) {
    return Bad("n", std::to_string(r.prompts.size()) + " prompts x n = " + std::to_string(r.n) +
                        " makes " + std::to_string(choices) + " choices, more than the limit of " +
                        std::to_string(limits.max_n));
  }
  return r;
}

#undef PIER_OPENAI_TRY

}  // namespace

OpenAiParseResult ParseChatCompletionRequest(std::string_view body,
                                             const OpenAiRequestLimits& limits) {
  auto parsed = ParseBody(body);
  if (auto* error = std::get_if<OpenAiError>(&parsed)) return std::move(*error);
  return ParseChat(std::get<json>(parsed), limits);
}

OpenAiParseResult ParseCompletionRequest(std::string_view body, const OpenAiRequestLimits& limits) {
  auto parsed = ParseBody(body);
  if (auto* error = std::get_if<OpenAiError>(&parsed)) return std::move(*error);
  return ParseCompletion(std::get<json>(parsed), limits);
}

}  // namespace pier::api

#include "api/openai/generic_tools.h"

#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "tokenizer/unicode.h"

namespace pier::api {
namespace {

using ojson = nlohmann::ordered_json;

std::string Compact(const ojson& value) {
  return value.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// A tool call as the generic form writes it: {"name":...,"arguments":{...}}.
ojson CallObject(const ToolCall& call) {
  // The request parser checked that the arguments are a JSON object.
  ojson arguments = ojson::parse(call.arguments, nullptr, false);
  if (arguments.is_discarded()) arguments = ojson::object();
  return {{"name", call.name}, {"arguments", std::move(arguments)}};
}

// How far `text` matches an opening made of `tokens` with JSON's optional whitespace between
// them: the offset just after it; npos when the text cannot begin so; kMaybe when it may
// still.
constexpr size_t kMaybe = static_cast<size_t>(-2);
size_t MatchOpening(std::string_view text, std::initializer_list<std::string_view> tokens) {
  size_t at = 0;
  for (std::string_view token : tokens) {
    while (at < text.size() && IsSpace(text[at])) ++at;
    if (at >= text.size()) return kMaybe;
    const std::string_view rest = text.substr(at);
    if (rest.size() < token.size()) {
      return token.substr(0, rest.size()) == rest ? kMaybe : std::string_view::npos;
    }
    if (rest.substr(0, token.size()) != token) return std::string_view::npos;
    at += token.size();
  }
  return at;
}

// {"response":" : the offset just after the string's opening quote.
size_t MatchResponseOpening(std::string_view text) {
  return MatchOpening(text, {"{", "\"response\"", ":", "\""});
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Four hex digits at text[at]; -1 when they are not.
int32_t Hex4(std::string_view text, size_t at) {
  int32_t value = 0;
  for (size_t k = 0; k < 4; ++k) {
    const int digit = HexValue(text[at + k]);
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

// Decodes the body of a JSON string from text[*at] into `out`, as far as it is complete: stops
// before an escape whose characters have not all arrived, and at the closing quote (sets
// *ended, *at just past it).
void DecodeStringBody(std::string_view text, size_t* at, std::string* out, bool* ended) {
  size_t i = *at;
  while (i < text.size()) {
    const char c = text[i];
    if (c == '"') {
      *ended = true;
      *at = i + 1;
      return;
    }
    if (c != '\\') {
      out->push_back(c);
      ++i;
      continue;
    }
    if (i + 1 >= text.size()) break;  // the escape's second character has not arrived
    const char e = text[i + 1];
    if (e != 'u') {
      static const std::map<char, char> kSimple = {{'"', '"'},  {'\\', '\\'}, {'/', '/'},
                                                   {'b', '\b'}, {'f', '\f'},  {'n', '\n'},
                                                   {'r', '\r'}, {'t', '\t'}};
      auto simple = kSimple.find(e);
      if (simple != kSimple.end()) out->push_back(simple->second);
      i += 2;
      continue;
    }
    if (i + 6 > text.size()) break;
    int32_t cp = Hex4(text, i + 2);
    size_t used = 6;
    if (cp >= 0xD800 && cp <= 0xDBFF) {  // a high surrogate: its low half follows
      if (i + 12 > text.size()) break;
      const int32_t low = text[i + 6] == '\\' && text[i + 7] == 'u' ? Hex4(text, i + 8) : -1;
      if (low >= 0xDC00 && low <= 0xDFFF) {
        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        used = 12;
      }
    }
    if (cp >= 0) tokenizer::AppendUtf8(static_cast<uint32_t>(cp), out);
    i += used;
  }
  *at = i;
}

}  // namespace

std::string GenericToolsSystemText(const std::vector<FunctionTool>& tools,
                                   const ToolChoice& choice) {
  std::string text =
      "You can call these tools. Each is a JSON object with its name, description and the "
      "JSON Schema of its arguments:\n";
  for (const FunctionTool& tool : tools) {
    if (choice.kind == ToolChoiceKind::kNamed && tool.name != choice.name) continue;
    ojson line = {{"name", tool.name}};
    if (!tool.description.empty()) line["description"] = tool.description;
    if (!tool.parameters.empty()) {
      ojson parameters = ojson::parse(tool.parameters, nullptr, false);
      if (!parameters.is_discarded()) line["parameters"] = std::move(parameters);
    }
    text += Compact(line) + "\n";
  }
  text +=
      "\nTo call tools, answer with only this JSON object:\n"
      "{\"tool_calls\": [{\"name\": \"<tool name>\", \"arguments\": {<its arguments>}}]}";
  if (choice.kind == ToolChoiceKind::kAuto) {
    text +=
        "\nTo answer without a tool, answer with only this JSON object:\n"
        "{\"response\": \"<your answer>\"}";
  }
  return text;
}

ojson GenericToolMessages(const std::vector<ChatMessage>& messages,
                          const std::vector<FunctionTool>& tools, const ToolChoice& choice) {
  const std::string tool_text = GenericToolsSystemText(tools, choice);
  ojson out = ojson::array();
  std::map<std::string, std::string> call_names;  // call id -> the function it called
  ojson results;                                  // the run of tool messages being gathered
  const auto flush_results = [&] {
    if (results.is_null()) return;
    out.push_back({{"role", "user"}, {"content", Compact({{"tool_results", std::move(results)}})}});
    results = nullptr;
  };
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "tool") {
      const std::string id = m.tool_call_id.value_or("");
      auto name = call_names.find(id);
      ojson result = {{"tool_call_id", id}};
      if (name != call_names.end()) result["name"] = name->second;
      result["content"] = m.content;
      if (results.is_null()) results = ojson::array();
      results.push_back(std::move(result));
      continue;
    }
    flush_results();
    ojson message = {{"role", m.role}, {"content", m.content}};
    if (i == 0 && (m.role == "system" || m.role == "developer")) {
      message["content"] = m.content.empty() ? tool_text : m.content + "\n\n" + tool_text;
    }
    if (!m.tool_calls.empty()) {
      ojson calls = ojson::array();
      for (const ToolCall& call : m.tool_calls) {
        calls.push_back(CallObject(call));
        call_names[call.id] = call.name;
      }
      message["content"] = Compact({{"tool_calls", std::move(calls)}});
    }
    if (m.name.has_value()) message["name"] = *m.name;
    out.push_back(std::move(message));
  }
  flush_results();
  const bool has_system = !messages.empty() && (messages.front().role == "system" ||
                                                messages.front().role == "developer");
  if (!has_system) out.insert(out.begin(), ojson{{"role", "system"}, {"content", tool_text}});
  return out;
}

ParsedToolCalls ParseGenericToolOutput(std::string_view text,
                                       const std::vector<FunctionTool>& tools) {
  const ojson v = ojson::parse(text.begin(), text.end(), nullptr, false);
  if (!v.is_discarded() && v.is_object()) {
    auto response = v.find("response");
    if (response != v.end() && response->is_string() && v.size() == 1) {
      return {response->get<std::string>(), {}};
    }
    auto calls = v.find("tool_calls");
    if (calls != v.end() && calls->is_array() && !calls->empty() && v.size() == 1) {
      // Each call as the bare-JSON family reads it: {"name", "arguments"}.
      ParsedToolCalls parsed = ParseToolCalls(ToolCallFormat::kJson, Compact(*calls), tools);
      if (!parsed.calls.empty()) return parsed;
    }
    return {std::string(text), {}};
  }
  // Cut short: a response's text so far; nothing of a call (its JSON is the form's, not an
  // answer); any other text as it is.
  const size_t calls_opening = MatchOpening(text, {"{", "\"tool_calls\""});
  if (calls_opening != std::string_view::npos && !Trim(text).empty()) return {};
  const size_t opening = MatchResponseOpening(text);
  if (opening == std::string_view::npos) return {std::string(text), {}};
  if (opening == kMaybe) return {};
  std::string content;
  size_t at = opening;
  bool ended = false;
  DecodeStringBody(text, &at, &content, &ended);
  return {std::move(content), {}};
}

std::string GenericOutputReader::Push(std::string_view piece) {
  text_ += piece;
  if (phase_ == Phase::kUndecided) {
    const size_t opening = MatchResponseOpening(text_);
    if (opening == kMaybe) return "";
    if (opening == std::string_view::npos) {
      phase_ = Phase::kOther;
      return "";
    }
    phase_ = Phase::kResponse;
    decoded_ = opening;
  }
  if (phase_ != Phase::kResponse || ended_) return "";
  std::string out;
  DecodeStringBody(text_, &decoded_, &out, &ended_);
  return out;
}

}  // namespace pier::api

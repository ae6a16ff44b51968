#include "api/responses/responses_stream.h"

#include <utility>

#include "api/request_json.h"

namespace pier::api {
namespace {

using json = nlohmann::ordered_json;

using request_json::Dump;

// The Responses API's usage from the chat one.
json UsageOf(const json& chat_usage) {
  if (!chat_usage.is_object()) return nullptr;
  const int64_t input = chat_usage.value("prompt_tokens", int64_t{0});
  const int64_t output = chat_usage.value("completion_tokens", int64_t{0});
  int64_t cached = 0;
  if (auto details = chat_usage.find("prompt_tokens_details");
      details != chat_usage.end() && details->is_object()) {
    cached = details->value("cached_tokens", int64_t{0});
  }
  return {{"input_tokens", input},
          {"input_tokens_details", {{"cached_tokens", cached}}},
          {"output_tokens", output},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", input + output}};
}

json MessageItem(const std::string& id, const std::string& text, std::string_view status) {
  return {{"type", "message"},
          {"id", id},
          {"status", status},
          {"role", "assistant"},
          {"content", json::array({{{"type", "output_text"},
                                    {"text", text},
                                    {"annotations", json::array()},
                                    {"logprobs", json::array()}}})}};
}

json CallItem(const std::string& id, const json& call, std::string_view status) {
  return {{"type", "function_call"},
          {"id", id},
          {"call_id", call.value("id", "")},
          {"name", call["function"].value("name", "")},
          {"arguments", call["function"].value("arguments", "")},
          {"status", status}};
}

}  // namespace

ResponsesStream::ResponsesStream(std::shared_ptr<ResponseStream> chat,
                                 ResponsesStreamOptions options)
    : chat_(std::move(chat)), options_(std::move(options)) {}

json ResponsesStream::Response(std::string_view status) const {
  json r = {{"id", options_.id},       {"object", "response"}, {"created_at", options_.created_at},
            {"status", status},        {"error", nullptr},     {"incomplete_details", nullptr},
            {"model", options_.model}, {"output", output_}};
  if (status == "incomplete") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
  for (const auto& [key, value] : options_.settings.items()) r[key] = value;
  r["usage"] = UsageOf(usage_);
  return r;
}

std::string ResponsesStream::Event(std::string_view type, json fields) {
  json event = {{"type", type}, {"sequence_number", sequence_++}};
  for (auto& [key, value] : fields.items()) event[key] = std::move(value);
  return "event: " + std::string(type) + "\ndata: " + Dump(event) + "\n\n";
}

std::string ResponsesStream::OpenMessage() {
  message_id_ = "msg_" + options_.id.substr(5) + std::to_string(next_item_);
  const json item = {{"type", "message"},
                     {"id", message_id_},
                     {"status", "in_progress"},
                     {"role", "assistant"},
                     {"content", json::array()}};
  std::string out =
      Event("response.output_item.added", {{"output_index", output_.size()}, {"item", item}});
  out += Event("response.content_part.added", {{"item_id", message_id_},
                                               {"output_index", output_.size()},
                                               {"content_index", 0},
                                               {"part",
                                                {{"type", "output_text"},
                                                 {"text", ""},
                                                 {"annotations", json::array()},
                                                 {"logprobs", json::array()}}}});
  return out;
}

std::string ResponsesStream::CloseMessage() {
  if (message_id_.empty()) return "";
  const size_t index = output_.size();
  std::string out = Event("response.output_text.done", {{"item_id", message_id_},
                                                        {"output_index", index},
                                                        {"content_index", 0},
                                                        {"text", text_},
                                                        {"logprobs", json::array()}});
  out += Event("response.content_part.done", {{"item_id", message_id_},
                                              {"output_index", index},
                                              {"content_index", 0},
                                              {"part",
                                               {{"type", "output_text"},
                                                {"text", text_},
                                                {"annotations", json::array()},
                                                {"logprobs", json::array()}}}});
  json item = MessageItem(message_id_, text_, "completed");
  out += Event("response.output_item.done", {{"output_index", index}, {"item", item}});
  output_.push_back(std::move(item));
  ++next_item_;
  message_id_.clear();
  text_.clear();
  return out;
}

std::string ResponsesStream::Finish(std::string_view status) {
  std::string out = CloseMessage();
  ended_ = true;
  const std::string type =
      status == "completed" ? "response.completed" : "response." + std::string(status);
  out += Event(type, {{"response", Response(status)}});
  return out;
}

std::string ResponsesStream::Translate(std::string_view payload) {
  if (payload == "[DONE]") return Finish(finish_reason_ == "length" ? "incomplete" : "completed");
  json chunk = json::parse(payload.begin(), payload.end(), nullptr, false);
  if (chunk.is_discarded() || !chunk.is_object()) return "";
  if (auto error = chunk.find("error"); error != chunk.end()) {
    const json& e = *error;
    std::string out = Event("error", {{"code", e.value("code", json(nullptr))},
                                      {"message", e.value("message", "")},
                                      {"param", e.value("param", json(nullptr))}});
    out += CloseMessage();
    ended_ = true;
    json failed = Response("failed");
    failed["error"] = {{"code", e.value("code", json("server_error"))},
                       {"message", e.value("message", "")}};
    out += Event("response.failed", {{"response", std::move(failed)}});
    return out;
  }
  if (auto usage = chunk.find("usage"); usage != chunk.end() && usage->is_object()) {
    usage_ = *usage;
  }
  std::string out;
  auto choices = chunk.find("choices");
  if (choices == chunk.end() || !choices->is_array()) return out;
  for (const json& choice : *choices) {
    const json& delta = choice.contains("delta") ? choice["delta"] : json::object();
    if (auto content = delta.find("content"); content != delta.end() && content->is_string() &&
                                              !content->get_ref<const std::string&>().empty()) {
      if (message_id_.empty()) out += OpenMessage();
      text_ += content->get<std::string>();
      out += Event("response.output_text.delta", {{"item_id", message_id_},
                                                  {"output_index", output_.size()},
                                                  {"content_index", 0},
                                                  {"delta", *content},
                                                  {"logprobs", json::array()}});
    }
    if (auto calls = delta.find("tool_calls"); calls != delta.end() && calls->is_array()) {
      out += CloseMessage();
      for (const json& call : *calls) {
        const std::string id = "fc_" + options_.id.substr(5) + std::to_string(next_item_++);
        const size_t index = output_.size();
        json added = CallItem(id, call, "in_progress");
        added["arguments"] = "";
        out += Event("response.output_item.added", {{"output_index", index}, {"item", added}});
        const std::string arguments = call["function"].value("arguments", "");
        out += Event("response.function_call_arguments.delta",
                     {{"item_id", id}, {"output_index", index}, {"delta", arguments}});
        out += Event("response.function_call_arguments.done",
                     {{"item_id", id}, {"output_index", index}, {"arguments", arguments}});
        json done = CallItem(id, call, "completed");
        out += Event("response.output_item.done", {{"output_index", index}, {"item", done}});
        output_.push_back(std::move(done));
      }
    }
    if (auto finish = choice.find("finish_reason"); finish != choice.end() && finish->is_string()) {
      finish_reason_ = finish->get<std::string>();
    }
  }
  return out;
}

std::string ResponsesStream::FromChatCompletion(std::string_view body) {
  json chat = json::parse(body.begin(), body.end(), nullptr, false);
  if (chat.is_discarded() || !chat.contains("choices") || chat["choices"].empty()) {
    return std::string(body);
  }
  const json& choice = chat["choices"][0];
  const json& message = choice["message"];
  const std::string hex = options_.id.substr(5);
  if (message.contains("content") && message["content"].is_string() &&
      !message["content"].get_ref<const std::string&>().empty()) {
    output_.push_back(MessageItem("msg_" + hex + "0", message["content"], "completed"));
  }
  if (message.contains("tool_calls")) {
    int64_t k = 1;
    for (const json& call : message["tool_calls"]) {
      output_.push_back(CallItem("fc_" + hex + std::to_string(k++), call, "completed"));
    }
  }
  usage_ = chat.value("usage", json(nullptr));
  return Dump(Response(choice.value("finish_reason", "") == "length" ? "incomplete" : "completed"));
}

StreamChunk ResponsesStream::Poll() {
  MutexLock lock(mutex_);
  StreamChunk chunk = chat_->Poll();
  if (!options_.stream) {
    if (chunk.done && (chunk.status == 0 || chunk.status == 200)) {
      chunk.data = FromChatCompletion(chunk.data);
    }
    return chunk;
  }
  std::string out;
  if (!started_) {
    started_ = true;
    out += Event("response.created", {{"response", Response("in_progress")}});
    out += Event("response.in_progress", {{"response", Response("in_progress")}});
  }
  out += TranslateEvents(chunk.data);
  if (chunk.done && !ended_) out += Finish("completed");
  return StreamChunk{.data = std::move(out), .done = chunk.done, .status = chunk.status};
}

std::string ResponsesStream::CancelWithEnding(std::string_view reason) {
  const std::string ending = chat_->CancelWithEnding(reason);
  MutexLock lock(mutex_);
  if (!options_.stream || ending.empty()) return "";
  return TranslateEvents(ending);
}

std::string ResponsesStream::TranslateEvents(std::string_view data) {
  // The chat stream's bytes are whole SSE events: `data: PAYLOAD\n\n` each.
  std::string out;
  while (!data.empty() && !ended_) {
    const size_t end = data.find("\n\n");
    std::string_view event = data.substr(0, end);
    data = end == std::string_view::npos ? std::string_view() : data.substr(end + 2);
    if (event.substr(0, 6) == "data: ") out += Translate(event.substr(6));
  }
  return out;
}

}  // namespace pier::api

#include "api/kserve/kserve_generate.h"

#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

#include "api/json_shape.h"
#include "common/mutex.h"

namespace pier::api {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kSettings[] = {"max_tokens",
                                          "temperature",
                                          "top_p",
                                          "top_k",
                                          "min_p",
                                          "seed",
                                          "stop",
                                          "presence_penalty",
                                          "frequency_penalty",
                                          "repetition_penalty",
                                          "ignore_eos"};

HttpResponse Error(int status, const std::string& message) {
  HttpResponse response;
  response.status = status;
  response.body = Json{{"error", message}}.dump(-1, ' ', false, Json::error_handler_t::replace);
  return response;
}

// The message of an OpenAI-shaped error body (or the body itself when it is not one).
std::string OpenAiMessage(std::string_view body) {
  try {
    const Json parsed = Json::parse(body);
    if (parsed.contains("error") && parsed["error"].is_object() &&
        parsed["error"].contains("message") && parsed["error"]["message"].is_string()) {
      return parsed["error"]["message"].get<std::string>();
    }
  } catch (const Json::exception&) {
  }
  return std::string(body);
}

// The completion stream of the same request, translated into generate's shapes.
class GenerateStream final : public ResponseStream {
 public:
  GenerateStream(std::shared_ptr<ResponseStream> inner, std::string model, bool stream)
      : inner_(std::move(inner)), model_(std::move(model)), stream_(stream) {}

  void Start(std::function<void()> wake) override { inner_->Start(std::move(wake)); }
  size_t backlog() const override { return inner_->backlog(); }
  void Cancel(std::string_view reason) override { inner_->Cancel(reason); }
  std::string CancelWithEnding(std::string_view reason) override {
    const std::string ending = inner_->CancelWithEnding(reason);
    MutexLock lock(mutex_);
    return stream_ ? TranslateEvents(ending) : "";
  }

  StreamChunk Poll() override {
    MutexLock lock(mutex_);
    StreamChunk chunk = inner_->Poll();
    if (!stream_) {
      if (chunk.done) {
        if (chunk.status == 0 || chunk.status == 200) {
          chunk.data = FromCompletion(chunk.data);
        } else {
          chunk.data = Json{{"error", OpenAiMessage(chunk.data)}}.dump();
        }
      }
      return chunk;
    }
    chunk.data = TranslateEvents(chunk.data);
    return chunk;
  }

 private:
  std::string Payload(std::string_view text) const {
    return Json{{"model_name", model_}, {"model_version", "1"}, {"text_output", text}}.dump(
        -1, ' ', false, Json::error_handler_t::replace);
  }

  std::string FromCompletion(std::string_view body) const {
    try {
      const Json parsed = Json::parse(body);
      return Payload(parsed.at("choices").at(0).at("text").get<std::string>());
    } catch (const Json::exception&) {
      return Json{{"error", "the completion could not be read"}}.dump();
    }
  }

  // The completion stream's bytes are whole SSE events (`data: PAYLOAD\n\n`).
  std::string TranslateEvents(std::string_view data) const {
    std::string out;
    while (!data.empty()) {
      const size_t end = data.find("\n\n");
      std::string_view event = data.substr(0, end);
      data = end == std::string_view::npos ? std::string_view() : data.substr(end + 2);
      if (event.substr(0, 6) != "data: ") continue;
      const std::string_view payload = event.substr(6);
      if (payload == "[DONE]") continue;
      try {
        const Json parsed = Json::parse(payload);
        if (parsed.contains("error")) {
          out += "data: " + Json{{"error", OpenAiMessage(payload)}}.dump() + "\n\n";
          continue;
        }
        const Json& choices = parsed.at("choices");
        if (choices.empty()) continue;  // the usage chunk
        const std::string text = choices.at(0).value("text", "");
        if (!text.empty()) out += "data: " + Payload(text) + "\n\n";
      } catch (const Json::exception&) {
      }
    }
    return out;
  }

  std::shared_ptr<ResponseStream> inner_;
  const std::string model_;
  const bool stream_;
  Mutex mutex_;
};

}  // namespace

HttpResponse ServeGenerate(const HttpRequest& http, const std::string& model, bool stream,
                           const std::function<HttpResponse(const HttpRequest&)>& completions) {
  if (!completions) return Error(400, "this server does not generate text");
  if (std::optional<std::string> shape = CheckJsonShape(http.body)) return Error(400, *shape);
  Json request;
  try {
    request = Json::parse(http.body);
  } catch (const Json::exception& e) {
    return Error(400, InvalidJsonMessage(e));
  }
  if (!request.is_object()) return Error(400, "the generate request must be a JSON object");
  if (!request.contains("text_input") || !request["text_input"].is_string()) {
    return Error(400, "text_input (a string) is required");
  }
  Json body{{"model", model}, {"prompt", request["text_input"]}, {"stream", stream}};
  auto take = [&](const std::string& key, const Json& value) -> std::optional<HttpResponse> {
    for (std::string_view known : kSettings) {
      if (key == known) {
        body[key] = value;
        return std::nullopt;
      }
    }
    if (key == "stream") return std::nullopt;  // the route decides
    return Error(400, "parameter '" + key +
                          "' is not supported (supported: max_tokens, "
                          "temperature, top_p, top_k, min_p, seed, stop, presence_penalty, "
                          "frequency_penalty, repetition_penalty, ignore_eos)");
  };
  for (const auto& [key, value] : request.items()) {
    if (key == "text_input" || key == "id" || key == "parameters") continue;
    if (auto refused = take(key, value)) return std::move(*refused);
  }
  if (request.contains("parameters")) {
    if (!request["parameters"].is_object()) return Error(400, "parameters must be an object");
    for (const auto& [key, value] : request["parameters"].items()) {
      if (auto refused = take(key, value)) return std::move(*refused);
    }
  }
  HttpRequest inner = http;
  inner.path = "/v1/completions";
  inner.target = "/v1/completions";
  inner.body = body.dump();
  HttpResponse response = completions(inner);
  if (response.deferred != nullptr) {
    return Error(503, "model '" + model + "' is not loaded; load it and retry");
  }
  if (response.stream == nullptr) {
    // Refused before anything ran: the same status, KServe's error shape.
    HttpResponse error =
        Error(response.status == 200 ? 500 : response.status, OpenAiMessage(response.body));
    error.headers = response.headers;
    error.model = response.model;
    return error;
  }
  response.stream = std::make_shared<GenerateStream>(std::move(response.stream), model, stream);
  return response;
}

}  // namespace pier::api

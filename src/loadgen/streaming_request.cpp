#include "loadgen/streaming_request.h"

#include <chrono>

namespace pier::loadgen {
namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The error message of an OpenAI-shaped error object, or its dump.
std::string ErrorText(const nlohmann::json& error) {
  if (error.is_object() && error.contains("message") && error["message"].is_string()) {
    return error["message"].get<std::string>();
  }
  if (error.is_string()) return error.get<std::string>();
  return error.dump();
}

std::string Shorten(std::string text) {
  constexpr size_t kMax = 300;
  if (text.size() > kMax) text = text.substr(0, kMax) + "...";
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

}  // namespace

ApiKind ApiKindForEndpoint(std::string_view endpoint) {
  return endpoint.find("chat") != std::string_view::npos ? ApiKind::kChat : ApiKind::kCompletions;
}

std::string MakeRequestBody(const RequestOptions& options, const WorkloadRequest& request) {
  nlohmann::json body;
  body["model"] = options.model;
  if (options.api == ApiKind::kChat) {
    body["messages"] =
        nlohmann::json::array({{{"role", "user"}, {"content", request.prompt_text}}});
  } else if (!request.prompt_ids.empty()) {
    body["prompt"] = request.prompt_ids;
  } else {
    body["prompt"] = request.prompt_text;
  }
  body["max_tokens"] = request.output_len;
  body["temperature"] = options.temperature;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  if (options.ignore_eos) body["ignore_eos"] = true;
  if (options.extra_body.is_object()) {
    for (const auto& [key, value] : options.extra_body.items()) body[key] = value;
  }
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

StreamAccumulator::StreamAccumulator(ApiKind api, Clock::time_point start, RequestResult* result)
    : api_(api),
      start_(start),
      last_token_(start),
      result_(result),
      sse_([this](const SseEvent& event) { OnEvent(event); }) {}

void StreamAccumulator::OnEvent(const SseEvent& event) {
  const Clock::time_point now = Clock::now();
  saw_event_ = true;
  if (!error_.empty()) return;
  if (event.data == "[DONE]") {
    saw_done_ = true;
    return;
  }
  nlohmann::json chunk;
  try {
    chunk = nlohmann::json::parse(event.data);
  } catch (const nlohmann::json::exception&) {
    error_ = event.event == "error" ? "error event: " + Shorten(event.data)
                                    : "malformed JSON in stream: " + Shorten(event.data);
    return;
  }
  if (!chunk.is_object()) {
    error_ = "stream chunk is not a JSON object: " + Shorten(event.data);
    return;
  }
  if (chunk.contains("error")) {
    error_ = "error event: " + Shorten(ErrorText(chunk["error"]));
    return;
  }
  if (event.event == "error") {
    error_ = "error event: " + Shorten(event.data);
    return;
  }
  const auto choices = chunk.find("choices");
  if (choices != chunk.end() && choices->is_array() && !choices->empty()) {
    const nlohmann::json& choice = (*choices)[0];
    std::string_view text;
    if (choice.is_object()) {
      if (api_ == ApiKind::kChat) {
        const auto delta = choice.find("delta");
        if (delta != choice.end() && delta->is_object()) {
          for (const char* field : {"content", "reasoning_content"}) {
            const auto it = delta->find(field);
            if (it != delta->end() && it->is_string() &&
                !it->get_ref<const std::string&>().empty()) {
              text = it->get_ref<const std::string&>();
              break;
            }
          }
        }
      } else {
        const auto it = choice.find("text");
        if (it != choice.end() && it->is_string()) text = it->get_ref<const std::string&>();
      }
    }
    if (!text.empty()) {
      if (result_->text_chunks == 0) {
        result_->ttft_s = Seconds(now - start_);
      } else {
        result_->itl_s.push_back(Seconds(now - last_token_));
      }
      last_token_ = now;
      ++result_->text_chunks;
    }
  }
  const auto usage = chunk.find("usage");
  if (usage != chunk.end() && usage->is_object()) {
    const auto completion = usage->find("completion_tokens");
    if (completion != usage->end() && completion->is_number_integer()) {
      result_->output_tokens = completion->get<int>();
      result_->usage_reported = true;
    }
    const auto prompt = usage->find("prompt_tokens");
    if (prompt != usage->end() && prompt->is_number_integer()) {
      result_->prompt_tokens = prompt->get<int>();
    }
  }
}

void StreamAccumulator::Finish(Clock::time_point end) {
  sse_.Finish();
  result_->latency_s = Seconds(end - start_);
  if (!result_->usage_reported) result_->output_tokens = result_->text_chunks;
  if (!error_.empty()) {
    result_->error = error_;
  } else if (result_->text_chunks == 0) {
    result_->error = saw_event_ ? "the stream carried no generated text"
                                : "the response was not an SSE stream (does the server "
                                  "support \"stream\": true on this endpoint?)";
  } else {
    result_->success = true;
  }
}

RequestResult SendStreamingRequest(const Endpoint& endpoint, const RequestOptions& options,
                                   const WorkloadRequest& request, Clock::time_point deadline) {
  RequestResult result;
  result.input_len = request.input_len;
  HttpRequest http;
  http.method = "POST";
  http.target = options.target;
  http.headers = {{"Content-Type", "application/json"},
                  {"Accept", "text/event-stream"},
                  {"User-Agent", "pier-bench/0.1"}};
  if (!options.api_key.empty())
    http.headers.emplace_back("Authorization", "Bearer " + options.api_key);
  http.body = MakeRequestBody(options, request);

  const Clock::time_point start = Clock::now();
  StreamAccumulator stream(options.api, start, &result);
  auto response = SendHttpRequest(endpoint, http, deadline,
                                  [&stream](std::string_view bytes) { stream.Feed(bytes); });
  const Clock::time_point end = Clock::now();
  if (!response.ok()) {
    result.latency_s = Seconds(end - start);
    result.error = response.status().message();
    return result;
  }
  if (response->status_code < 200 || response->status_code >= 300) {
    result.latency_s = Seconds(end - start);
    std::string message = response->body;
    try {
      const auto json = nlohmann::json::parse(response->body);
      if (json.is_object() && json.contains("error")) message = ErrorText(json["error"]);
    } catch (const nlohmann::json::exception&) {
    }
    result.error = "HTTP " + std::to_string(response->status_code) + ": " + Shorten(message);
    return result;
  }
  stream.Finish(end);
  return result;
}

Result<std::string> FetchFirstModelId(const Endpoint& endpoint, const std::string& api_key,
                                      Clock::time_point deadline) {
  HttpRequest http;
  http.target = endpoint.url.path_prefix + "/v1/models";
  if (!api_key.empty()) http.headers.emplace_back("Authorization", "Bearer " + api_key);
  PIER_ASSIGN_OR_RETURN(HttpResponse response, SendHttpRequest(endpoint, http, deadline));
  const std::string where = "GET " + http.target;
  if (response.status_code != 200) {
    return UnavailableError(where + " answered HTTP " + std::to_string(response.status_code) +
                            ": " + Shorten(response.body) + " (pass --model to skip it)");
  }
  try {
    const auto json = nlohmann::json::parse(response.body);
    const auto& data = json.at("data");
    if (!data.is_array() || data.empty()) {
      return NotFoundError(where + " lists no model; pass --model");
    }
    return data[0].at("id").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    return DataLossError(where + ": unexpected answer (" + std::string(e.what()) +
                         "); pass --model");
  }
}

}  // namespace pier::loadgen

#include "api/openai/openai_stream.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <utility>

#include "api/request_json.h"

namespace pier::api {

using json = nlohmann::ordered_json;

namespace {

using request_json::Dump;

std::string SseEvent(const std::string& data) { return "data: " + data + "\n\n"; }

int64_t SteadyNowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

struct OpenAiStream::Choice {
  int32_t index = 0;  // prompt * n + i
  bool started = false;
  bool finished = false;
  std::string finish_reason;
  std::string text;  // non-streaming: everything so far (echo included)
  // Logprobs accumulated (non-streaming) or of the current chunk (streaming):
  // chat: {"content": [...]}; completions: {"tokens", "token_logprobs", "top_logprobs",
  // "text_offset"}.
  json logprobs;
  int64_t text_offset = 0;  // completions: where the next token's text starts
  int64_t completion_tokens = 0;
  int64_t last_token_at_us = 0;              // for inter-token latency
  engine::Event last;                        // the final event (usage, timestamps)
  std::optional<ToolCallSplitter> splitter;  // streaming chat with tools
};

struct OpenAiStream::Group {
  OpenAiStreamPrompt prompt;
  std::vector<Choice> choices;  // [n]
  std::vector<engine::PromptTokenLogprob> prompt_logprobs;
  int64_t cached_prompt_tokens = 0;
  bool finished = false;
};

OpenAiStream::OpenAiStream(OpenAiStreamOptions options, std::vector<OpenAiStreamPrompt> prompts,
                           engine::EngineClient* client, const tokenizer::Tokenizer* tokenizer,
                           serving::ServingMetrics* metrics)
    : options_(std::move(options)), client_(client), tokenizer_(tokenizer), metrics_(metrics) {
  for (size_t p = 0; p < prompts.size(); ++p) {
    auto group = std::make_unique<Group>();
    group->prompt = std::move(prompts[p]);
    group->choices.resize(static_cast<size_t>(options_.n));
    for (int32_t i = 0; i < options_.n; ++i) {
      group->choices[i].index = static_cast<int32_t>(p) * options_.n + i;
      if (options_.tool_format.has_value() && options_.stream) {
        group->choices[i].splitter.emplace(*options_.tool_format);
      }
    }
    groups_.push_back(std::move(group));
  }
}

OpenAiStream::~OpenAiStream() {
  for (const auto& group : groups_) group->prompt.handle->SetListener({});
  MutexLock lock(mutex_);
  if (!done_ && !aborted_) AbortAll();
}

void OpenAiStream::Start(std::function<void()> wake) {
  // Not under mutex_: SetListener may call wake at once, and wake may poll.
  for (const auto& group : groups_) group->prompt.handle->SetListener(wake);
}

size_t OpenAiStream::backlog() const {
  size_t total = 0;
  for (const auto& group : groups_) total += group->prompt.handle->pending();
  return total;
}

namespace {

// A short label for the metrics from the server's cancel reason.
std::string_view CancelLabel(std::string_view reason) {
  if (reason.starts_with("client disconnected")) return "client_disconnected";
  if (reason.starts_with("client reads too slowly")) return "slow_reader";
  if (reason.starts_with("server shutting down")) return "shutdown";
  return "other";
}

}  // namespace

void OpenAiStream::Cancel(std::string_view reason) { CancelWithEnding(reason); }

std::string OpenAiStream::CancelWithEnding(std::string_view reason) {
  for (const auto& group : groups_) group->prompt.handle->SetListener({});
  {
    MutexLock lock(mutex_);
    if (aborted_ || done_) return {};
    AbortAll();
    done_ = true;
    // Every request not finished yet counts as finished by "abort".
    for (const auto& group : groups_) {
      if (group->finished) continue;
      group->finished = true;
      RecordGroup(*group, "abort");
    }
  }
  if (metrics_ != nullptr) metrics_->RecordClientAbort(CancelLabel(reason), options_.model);
  if (!options_.stream) return {};
  // A streaming client sees why its stream ended, then the usual end marker.
  const std::string error =
      ErrorJson(503, std::string(reason) + ": the request was cancelled before it finished", {},
                "server_shutting_down");
  return SseEvent(error) + "data: [DONE]\n\n";
}

void OpenAiStream::AbortAll() {
  aborted_ = true;
  for (const auto& group : groups_) {
    if (!group->finished) client_->Abort(group->prompt.engine_id);
  }
}

json OpenAiStream::Fingerprint() const {
  return options_.system_fingerprint.empty() ? json(nullptr) : json(options_.system_fingerprint);
}

std::string OpenAiStream::ChunkJson(json choices) const {
  const bool chat = options_.endpoint == OpenAiEndpoint::kChatCompletions;
  json chunk = {{"id", options_.id},
                {"object", chat ? "chat.completion.chunk" : "text_completion"},
                {"created", options_.created_unix_seconds},
                {"model", options_.model},
                {"system_fingerprint", Fingerprint()},
                {"choices", std::move(choices)}};
  if (options_.include_usage) chunk["usage"] = nullptr;
  return SseEvent(Dump(chunk));
}

json OpenAiStream::UsageJson() const {
  int64_t prompt_tokens = 0, completion_tokens = 0, cached = 0;
  for (const auto& group : groups_) {
    prompt_tokens += static_cast<int64_t>(group->prompt.prompt_tokens.size());
    cached += group->cached_prompt_tokens;
    for (const Choice& c : group->choices) completion_tokens += c.completion_tokens;
  }
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

void OpenAiStream::AppendTokenLogprobs(Choice& choice, const engine::Event& event, json* piece) {
  if (!options_.logprobs.has_value() || event.token < 0 || !event.logprob.has_value()) return;
  // An end-of-generation token ends the text without appearing in it: no logprob entry.
  if (event.finish == engine::FinishReason::kStop && tokenizer_->IsEndOfGeneration(event.token)) {
    return;
  }
  const std::string token_text = tokenizer_->TokenBytes(event.token);
  if (options_.endpoint == OpenAiEndpoint::kChatCompletions) {
    auto entry = [&](int32_t token, float logprob) {
      const std::string bytes = tokenizer_->TokenBytes(token);
      json byte_values = json::array();
      for (unsigned char b : bytes) byte_values.push_back(static_cast<int>(b));
      return json{{"token", bytes}, {"logprob", logprob}, {"bytes", std::move(byte_values)}};
    };
    json item = entry(event.token, *event.logprob);
    json top = json::array();
    for (const sampling::TokenLogprob& t : event.top_logprobs)
      top.push_back(entry(t.token, t.logprob));
    item["top_logprobs"] = std::move(top);
    if (piece->is_null()) *piece = {{"content", json::array()}};
    (*piece)["content"].push_back(std::move(item));
    return;
  }
  if (piece->is_null()) {
    *piece = {{"tokens", json::array()},
              {"token_logprobs", json::array()},
              {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
  }
  json top = json::object();
  for (const sampling::TokenLogprob& t : event.top_logprobs) {
    top[tokenizer_->TokenBytes(t.token)] = t.logprob;
  }
  (*piece)["tokens"].push_back(token_text);
  (*piece)["token_logprobs"].push_back(*event.logprob);
  (*piece)["top_logprobs"].push_back(std::move(top));
  (*piece)["text_offset"].push_back(choice.text_offset);
  choice.text_offset += static_cast<int64_t>(token_text.size());
}

// Completions with echo and logprobs: the prompt's tokens lead the choice's logprobs (the
// first has no logprob: nothing precedes it).
void OpenAiStream::AppendPromptLogprobs(Group& group, Choice& choice, json* piece) {
  if (!options_.logprobs.has_value() || !options_.echo ||
      options_.endpoint != OpenAiEndpoint::kCompletions) {
    return;
  }
  if (piece->is_null()) {
    *piece = {{"tokens", json::array()},
              {"token_logprobs", json::array()},
              {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
  }
  const std::vector<int32_t>& tokens = group.prompt.prompt_tokens;
  std::vector<const engine::PromptTokenLogprob*> at_position(tokens.size(), nullptr);
  for (const engine::PromptTokenLogprob& p : group.prompt_logprobs) {
    if (p.position >= 0 && p.position < static_cast<int64_t>(tokens.size())) {
      at_position[static_cast<size_t>(p.position)] = &p;
    }
  }
  int64_t offset = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string token_text = tokenizer_->TokenBytes(tokens[i]);
    json logprob = nullptr;
    json top = nullptr;
    if (const engine::PromptTokenLogprob* p = at_position[i]; p != nullptr) {
      logprob = p->logprob;
      top = json::object();
      for (const sampling::TokenLogprob& t : p->top_logprobs) {
        top[tokenizer_->TokenBytes(t.token)] = t.logprob;
      }
    }
    (*piece)["tokens"].push_back(token_text);
    (*piece)["token_logprobs"].push_back(std::move(logprob));
    (*piece)["top_logprobs"].push_back(std::move(top));
    (*piece)["text_offset"].push_back(offset);
    offset += static_cast<int64_t>(token_text.size());
  }
  choice.text_offset = static_cast<int64_t>(group.prompt.echo_text.size());
}

void OpenAiStream::HandleEvent(Group& group, engine::Event& event, std::string& out) {
  if (event.choice < 0 || event.choice >= options_.n) return;
  Choice& choice = group.choices[static_cast<size_t>(event.choice)];
  if (choice.finished) return;
  if (event.token >= 0 && options_.live != nullptr) options_.live->Produced(1);
  if (event.choice == 0 && !event.prompt_logprobs.empty()) {
    group.prompt_logprobs = std::move(event.prompt_logprobs);
  }
  if (event.finish == engine::FinishReason::kError && event.queue_full) {
    // Resubmitted after its worker died, into a full queue: the answer a full queue gives at
    // Submit (FromSubmitError), or in a stream already started, its error type.
    failure_ = Failure{429, event.error, "error", /*retry_after=*/true};
    return;
  }
  if (event.finish == engine::FinishReason::kError) {
    failure_ = event.instance_lost ? Failure{503, event.error}
               : event.request_fault
                   ? Failure{400, "the request cannot be served: " + event.error}
                   : Failure{500, "the engine failed the request: " + event.error};
    return;
  }
  if (event.finish == engine::FinishReason::kAbort && event.queue_expired) {
    failure_ = Failure{429,
                       "the request was refused: " + event.error + " (class " +
                           options_.priority_class + "; retry later or with a later deadline)",
                       "expired"};
    return;
  }
  if (event.finish == engine::FinishReason::kAbort) {
    failure_ =
        Failure{503, event.error.empty() ? "the engine stopped the request (it is shutting down)"
                                         : "the request was stopped: " + event.error};
    return;
  }

  json logprobs_piece;  // this event's logprobs (null when none)
  std::string text;
  if (!choice.started) {
    choice.started = true;
    if (options_.echo && options_.endpoint == OpenAiEndpoint::kCompletions) {
      text = group.prompt.echo_text;
      AppendPromptLogprobs(group, choice, &logprobs_piece);
    }
  }
  text += event.text;
  if (event.token >= 0) {
    const int64_t now = SteadyNowUs();
    if (options_.stream && metrics_ != nullptr && choice.last_token_at_us > 0) {
      metrics_->RecordInterTokenLatency(static_cast<double>(now - choice.last_token_at_us) / 1e6,
                                        options_.model);
    }
    choice.last_token_at_us = now;
  }
  AppendTokenLogprobs(choice, event, &logprobs_piece);
  if (event.finish.has_value()) {
    choice.finished = true;
    choice.finish_reason = std::string(engine::FinishReasonName(*event.finish));
    choice.completion_tokens = event.usage.completion_tokens;
    group.cached_prompt_tokens =
        std::max(group.cached_prompt_tokens, event.usage.cached_prompt_tokens);
    choice.last = event;
  }

  const bool chat = options_.endpoint == OpenAiEndpoint::kChatCompletions;
  if (!options_.stream) {
    choice.text += text;
    if (logprobs_piece.is_null()) return;
    if (choice.logprobs.is_null()) {
      choice.logprobs = std::move(logprobs_piece);
      return;
    }
    for (auto& [key, values] : logprobs_piece.items()) {
      for (json& v : values) choice.logprobs[key].push_back(std::move(v));
    }
    return;
  }
  json tool_calls;  // the calls, when this is the end of a choice that made some
  if (choice.splitter.has_value()) {
    text = choice.splitter->Push(text);
    if (choice.finished) {
      ParsedToolCalls parsed = choice.splitter->Finish(options_.tools);
      text += parsed.content;
      if (!parsed.calls.empty()) {
        tool_calls = ToolCallsJson(choice, parsed.calls, true);
        choice.finish_reason = "tool_calls";
      }
    }
  }
  if (text.empty() && logprobs_piece.is_null() && !choice.finished) return;
  json c = {{"index", choice.index}};
  if (chat) {
    c["delta"] = text.empty() ? json::object() : json{{"content", text}};
  } else {
    c["text"] = text;
  }
  c["logprobs"] = std::move(logprobs_piece);
  if (!tool_calls.is_null()) {
    // The text before the calls, the calls, then the finish on an empty delta, as OpenAI does.
    if (!text.empty() || !c["logprobs"].is_null()) {
      c["finish_reason"] = nullptr;
      out += ChunkJson(json::array({c}));
    }
    out += ChunkJson(json::array({{{"index", choice.index},
                                   {"delta", {{"tool_calls", std::move(tool_calls)}}},
                                   {"logprobs", nullptr},
                                   {"finish_reason", nullptr}}}));
    out += ChunkJson(json::array({{{"index", choice.index},
                                   {"delta", json::object()},
                                   {"logprobs", nullptr},
                                   {"finish_reason", choice.finish_reason}}}));
    return;
  }
  c["finish_reason"] = choice.finished ? json(choice.finish_reason) : json(nullptr);
  out += ChunkJson(json::array({std::move(c)}));
}

json OpenAiStream::ToolCallsJson(const Choice& choice, const std::vector<ToolCall>& calls,
                                 bool with_index) const {
  // Ids unique per response and call: the response id's random hex, the choice and the call.
  const std::string hex = options_.id.substr(options_.id.find('-') + 1, 16);
  const uint64_t random = std::stoull(hex, nullptr, 16);
  json out = json::array();
  // parallel_tool_calls false: one call at most (the first), as the client asked.
  const size_t n = options_.parallel_tool_calls ? calls.size() : std::min<size_t>(calls.size(), 1);
  for (size_t k = 0; k < n; ++k) {
    char suffix[9];
    std::snprintf(suffix, sizeof(suffix), "%04x%04x", static_cast<unsigned>(choice.index) & 0xffff,
                  static_cast<unsigned>(k) & 0xffff);
    json call;
    if (with_index) call["index"] = k;
    // Mistral's templates accept only 9 alphanumerics as an id (and refuse the next turn
    // otherwise), so that family gets ids of that form: 53 bits of the response's randomness,
    // mixed with the choice and the call, in base 62.
    if (options_.tool_format == ToolCallFormat::kMistral) {
      static constexpr char kDigits[] =
          "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
      uint64_t v = random ^ (static_cast<uint64_t>(choice.index) * 0x9E3779B97F4A7C15ull) ^
                   (static_cast<uint64_t>(k) * 0xC2B2AE3D27D4EB4Full);
      std::string id(9, '0');
      for (char& d : id) {
        d = kDigits[v % 62];
        v /= 62;
      }
      call["id"] = id;
    } else {
      call["id"] = "call_" + hex + suffix;
    }
    call["type"] = "function";
    call["function"] = {{"name", calls[k].name}, {"arguments", calls[k].arguments}};
    out.push_back(std::move(call));
  }
  return out;
}

void OpenAiStream::FinishGroupIfDone(Group& group) {
  if (group.finished) return;
  for (const Choice& c : group.choices) {
    if (!c.finished) return;
  }
  group.finished = true;
  RecordGroup(group, group.choices[0].finish_reason);
}

void OpenAiStream::RecordGroup(const Group& group, std::string_view finish_reason) {
  if (metrics_ == nullptr) return;
  serving::RequestRecord record;
  record.model = options_.model;
  record.finish_reason = finish_reason;
  record.prompt_tokens = static_cast<int64_t>(group.prompt.prompt_tokens.size());
  record.cached_prompt_tokens = group.cached_prompt_tokens;
  record.tenant = options_.tenant;
  record.priority_class = options_.priority_class;
  engine::TimestampUs first_token = 0, finished = 0;
  const engine::TimestampUs queued = group.choices[0].last.times.queued_us;
  for (const Choice& c : group.choices) {
    record.generation_tokens += c.completion_tokens;
    const engine::TimestampUs t = c.last.times.first_token_us;
    if (t > 0 && (first_token == 0 || t < first_token)) first_token = t;
    finished = std::max(finished, c.last.times.finished_us);
  }
  if (queued > 0) {
    if (first_token > 0)
      record.time_to_first_token = static_cast<double>(first_token - queued) / 1e6;
    // An aborted request has no finish time.
    if (finished >= queued) record.e2e_seconds = static_cast<double>(finished - queued) / 1e6;
    const engine::TimestampUs scheduled = group.choices[0].last.times.scheduled_us;
    if (scheduled > 0) record.queue_seconds = static_cast<double>(scheduled - queued) / 1e6;
  }
  const Choice& c0 = group.choices[0];
  if (c0.completion_tokens > 1 && c0.last.times.first_token_us > 0) {
    record.time_per_output_token =
        static_cast<double>(c0.last.times.finished_us - c0.last.times.first_token_us) / 1e6 /
        static_cast<double>(c0.completion_tokens - 1);
  }
  if (options_.slo_ttft_ms > 0 || options_.slo_tpot_ms > 0) {
    // Met: it was served, within the targets it has (a target it could not be measured
    // against, e.g. TPOT of a one-token answer, counts as met).
    const bool served =
        finish_reason != "error" && finish_reason != "expired" && finish_reason != "abort";
    const bool ttft_ok =
        options_.slo_ttft_ms <= 0 || (record.time_to_first_token >= 0 &&
                                      record.time_to_first_token * 1000 <= options_.slo_ttft_ms);
    const bool tpot_ok = options_.slo_tpot_ms <= 0 || record.time_per_output_token < 0 ||
                         record.time_per_output_token * 1000 <= options_.slo_tpot_ms;
    record.slo_met = served && ttft_ok && tpot_ok;
  }
  metrics_->RecordRequest(record);
}

std::string OpenAiStream::FullResponse() const {
  const bool chat = options_.endpoint == OpenAiEndpoint::kChatCompletions;
  json choices = json::array();
  for (const auto& group : groups_) {
    for (const Choice& c : group->choices) {
      json item = {{"index", c.index}};
      std::string finish_reason = c.finish_reason;
      if (chat && options_.tool_format.has_value()) {
        ParsedToolCalls parsed = ParseToolCalls(*options_.tool_format, c.text, options_.tools);
        if (parsed.calls.empty()) {
          // The generic form's response is unwrapped; other families' text stays as written.
          const bool generic = *options_.tool_format == ToolCallFormat::kGeneric;
          item["message"] = {{"role", "assistant"}, {"content", generic ? parsed.content : c.text}};
        } else {
          item["message"] = {
              {"role", "assistant"},
              {"content", parsed.content.empty() ? json(nullptr) : json(parsed.content)},
              {"tool_calls", ToolCallsJson(c, parsed.calls, false)}};
          finish_reason = "tool_calls";
        }
      } else if (chat) {
        item["message"] = {{"role", "assistant"}, {"content", c.text}};
      } else {
        item["text"] = c.text;
      }
      json logprobs = c.logprobs;
      if (options_.logprobs.has_value() && logprobs.is_null()) {
        logprobs = chat ? json{{"content", json::array()}}
                        : json{{"tokens", json::array()},
                               {"token_logprobs", json::array()},
                               {"top_logprobs", json::array()},
                               {"text_offset", json::array()}};
      }
      item["logprobs"] = std::move(logprobs);
      item["finish_reason"] = std::move(finish_reason);
      choices.push_back(std::move(item));
    }
  }
  json response = {{"id", options_.id},
                   {"object", chat ? "chat.completion" : "text_completion"},
                   {"created", options_.created_unix_seconds},
                   {"model", options_.model},
                   {"system_fingerprint", Fingerprint()},
                   {"choices", std::move(choices)},
                   {"usage", UsageJson()}};
  return Dump(response);
}

StreamChunk OpenAiStream::Poll() {
  MutexLock lock(mutex_);
  if (done_) return StreamChunk{.data = "", .done = true, .status = 0};
  std::string out;
  const bool chat = options_.endpoint == OpenAiEndpoint::kChatCompletions;
  if (options_.stream && chat && !roles_sent_) {
    roles_sent_ = true;
    for (const auto& group : groups_) {
      for (const Choice& c : group->choices) {
        json item = {{"index", c.index},
                     {"delta", {{"role", "assistant"}, {"content", ""}}},
                     {"logprobs", nullptr},
                     {"finish_reason", nullptr}};
        out += ChunkJson(json::array({std::move(item)}));
      }
    }
  }
  for (const auto& group : groups_) {
    if (group->finished) continue;
    std::vector<engine::Event> events = group->prompt.handle->Drain();
    for (engine::Event& event : events) {
      HandleEvent(*group, event, out);
      if (failure_.has_value()) break;
    }
    if (failure_.has_value()) break;
    FinishGroupIfDone(*group);
  }

  if (failure_.has_value()) {
    AbortAll();
    done_ = true;
    for (const auto& group : groups_) {
      if (group->finished) continue;
      group->finished = true;
      RecordGroup(*group, failure_->finish_reason);
    }
    const std::string error = ErrorJson(failure_->status, failure_->message);
    if (options_.stream) return StreamChunk{.data = out + SseEvent(error), .done = true};
    StreamChunk failed{.data = error, .done = true, .status = failure_->status};
    if (failure_->retry_after) failed.headers.emplace_back("Retry-After", "1");
    return failed;
  }
  const bool all_finished = std::all_of(groups_.begin(), groups_.end(),
                                        [](const auto& group) { return group->finished; });
  if (!all_finished) return StreamChunk{.data = std::move(out), .done = false};
  done_ = true;
  if (!options_.stream) return StreamChunk{.data = FullResponse(), .done = true};
  if (options_.include_usage) {
    const json chunk = {{"id", options_.id},
                        {"object", chat ? "chat.completion.chunk" : "text_completion"},
                        {"created", options_.created_unix_seconds},
                        {"model", options_.model},
                        {"system_fingerprint", Fingerprint()},
                        {"choices", json::array()},
                        {"usage", UsageJson()}};
    out += SseEvent(Dump(chunk));
  }
  out += "data: [DONE]\n\n";
  return StreamChunk{.data = std::move(out), .done = true};
}

}  // namespace pier::api

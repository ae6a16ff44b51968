#include "api/openai/openai_api.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "api/openai/chat_messages.h"
#include "api/openai/generic_tools.h"
#include "api/openai/openai_request.h"
#include "api/openai/openai_stream.h"
#include "api/pending_response.h"
#include "api/responses/responses_request.h"
#include "api/responses/responses_stream.h"
#include "api/status_map.h"
#include "common/build_info.h"
#include "common/mutex.h"
#include "engine/core/kv_ceiling.h"
#include "grammar/constraint.h"
#include "serving/request_policy.h"
#include "tokenizer/chat_prompt.h"

namespace pier::api {

namespace {

// Without a limit from the options or the engine (should not happen): a modest default.
constexpr int64_t kFallbackMaxTokens = 256;

HttpResponse FromError(const OpenAiError& e) {
  return ErrorResponse(e.status, e.message, e.param, e.code);
}

// An engine Submit error as the client should see it.
HttpResponse FromSubmitError(const Status& status) {
  HttpResponse response = ErrorResponse(HttpStatusOf(status), status.message());
  if (response.status == 429) response.headers.emplace_back("Retry-After", "1");
  return response;
}

// The request's settings a Response object repeats, with the API's defaults where absent.
nlohmann::ordered_json ResponseSettings(std::string_view body) {
  using ojson = nlohmann::ordered_json;
  const ojson request = ojson::parse(body.begin(), body.end(), nullptr, false);
  ojson settings = {{"instructions", nullptr},
                    {"max_output_tokens", nullptr},
                    {"parallel_tool_calls", true},
                    {"temperature", 1.0},
                    {"tool_choice", "auto"},
                    {"tools", ojson::array()},
                    {"top_p", 1.0},
                    {"text", {{"format", {{"type", "text"}}}}},
                    {"metadata", ojson::object()}};
  if (!request.is_object()) return settings;
  for (auto& [key, value] : settings.items()) {
    if (auto it = request.find(key); it != request.end() && !it->is_null()) value = *it;
  }
  return settings;
}

}  // namespace

struct OpenAiApi::Impl {
  OpenAiApiOptions options;
  serving::ModelRegistry* registry;
  const ApiKeys* keys;
  serving::ServingMetrics* metrics;

  Mutex rng_mutex;
  std::mt19937_64 rng PIER_GUARDED_BY(rng_mutex);  // response ids and seeds not given

  // Whether a chat template shows tools (ChatTemplateShowsTools renders it), by the hash of
  // its source: asked once per template, not per request.
  Mutex probe_mutex;
  std::unordered_map<size_t, bool> shows_tools PIER_GUARDED_BY(probe_mutex);

  bool ShowsTools(const tokenizer::ChatTemplate& chat_template,
                  const tokenizer::Tokenizer& tokenizer) {
    const size_t key = std::hash<std::string>{}(chat_template.source());
    {
      MutexLock lock(probe_mutex);
      if (auto it = shows_tools.find(key); it != shows_tools.end()) return it->second;
    }
    const bool shows = tokenizer::ChatTemplateShowsTools(chat_template, tokenizer);
    MutexLock lock(probe_mutex);
    shows_tools[key] = shows;
    return shows;
  }

  // The form a chat request's tools take on `model` (its tool_format setting, and whether its
  // template shows tools), or the 400 that refuses them.
  std::variant<ToolCallFormat, HttpResponse> ToolFormatFor(const serving::ServedModel& model) {
    using serving::ToolFormat;
    if (model.tool_format == ToolFormat::kOff) {
      return ErrorResponse(400, "tool calling is off for model " + model.id + " (tool_format: off)",
                           "tools");
    }
    if (model.tool_format == ToolFormat::kGeneric) return ToolCallFormat::kGeneric;
    if (ShowsTools(*model.chat_template, *model.tokenizer)) {
      return DetectToolCallFormat(model.chat_template->source());
    }
    if (model.tool_format == ToolFormat::kAuto) return ToolCallFormat::kGeneric;
    return ErrorResponse(400,
                         "model " + model.id +
                             "'s chat template does not support tools (it does not show them "
                             "to the model); set a chat_template for it that does, or "
                             "tool_format: generic",
                         "tools");
  }

  uint64_t Random() {
    MutexLock lock(rng_mutex);
    return rng();
  }

  std::string ResponseId(OpenAiEndpoint endpoint) {
    char hex[33];
    std::snprintf(hex, sizeof(hex), "%016llx%016llx", static_cast<unsigned long long>(Random()),
                  static_cast<unsigned long long>(Random()));
    return (endpoint == OpenAiEndpoint::kChatCompletions ? "chatcmpl-" : "cmpl-") +
           std::string(hex, 24);
  }

  serving::FallbackSwitch fallback_switch;

  // The model that answers a request for ready model `found`: its fallback while the switch
  // is engaged and the request allows it (else `found` itself). Sets `*diverted_from` to the
  // primary's id when it diverts.
  serving::ModelRef ChooseModel(const HttpRequest& http, const OpenAiRequest& r,
                                const Principal& principal, const serving::ModelEntry& found,
                                std::string* diverted_from);
  HttpResponse Handle(const HttpRequest& http, OpenAiEndpoint endpoint);
  // POST /v1/responses: the request as chat (responses_request.h), answered through a
  // ResponsesStream over the chat stream.
  HttpResponse HandleResponses(const HttpRequest& http);
  // Handle() once the request is parsed and its model found ready.
  HttpResponse Serve(const HttpRequest& http, OpenAiEndpoint endpoint, const OpenAiRequest& r,
                     const Principal& principal, const serving::ModelRef& model_ref);
  // Serve() once the request's priority class is decided: admission and submission.
  HttpResponse ServeInClass(const HttpRequest& http, OpenAiEndpoint endpoint,
                            const OpenAiRequest& r, const Principal& principal,
                            const serving::ModelRef& model_ref,
                            const serving::RequestClass& request_class);
  // The prompt of each engine request (token ids) and, with echo, its text; or the error.
  // `tool_format`: the form of the request's tools (unset without tools or under "none").
  std::variant<std::vector<OpenAiStreamPrompt>, HttpResponse> Prompts(
      const OpenAiRequest& r, const serving::ServedModel& model,
      std::optional<ToolCallFormat> tool_format);
};

std::variant<std::vector<OpenAiStreamPrompt>, HttpResponse> OpenAiApi::Impl::Prompts(
    const OpenAiRequest& r, const serving::ServedModel& model,
    std::optional<ToolCallFormat> tool_format) {
  const tokenizer::Tokenizer* tokenizer = model.tokenizer;
  const tokenizer::ChatTemplate* chat_template = model.chat_template;
  std::vector<OpenAiStreamPrompt> prompts;
  if (r.endpoint == OpenAiEndpoint::kChatCompletions) {
    if (chat_template == nullptr) {
      return ErrorResponse(400, "model " + model.id + " has no chat template; use /v1/completions");
    }
    using ojson = nlohmann::ordered_json;
    // The generic form shows the tools in the conversation itself; a template's own family
    // gets them as its `tools` variable.
    const bool generic = tool_format == ToolCallFormat::kGeneric;
    const ojson messages = generic ? GenericToolMessages(r.messages, r.tools, r.tool_choice)
                                   : TemplateMessages(r.messages);
    std::optional<ojson> tools;
    if (tool_format.has_value() && !generic) tools = ojson::parse(ToolsJsonForTemplate(r.tools));
    Result<tokenizer::ChatPrompt> rendered = tokenizer::RenderChatPrompt(
        *chat_template, *tokenizer, messages, true, tools.has_value() ? &*tools : nullptr);
    if (!rendered.ok()) return ErrorResponse(400, rendered.status().message(), r.messages_param);
    OpenAiStreamPrompt prompt;
    prompt.prompt_tokens = std::move(rendered->tokens);
    prompts.push_back(std::move(prompt));
    return prompts;
  }
  for (size_t i = 0; i < r.prompts.size(); ++i) {
    const CompletionPrompt& p = r.prompts[i];
    OpenAiStreamPrompt prompt;
    if (p.is_tokens) {
      for (int32_t id : p.tokens) {
        if (id >= tokenizer->vocab_size()) {
          return ErrorResponse(400,
                               "prompt token id " + std::to_string(id) +
                                   " is outside the vocabulary (size " +
                                   std::to_string(tokenizer->vocab_size()) + ")",
                               "prompt");
        }
      }
      prompt.prompt_tokens = p.tokens;
      if (r.echo) prompt.echo_text = tokenizer->Decode(p.tokens);
    } else {
      Result<std::vector<int32_t>> tokens = tokenizer->Encode(p.text);
      if (!tokens.ok()) return ErrorResponse(400, tokens.status().message(), "prompt");
      prompt.prompt_tokens = std::move(tokens).value();
      if (r.echo) prompt.echo_text = p.text;
    }
    if (prompt.prompt_tokens.empty()) {
      return ErrorResponse(400, "prompt " + std::to_string(i) + " is empty (no tokens)", "prompt");
    }
    prompts.push_back(std::move(prompt));
  }
  return prompts;
}

HttpResponse OpenAiApi::Impl::Handle(const HttpRequest& http, OpenAiEndpoint endpoint) {
  Principal principal;
  if (keys != nullptr) {
    auto auth = keys->Authenticate(http);
    if (auto* denied = std::get_if<HttpResponse>(&auth)) return std::move(*denied);
    principal = std::get<Principal>(std::move(auth));
  }

  const OpenAiRequestLimits limits{.max_n = options.max_n};
  OpenAiParseResult parsed = endpoint == OpenAiEndpoint::kChatCompletions
                                 ? ParseChatCompletionRequest(http.body, limits)
                                 : ParseCompletionRequest(http.body, limits);
  if (const auto* error = std::get_if<OpenAiError>(&parsed)) return FromError(*error);
  const OpenAiRequest& r = std::get<OpenAiRequest>(parsed);
  // No model named: the server's default model serves it.
  Result<serving::ModelEntry> found = registry->Lookup(r.model);
  if (!found.ok()) {
    return ErrorResponse(404, found.status().message(), "model", "model_not_found");
  }
  if (found->state != serving::ModelState::kReady) {
    return ModelNotReady(registry, *found, options.load_wait,
                         [this, http, endpoint] { return Handle(http, endpoint); });
  }
  std::string diverted_from;
  const serving::ModelRef chosen = ChooseModel(http, r, principal, *found, &diverted_from);
  HttpResponse response = Serve(http, endpoint, r, principal, chosen);
  response.model = chosen->id;
  if (!diverted_from.empty()) response.headers.emplace_back("X-Pier-Fallback", diverted_from);
  return response;
}

serving::ModelRef OpenAiApi::Impl::ChooseModel(const HttpRequest& http, const OpenAiRequest& r,
                                               const Principal& principal,
                                               const serving::ModelEntry& found,
                                               std::string* diverted_from) {
  const serving::ModelRef& primary = found.model;
  if (!options.fallback_of || primary->kind != serving::ModelKind::kGenerate || !r.fallback) {
    return primary;
  }
  if (std::optional<std::string_view> no = http.Header("x-pier-no-fallback");
      no.has_value() && *no != "0" && *no != "false") {
    return primary;
  }
  const std::optional<serving::FallbackRoute> route = options.fallback_of(found.id);
  if (!route.has_value() || route->model.empty()) return primary;
  // The class the request will run at (a bad priority is refused later, on the primary).
  Result<serving::RequestClass> request_class = serving::ResolveRequestClass(
      r.priority, http.Header("x-priority"), principal.tenant, principal.max_priority);
  if (!request_class.ok()) return primary;
  const std::optional<std::string_view> reason = fallback_switch.Divert(
      found.id, route->when, primary->client->Stats(), request_class->priority);
  if (!reason.has_value()) return primary;
  const std::string class_name(engine::PriorityName(request_class->priority));
  Result<serving::ModelEntry> fallback = registry->Lookup(route->model);
  if (!fallback.ok() || fallback->state != serving::ModelState::kReady ||
      fallback->model == nullptr || fallback->model->kind != serving::ModelKind::kGenerate) {
    // Queued on the primary instead, and counted.
    if (metrics != nullptr) {
      metrics->RecordQosOutcome(found.id, principal.tenant, class_name, "fallback_unavailable");
    }
    return primary;
  }
  if (metrics != nullptr) {
    metrics->RecordQosOutcome(found.id, principal.tenant, class_name,
                              "fallback_" + std::string(*reason));
  }
  *diverted_from = found.id;
  return fallback->model;
}

HttpResponse OpenAiApi::Impl::HandleResponses(const HttpRequest& http) {
  Principal principal;
  if (keys != nullptr) {
    auto auth = keys->Authenticate(http);
    if (auto* denied = std::get_if<HttpResponse>(&auth)) return std::move(*denied);
    principal = std::get<Principal>(std::move(auth));
  }
  OpenAiParseResult parsed = ParseResponsesRequest(http.body, {.max_n = options.max_n});
  if (const auto* error = std::get_if<OpenAiError>(&parsed)) return FromError(*error);
  OpenAiRequest r = std::get<OpenAiRequest>(std::move(parsed));
  r.include_usage = r.stream;  // response.completed carries the usage
  Result<serving::ModelEntry> found = registry->Lookup(r.model);
  if (!found.ok()) {
    return ErrorResponse(404, found.status().message(), "model", "model_not_found");
  }
  if (found->state != serving::ModelState::kReady) {
    return ModelNotReady(registry, *found, options.load_wait,
                         [this, http] { return HandleResponses(http); });
  }
  std::string diverted_from;
  const serving::ModelRef chosen = ChooseModel(http, r, principal, *found, &diverted_from);
  HttpResponse response = Serve(http, OpenAiEndpoint::kChatCompletions, r, principal, chosen);
  response.model = chosen->id;
  if (!diverted_from.empty()) response.headers.emplace_back("X-Pier-Fallback", diverted_from);
  if (response.stream == nullptr) return response;  // refused before anything ran

  ResponsesStreamOptions options;
  options.id = "resp_" + ResponseId(OpenAiEndpoint::kCompletions).substr(5);
  options.model = chosen->id;
  options.created_at = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  options.stream = r.stream;
  options.settings = ResponseSettings(http.body);
  response.stream =
      std::make_shared<ResponsesStream>(std::move(response.stream), std::move(options));
  return response;
}

HttpResponse OpenAiApi::Impl::Serve(const HttpRequest& http, OpenAiEndpoint endpoint,
                                    const OpenAiRequest& r, const Principal& principal,
                                    const serving::ModelRef& model_ref) {
  const serving::ServedModel& model = *model_ref;
  if (model.kind != serving::ModelKind::kGenerate) {
    return ErrorResponse(400,
                         "model '" + model.id + "' is an " +
                             std::string(serving::ModelKindName(model.kind)) +
                             "ding model; it serves POST /v1/embeddings, not text generation",
                         "model", "model_kind");
  }
  const tokenizer::Tokenizer* tokenizer = model.tokenizer;
  for (const auto& [token, bias] : r.logit_bias) {
    if (token >= tokenizer->vocab_size()) {
      return ErrorResponse(400,
                           "logit_bias token id " + std::to_string(token) +
                               " is outside the vocabulary (size " +
                               std::to_string(tokenizer->vocab_size()) + ")",
                           "logit_bias");
    }
  }
  if (r.max_tokens.has_value() && options.max_tokens_limit > 0 &&
      *r.max_tokens > options.max_tokens_limit) {
    return ErrorResponse(400,
                         r.max_tokens_param + " " + std::to_string(*r.max_tokens) +
                             " is above this server's limit of " +
                             std::to_string(options.max_tokens_limit),
                         r.max_tokens_param);
  }

  // Priority: the body wins over the X-Priority header; the key's ceiling applies to both.
  Result<serving::RequestClass> request_class = serving::ResolveRequestClass(
      r.priority, http.Header("x-priority"), principal.tenant, principal.max_priority);
  if (!request_class.ok()) {
    return ErrorResponse(400, request_class.status().message(), "priority");
  }
  // Every answer from here on, refusals (429) included, names the class it was decided in.
  HttpResponse response = ServeInClass(http, endpoint, r, principal, model_ref, *request_class);
  response.headers.emplace_back("X-Priority-Applied",
                                std::string(engine::PriorityName(request_class->priority)));
  return response;
}

HttpResponse OpenAiApi::Impl::ServeInClass(const HttpRequest& http, OpenAiEndpoint endpoint,
                                           const OpenAiRequest& r, const Principal& principal,
                                           const serving::ModelRef& model_ref,
                                           const serving::RequestClass& request_class) {
  const serving::ServedModel& model = *model_ref;
  engine::EngineClient* client = model.client;
  const tokenizer::Tokenizer* tokenizer = model.tokenizer;
  const engine::Priority priority = request_class.priority;
  const std::string class_name(engine::PriorityName(priority));
  Result<std::optional<int64_t>> client_deadline_ms =
      serving::ResolveClientDeadlineMs(r.deadline_ms, http.Header("x-request-deadline-ms"));
  if (!client_deadline_ms.ok()) {
    return ErrorResponse(400, client_deadline_ms.status().message(),
                         r.deadline_ms.has_value() ? "deadline_ms" : "X-Request-Deadline-Ms");
  }

  std::optional<ToolCallFormat> tool_format;
  if (r.endpoint == OpenAiEndpoint::kChatCompletions &&
      r.tool_choice.kind != ToolChoiceKind::kNone && model.chat_template != nullptr) {
    auto format_or = ToolFormatFor(model);
    if (auto* error = std::get_if<HttpResponse>(&format_or)) return std::move(*error);
    tool_format = std::get<ToolCallFormat>(format_or);
  }
  auto prompts_or = Prompts(r, model, tool_format);
  if (auto* error = std::get_if<HttpResponse>(&prompts_or)) return std::move(*error);
  std::vector<OpenAiStreamPrompt> prompts = std::get<0>(std::move(prompts_or));

  const engine::EngineStats engine_stats = client->Stats();
  int64_t limit = model.max_request_tokens;
  if (limit <= 0) limit = engine_stats.max_request_tokens;
  // Under a tight memory budget the KV cache may never reach the model's own limit: what it
  // could hold (every other model's KV at its minimum) bounds the request, and a request past
  // it is refused now rather than queued for memory that can never come.
  const bool memory_bound =
      engine_stats.kv_ceiling_tokens > 0 && (limit <= 0 || engine_stats.kv_ceiling_tokens < limit);
  if (memory_bound) limit = engine_stats.kv_ceiling_tokens;
  auto memory_refusal = [&](int64_t tokens) {
    return engine::KvCeilingRefusal(tokens, engine_stats.kv_ceiling_tokens,
                                    engine_stats.kv_bytes_per_token)
        .value_or(std::string());
  };
  const std::string prompt_param =
      endpoint == OpenAiEndpoint::kChatCompletions ? r.messages_param : "prompt";
  std::vector<int32_t> max_tokens(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t prompt_tokens = static_cast<int64_t>(prompts[i].prompt_tokens.size());
    if (r.max_tokens.has_value()) {
      if (memory_bound && prompt_tokens + *r.max_tokens > limit) {
        return ErrorResponse(400, memory_refusal(prompt_tokens + *r.max_tokens),
                             r.max_tokens_param);
      }
      if (limit > 0 && prompt_tokens + *r.max_tokens > limit) {
        return ErrorResponse(400,
                             "the prompt (" + std::to_string(prompt_tokens) + " tokens) plus " +
                                 r.max_tokens_param + " (" + std::to_string(*r.max_tokens) +
                                 ") exceeds the model's limit of " + std::to_string(limit) +
                                 " tokens",
                             r.max_tokens_param);
      }
      max_tokens[i] = static_cast<int32_t>(*r.max_tokens);
      continue;
    }
    if (memory_bound && prompt_tokens >= limit) {
      return ErrorResponse(400, memory_refusal(prompt_tokens + 1), prompt_param);
    }
    if (limit > 0 && prompt_tokens >= limit) {
      return ErrorResponse(400,
                           "the prompt has " + std::to_string(prompt_tokens) +
                               " tokens; the model's limit is " + std::to_string(limit) +
                               " tokens, prompt and completion together",
                           prompt_param);
    }
    int64_t room = limit > 0 ? limit - prompt_tokens : kFallbackMaxTokens;
    if (options.default_max_tokens > 0) room = std::min<int64_t>(room, options.default_max_tokens);
    if (options.max_tokens_limit > 0) room = std::min<int64_t>(room, options.max_tokens_limit);
    max_tokens[i] =
        static_cast<int32_t>(std::min<int64_t>(room, std::numeric_limits<int32_t>::max()));
  }

  // Admission control: a request that could only start after its queue deadline, by the
  // queue's measured drain rate, is refused now (429) instead of failing later.
  const auto now = std::chrono::steady_clock::now();
  const std::optional<std::chrono::steady_clock::time_point> queue_deadline =
      serving::RequestQueueDeadline(options.class_max_queue, priority, *client_deadline_ms, now);
  if (queue_deadline.has_value()) {
    const std::optional<double> wait_ms =
        serving::PredictQueueWaitMs(client->Stats(), priority, principal.tenant);
    const auto allowed_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(*queue_deadline - now).count();
    const bool client_set =
        client_deadline_ms->has_value() && **client_deadline_ms == static_cast<int64_t>(allowed_ms);
    // A class whose deadline action is delay waits on past its deadline: never refused here.
    const bool delays = options.class_max_queue.delay[static_cast<size_t>(priority)];
    if (wait_ms.has_value() && *wait_ms > static_cast<double>(allowed_ms) && !delays) {
      if (metrics != nullptr) {
        metrics->RecordQosOutcome(model.id, principal.tenant, class_name, "refused_predicted_wait");
      }
      HttpResponse refused = ErrorResponse(
          429,
          "the queue's predicted wait for class " + class_name + " is " +
              std::to_string(static_cast<int64_t>(*wait_ms)) + " ms, past this request's " +
              (client_set ? "deadline_ms" : "class max queue time") + " of " +
              std::to_string(allowed_ms) + " ms",
          {}, "queue_deadline");
      refused.headers.emplace_back(
          "Retry-After",
          std::to_string(std::max<int64_t>(1, static_cast<int64_t>(std::ceil(*wait_ms / 1000.0)))));
      return refused;
    }
  }

  // The key's abuse limits and its class's: sizes first (400, nothing taken), then the slots
  // and rates (429).
  std::shared_ptr<KeySlot> slot;
  const SizeLimit max_prompt = MaxPromptTokens(principal, priority);
  const SizeLimit max_output = MaxOutputTokens(principal, priority);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto prompt_tokens = static_cast<int64_t>(prompts[i].prompt_tokens.size());
    if (max_prompt.value > 0 && prompt_tokens > max_prompt.value) {
      return ErrorResponse(400,
                           "the prompt has " + std::to_string(prompt_tokens) +
                               " tokens; this API key allows at most " +
                               std::to_string(max_prompt.value) + " (" + max_prompt.setting + ")",
                           prompt_param);
    }
    if (max_output.value <= 0) continue;
    if (!r.max_tokens.has_value()) {
      // No max_tokens given: the default shrinks to what the key allows.
      max_tokens[i] = static_cast<int32_t>(
          std::max<int64_t>(1, std::min<int64_t>(max_tokens[i], max_output.value / r.n)));
    }
    const int64_t output = static_cast<int64_t>(max_tokens[i]) * r.n;
    if (output > max_output.value) {
      return ErrorResponse(400,
                           "n x " + r.max_tokens_param + " is " + std::to_string(output) +
                               "; this API key allows at most " + std::to_string(max_output.value) +
                               " (" + max_output.setting + ")",
                           r.max_tokens_param);
    }
  }
  // What the request may cost at most: its prompts and every choice's max_tokens.
  int64_t cost = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    cost += static_cast<int64_t>(prompts[i].prompt_tokens.size()) +
            static_cast<int64_t>(max_tokens[i]) * r.n;
  }
  if (std::optional<KeyRefusal> refused =
          AdmitKeyRequest(principal, priority, cost, "prompt plus n x " + r.max_tokens_param,
                          r.max_tokens_param, &slot)) {
    if (metrics != nullptr) {
      metrics->RecordQosOutcome(model.id, principal.tenant, class_name,
                                refused->status.code() == StatusCode::kResourceExhausted
                                    ? "refused_key_rate"
                                    : "refused_key_size");
    }
    return ResponseOf(*refused);
  }

  OpenAiStreamOptions stream_options;
  stream_options.endpoint = endpoint;
  stream_options.id = ResponseId(endpoint);
  stream_options.model = model.id;
  stream_options.created_unix_seconds = std::chrono::duration_cast<std::chrono::seconds>(
                                            std::chrono::system_clock::now().time_since_epoch())
                                            .count();
  stream_options.stream = r.stream;
  stream_options.include_usage = r.include_usage;
  stream_options.n = r.n;
  stream_options.logprobs = r.logprobs;
  stream_options.echo = r.echo && endpoint == OpenAiEndpoint::kCompletions;
  stream_options.system_fingerprint = std::string(SystemFingerprint());
  stream_options.tenant = principal.tenant;
  stream_options.priority_class = class_name;
  stream_options.slo_ttft_ms = options.class_slo.ttft_ms[static_cast<size_t>(priority)];
  stream_options.slo_tpot_ms = options.class_slo.tpot_ms[static_cast<size_t>(priority)];
  if (options.board != nullptr) {
    stream_options.live = options.board->Open({.request_id = stream_options.id,
                                               .model = model.id,
                                               .route = http.path,
                                               .tenant = principal.tenant,
                                               .priority_class = class_name});
  }
  if (slot == nullptr) {
    stream_options.keep_alive = model_ref;
  } else {
    // The key's slot is held as long as the model: until the response has ended.
    struct Hold {
      serving::ModelRef model;
      std::shared_ptr<KeySlot> slot;
    };
    stream_options.keep_alive = std::make_shared<const Hold>(Hold{model_ref, std::move(slot)});
  }
  grammar::OutputConstraint constraint = r.constraint;
  if (tool_format.has_value()) {
    const ToolCallFormat format = *tool_format;
    stream_options.tool_format = format;
    stream_options.tools = r.tools;
    stream_options.parallel_tool_calls = r.parallel_tool_calls;
    if (format == ToolCallFormat::kGeneric) {
      // The answer is always one of the form's JSON objects; a response_format of the
      // request's own (under auto) takes precedence, and the answer is still read back.
      if (r.tool_choice.kind != ToolChoiceKind::kAuto || !constraint.active()) {
        if (r.tool_choice.kind == ToolChoiceKind::kAuto) {
          // Under auto too the calls are enforced: checked as required and named are when the
          // request is read, so the error names the tool's own schema.
          const Status enforceable = grammar::CheckConstraint(ToolCallConstraint(
              ToolCallFormat::kJson, r.tools, ToolChoice{ToolChoiceKind::kRequired, ""}));
          if (!enforceable.ok()) {
            return ErrorResponse(
                400, "a tool's parameters cannot be enforced: " + enforceable.message(), "tools");
          }
        }
        constraint = GenericToolConstraint(r.tools, r.tool_choice, r.parallel_tool_calls);
      }
    } else if (r.tool_choice.kind != ToolChoiceKind::kAuto) {
      constraint = ToolCallConstraint(format, r.tools, r.tool_choice);
    }
  }

  const uint64_t seed = r.seed.has_value() ? *r.seed : Random();
  for (size_t i = 0; i < prompts.size(); ++i) {
    engine::Request request;
    request.id = stream_options.id + "-" + std::to_string(i);
    request.prompt_tokens = prompts[i].prompt_tokens;
    request.sampling.temperature = r.temperature;
    request.sampling.top_k = r.top_k;
    request.sampling.top_p = r.top_p;
    request.sampling.min_p = r.min_p;
    request.sampling.repetition_penalty = r.repetition_penalty;
    request.sampling.presence_penalty = r.presence_penalty;
    request.sampling.frequency_penalty = r.frequency_penalty;
    // Choice i of prompt p samples with seed + p * n + i: seed + its index in the response.
    request.sampling.seed = seed + static_cast<uint64_t>(i) * static_cast<uint64_t>(r.n);
    request.sampling.logprobs = r.logprobs;
    request.sampling.logit_bias = r.logit_bias;
    request.n = r.n;
    request.max_tokens = max_tokens[i];
    request.stop = r.stop;
    request.ignore_eos = r.ignore_eos;
    request.constraint = constraint;
    if (stream_options.echo && r.logprobs.has_value()) request.prompt_logprobs = *r.logprobs;
    request.priority = priority;
    request.tenant = request_class.tenant;
    request.tenant_weight = principal.weight;
    if (queue_deadline.has_value()) {
      request.deadline_us =
          std::chrono::duration_cast<std::chrono::microseconds>(queue_deadline->time_since_epoch())
              .count();
      request.on_deadline = options.class_max_queue.delay[static_cast<size_t>(priority)]
                                ? engine::Request::DeadlineAction::kDelay
                                : engine::Request::DeadlineAction::kReject;
    }
    prompts[i].engine_id = request.id;
    if (Status valid = request.sampling.Validate(); !valid.ok()) {
      for (size_t j = 0; j < i; ++j) client->Abort(prompts[j].engine_id);
      return ErrorResponse(400, valid.message());
    }
    Result<std::shared_ptr<engine::RequestHandle>> handle = client->Submit(std::move(request));
    if (!handle.ok()) {
      for (size_t j = 0; j < i; ++j) client->Abort(prompts[j].engine_id);
      return FromSubmitError(handle.status());
    }
    prompts[i].handle = std::move(handle).value();
  }

  HttpResponse response;
  if (r.stream) {
    response.content_type = "text/event-stream";
    response.chunked = true;
    response.headers.emplace_back("Cache-Control", "no-cache");
  }
  response.stream = std::make_shared<OpenAiStream>(std::move(stream_options), std::move(prompts),
                                                   client, tokenizer, metrics);
  return response;
}

OpenAiApi::OpenAiApi(OpenAiApiOptions options, serving::ModelRegistry* registry,
                     const ApiKeys* keys, serving::ServingMetrics* metrics)
    : impl_(std::make_shared<Impl>()) {
  impl_->options = std::move(options);
  impl_->registry = registry;
  impl_->keys = keys;
  impl_->metrics = metrics;
  std::random_device device;
  MutexLock lock(impl_->rng_mutex);
  impl_->rng.seed((static_cast<uint64_t>(device()) << 32) ^ device());
}

OpenAiApi::~OpenAiApi() = default;

std::map<std::string, bool> OpenAiApi::FallbackStates() const {
  return impl_->fallback_switch.Snapshot();
}

void OpenAiApi::Register(Router& router) {
  std::shared_ptr<Impl> impl = impl_;
  router.Add("POST", "/v1/chat/completions", [impl](const HttpRequest& request) {
    return impl->Handle(request, OpenAiEndpoint::kChatCompletions);
  });
  router.Add("POST", "/v1/completions", [impl](const HttpRequest& request) {
    return impl->Handle(request, OpenAiEndpoint::kCompletions);
  });
  router.Add("POST", "/v1/responses",
             [impl](const HttpRequest& request) { return impl->HandleResponses(request); });
  router.Add("POST", "/responses",
             [impl](const HttpRequest& request) { return impl->HandleResponses(request); });
  router.Add("POST", "/chat/completions", [impl](const HttpRequest& request) {
    return impl->Handle(request, OpenAiEndpoint::kChatCompletions);
  });
  router.Add("POST", "/completions", [impl](const HttpRequest& request) {
    return impl->Handle(request, OpenAiEndpoint::kCompletions);
  });
}

}  // namespace pier::api

#include "serving/serving_metrics.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "common/mutex.h"
#include "engine/runner/local_model.h"
#include "metrics/registry.h"
#include "serving/demand_forecast.h"
#include "serving/live_figures.h"

namespace pier::serving {
namespace {

// Bucket bounds as vLLM uses them, so that dashboards and recording rules written for vLLM
// read Pier's histograms unchanged.
const std::vector<double>& TimeToFirstTokenBuckets() {
  static const std::vector<double> bounds = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                             0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                             20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
  return bounds;
}

const std::vector<double>& PerTokenBuckets() {
  static const std::vector<double> bounds = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                             0.3,  0.4,   0.5,  0.75,  1.0, 2.5,  5.0,
                                             7.5,  10.0,  20.0, 40.0,  80.0};
  return bounds;
}

const std::vector<double>& RequestLatencyBuckets() {
  static const std::vector<double> bounds = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                             5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                             60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
  return bounds;
}

const std::vector<double>& ModelLoadBuckets() {
  static const std::vector<double> bounds = {0.1,  0.25, 0.5,  1.0,   2.5,   5.0,
                                             10.0, 30.0, 60.0, 120.0, 300.0, 900.0};
  return bounds;
}

const std::vector<double>& TokenCountBuckets() {
  static const std::vector<double> bounds = metrics::OneTwoFiveBuckets(1e6);
  return bounds;
}

// Records a duration or count unless it was not measured (negative or NaN).
void ObserveMeasured(metrics::Histogram& histogram, double value) {
  if (value >= 0) histogram.Observe(value);
}

}  // namespace

struct ServingMetrics::Instruments {
  metrics::Family<metrics::Counter>* requests = nullptr;
  metrics::Family<metrics::Counter>* http_responses = nullptr;
  metrics::Family<metrics::Counter>* prompt_tokens = nullptr;
  metrics::Family<metrics::Counter>* generation_tokens = nullptr;
  metrics::Family<metrics::Counter>* prefix_queries = nullptr;
  metrics::Family<metrics::Counter>* prefix_hits = nullptr;
  metrics::Family<metrics::Counter>* client_aborts = nullptr;
  metrics::Family<metrics::Histogram>* ttft = nullptr;
  metrics::Family<metrics::Histogram>* tpot = nullptr;
  metrics::Family<metrics::Histogram>* itl = nullptr;
  metrics::Family<metrics::Histogram>* e2e = nullptr;
  metrics::Family<metrics::Histogram>* queue = nullptr;
  metrics::Family<metrics::Histogram>* prompt_length = nullptr;
  metrics::Family<metrics::Histogram>* generation_length = nullptr;
  metrics::Family<metrics::Histogram>* model_load = nullptr;
  metrics::Histogram* itl_child = nullptr;  // model = model_name_, the per-token hot path
  // QoS, per tenant and class.
  metrics::Family<metrics::Counter>* qos_requests = nullptr;
  metrics::Family<metrics::Counter>* qos_tokens = nullptr;
  metrics::Family<metrics::Histogram>* qos_ttft = nullptr;
  metrics::Family<metrics::Histogram>* qos_tpot = nullptr;
  metrics::Family<metrics::Histogram>* qos_queue = nullptr;
  metrics::Family<metrics::Gauge>* slo_attainment = nullptr;
  // The finished requests of the last 5 minutes per (model, class) whose class has an SLO:
  // (when, met), oldest first.
  struct SloWindow {
    std::deque<std::pair<double, bool>> finished;  // (when, met), oldest first
    int64_t met = 0;                               // of them
  };
  // Each model's demand (requests and tokens per second) and its forecast 5 minutes ahead,
  // for predictive scaling (pier_demand_*).
  struct Demand {
    DemandForecast requests;
    DemandForecast tokens;
  };
  Mutex demand_mutex;
  std::map<std::string, std::unique_ptr<Demand>> demand PIER_GUARDED_BY(demand_mutex);
  Demand& DemandOf(const std::string& model) {
    MutexLock lock(demand_mutex);
    std::unique_ptr<Demand>& d = demand[model];
    if (d == nullptr) d = std::make_unique<Demand>();
    return *d;  // never erased: the reference outlives the lock
  }

  Mutex slo_mutex;
  std::map<std::pair<std::string, std::string>, SloWindow> slo_windows PIER_GUARDED_BY(slo_mutex);

  void RecordSlo(const std::string& model, std::string_view priority_class, bool met) {
    constexpr double kWindowSeconds = 300;
    const double now = static_cast<double>(engine::NowUs()) / 1e6;
    MutexLock lock(slo_mutex);  // held through Set: the gauge never goes back to an older value
    SloWindow& w = slo_windows[{model, std::string(priority_class)}];
    w.finished.emplace_back(now, met);
    w.met += met ? 1 : 0;
    while (w.finished.front().first < now - kWindowSeconds) {
      w.met -= w.finished.front().second ? 1 : 0;
      w.finished.pop_front();
    }
    slo_attainment->WithLabels({{"model", model}, {"class", std::string(priority_class)}})
        .Set(static_cast<double>(w.met) / static_cast<double>(w.finished.size()));
  }
};

ServingMetrics::ServingMetrics(std::string model_name)
    : model_name_(std::move(model_name)),
      registry_(std::make_unique<metrics::Registry>()),
      instruments_(std::make_unique<Instruments>()) {
  metrics::Registry& r = *registry_;
  Instruments& in = *instruments_;
  in.requests = &r.AddCounter("pier_requests_total", "Requests finished, by finish reason.",
                              {"model", "finish_reason"});
  in.http_responses =
      &r.AddCounter("pier_http_responses_total", "HTTP responses sent, by status code and route.",
                    {"model", "code", "route"});
  in.prompt_tokens = &r.AddCounter("pier_prompt_tokens_total",
                                   "Prompt tokens of finished requests.", ModelLabel());
  in.generation_tokens = &r.AddCounter("pier_generation_tokens_total",
                                       "Tokens generated for finished requests.", ModelLabel());
  in.prefix_queries = &r.AddCounter(
      "pier_prefix_cache_queries_total",
      "Prompt tokens looked up in the prefix cache (every prompt token of a finished request).",
      ModelLabel());
  in.prefix_hits = &r.AddCounter("pier_prefix_cache_hits_total",
                                 "Prompt tokens served from the prefix cache.", ModelLabel());
  in.client_aborts =
      &r.AddCounter("pier_client_aborts_total",
                    "Requests aborted because the client went away or read too slowly, by reason.",
                    {"model", "reason"});
  in.ttft = &r.AddHistogram("pier_time_to_first_token_seconds",
                            "Time from arrival to the first generated token.", ModelLabel(),
                            TimeToFirstTokenBuckets());
  in.tpot = &r.AddHistogram("pier_time_per_output_token_seconds",
                            "Per request: (last token - first token) / (generated tokens - 1).",
                            ModelLabel(), PerTokenBuckets());
  in.itl = &r.AddHistogram("pier_inter_token_latency_seconds",
                           "Every gap between two tokens of a stream as they were sent.",
                           ModelLabel(), PerTokenBuckets());
  in.e2e = &r.AddHistogram("pier_e2e_request_latency_seconds",
                           "Time from arrival to the end of the request.", ModelLabel(),
                           RequestLatencyBuckets());
  in.queue = &r.AddHistogram("pier_request_queue_time_seconds",
                             "Time from arrival to the first scheduled step.", ModelLabel(),
                             RequestLatencyBuckets());
  in.model_load = &r.AddHistogram(
      "pier_model_load_seconds",
      "Time to load one model instance (file, admission, weights, engine); _count: loads.",
      ModelLabel(), ModelLoadBuckets());
  in.prompt_length =
      &r.AddHistogram("pier_request_prompt_tokens", "Prompt tokens per finished request.",
                      ModelLabel(), TokenCountBuckets());
  in.generation_length =
      &r.AddHistogram("pier_request_generation_tokens", "Generated tokens per finished request.",
                      ModelLabel(), TokenCountBuckets());
  // Series of this model exist from the start (at zero), so that rate() sees their first
  // increase; finish reasons as the engine reports them.
  const metrics::Labels model = {{"model", model_name_}};
  for (metrics::Family<metrics::Counter>* family :
       {in.prompt_tokens, in.generation_tokens, in.prefix_queries, in.prefix_hits}) {
    family->WithLabels(model);
  }
  for (metrics::Family<metrics::Histogram>* family :
       {in.ttft, in.tpot, in.e2e, in.queue, in.prompt_length, in.generation_length}) {
    family->WithLabels(model);
  }
  for (const char* reason : {"stop", "length", "abort", "error"}) {
    in.requests->WithLabels({{"model", model_name_}, {"finish_reason", reason}});
  }
  in.itl_child = &in.itl->WithLabels(model);
  const std::vector<std::string> qos_labels = {"model", "tenant", "class"};
  in.qos_requests = &r.AddCounter(
      "pier_qos_requests_total",
      "Requests by tenant, priority class and outcome: served, expired (its queue deadline "
      "passed while it waited), abort, error, refused_* (refused on arrival, by reason), "
      "fallback_* (answered by the model's fallback, by trigger).",
      {"model", "tenant", "class", "outcome"});
  in.qos_tokens = &r.AddCounter(
      "pier_qos_tokens_total",
      "Tokens computed for finished requests (prompt tokens not served from the prefix cache, "
      "plus generated tokens), by tenant and class: the fair share's currency.",
      qos_labels);
  in.qos_ttft = &r.AddHistogram("pier_qos_time_to_first_token_seconds",
                                "Time from arrival to the first token, by tenant and class.",
                                qos_labels, TimeToFirstTokenBuckets());
  // With the time to first token, where a class's TTFT goes: waiting for admission, or its own
  // prefill (and the step in flight before it).
  in.qos_queue = &r.AddHistogram(
      "pier_qos_queue_time_seconds",
      "Time from arrival in the engine to the first step that computed the request, by tenant "
      "and class.",
      qos_labels, TimeToFirstTokenBuckets());
  in.qos_tpot = &r.AddHistogram("pier_qos_time_per_output_token_seconds",
                                "Mean time per output token of each request, by tenant and class.",
                                qos_labels, PerTokenBuckets());
  in.slo_attainment = &r.AddGauge(
      "pier_qos_slo_attainment_ratio",
      "Share of the class's requests finished in the last 5 minutes that met its SLO targets "
      "(class_ttft_ms, class_tpot_ms; expired and failed ones did not); updated as requests "
      "finish.",
      {"model", "class"});

  // vLLM's names for the same series (label model_name, as vLLM writes it).
  r.AddAlias(*in.prompt_tokens, "vllm:prompt_tokens_total", "Number of prefill tokens processed.",
             ModelNameLabel());
  r.AddAlias(*in.generation_tokens, "vllm:generation_tokens_total",
             "Number of generation tokens processed.", ModelNameLabel());
  r.AddAlias(*in.requests, "vllm:request_success_total",
             "Count of finished requests, by finish reason.", {"model_name", "finished_reason"});
  r.AddAlias(*in.prefix_queries, "vllm:prefix_cache_queries_total",
             "Prefix cache queries, in terms of number of queried tokens.", ModelNameLabel());
  r.AddAlias(*in.prefix_hits, "vllm:prefix_cache_hits_total",
             "Prefix cache hits, in terms of number of cached tokens.", ModelNameLabel());
  r.AddAlias(*in.ttft, "vllm:time_to_first_token_seconds",
             "Histogram of time to first token in seconds.", ModelNameLabel());
  // vLLM (v1) writes the per-token gaps under both names, and the per-request mean under
  // request_time_per_output_token.
  r.AddAlias(*in.itl, "vllm:inter_token_latency_seconds",
             "Histogram of inter-token latency in seconds.", ModelNameLabel());
  r.AddAlias(*in.itl, "vllm:time_per_output_token_seconds",
             "Histogram of time per output token in seconds (inter-token gaps, as vLLM v1).",
             ModelNameLabel());
  r.AddAlias(*in.tpot, "vllm:request_time_per_output_token_seconds",
             "Histogram of time per output token in seconds, one observation per request.",
             ModelNameLabel());
  r.AddAlias(*in.e2e, "vllm:e2e_request_latency_seconds",
             "Histogram of end to end request latency in seconds.", ModelNameLabel());
  r.AddAlias(*in.queue, "vllm:request_queue_time_seconds",
             "Histogram of time spent in the waiting queue in seconds.", ModelNameLabel());
  r.AddAlias(*in.prompt_length, "vllm:request_prompt_tokens",
             "Number of prefill tokens processed, per request.", ModelNameLabel());
  r.AddAlias(*in.generation_length, "vllm:request_generation_tokens",
             "Number of generation tokens processed, per request.", ModelNameLabel());
}

ServingMetrics::~ServingMetrics() = default;

void ServingMetrics::RecordRequest(const RequestRecord& record) {
  Instruments& in = *instruments_;
  const std::string model = record.model.empty() ? model_name_ : std::string(record.model);
  const metrics::Labels labels = {{"model", model}};
  in.requests->WithLabels({{"model", model}, {"finish_reason", std::string(record.finish_reason)}})
      .Increment();
  const double prompt = static_cast<double>(std::max<int64_t>(record.prompt_tokens, 0));
  const double generated = static_cast<double>(std::max<int64_t>(record.generation_tokens, 0));
  const double cached =
      std::clamp<double>(static_cast<double>(record.cached_prompt_tokens), 0, prompt);
  in.prompt_tokens->WithLabels(labels).Increment(prompt);
  in.generation_tokens->WithLabels(labels).Increment(generated);
  {
    const double now = static_cast<double>(engine::NowUs()) / 1e6;
    Instruments::Demand& demand = in.DemandOf(model);
    demand.requests.Record(now);
    demand.tokens.Record(now, prompt + generated);
  }
  in.prefix_queries->WithLabels(labels).Increment(prompt);
  in.prefix_hits->WithLabels(labels).Increment(cached);
  in.prompt_length->WithLabels(labels).Observe(prompt);
  in.generation_length->WithLabels(labels).Observe(generated);
  ObserveMeasured(in.queue->WithLabels(labels), record.queue_seconds);
  ObserveMeasured(in.ttft->WithLabels(labels), record.time_to_first_token);
  ObserveMeasured(in.tpot->WithLabels(labels), record.time_per_output_token);
  ObserveMeasured(in.e2e->WithLabels(labels), record.e2e_seconds);
  if (record.priority_class.empty()) return;
  const metrics::Labels qos = {{"model", model},
                               {"tenant", std::string(record.tenant)},
                               {"class", std::string(record.priority_class)}};
  const std::string_view reason = record.finish_reason;
  const std::string outcome = reason == "stop" || reason == "length" || reason == "tool_calls"
                                  ? "served"
                                  : std::string(reason);
  metrics::Labels with_outcome = qos;
  with_outcome.emplace_back("outcome", outcome);
  in.qos_requests->WithLabels(with_outcome).Increment();
  in.qos_tokens->WithLabels(qos).Increment(prompt - cached + generated);
  ObserveMeasured(in.qos_ttft->WithLabels(qos), record.time_to_first_token);
  ObserveMeasured(in.qos_tpot->WithLabels(qos), record.time_per_output_token);
  ObserveMeasured(in.qos_queue->WithLabels(qos), record.queue_seconds);
  if (record.slo_met.has_value()) in.RecordSlo(model, record.priority_class, *record.slo_met);
}

void ServingMetrics::RecordQosOutcome(std::string_view model, std::string_view tenant,
                                      std::string_view priority_class, std::string_view outcome) {
  instruments_->qos_requests
      ->WithLabels({{"model", model.empty() ? model_name_ : std::string(model)},
                    {"tenant", std::string(tenant)},
                    {"class", std::string(priority_class)},
                    {"outcome", std::string(outcome)}})
      .Increment();
}

void ServingMetrics::RecordInterTokenLatency(double seconds, std::string_view model) {
  if (model.empty() || model == model_name_) {
    ObserveMeasured(*instruments_->itl_child, seconds);  // no label lookup per token
    return;
  }
  ObserveMeasured(instruments_->itl->WithLabels({{"model", std::string(model)}}), seconds);
}

void ServingMetrics::RecordModelLoad(std::string_view model, double seconds) {
  ObserveMeasured(instruments_->model_load->WithLabels({{"model", std::string(model)}}), seconds);
}

void ServingMetrics::RecordHttpResponse(int status, std::string_view route,
                                        std::string_view model) {
  instruments_->http_responses
      ->WithLabels({{"model", std::string(model)},
                    {"code", std::to_string(status)},
                    {"route", std::string(route)}})
      .Increment();
}

void ServingMetrics::RecordClientAbort(std::string_view reason, std::string_view model) {
  const std::string name = model.empty() ? model_name_ : std::string(model);
  instruments_->client_aborts->WithLabels({{"model", name}, {"reason", std::string(reason)}})
      .Increment();
}

namespace {

void AddEmbeddingFigures(const std::string& model, const EmbeddingFigures& e, LiveFigures& live) {
  live.SetGauge(model, "pier_embedding_queue_texts", "Texts waiting for an embedding batch.",
                static_cast<double>(e.queued_texts));
  live.SetGauge(model, "pier_embedding_window_seconds",
                "The batching window in use (adapts below max_queue_delay_ms).", e.window_seconds);
  live.SetCounter(model, "pier_embedding_batches_total", "Embedding batches run.",
                  static_cast<double>(e.batches));
  live.SetCounter(model, "pier_embedding_texts_total", "Texts embedded.",
                  static_cast<double>(e.texts));
  live.SetCounter(model, "pier_embedding_tokens_total", "Tokens embedded.",
                  static_cast<double>(e.tokens));
  live.SetCounter(model, "pier_embedding_expired_total",
                  "Texts refused because they waited past their class's max queue time.",
                  static_cast<double>(e.expired));
  live.SetCounter(model, "pier_embedding_predicted_refusals_total",
                  "Requests refused on arrival: their predicted wait passed their class's max "
                  "queue time.",
                  static_cast<double>(e.predicted_refusals));
  live.SetHistogram(model, "pier_embedding_batch_texts", "Texts per embedding batch.",
                    e.batch_texts);
  live.SetHistogram(model, "pier_embedding_batch_tokens", "Tokens per embedding batch.",
                    e.batch_tokens);
  live.SetHistogram(model, "pier_embedding_queue_seconds",
                    "Per text: from arrival to the start of its batch.", e.queue_seconds);
  live.SetHistogram(model, "pier_embedding_compute_seconds",
                    "Per batch: the encoder's forward pass.", e.compute_seconds);
}

// A tensor model's batcher (TensorRunnerStats): the embedding batcher's figures in items (a
// request brings one or more items along the batch dimension). Items per second is
// rate(pier_tensor_items_total).
void AddTensorFigures(const std::string& model, const TensorRunnerStats& t, LiveFigures& live) {
  live.SetGauge(model, "pier_tensor_queue_items", "Items (batch rows) waiting for a batch.",
                static_cast<double>(t.queued_items));
  live.SetGauge(model, "pier_tensor_running_items", "Items in the batch running now.",
                static_cast<double>(t.running_items));
  live.SetGauge(model, "pier_tensor_window_seconds",
                "The batching window in use (adapts below max_queue_delay_ms).", t.window_seconds);
  live.SetCounter(model, "pier_tensor_batches_total", "Tensor batches run.",
                  static_cast<double>(t.batches));
  live.SetCounter(model, "pier_tensor_items_total", "Items (batch rows) run through the model.",
                  static_cast<double>(t.items));
  live.SetCounter(model, "pier_tensor_requests_total", "Requests run in a batch.",
                  static_cast<double>(t.requests));
  live.SetCounter(model, "pier_tensor_expired_total",
                  "Requests refused because they waited past their class's max queue time.",
                  static_cast<double>(t.expired));
  live.SetCounter(model, "pier_tensor_cancelled_total",
                  "Requests dropped or stopped because nobody waited for them any more.",
                  static_cast<double>(t.cancelled));
  live.SetHistogram(model, "pier_tensor_batch_items", "Items per tensor batch.", t.batch_items);
  live.SetHistogram(model, "pier_tensor_queue_seconds",
                    "Per request: from arrival to the start of its batch.", t.queue_seconds);
  live.SetHistogram(model, "pier_tensor_compute_seconds", "Per batch: the model's run.",
                    t.compute_seconds);
  if (t.decode_seconds.counts.empty()) return;  // no image input
  live.SetGauge(model, "pier_tensor_images_queued",
                "Images waiting to be decoded (an image input, preprocess:).",
                static_cast<double>(t.queued_images));
  live.SetCounter(model, "pier_tensor_images_total", "Images decoded for the model.",
                  static_cast<double>(t.images));
  live.SetCounter(model, "pier_tensor_images_refused_total",
                  "Requests refused for an image: not an image, too large, corrupt.",
                  static_cast<double>(t.images_refused));
  live.SetHistogram(model, "pier_tensor_decode_seconds",
                    "Per request: decoding, fitting and normalising its images.", t.decode_seconds);
}

// Speculative decoding (a model with `speculative:`): Pier's counters with vLLM's names beside
// them (vllm:spec_decode_*), the kept proposals per position and the histogram of proposals
// kept per draft.
void AddSpeculativeFigures(const std::string& model, const engine::EngineStats& e,
                           LiveFigures& live) {
  if (e.spec_accepted_lengths.empty()) return;  // speculation off
  auto& drafts = live.SetCounter(model, "pier_spec_decode_drafts_total",
                                 "Drafts verified: one sequence's proposed tokens in one step.",
                                 static_cast<double>(e.spec_drafts));
  auto& proposed =
      live.SetCounter(model, "pier_spec_decode_draft_tokens_total", "Proposed tokens verified.",
                      static_cast<double>(e.spec_draft_tokens));
  auto& accepted = live.SetCounter(model, "pier_spec_decode_accepted_tokens_total",
                                   "Proposed tokens kept (each equal to the token the plain "
                                   "path samples there).",
                                   static_cast<double>(e.spec_accepted_tokens));
  live.SetCounter(model, "pier_spec_decode_skipped_total",
                  "Decoding sequence-steps without proposals (the planner held back under load "
                  "or for low acceptance, or the proposer had none).",
                  static_cast<double>(e.spec_skipped));
  live.Alias(drafts, "vllm:spec_decode_num_drafts_total", "Number of spec decoding drafts.");
  live.Alias(proposed, "vllm:spec_decode_num_draft_tokens_total", "Number of draft tokens.");
  live.Alias(accepted, "vllm:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.");
  auto& per_position = live.CounterFamily(
      "pier_spec_decode_accepted_tokens_per_pos",
      "Drafts whose proposal at this position (0-based) was kept.", {"model", "position"});
  auto& per_position_vllm =
      live.CounterFamily("vllm:spec_decode_num_accepted_tokens_per_pos_total",
                         "Accepted tokens per draft position.", {"model_name", "position"});
  for (size_t i = 0; i < e.spec_accepted_per_position.size(); ++i) {
    const auto value = static_cast<double>(e.spec_accepted_per_position[i]);
    per_position.WithLabels({{"model", model}, {"position", std::to_string(i)}}).Increment(value);
    per_position_vllm.WithLabels({{"model_name", model}, {"position", std::to_string(i)}})
        .Increment(value);
  }
  pier::Buckets lengths;
  for (size_t i = 0; i + 1 < e.spec_accepted_lengths.size(); ++i) {
    lengths.bounds.push_back(static_cast<double>(i));
  }
  for (size_t i = 0; i < e.spec_accepted_lengths.size(); ++i) {
    lengths.counts.push_back(static_cast<uint64_t>(e.spec_accepted_lengths[i]));
    lengths.sum += static_cast<double>(i * static_cast<size_t>(e.spec_accepted_lengths[i]));
  }
  live.SetHistogram(model, "pier_spec_decode_acceptance_length",
                    "Proposed tokens kept per draft (the step yields one more).", lengths);
}

void AddEngineFigures(const std::string& model, const engine::EngineStats& e, LiveFigures& live) {
  const double usage = e.kv_blocks_total > 0 ? static_cast<double>(e.kv_blocks_used) /
                                                   static_cast<double>(e.kv_blocks_total)
                                             : 0.0;
  const double heartbeat_age =
      e.last_step_at_us > 0
          ? std::max<double>(static_cast<double>(engine::NowUs() - e.last_step_at_us) / 1e6, 0)
          : 0.0;
  auto& running = live.SetGauge(model, "pier_num_requests_running",
                                "Sequences holding KV blocks (one per choice of a request).",
                                static_cast<double>(e.running));
  auto& waiting = live.SetGauge(model, "pier_num_requests_waiting",
                                "Sequences queued or preempted.", static_cast<double>(e.waiting));
  auto& swapped = live.SetGauge(model, "pier_num_requests_swapped",
                                "Sequences whose KV blocks wait in host memory.",
                                static_cast<double>(e.swapped));
  auto& kv_usage = live.SetGauge(model, "pier_kv_cache_usage_ratio",
                                 "KV blocks used / KV blocks in the cache (0..1).", usage);
  live.SetGauge(model, "pier_kv_blocks_used", "KV blocks held by sequences.",
                static_cast<double>(e.kv_blocks_used));
  live.SetGauge(model, "pier_kv_blocks_total",
                "KV blocks in the cache now (follows an elastic arena).",
                static_cast<double>(e.kv_blocks_total));
  live.SetGauge(model, "pier_kv_blocks_cached", "Free KV blocks still holding a reusable prefix.",
                static_cast<double>(e.kv_blocks_cached));
  auto& preemptions = live.SetCounter(model, "pier_preemptions_total",
                                      "Sequences preempted (by recompute or by swap).",
                                      static_cast<double>(e.preemptions));
  live.SetGauge(model, "pier_kv_blocks_max",
                "KV blocks the cache may grow to (an elastic arena's maximum; else its size).",
                static_cast<double>(e.kv_blocks_max));
  live.SetCounter(model, "pier_kv_cache_grows_total",
                  "Chunks an elastic KV cache took from the device's budget.",
                  static_cast<double>(e.kv_grows));
  live.SetCounter(model, "pier_kv_cache_reclaims_total",
                  "Shrinks of an elastic KV cache honoured (memory reclaimed for other models).",
                  static_cast<double>(e.kv_shrinks));
  live.SetCounter(model, "pier_kv_cache_idle_releases_total",
                  "Times an idle elastic KV cache gave its chunks above its minimum back to the "
                  "device (kv_idle_release).",
                  static_cast<double>(e.kv_idle_releases));
  live.SetGauge(model, "pier_kv_waiting_for_memory",
                "Sequences waiting to start because the KV cache cannot grow under the memory "
                "budget (they start when other models give memory back).",
                static_cast<double>(e.kv_waiting_for_memory));
  live.SetGauge(model, "pier_kv_ceiling_tokens",
                "The longest sequence the KV cache could hold under the memory budget, every other "
                "model's KV given back to its minimum (0: bounded by the context alone).",
                static_cast<double>(e.kv_ceiling_tokens));
  live.SetCounter(model, "pier_engine_steps_total", "Engine steps run.",
                  static_cast<double>(e.steps));
  live.SetGauge(model, "pier_engine_tokens_per_step",
                "Mean tokens per engine step since the start.", e.tokens_per_step);
  live.SetGauge(model, "pier_engine_last_step_seconds", "Duration of the latest engine step.",
                static_cast<double>(e.last_step_us) / 1e6);
  live.SetGauge(model, "pier_engine_heartbeat_age_seconds",
                "Seconds since the latest engine step ended (0 before the first step).",
                heartbeat_age);

  // QoS (issue #16): the queue per class, its drain rate, deadlines, the reserve, tenants.
  if (e.max_seqs > 0) {
    static constexpr const char* kClasses[] = {"critical", "high", "normal", "low"};
    for (size_t c = 0; c < 4; ++c) {
      live.GaugeFamily("pier_qos_queued_sequences",
                       "Sequences waiting (queued or preempted), by requested class.",
                       {"model", "class"})
          .WithLabels({{"model", model}, {"class", kClasses[c]}})
          .Set(static_cast<double>(e.waiting_by_class[c]));
    }
    live.SetGauge(model, "pier_qos_drain_rate",
                  "Sequences admitted per second while others waited (the queue's measured "
                  "drain rate; predicted waits divide by it).",
                  e.admissions_per_s);
    live.SetCounter(model, "pier_qos_queue_expired_total",
                    "Requests refused as their queue deadline passed while they waited.",
                    static_cast<double>(e.queue_expired));
    live.SetCounter(model, "pier_qos_queue_delayed_total",
                    "Requests past their queue deadline kept waiting behind the rest (delay).",
                    static_cast<double>(e.queue_delayed));
    live.SetCounter(model, "pier_qos_steps_stopped_early_total",
                    "Steps stopped between layers for an arriving critical request (then run "
                    "again).",
                    static_cast<double>(e.steps_stopped_early));
    live.SetGauge(model, "pier_qos_reserved_slots",
                  "Running slots kept for the critical class (qos_reserve).",
                  static_cast<double>(e.reserved_seqs));
    live.SetGauge(model, "pier_qos_running_critical", "Critical sequences running.",
                  static_cast<double>(e.running_critical));
    live.SetGauge(model, "pier_engine_step_token_budget",
                  "Adaptive batching: the token budget of the latest step.",
                  static_cast<double>(e.step_token_budget));
    live.SetGauge(model, "pier_engine_step_prefill_chunk",
                  "Adaptive batching: the largest prompt chunk beside decodes of the latest step.",
                  static_cast<double>(e.step_prefill_chunk));
    for (const engine::TenantShare& t : e.tenants) {
      const metrics::Labels labels = {{"model", model},
                                      {"tenant", t.tenant},
                                      {"class", std::string(engine::PriorityName(t.priority))}};
      live.GaugeFamily("pier_qos_tenant_virtual_time",
                       "The tenant's fair-share virtual time (tokens / weight, never below the "
                       "clock while it has live sequences), in its class.",
                       {"model", "tenant", "class"})
          .WithLabels(labels)
          .Set(t.virtual_time);
      live.GaugeFamily("pier_qos_tenant_live_sequences",
                       "The tenant's sequences in the engine (running or waiting), in the class.",
                       {"model", "tenant", "class"})
          .WithLabels(labels)
          .Set(static_cast<double>(t.live_sequences));
    }
  }

  AddSpeculativeFigures(model, e, live);

  live.Alias(running, "vllm:num_requests_running",
             "Number of requests in model execution batches.");
  live.Alias(waiting, "vllm:num_requests_waiting", "Number of requests waiting to be processed.");
  live.Alias(swapped, "vllm:num_requests_swapped", "Number of requests swapped to CPU.");
  live.Alias(kv_usage, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.");
  live.Alias(kv_usage, "vllm:gpu_cache_usage_perc",
             "GPU KV-cache usage. 1 means 100 percent usage (older name).");
  live.Alias(preemptions, "vllm:num_preemptions_total", "Cumulative number of preemptions.");
}

}  // namespace

std::string ServingMetrics::Render(const engine::EngineStats& engine,
                                   const MemoryGovernor* governor) const {
  const ModelFigures figures[] = {{model_name_, engine, governor}};
  return Render(figures);
}

std::string ServingMetrics::Render(std::span<const ModelFigures> models,
                                   std::span<const ModelLifecycle> lifecycle,
                                   const MemoryGovernor* device) const {
  LiveFigures live;
  for (const ModelFigures& m : models) {
    if (m.embedding.has_value()) {
      AddEmbeddingFigures(std::string(m.model), *m.embedding, live);
    } else if (m.tensor.has_value()) {
      AddTensorFigures(std::string(m.model), *m.tensor, live);
    } else {
      AddEngineFigures(std::string(m.model), m.engine, live);
    }
  }
  const double now = static_cast<double>(engine::NowUs()) / 1e6;
  for (const ModelFigures& m : models) {
    Instruments::Demand& demand = instruments_->DemandOf(std::string(m.model));
    const metrics::Labels labels = {{"model", std::string(m.model)}};
    live.GaugeFamily("pier_demand_requests_per_second",
                     "Requests finished per second over the last minute.", {"model"})
        .WithLabels(labels)
        .Set(demand.requests.CurrentRate(now));
    live.GaugeFamily("pier_demand_tokens_per_second",
                     "Prompt plus generated tokens per second over the last minute.", {"model"})
        .WithLabels(labels)
        .Set(demand.tokens.CurrentRate(now));
    // Absent until five minutes of history: a trend projected further than it was measured.
    if (std::optional<double> f = demand.requests.ForecastRate(now)) {
      live.GaugeFamily("pier_demand_forecast_requests_per_second",
                       "Forecast request rate 5 minutes ahead (trend and detected cycles).",
                       {"model"})
          .WithLabels(labels)
          .Set(*f);
    }
    if (std::optional<double> f = demand.tokens.ForecastRate(now)) {
      live.GaugeFamily("pier_demand_forecast_tokens_per_second",
                       "Forecast token rate 5 minutes ahead (trend and detected cycles).",
                       {"model"})
          .WithLabels(labels)
          .Set(*f);
    }
  }
  for (const ModelFigures& m : models) {
    for (const WorkerFigures& w : m.workers) {
      const metrics::Labels labels = {{"model", std::string(m.model)},
                                      {"instance", std::to_string(w.instance)}};
      live.GaugeFamily("pier_worker_up", "1 while the instance's worker process is ready.",
                       {"model", "instance"})
          .WithLabels(labels)
          .Set(w.up ? 1 : 0);
      live.CounterFamily("pier_worker_restarts_total",
                         "Restarts of the instance's worker process (crash, hang).",
                         {"model", "instance"})
          .WithLabels(labels)
          .Increment(static_cast<double>(w.restarts));
      live.GaugeFamily("pier_worker_resident_bytes",
                       "Resident memory of the instance's worker process (last heartbeat).",
                       {"model", "instance"})
          .WithLabels(labels)
          .Set(static_cast<double>(w.rss_bytes));
      if (w.device_bytes.has_value()) {
        // NVML's figure for the worker's process against its grant: the difference is memory
        // the ledger does not know about (a leak, a CUDA context, a library's own pool).
        live.GaugeFamily("pier_worker_device_bytes",
                         "Device memory the worker process holds, as NVML reports it.",
                         {"model", "instance"})
            .WithLabels(labels)
            .Set(static_cast<double>(*w.device_bytes));
        live.GaugeFamily("pier_worker_device_unaccounted_bytes",
                         "NVML's device memory of the worker minus its grant (negative: unused "
                         "grant).",
                         {"model", "instance"})
            .WithLabels(labels)
            .Set(static_cast<double>(*w.device_bytes) - static_cast<double>(w.granted_bytes));
      }
      live.GaugeFamily("pier_worker_granted_bytes",
                       "Bytes of the device's budget granted to the worker process.",
                       {"model", "instance"})
          .WithLabels(labels)
          .Set(static_cast<double>(w.granted_bytes));
      live.GaugeFamily("pier_worker_kv_lent_bytes",
                       "Elastic KV memory lent to the worker above its minimum (in its grant).",
                       {"model", "instance"})
          .WithLabels(labels)
          .Set(static_cast<double>(w.kv_lent_bytes));
    }
  }
  auto& state =
      live.GaugeFamily("pier_model_state", "1 for the state each model is in, 0 for the others.",
                       {"model", "state"});
  if (lifecycle.empty()) {
    for (const ModelFigures& m : models) {
      state.WithLabels({{"model", std::string(m.model)}, {"state", "ready"}}).Set(1);
    }
  }
  static constexpr std::string_view kStates[] = {"unloaded", "loading", "ready", "draining",
                                                 "failed"};
  for (const ModelLifecycle& m : lifecycle) {
    const std::string model(m.model);
    for (std::string_view s : kStates) {
      state.WithLabels({{"model", model}, {"state", std::string(s)}}).Set(s == m.state ? 1 : 0);
    }
    live.SetCounter(model, "pier_model_loads_total", "Loads of the model that succeeded.",
                    static_cast<double>(m.loads));
    live.SetCounter(model, "pier_model_load_failures_total",
                    "Loads of the model that failed (it did not fit, or did not open).",
                    static_cast<double>(m.load_failures));
    auto& unloads = live.CounterFamily("pier_model_unloads_total",
                                       "Unloads of the model, by why: requested (admin or "
                                       "reload), evicted (room for another model), idle.",
                                       {"model", "reason"});
    unloads.WithLabels({{"model", model}, {"reason", "requested"}})
        .Increment(static_cast<double>(m.unloads_requested));
    unloads.WithLabels({{"model", model}, {"reason", "evicted"}})
        .Increment(static_cast<double>(m.unloads_evicted));
    unloads.WithLabels({{"model", model}, {"reason", "idle"}})
        .Increment(static_cast<double>(m.unloads_idle));
  }
  std::vector<const MemoryGovernor*> governors;  // each device once
  if (device != nullptr) {
    governors.push_back(device);
    AddGovernorFigures(device, models, live);
  }
  for (const ModelFigures& m : models) {
    if (m.governor == nullptr ||
        std::find(governors.begin(), governors.end(), m.governor) != governors.end()) {
      continue;
    }
    governors.push_back(m.governor);
    AddGovernorFigures(m.governor, models, live);
  }
  std::string out;
  live.registry().RenderTo(&out);
  registry_->RenderTo(&out);
  return out;
}

}  // namespace pier::serving

// `pier bench serve`'s engine: sends a synthetic workload to an OpenAI-compatible server at
// a request rate (Poisson or gamma arrivals) and/or a fixed concurrency, and measures every
// request (see metrics.h for the definitions, which follow `vllm bench serve`).
//
// RunBenchmark runs on the calling thread, which dispatches requests at their arrival
// times; worker threads, started on demand (one per in-flight request, at most
// --max-concurrency, else kMaxWorkers), send them over blocking sockets. The run is capped by the
// number of prompts and by `timeout_s`: requests still running at the cap fail with a timeout, and
// requests not sent by then are counted apart. Results are written to per-request slots
// that only one worker touches, and read after every worker has joined.
#pragma once

#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "loadgen/run_metrics.h"
#include "loadgen/workload.h"

namespace pier::loadgen {

// One phase of a shifting-load schedule: for `seconds`, `hot` gets `hot_share` of the
// requests and the other models split the rest evenly; an empty `hot` shares them evenly.
struct LoadPhase {
  std::string hot;
  double seconds = 60;
  double hot_share = 0.8;
};

// One stream of a QoS traffic mix (--traffic): `share` of the requests are sent with this API
// key (the tenant), priority class and deadline (each optional).
struct TrafficStream {
  std::string name;
  std::string api_key;   // empty: the run's --api-key
  std::string priority;  // sent as the body's `priority`; empty: none
  double share = 1;
  std::optional<int64_t> deadline_ms = std::nullopt;  // sent as the body's `deadline_ms`
};

// Parses "NAME:KEY:CLASS:SHARE[:DEADLINE_MS],..." (KEY and CLASS may be empty or "-"); the
// shares need not add up to 1 (they are weights).
Result<std::vector<TrafficStream>> ParseTraffic(const std::string& text);

struct BenchmarkConfig {
  std::string base_url = "http://127.0.0.1:8080";
  std::string endpoint = "/v1/completions";
  std::string model;  // empty: the first id from GET /v1/models
  // Several models (a shifting-load trace): with `phases`, each request names one of
  // `models`, drawn by its phase; the number of requests is request_rate x the schedule's
  // length. `model_urls`: a server per model (three single-model servers), else base_url.
  std::vector<std::string> models = {};
  std::vector<LoadPhase> phases = {};
  std::map<std::string, std::string> model_urls = {};
  // A QoS traffic mix: each request is drawn from one stream by its share (empty: none).
  std::vector<TrafficStream> traffic = {};
  std::string api_key;                                            // empty: no Authorization header
  double request_rate = std::numeric_limits<double>::infinity();  // requests/s
  double burstiness = 1.0;                                        // gamma shape
  size_t max_concurrency = 0;                                     // 0: no limit
  WorkloadOptions workload;  // num_prompts, lengths, prompt format and seed
  bool ignore_eos = false;
  double temperature = 0.0;
  nlohmann::json extra_body = nlohmann::json::object();
  double timeout_s = 600;          // the whole run
  double request_timeout_s = 300;  // each request
  SloTargets slos;
  std::vector<double> percentiles = {50, 90, 99};
  // Progress lines (start, every 10% of requests done); may be empty.
  std::function<void(const std::string& line)> log;
};

struct BenchmarkResult {
  BenchmarkConfig config;
  std::string model;                    // the model the requests named
  std::vector<RequestResult> requests;  // the requests that were sent, in workload order
  size_t max_in_flight = 0;             // the most requests in flight at once
  bool time_cap_reached = false;
  BenchmarkMetrics metrics;
  // With a schedule: each phase's metrics (its requests; its duration), and each model's
  // over the whole run.
  struct PhaseMetrics {
    std::string name;  // "hot:a" or "even"
    double start_s = 0;
    double seconds = 0;
    BenchmarkMetrics metrics;
  };
  std::vector<PhaseMetrics> phases;
  std::map<std::string, BenchmarkMetrics> per_model;
  std::map<std::string, BenchmarkMetrics> per_stream;  // with a traffic mix
};

// Parses "a,b,c,even" (each a model of `models`, or "even") with one phase length and hot
// share into a schedule.
Result<std::vector<LoadPhase>> ParsePhases(const std::string& text,
                                           const std::vector<std::string>& models, double seconds,
                                           double hot_share);

// Most worker threads (and so requests in flight) one run uses.
inline constexpr size_t kMaxWorkers = 1024;

// Runs the benchmark. Fails only before the first request: a bad option, an unreachable
// server when the model must be looked up. Request failures are counted in the result.
Result<BenchmarkResult> RunBenchmark(const BenchmarkConfig& config);

}  // namespace pier::loadgen

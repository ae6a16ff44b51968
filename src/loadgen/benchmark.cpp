#include "loadgen/benchmark.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "common/ascii.h"
#include "common/mutex.h"
#include "loadgen/arrivals.h"
#include "loadgen/http_client.h"
#include "loadgen/streaming_request.h"

namespace pier::loadgen {
namespace {

// Request indices handed from the dispatcher to the workers, in arrival order.
class IndexQueue {
 public:
  void Push(size_t index) {
    {
      MutexLock lock(mutex_);
      indices_.push_back(index);
    }
    ready_.notify_one();
  }
  void Close() {
    {
      MutexLock lock(mutex_);
      closed_ = true;
    }
    ready_.notify_all();
  }
  // The next index, or nothing once the queue is closed and empty.
  std::optional<size_t> Pop() {
    MutexLock lock(mutex_);
    ++idle_;
    lock.Wait(ready_, [this]() PIER_REQUIRES(mutex_) { return closed_ || !indices_.empty(); });
    --idle_;
    if (indices_.empty()) return std::nullopt;
    const size_t index = indices_.front();
    indices_.pop_front();
    return index;
  }
  // Whether some worker waits for work that is not queued yet.
  bool HasIdleWorker() {
    MutexLock lock(mutex_);
    return idle_ > indices_.size();
  }

 private:
  Mutex mutex_;
  std::condition_variable ready_;
  std::deque<size_t> indices_ PIER_GUARDED_BY(mutex_);
  bool closed_ PIER_GUARDED_BY(mutex_) = false;
  size_t idle_ PIER_GUARDED_BY(mutex_) = 0;  // workers waiting in Pop
};

// Raises the soft limit on open files so that `connections` sockets fit beside stdio
// (the usual soft limit of 1024 would refuse the last sockets of a 1024-request run).
void RaiseOpenFileLimit(size_t connections) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t wanted = static_cast<rlim_t>(connections) + 64;
  if (limit.rlim_cur >= wanted) return;
  limit.rlim_cur = std::min(wanted, limit.rlim_max);
  ::setrlimit(RLIMIT_NOFILE, &limit);
}

Clock::duration FromSeconds(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

std::string Fixed(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.*f", digits, value);
  return text;
}

// The phase an offset falls in (the last one past the end).
int PhaseAt(const std::vector<LoadPhase>& phases, double offset_s) {
  double end = 0;
  for (size_t i = 0; i < phases.size(); ++i) {
    end += phases[i].seconds;
    if (offset_s < end) return static_cast<int>(i);
  }
  return static_cast<int>(phases.size()) - 1;
}

// The model a request of `phase` names, drawn with `rng`.
const std::string& DrawModel(const LoadPhase& phase, const std::vector<std::string>& models,
                             std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<const std::string*> others;
  for (const std::string& m : models) {
    if (m != phase.hot) others.push_back(&m);
  }
  if (!phase.hot.empty() && (others.empty() || unit(rng) < phase.hot_share)) return phase.hot;
  std::uniform_int_distribution<size_t> pick(0, others.size() - 1);
  return *others[pick(rng)];
}

}  // namespace

Result<std::vector<LoadPhase>> ParsePhases(const std::string& text,
                                           const std::vector<std::string>& models, double seconds,
                                           double hot_share) {
  if (!(seconds > 0)) return InvalidArgumentError("--phase-seconds must be positive");
  if (!(hot_share >= 0 && hot_share <= 1)) {
    return InvalidArgumentError("--hot-share must be in [0, 1]");
  }
  std::vector<LoadPhase> phases;
  for (const std::string& item : SplitList(text)) {
    if (item.empty()) return InvalidArgumentError("--phases: an empty phase in '" + text + "'");
    LoadPhase phase;
    phase.seconds = seconds;
    phase.hot_share = hot_share;
    if (item != "even") {
      if (std::find(models.begin(), models.end(), item) == models.end()) {
        return InvalidArgumentError("--phases: '" + item + "' is not one of --models, nor even");
      }
      phase.hot = item;
    }
    phases.push_back(std::move(phase));
  }
  return phases;
}

Result<std::vector<TrafficStream>> ParseTraffic(const std::string& text) {
  std::vector<TrafficStream> streams;
  for (const std::string& item : SplitList(text)) {
    std::vector<std::string> parts;
    size_t at = 0;
    while (true) {
      const size_t colon = item.find(':', at);
      parts.push_back(item.substr(at, colon == std::string::npos ? colon : colon - at));
      if (colon == std::string::npos) break;
      at = colon + 1;
    }
    if (parts.size() < 4 || parts.size() > 5 || parts[0].empty()) {
      return InvalidArgumentError("--traffic: '" + item +
                                  "' is not NAME:KEY:CLASS:SHARE[:DEADLINE_MS]");
    }
    TrafficStream s;
    s.name = parts[0];
    s.api_key = parts[1] == "-" ? "" : parts[1];
    s.priority = parts[2] == "-" ? "" : parts[2];
    char* end = nullptr;
    s.share = std::strtod(parts[3].c_str(), &end);
    if (parts[3].empty() || *end != '\0' || !(s.share > 0)) {
      return InvalidArgumentError("--traffic: '" + item + "': the share must be above 0");
    }
    if (parts.size() == 5) {
      const long long ms = std::strtoll(parts[4].c_str(), &end, 10);
      if (parts[4].empty() || *end != '\0' || ms < 1) {
        return InvalidArgumentError("--traffic: '" + item + "': the deadline must be >= 1 ms");
      }
      s.deadline_ms = ms;
    }
    streams.push_back(std::move(s));
  }
  if (streams.empty()) return InvalidArgumentError("--traffic lists no stream");
  return streams;
}

Result<BenchmarkResult> RunBenchmark(const BenchmarkConfig& config_in) {
  BenchmarkConfig config = config_in;
  if (!config.phases.empty()) {
    if (config.models.size() < 2) {
      return InvalidArgumentError("a phase schedule needs --models with at least two models");
    }
    if (std::isinf(config.request_rate)) {
      return InvalidArgumentError("a phase schedule needs a finite --request-rate");
    }
    double total = 0;
    for (const LoadPhase& phase : config.phases) total += phase.seconds;
    config.workload.num_prompts =
        std::max<size_t>(1, static_cast<size_t>(std::ceil(config.request_rate * total)));
  }
  const auto log = [&config](const std::string& line) {
    if (config.log) config.log(line);
  };
  if (config.workload.num_prompts == 0) return InvalidArgumentError("--num-prompts must be >= 1");
  if (!(config.timeout_s > 0) || !(config.request_timeout_s > 0)) {
    return InvalidArgumentError("timeouts must be positive numbers of seconds");
  }
  if (config.max_concurrency > kMaxWorkers) {
    return InvalidArgumentError("--max-concurrency " + std::to_string(config.max_concurrency) +
                                " is above the " + std::to_string(kMaxWorkers) +
                                " requests this load generator keeps in flight");
  }
  for (double p : config.percentiles) {
    if (!(p >= 0 && p <= 100)) {
      return InvalidArgumentError("percentile " + std::to_string(p) + " is outside [0, 100]");
    }
  }
  if (!config.endpoint.empty() && config.endpoint.front() != '/') {
    return InvalidArgumentError("--endpoint must start with '/', e.g. /v1/completions");
  }
  const ApiKind api = ApiKindForEndpoint(config.endpoint);
  if (api == ApiKind::kChat && config.workload.format == PromptFormat::kTokenIds) {
    return InvalidArgumentError(
        "token-id prompts need a completions endpoint; chat messages take text");
  }
  PIER_ASSIGN_OR_RETURN(const BaseUrl url, ParseBaseUrl(config.base_url));
  PIER_ASSIGN_OR_RETURN(const Endpoint endpoint, Resolve(url));
  PIER_ASSIGN_OR_RETURN(std::vector<WorkloadRequest> workload, MakeRandomWorkload(config.workload));
  PIER_ASSIGN_OR_RETURN(const std::vector<double> offsets,
                        ArrivalOffsets(workload.size(), config.request_rate, config.burstiness,
                                       config.workload.seed ^ 0x9E3779B97F4A7C15ull));
  // With a schedule: each request's phase and model, and each model's server.
  std::vector<int> phase_of(workload.size(), -1);
  std::vector<std::string> model_of(workload.size());
  std::map<std::string, std::pair<BaseUrl, Endpoint>> servers;
  if (!config.phases.empty()) {
    std::mt19937_64 rng(config.workload.seed ^ 0xD1B54A32D192ED03ull);
    for (size_t i = 0; i < workload.size(); ++i) {
      phase_of[i] = PhaseAt(config.phases, offsets[i]);
      model_of[i] = DrawModel(config.phases[static_cast<size_t>(phase_of[i])], config.models, rng);
    }
    for (const std::string& model : config.models) {
      auto it = config.model_urls.find(model);
      if (it == config.model_urls.end()) {
        servers.emplace(model, std::make_pair(url, endpoint));
        continue;
      }
      PIER_ASSIGN_OR_RETURN(const BaseUrl model_url, ParseBaseUrl(it->second));
      PIER_ASSIGN_OR_RETURN(const Endpoint model_endpoint, Resolve(model_url));
      servers.emplace(model, std::make_pair(model_url, model_endpoint));
    }
    for (const auto& [model, where] : config.model_urls) {
      if (servers.count(model) == 0) {
        return InvalidArgumentError("--model-url names " + model + ", which is not in --models");
      }
    }
  }

  // With a traffic mix: each request's stream, drawn by share.
  std::vector<int> stream_of(workload.size(), -1);
  if (!config.traffic.empty()) {
    std::vector<double> weights;
    for (const TrafficStream& s : config.traffic) weights.push_back(s.share);
    std::discrete_distribution<int> pick(weights.begin(), weights.end());
    std::mt19937_64 rng(config.workload.seed ^ 0x94D049BB133111EBull);
    for (int& s : stream_of) s = pick(rng);
  }

  BenchmarkResult result;
  result.config = config;
  result.config.log = nullptr;
  result.model = config.model;
  if (!config.phases.empty()) {
    for (const std::string& m : config.models)
      result.model += (result.model.empty() ? "" : ",") + m;
  } else if (result.model.empty()) {
    PIER_ASSIGN_OR_RETURN(
        result.model,
        FetchFirstModelId(endpoint, config.api_key,
                          Clock::now() + FromSeconds(std::min(30.0, config.request_timeout_s))));
  }
  RequestOptions options;
  options.api = api;
  options.target = url.path_prefix + config.endpoint;
  options.model = result.model;
  options.api_key = config.api_key;
  options.ignore_eos = config.ignore_eos;
  options.temperature = config.temperature;
  options.extra_body = config.extra_body;

  const size_t total = workload.size();
  const size_t limit = config.max_concurrency > 0 ? config.max_concurrency : kMaxWorkers;
  const size_t workers = std::min(total, limit);
  if (config.max_concurrency == 0 && total > kMaxWorkers) {
    log("note: at most " + std::to_string(kMaxWorkers) +
        " requests are in flight at once; later arrivals wait for a free worker");
  }
  log("model " + result.model + ", " + std::to_string(total) + " requests to " + config.base_url +
      options.target + ", rate " +
      (std::isinf(config.request_rate) ? std::string("inf") : Fixed(config.request_rate, 2)) +
      "/s, burstiness " + Fixed(config.burstiness, 2) + ", max concurrency " +
      (config.max_concurrency > 0 ? std::to_string(config.max_concurrency) : "none"));

  std::vector<RequestResult> results(total);
  std::vector<char> sent(total, 0);  // written by the worker owning the index
  std::atomic<size_t> in_flight{0};
  std::atomic<size_t> max_in_flight{0};
  std::atomic<size_t> done{0};
  IndexQueue queue;
  const Clock::time_point start = Clock::now();
  const Clock::time_point cap = start + FromSeconds(config.timeout_s);

  RaiseOpenFileLimit(workers);
  // Workers start on demand: a new one when a request arrives and none is idle, up to
  // `workers`; a slow request rate needs only a few threads.
  const auto worker = [&] {
    while (const std::optional<size_t> index = queue.Pop()) {
      const Clock::time_point now = Clock::now();
      if (now >= cap) continue;  // the time cap came first: never sent
      const size_t running = in_flight.fetch_add(1) + 1;
      size_t seen = max_in_flight.load();
      while (running > seen && !max_in_flight.compare_exchange_weak(seen, running)) {
      }
      const Clock::time_point deadline = std::min(cap, now + FromSeconds(config.request_timeout_s));
      RequestResult r;
      if (phase_of[*index] >= 0) {
        const auto& [model_url, model_endpoint] = servers.at(model_of[*index]);
        RequestOptions per_model = options;
        per_model.model = model_of[*index];
        per_model.target = model_url.path_prefix + config.endpoint;
        r = SendStreamingRequest(model_endpoint, per_model, workload[*index], deadline);
        r.model = model_of[*index];
        r.phase = phase_of[*index];
      } else if (stream_of[*index] >= 0) {
        const TrafficStream& s = config.traffic[static_cast<size_t>(stream_of[*index])];
        RequestOptions per_stream = options;
        if (!s.api_key.empty()) per_stream.api_key = s.api_key;
        if (!s.priority.empty()) per_stream.extra_body["priority"] = s.priority;
        if (s.deadline_ms.has_value()) per_stream.extra_body["deadline_ms"] = *s.deadline_ms;
        r = SendStreamingRequest(endpoint, per_stream, workload[*index], deadline);
        r.stream = s.name;
      } else {
        r = SendStreamingRequest(endpoint, options, workload[*index], deadline);
      }
      r.send_offset_s = std::chrono::duration<double>(now - start).count();
      results[*index] = std::move(r);
      sent[*index] = 1;
      in_flight.fetch_sub(1);
      const size_t finished = done.fetch_add(1) + 1;
      const size_t step = std::max<size_t>(1, total / 10);
      if (finished % step == 0 || finished == total) {
        log(std::to_string(finished) + "/" + std::to_string(total) + " requests done after " +
            Fixed(std::chrono::duration<double>(Clock::now() - start).count(), 1) + " s");
      }
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(workers);
  for (size_t i = 0; i < total; ++i) {
    const Clock::time_point at = start + FromSeconds(offsets[i]);
    if (at >= cap) break;
    std::this_thread::sleep_until(at);
    if (threads.size() < workers && !queue.HasIdleWorker()) threads.emplace_back(worker);
    queue.Push(i);
  }
  queue.Close();
  for (std::thread& thread : threads) thread.join();
  const Clock::time_point end = Clock::now();

  size_t not_sent = 0;
  for (size_t i = 0; i < total; ++i) {
    if (sent[i]) {
      result.requests.push_back(std::move(results[i]));
    } else {
      ++not_sent;
    }
  }
  result.time_cap_reached = not_sent > 0 || end >= cap;
  result.max_in_flight = max_in_flight.load();
  const double duration_s = std::chrono::duration<double>(std::min(end, cap) - start).count();
  result.metrics =
      ComputeMetrics(result.requests, not_sent, duration_s, config.slos, config.percentiles);
  for (const TrafficStream& s : config.traffic) {
    std::vector<RequestResult> of_stream;
    for (const RequestResult& r : result.requests) {
      if (r.stream == s.name) of_stream.push_back(r);
    }
    result.per_stream[s.name] =
        ComputeMetrics(of_stream, 0, duration_s, config.slos, config.percentiles);
  }
  if (!config.phases.empty()) {
    double start_s = 0;
    for (size_t p = 0; p < config.phases.size(); ++p) {
      std::vector<RequestResult> in_phase;
      for (const RequestResult& r : result.requests) {
        if (r.phase == static_cast<int>(p)) in_phase.push_back(r);
      }
      const LoadPhase& phase = config.phases[p];
      BenchmarkResult::PhaseMetrics m;
      m.name = phase.hot.empty() ? "even" : "hot:" + phase.hot;
      m.start_s = start_s;
      m.seconds = phase.seconds;
      m.metrics = ComputeMetrics(in_phase, 0, phase.seconds, config.slos, config.percentiles);
      result.phases.push_back(std::move(m));
      start_s += phase.seconds;
    }
    for (const std::string& model : config.models) {
      std::vector<RequestResult> of_model;
      for (const RequestResult& r : result.requests) {
        if (r.model == model) of_model.push_back(r);
      }
      result.per_model[model] =
          ComputeMetrics(of_model, 0, duration_s, config.slos, config.percentiles);
    }
  }
  return result;
}

}  // namespace pier::loadgen

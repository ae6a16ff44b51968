#include "loadgen/benchmark.h"

#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "loadgen/arrivals.h"
#include "loadgen/http_client.h"
#include "loadgen/openai_request.h"

namespace pier::loadgen {
namespace {

// Request indices handed from the dispatcher to the workers, in arrival order.
class IndexQueue {
 public:
  void Push(size_t index) {
    {
      std::lock_guard lock(mutex_);
      indices_.push_back(index);
    }
    ready_.notify_one();
  }
  void Close() {
    {
      std::lock_guard lock(mutex_);
      closed_ = true;
    }
    ready_.notify_all();
  }
  // The next index, or nothing once the queue is closed and empty.
  std::optional<size_t> Pop() {
    std::unique_lock lock(mutex_);
    ++idle_;
    ready_.wait(lock, [this] { return closed_ || !indices_.empty(); });
    --idle_;
    if (indices_.empty()) return std::nullopt;
    const size_t index = indices_.front();
    indices_.pop_front();
    return index;
  }
  // Whether some worker waits for work that is not queued yet.
  bool HasIdleWorker() {
    std::lock_guard lock(mutex_);
    return idle_ > indices_.size();
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<size_t> indices_;  // guarded by mutex_
  bool closed_ = false;         // guarded by mutex_
  size_t idle_ = 0;             // workers waiting in Pop; guarded by mutex_
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

}  // namespace

Result<BenchmarkResult> RunBenchmark(const BenchmarkConfig& config) {
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

  BenchmarkResult result;
  result.config = config;
  result.config.log = nullptr;
  result.model = config.model;
  if (result.model.empty()) {
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
      RequestResult r = SendStreamingRequest(endpoint, options, workload[*index], deadline);
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
  return result;
}

}  // namespace pier::loadgen

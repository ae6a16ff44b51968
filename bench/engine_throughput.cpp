// pier_bench_engine: offline throughput of the LLM engine (issue 5, "Benchmarks") on one model,
// through a ModelHost as `pier serve` builds it: the engine thread runs continuous batching
// with chunked prefill over the paged KV cache; this program only submits requests and reads
// their events.
//
// Mixed mode (default), for each concurrency C: requests with prompt lengths uniform in
// [--prompt-min, --prompt-max] and outputs uniform in [--output-min, --output-max] (greedy,
// ignore_eos, so each request produces exactly max_tokens), C of them in flight at all times
// (a new one is submitted when one finishes) until --requests are done (default 20 at C = 1,
// 200 above) or --time-limit-s passes. Prompts are random token ids drawn uniformly from the
// vocabulary's normal tokens (no control, byte or unused tokens), one seeded stream per run, so
// no two prompts share a prefix and the prefix cache never helps. One markdown row per run:
// output tokens/s and total (prompt + output) tokens/s over the wall time from the first
// submit to the last finish (and the CPU seconds the process used meanwhile), mean tokens per
// engine step, peak KV blocks used and the KV waste.
//
// KV waste: (allocated slots - used slots) / allocated slots, where allocated = kv_blocks_used
// * kv_block_size and used = kv_tokens_used (EngineStats). Sampled from Stats() each time this
// thread wakes for new events after a step it has not yet sampled (so about once per step),
// reported as the sum of wasted slots over the sum of allocated slots over all samples.
//
// Fixed mode (--fixed PP,TG), matching llama-batched-bench's -npp PP -ntg TG -npl C: C requests
// with distinct random prompts of PP tokens and max_tokens TG, submitted at once. T_PP ends when
// the last request has its first token (all prompts computed); T_TG runs from there to the last
// finish; S_TG = output tokens received during T_TG / T_TG; S = C * (PP + TG) / (T_PP + T_TG).
// Pier overlaps phases (requests whose prompt is done decode while later prompts are read), so
// a few tokens fall in T_PP and S_PP = C * PP / T_PP is slightly pessimistic. Printed in
// llama-batched-bench's table layout.
//
// Constrained decoding (--json-schema TEXT or --json-object): every timed request carries that
// output constraint (response_format), so the runs measure the mask's cost against the same
// command without it. Such a request may end early with finish reason stop (its output is a
// whole match); mixed mode keeps C requests in flight regardless, so output tokens/s stays
// comparable. The warm-up request is unconstrained: the first constrained request pays for the
// vocabulary trie and the compile, as the first one does in `pier serve`.
//
// Each run opens its own ModelHost (max_seqs = C, KV sized for C requests of the largest
// length unless --kv-tokens) and runs one untimed warm-up request first. The process exits 1 when
// a request does not end with exactly max_tokens tokens (finish reason length).
//
// Ownership: main owns each ModelHost. Thread-safety: one driver thread; the engine thread
// and its compute pool do the work; event listeners only set a flag under a mutex.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "engine/core/engine.h"
#include "engine/request.h"
#include "grammar/constraint.h"
#include "serving/device_set.h"
#include "serving/model_host.h"
#include "tokenizer/tokenizer.h"

namespace {

using pier::engine::EngineStats;
using pier::engine::Event;
using pier::engine::FinishReason;
using pier::engine::Request;
using pier::engine::RequestHandle;
using pier::serving::ModelHost;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string model = PIER_DEFAULT_MODEL_PATH;
  int threads = 2;
  std::vector<int64_t> concurrency = {1, 4, 16, 64};
  int64_t requests = 0;  // 0: 20 at concurrency 1, 200 above
  int64_t prompt_min = 32;
  int64_t prompt_max = 512;
  int64_t output_min = 32;
  int64_t output_max = 256;
  std::string fixed;  // "PP,TG"
  int64_t max_batched_tokens = 512;
  int64_t block_size = 16;
  int64_t kv_tokens = 0;  // 0: concurrency * largest request, whole blocks
  std::string kv_dtype = "f16";
  bool keep_sliding_blocks = false;
  uint64_t seed = 1;
  double time_limit_s = 600;
  pier::grammar::OutputConstraint constraint;  // --json-schema / --json-object
};

// CPU seconds this process has used (all threads): next to wall time it shows how much of the
// machine the run got when other work shares it.
double ProcessCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

int64_t RoundUp(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// Total tokens the engine has computed (tokens_per_step is the mean over all steps).
double TotalTokens(const EngineStats& s) {
  return s.tokens_per_step * static_cast<double>(s.steps);
}

// Wakes the driver when any in-flight request has new events.
class Wakeup {
 public:
  void Notify() {
    {
      std::lock_guard lock(mutex_);
      ready_ = true;
    }
    cv_.notify_one();
  }
  void Wait(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    cv_.wait_for(lock, timeout, [&] { return ready_; });
    ready_ = false;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool ready_ = false;  // guarded by mutex_
};

struct InFlight {
  std::shared_ptr<RequestHandle> handle;
  int64_t prompt_tokens = 0;
  int32_t max_tokens = 0;
  int32_t received = 0;
  bool first_token_seen = false;
};

// KV samples taken from EngineStats, once per engine step seen.
struct KvSampler {
  int64_t last_step = -1;
  int64_t peak_blocks = 0;
  double allocated_slots = 0;
  double wasted_slots = 0;
  int64_t samples = 0;

  void Sample(const EngineStats& s) {
    if (s.steps == last_step) return;
    last_step = s.steps;
    peak_blocks = std::max(peak_blocks, s.kv_blocks_used);
    const int64_t allocated = s.kv_blocks_used * s.kv_block_size;
    if (allocated == 0) return;
    allocated_slots += static_cast<double>(allocated);
    wasted_slots += static_cast<double>(allocated - s.kv_tokens_used);
    ++samples;
  }
  double WastePercent() const {
    return allocated_slots > 0 ? 100.0 * wasted_slots / allocated_slots : 0.0;
  }
};

class Runner {
 public:
  // Request ids are `prefix` + a counter: an id is free again only some time after its final
  // event, so runs on one engine use different prefixes.
  Runner(ModelHost& instance, uint64_t seed, std::string prefix)
      : instance_(instance), rng_(seed), prefix_(std::move(prefix)) {
    const pier::tokenizer::Tokenizer& tok = instance.tokenizer();
    for (int32_t id = 0; id < tok.vocab_size(); ++id) {
      if (tok.Type(id) == pier::tokenizer::TokenType::kNormal) normal_tokens_.push_back(id);
    }
  }

  std::vector<int32_t> RandomPrompt(int64_t n) {
    std::uniform_int_distribution<size_t> pick(0, normal_tokens_.size() - 1);
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    for (int32_t& t : tokens) t = normal_tokens_[pick(rng_)];
    return tokens;
  }
  int64_t Uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }

  // Given to every request this runner submits from now on.
  void SetConstraint(pier::grammar::OutputConstraint constraint) {
    constraint_ = std::move(constraint);
  }

  // Submits one greedy ignore_eos request; false (with a message) on a refusal.
  bool Submit(int64_t prompt_len, int32_t max_tokens) {
    Request r;
    r.constraint = constraint_;
    r.id = prefix_ + std::to_string(next_id_++);
    r.prompt_tokens = RandomPrompt(prompt_len);
    r.sampling.temperature = 0;
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    auto handle = instance_.engine().Submit(std::move(r));
    if (!handle.ok()) {
      std::fprintf(stderr, "pier_bench_engine: submit refused: %s\n",
                   handle.status().ToString().c_str());
      return false;
    }
    InFlight f;
    f.handle = *handle;
    f.prompt_tokens = prompt_len;
    f.max_tokens = max_tokens;
    f.handle->SetListener([this] { wakeup_.Notify(); });
    in_flight_.push_back(std::move(f));
    return true;
  }

  // Reads every available event. Returns the requests that finished (removed from the
  // in-flight list); sets *bad when one did not produce exactly max_tokens tokens.
  std::vector<InFlight> Poll(bool* bad) {
    wakeup_.Wait(std::chrono::milliseconds(100));
    std::vector<InFlight> finished;
    const Clock::time_point now = Clock::now();
    for (size_t i = 0; i < in_flight_.size();) {
      InFlight& f = in_flight_[i];
      bool done = false;
      for (Event& e : f.handle->Drain()) {
        if (e.token >= 0) {
          ++f.received;
          ++tokens_received_;
          if (first_token_all_.has_value()) ++tokens_after_first_all_;
          if (!f.first_token_seen) {
            f.first_token_seen = true;
            ++first_tokens_;
          }
        }
        if (e.finish.has_value()) {
          done = true;
          const bool complete_early = constraint_.active() && *e.finish == FinishReason::kStop &&
                                      e.usage.completion_tokens == f.received;
          if (complete_early) {
            f.max_tokens = f.received;
          } else if (*e.finish != FinishReason::kLength ||
                     e.usage.completion_tokens != f.max_tokens) {
            std::fprintf(stderr,
                         "pier_bench_engine: %s ended with %s after %" PRId64
                         " tokens (max_tokens %d)%s%s\n",
                         f.handle->id().c_str(), std::string(FinishReasonName(*e.finish)).c_str(),
                         e.usage.completion_tokens, f.max_tokens, e.error.empty() ? "" : ": ",
                         e.error.c_str());
            *bad = true;
          }
        }
      }
      if (done) {
        if (f.received != f.max_tokens) *bad = true;
        finished.push_back(std::move(f));
        in_flight_.erase(in_flight_.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    // The phase boundary is set after this poll's tokens are counted.
    if (first_tokens_ == expected_first_tokens_ && !first_token_all_.has_value()) {
      first_token_all_ = now;
    }
    kv_.Sample(instance_.engine().Stats());
    return finished;
  }

  void AbortAll() {
    for (const InFlight& f : in_flight_) instance_.engine().Abort(f.handle->id());
    for (const InFlight& f : in_flight_) f.handle->WaitAll();
    in_flight_.clear();
  }

  size_t num_in_flight() const { return in_flight_.size(); }
  int64_t tokens_received() const { return tokens_received_; }
  const KvSampler& kv() const { return kv_; }
  // Fixed mode: the phase boundary is when this many requests have their first token.
  void ExpectFirstTokens(int64_t n) { expected_first_tokens_ = n; }
  std::optional<Clock::time_point> first_token_all() const { return first_token_all_; }
  int64_t tokens_after_first_all() const { return tokens_after_first_all_; }

 private:
  ModelHost& instance_;
  std::mt19937_64 rng_;
  const std::string prefix_;
  std::vector<int32_t> normal_tokens_;
  pier::grammar::OutputConstraint constraint_;
  Wakeup wakeup_;
  std::vector<InFlight> in_flight_;
  int64_t next_id_ = 0;
  int64_t tokens_received_ = 0;
  int64_t first_tokens_ = 0;
  int64_t expected_first_tokens_ = -1;
  std::optional<Clock::time_point> first_token_all_;
  int64_t tokens_after_first_all_ = 0;
  KvSampler kv_;
};

pier::Result<std::unique_ptr<ModelHost>> OpenInstance(const Options& options, int64_t concurrency,
                                                      int64_t max_request_tokens) {
  pier::serving::ModelHostOptions mi;
  mi.model.path = options.model;
  mi.model.threads = options.threads;
  mi.model.block_size = options.block_size;
  PIER_ASSIGN_OR_RETURN(mi.model.kv_dtype, pier::engine::ParseKvDtype(options.kv_dtype));
  mi.model.kv_tokens = options.kv_tokens > 0
                           ? options.kv_tokens
                           : concurrency * RoundUp(max_request_tokens, options.block_size);
  mi.engine.scheduler.max_seqs = concurrency;
  mi.engine.scheduler.max_batched_tokens = options.max_batched_tokens;
  mi.engine.release_sliding_blocks = !options.keep_sliding_blocks;
  // One device set for the process, as `pier serve` has; each run's host adds its owners to
  // the CPU governor and removes them when it ends.
  static pier::serving::DeviceSet* const devices = [] {
    auto created = pier::serving::DeviceSet::Create({});
    return created.ok() ? created.value().release() : nullptr;
  }();
  if (devices == nullptr) return pier::InternalError("the CPU device could not be created");
  return ModelHost::Open(mi, &devices->cpu_governor());
}

// One untimed request through the engine (touches the weights and the workspace).
bool WarmUp(ModelHost& instance) {
  Runner warm(instance, 0xABCDu, "warm-up-");
  if (!warm.Submit(16, 2)) return false;
  bool bad = false;
  while (warm.num_in_flight() > 0) warm.Poll(&bad);
  return !bad;
}

int RunMixed(const Options& options, int64_t concurrency) {
  const int64_t n_requests =
      options.requests > 0 ? options.requests : (concurrency == 1 ? 20 : 200);
  auto opened = OpenInstance(options, concurrency, options.prompt_max + options.output_max);
  if (!opened.ok()) {
    std::fprintf(stderr, "pier_bench_engine: %s\n", opened.status().ToString().c_str());
    return 1;
  }
  ModelHost& instance = **opened;
  if (!WarmUp(instance)) return 1;
  const EngineStats before = instance.engine().Stats();

  Runner runner(instance, options.seed + static_cast<uint64_t>(concurrency), "bench-");
  runner.SetConstraint(options.constraint);
  int64_t submitted = 0;
  int64_t done = 0;
  int64_t prompt_tokens_done = 0;
  int64_t output_tokens_done = 0;
  bool bad = false;
  bool capped = false;
  const double cpu0 = ProcessCpuSeconds();
  const Clock::time_point t0 = Clock::now();
  auto submit_one = [&] {
    const int64_t p = runner.Uniform(options.prompt_min, options.prompt_max);
    const auto o = static_cast<int32_t>(runner.Uniform(options.output_min, options.output_max));
    if (!runner.Submit(p, o)) bad = true;
    ++submitted;
  };
  while (submitted < std::min(concurrency, n_requests) && !bad) submit_one();
  while (done < n_requests && !bad) {
    for (const InFlight& f : runner.Poll(&bad)) {
      ++done;
      prompt_tokens_done += f.prompt_tokens;
      output_tokens_done += f.received;
      if (submitted < n_requests && !bad) submit_one();
    }
    if (Seconds(t0, Clock::now()) > options.time_limit_s) {
      capped = true;
      break;
    }
  }
  const Clock::time_point t1 = Clock::now();
  const double cpu = ProcessCpuSeconds() - cpu0;
  const EngineStats after = instance.engine().Stats();
  runner.AbortAll();
  if (bad) return 1;

  const double wall = Seconds(t0, t1);
  const int64_t steps = after.steps - before.steps;
  const double step_tokens = TotalTokens(after) - TotalTokens(before);
  // Output tokens of unfinished (capped) requests count too: they were produced in the window.
  const int64_t output_tokens = capped ? runner.tokens_received() : output_tokens_done;
  std::printf(
      "| %" PRId64 " | %" PRId64 "%s | %" PRId64 " | %.2f | %.2f | %.2f | %.2f | %.2f | %" PRId64
      " | %.2f | %" PRId64 " / %" PRId64 " | %.2f | %" PRId64 " |\n",
      concurrency, done, capped ? " (capped)" : "", output_tokens, wall, cpu,
      static_cast<double>(output_tokens) / wall,
      static_cast<double>(prompt_tokens_done + output_tokens) / wall,
      steps > 0 ? step_tokens / static_cast<double>(steps) : 0.0, steps,
      steps > 0 ? 1000.0 * wall / static_cast<double>(steps) : 0.0, runner.kv().peak_blocks,
      after.kv_blocks_total, runner.kv().WastePercent(), after.preemptions - before.preemptions);
  std::fflush(stdout);
  return 0;
}

int RunFixed(const Options& options, int64_t concurrency, int64_t pp, int64_t tg) {
  auto opened = OpenInstance(options, concurrency, pp + tg);
  if (!opened.ok()) {
    std::fprintf(stderr, "pier_bench_engine: %s\n", opened.status().ToString().c_str());
    return 1;
  }
  ModelHost& instance = **opened;
  if (!WarmUp(instance)) return 1;

  Runner runner(instance, options.seed + static_cast<uint64_t>(concurrency), "bench-");
  runner.SetConstraint(options.constraint);
  runner.ExpectFirstTokens(concurrency);
  bool bad = false;
  const Clock::time_point t0 = Clock::now();
  for (int64_t i = 0; i < concurrency && !bad; ++i) {
    if (!runner.Submit(pp, static_cast<int32_t>(tg))) bad = true;
  }
  while (runner.num_in_flight() > 0 && !bad) {
    runner.Poll(&bad);
    if (Seconds(t0, Clock::now()) > options.time_limit_s) {
      std::fprintf(stderr, "pier_bench_engine: fixed run passed --time-limit-s\n");
      bad = true;
    }
  }
  const Clock::time_point t1 = Clock::now();
  runner.AbortAll();
  if (bad || !runner.first_token_all().has_value()) return 1;

  const double t_pp = Seconds(t0, *runner.first_token_all());
  const double t_tg = Seconds(*runner.first_token_all(), t1);
  const double t = t_pp + t_tg;
  std::printf("|%6" PRId64 " | %6" PRId64 " | %4" PRId64 " | %6" PRId64
              " | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | %8.2f | %6.2f |\n",
              pp, tg, concurrency, concurrency * (pp + tg), t_pp,
              static_cast<double>(concurrency * pp) / t_pp, t_tg,
              static_cast<double>(runner.tokens_after_first_all()) / t_tg, t,
              static_cast<double>(concurrency * (pp + tg)) / t, runner.kv().WastePercent());
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"pier_bench_engine: offline throughput of the LLM engine (see the file header)"};
  app.add_option("-m,--model", options.model, "GGUF model file");
  app.add_option("-t,--threads", options.threads, "compute threads");
  app.add_option("-c,--concurrency", options.concurrency, "requests in flight (list: 1,4,16,64)")
      ->delimiter(',');
  app.add_option("-n,--requests", options.requests,
                 "requests per run (0: 20 at concurrency 1, 200 above)");
  app.add_option("--prompt-min", options.prompt_min);
  app.add_option("--prompt-max", options.prompt_max);
  app.add_option("--output-min", options.output_min);
  app.add_option("--output-max", options.output_max);
  app.add_option("--fixed", options.fixed,
                 "PP,TG: all requests PP prompt tokens and TG output tokens, submitted at once "
                 "(llama-batched-bench's -npp/-ntg)");
  app.add_option("-b,--max-batched-tokens", options.max_batched_tokens,
                 "scheduler token budget per step");
  app.add_option("--block-size", options.block_size, "KV block size in positions");
  app.add_option("--kv-tokens", options.kv_tokens,
                 "KV capacity in positions (0: concurrency x largest request)");
  app.add_option("--kv-dtype", options.kv_dtype, "KV cache element type (f16, f32)")
      ->capture_default_str();
  app.add_flag("--keep-sliding-blocks", options.keep_sliding_blocks,
               "keep sliding-window layers' K/V blocks behind their window (as before KV groups)");
  app.add_option("--seed", options.seed, "seed of prompt and length draws");
  app.add_option("--time-limit-s", options.time_limit_s, "cap per run in seconds");
  std::string json_schema;
  bool json_object = false;
  app.add_option("--json-schema", json_schema,
                 "constrain every timed request to this JSON Schema (response_format)");
  app.add_flag("--json-object", json_object, "constrain every timed request to a JSON object");
  CLI11_PARSE(app, argc, argv);

  if (json_object || !json_schema.empty()) {
    options.constraint = json_object ? pier::grammar::OutputConstraint::JsonObject()
                                     : pier::grammar::OutputConstraint::JsonSchema(json_schema);
    if (pier::Status valid = pier::grammar::CheckConstraint(options.constraint); !valid.ok()) {
      std::fprintf(stderr, "pier_bench_engine: %s\n", valid.ToString().c_str());
      return 2;
    }
  }
  int64_t pp = 0;
  int64_t tg = 0;
  if (!options.fixed.empty() &&
      (std::sscanf(options.fixed.c_str(), "%" SCNd64 ",%" SCNd64, &pp, &tg) != 2 || pp < 1 ||
       tg < 1)) {
    std::fprintf(stderr, "pier_bench_engine: --fixed wants PP,TG (positive), got '%s'\n",
                 options.fixed.c_str());
    return 2;
  }
  if (options.prompt_min < 1 || options.prompt_min > options.prompt_max || options.output_min < 1 ||
      options.output_min > options.output_max) {
    std::fprintf(stderr, "pier_bench_engine: need 1 <= min <= max for prompt and output lengths\n");
    return 2;
  }

  std::printf("pier_bench_engine: model %s, threads %d, max_batched_tokens %" PRId64
              ", block size %" PRId64 ", KV %s, seed %" PRIu64
              ", prompts of random normal-vocabulary tokens, greedy, ignore_eos\n",
              options.model.c_str(), options.threads, options.max_batched_tokens,
              options.block_size, options.kv_dtype.c_str(), options.seed);
  if (options.constraint.active()) {
    std::printf("output constraint: %s\n",
                options.constraint.kind == pier::grammar::OutputConstraint::Kind::kJsonObject
                    ? "json_object"
                    : options.constraint.schema.c_str());
  }
  if (pp > 0) {
    std::printf("\n|%6s | %6s | %4s | %6s | %8s | %8s | %8s | %8s | %8s | %8s | %6s |\n", "PP",
                "TG", "B", "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s",
                "waste%");
    std::printf("|%6s-|-%6s-|-%4s-|-%6s-|-%8s-|-%8s-|-%8s-|-%8s-|-%8s-|-%8s-|-%6s-|\n", "------",
                "------", "----", "------", "--------", "--------", "--------", "--------",
                "--------", "--------", "------");
  } else {
    std::printf("prompt lengths uniform in [%" PRId64 ", %" PRId64 "], outputs uniform in [%" PRId64
                ", %" PRId64 "]\n\n",
                options.prompt_min, options.prompt_max, options.output_min, options.output_max);
    std::printf(
        "| concurrency | requests | output tokens | wall s | CPU s | output t/s | total t/s | "
        "tokens/step | steps | ms/step | peak KV blocks / total | KV waste %% | preemptions |\n");
    std::printf(
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: |\n");
  }
  std::fflush(stdout);
  for (int64_t c : options.concurrency) {
    if (c < 1) {
      std::fprintf(stderr, "pier_bench_engine: concurrency must be >= 1\n");
      return 2;
    }
    const int rc = pp > 0 ? RunFixed(options, c, pp, tg) : RunMixed(options, c);
    if (rc != 0) return rc;
  }
  return 0;
}

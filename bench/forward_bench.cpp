// pier_bench_forward: forward-pass throughput of the CPU runner on one model,
// measured the way llama.cpp's llama-bench measures it, so the two can be read
// side by side (issue 3, "Performance").
//
//   pp<P>: one prompt of P random tokens from an empty KV cache, run as ONE
//          runner step of P tokens (the runner's natural chunking: `pier run`
//          prefills in chunks of 512), logits of the last token only.
//   tg<N>: N single-token decode steps at positions 0..N-1 from an empty KV
//          cache (as llama-bench's tg test: no prompt), each step returning the
//          last token's logits; the next token is the argmax (greedy).
//   verify<K>: (--verify K,...) the cost of checking K-1 speculative tokens: steps of K
//          tokens at decode positions after a 128-token prompt, every row's logits asked
//          for (as the engine's verification step), against one-token decode steps at the
//          same positions; prints ms per step and its ratio to the one-token step, the
//          cost model speculative decoding's scheduler measures at load (docs/benchmarks.md).
//
// Each test runs once untimed (warm-up, as llama-bench), then `--repetitions`
// timed runs; it prints mean ± sample stddev of tokens/s per run, as a markdown
// row in llama-bench's layout, followed by peak RSS (VmHWM) and the memory
// governor's peak charged bytes against the RSS bound:
// file size + KV of the context used + 64 MiB.
//
// Ownership: main owns the LocalModel. Thread-safety: single-threaded driver;
// the runner's thread pool does the parallel work.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/kv/kv_store.h"
#include "engine/runner/batch.h"
#include "engine/runner/local_model.h"
#include "memory/memory_governor.h"
#include "serving/device_set.h"

namespace {

using pier::engine::Batch;
using pier::engine::LocalModel;
using pier::engine::LogitsWanted;
using pier::engine::SequenceSpan;
using pier::engine::StepOutput;

constexpr double kMiB = 1024.0 * 1024.0;

struct Options {
  std::string model = PIER_DEFAULT_MODEL_PATH;
  int threads = 2;
  int64_t prompt_tokens = 512;
  int64_t gen_tokens = 128;
  int repetitions = 3;
  int64_t ctx = 0;              // KV positions; 0: prompt_tokens + gen_tokens (llama-bench's n_ctx)
  std::vector<int64_t> verify;  // span lengths of the verify test (empty: skip)
};

struct Sample {
  double mean = 0;
  double stddev = 0;
};

Sample MeanStddev(const std::vector<double>& xs) {
  Sample s;
  if (xs.empty()) return s;
  s.mean = std::accumulate(xs.begin(), xs.end(), 0.0) / static_cast<double>(xs.size());
  if (xs.size() > 1) {
    double ss = 0;
    for (double x : xs) ss += (x - s.mean) * (x - s.mean);
    s.stddev = std::sqrt(ss / static_cast<double>(xs.size() - 1));
  }
  return s;
}

// A /proc/self/status field in KiB (VmHWM, VmRSS), or -1.
int64_t ProcStatusKiB(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  }
  return -1;
}

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

class Bench {
 public:
  explicit Bench(LocalModel& model) : model_(model) {
    const auto& kv = model_.kv();
    block_table_.resize(static_cast<size_t>(kv.num_blocks()));
    std::iota(block_table_.begin(), block_table_.end(), 0);
    n_vocab_ = model_.runner().shape().n_vocab;
  }

  // One step of `tokens` at `first_position`; returns the argmax of the last row's logits
  // (or -1 when no logits were asked for).
  pier::Result<int32_t> Step(std::vector<int32_t> tokens, int64_t first_position,
                             LogitsWanted wanted) {
    SequenceSpan span;
    span.sequence_id = 0;
    span.tokens = std::move(tokens);
    span.first_position = first_position;
    span.block_table = block_table_;
    span.logits = wanted;
    PIER_ASSIGN_OR_RETURN(StepOutput out, model_.runner().Step(Batch{{std::move(span)}}));
    if (out.rows.empty()) return -1;
    auto row = out.Row(out.rows.size() - 1);
    return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
  }

  // Seconds for one prompt of `n` tokens from position 0.
  pier::Result<double> RunPrompt(int64_t n) {
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(n_vocab_ - 1));
    for (auto& t : tokens) t = dist(rng_);
    const auto t0 = std::chrono::steady_clock::now();
    PIER_ASSIGN_OR_RETURN(int32_t next, Step(std::move(tokens), 0, LogitsWanted::kLast));
    const auto t1 = std::chrono::steady_clock::now();
    last_token_ = next;
    return Seconds(t0, t1);
  }

  // Seconds for `n` single-token decode steps at positions 0..n-1.
  pier::Result<double> RunDecode(int64_t n) {
    int32_t token =
        std::uniform_int_distribution<int32_t>(0, static_cast<int32_t>(n_vocab_ - 1))(rng_);
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t pos = 0; pos < n; ++pos) {
      PIER_ASSIGN_OR_RETURN(token, Step({token}, pos, LogitsWanted::kLast));
    }
    const auto t1 = std::chrono::steady_clock::now();
    last_token_ = token;
    return Seconds(t0, t1);
  }

  // Mean seconds per step of `k` tokens (every row's logits) at decode positions from
  // `first`, over `steps` steps; the positions advance by one per step, as a sequence whose
  // proposals were all rejected.
  pier::Result<double> RunVerify(int64_t k, int64_t first, int64_t steps) {
    std::vector<int32_t> tokens(static_cast<size_t>(k));
    std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(n_vocab_ - 1));
    for (auto& t : tokens) t = dist(rng_);
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < steps; ++i) {
      PIER_ASSIGN_OR_RETURN(
          int32_t next, Step(tokens, first + i, k == 1 ? LogitsWanted::kLast : LogitsWanted::kAll));
      tokens[0] = next;
    }
    const auto t1 = std::chrono::steady_clock::now();
    return Seconds(t0, t1) / static_cast<double>(steps);
  }

  int32_t last_token() const { return last_token_; }

 private:
  LocalModel& model_;
  std::vector<int32_t> block_table_;
  int64_t n_vocab_ = 0;
  std::mt19937 rng_{1234};
  int32_t last_token_ = -1;
};

std::string ModelLabel(const pier::model::GgufFile& file) {
  std::string arch = "?";
  if (auto a = file.GetString("general.architecture"); a.ok()) arch = std::string(a.value());
  std::string label = file.path();
  if (auto slash = label.find_last_of('/'); slash != std::string::npos)
    label = label.substr(slash + 1);
  return arch + " " + label;
}

void PrintRow(const std::string& model, double size_mib, double params_m, int threads,
              const std::string& test, const Sample& s) {
  std::printf("| %s | %.2f MiB | %.2f M | pier CPU | %d | %s | %.2f ± %.2f |\n", model.c_str(),
              size_mib, params_m, threads, test.c_str(), s.mean, s.stddev);
  std::fflush(stdout);
}

int Run(const Options& options) {
  const int64_t ctx =
      options.ctx > 0
          ? options.ctx
          : std::max<int64_t>(options.prompt_tokens + options.gen_tokens, 128 + 32 + 64);
  pier::engine::LocalModelOptions lm;
  lm.path = options.model;
  lm.threads = options.threads;
  lm.kv_tokens = ctx;
  auto devices = pier::serving::DeviceSet::Create({});
  if (!devices.ok()) {
    std::fprintf(stderr, "pier_bench_forward: %s\n", devices.status().ToString().c_str());
    return 1;
  }
  auto opened = LocalModel::Open(lm, &(*devices)->cpu_governor());
  if (!opened.ok()) {
    std::fprintf(stderr, "pier_bench_forward: %s\n", opened.status().ToString().c_str());
    return 1;
  }
  LocalModel& model = *opened.value();
  const auto& file = model.file();

  uint64_t tensor_bytes = 0;
  int64_t params = 0;
  for (const auto& t : file.tensors()) {
    tensor_bytes += t.size_bytes;
    params += t.element_count;
  }
  const std::string label = ModelLabel(file);
  const double size_mib = static_cast<double>(tensor_bytes) / kMiB;
  const double params_m = static_cast<double>(params) / 1e6;

  Bench bench(model);
  std::printf("| model | size | params | backend | threads | test | t/s |\n");
  std::printf("| ----- | ---: | -----: | ------- | ------: | ---: | --: |\n");
  std::fflush(stdout);

  auto fail = [](const pier::Status& s) {
    std::fprintf(stderr, "pier_bench_forward: %s\n", s.ToString().c_str());
    return 1;
  };

  if (options.prompt_tokens > 0) {
    if (auto w = bench.RunPrompt(options.prompt_tokens); !w.ok()) return fail(w.status());
    std::vector<double> tps;
    for (int r = 0; r < options.repetitions; ++r) {
      auto s = bench.RunPrompt(options.prompt_tokens);
      if (!s.ok()) return fail(s.status());
      tps.push_back(static_cast<double>(options.prompt_tokens) / s.value());
    }
    PrintRow(label, size_mib, params_m, options.threads,
             "pp" + std::to_string(options.prompt_tokens), MeanStddev(tps));
  }
  if (options.gen_tokens > 0) {
    if (auto w = bench.RunDecode(1); !w.ok()) return fail(w.status());
    std::vector<double> tps;
    for (int r = 0; r < options.repetitions; ++r) {
      auto s = bench.RunDecode(options.gen_tokens);
      if (!s.ok()) return fail(s.status());
      tps.push_back(static_cast<double>(options.gen_tokens) / s.value());
    }
    PrintRow(label, size_mib, params_m, options.threads, "tg" + std::to_string(options.gen_tokens),
             MeanStddev(tps));
  }

  if (!options.verify.empty()) {
    // A 128-token prompt first, so attention reads a realistic context.
    if (auto w = bench.RunPrompt(128); !w.ok()) return fail(w.status());
    constexpr int64_t kSteps = 32;
    double one = 0;
    std::printf("\n| verify span (tokens) | ms per step | vs 1-token decode |\n|---|---|---|\n");
    std::vector<int64_t> spans = options.verify;
    spans.insert(spans.begin(), 1);
    for (int64_t k : spans) {
      std::vector<double> ms;
      for (int r = 0; r < options.repetitions; ++r) {
        auto s = bench.RunVerify(k, 128, kSteps);
        if (!s.ok()) return fail(s.status());
        ms.push_back(s.value() * 1e3);
      }
      const Sample m = MeanStddev(ms);
      if (k == 1) one = m.mean;
      std::printf("| %" PRId64 " | %.3f ± %.3f | %.2fx |\n", k, m.mean, m.stddev, m.mean / one);
      std::fflush(stdout);
    }
  }

  const pier::GovernorStats stats = model.governor().Stats();
  const int64_t hwm_kib = ProcStatusKiB("VmHWM");
  const auto& layout = model.kv().layout();
  const double kv_mib = static_cast<double>(model.kv().num_blocks()) *
                        static_cast<double>(layout.bytes_per_block()) / kMiB;
  const double file_mib = static_cast<double>(file.file_size()) / kMiB;
  const double bound_mib = file_mib + kv_mib + 64.0;  // KV as allocated: whole blocks
  const double hwm_mib = static_cast<double>(hwm_kib) / 1024.0;
  std::printf("\n");
  std::printf("context (KV positions): %" PRId64 " (store: %" PRId64 " blocks of %" PRId64
              ", %.2f MiB %s)\n",
              ctx, model.kv().num_blocks(), layout.block_size, kv_mib,
              std::string(pier::engine::KvDtypeName(layout.dtype)).c_str());
  std::printf("peak RSS (VmHWM): %.2f MiB\n", hwm_mib);
  std::printf("governor peak charged: %.2f MiB (weights + workspace + KV)\n",
              static_cast<double>(stats.peak_allocated_bytes) / kMiB);
  for (const auto& owner : stats.owners) {
    std::printf("  %-28s peak %.2f MiB\n", owner.name.c_str(),
                static_cast<double>(owner.peak_allocated_bytes) / kMiB);
  }
  std::printf("RSS bound: file %.2f + KV %.2f + 64 MiB = %.2f MiB -> %s\n", file_mib, kv_mib,
              bound_mib, hwm_mib <= bound_mib ? "within" : "OVER");
  std::printf("(last token %d)\n", bench.last_token());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"Forward-pass benchmark (pp/tg tokens/s, like llama-bench)"};
  app.add_option("-m,--model", options.model, "GGUF file")->capture_default_str();
  app.add_option("-t,--threads", options.threads, "compute threads, counting the caller")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("-p,--prompt", options.prompt_tokens, "prompt tokens of the pp test (0: skip)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("-n,--gen", options.gen_tokens, "decode steps of the tg test (0: skip)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("-r,--repetitions", options.repetitions, "timed runs per test")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("-c,--ctx", options.ctx, "KV positions (0: prompt + gen)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--verify", options.verify,
                 "span lengths of the verify test (speculative decoding's verification step)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{64}));
  CLI11_PARSE(app, argc, argv);
  return Run(options);
}

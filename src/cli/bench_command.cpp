// `pier bench serve`: load-tests any OpenAI-compatible server (pier serve, llama.cpp's
// llama-server, vLLM) over HTTP and reports what `vllm bench serve` reports: request and
// token throughput, goodput under SLOs, and TTFT, TPOT, ITL and end-to-end latency
// percentiles. The work is done by src/loadgen; this file maps flags to its options.
//
// Exits 0 when the run finished with at least one successful request, 1 when no request
// succeeded or an option is wrong (the reason goes to stderr).
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/ascii.h"
#include "loadgen/benchmark.h"
#include "loadgen/report.h"

namespace pier::cli {
namespace {

struct BenchServeOptions {
  loadgen::BenchmarkConfig config;
  std::string request_rate = "inf";
  std::string prompt_format = "text";
  std::string percentiles = "50,90,99";
  std::vector<std::string> goodput;
  std::string extra_body;
  std::string json_path;
  std::string models;
  std::string phases;
  std::string traffic;
  double phase_seconds = 60;
  double hot_share = 0.8;
  std::vector<std::string> model_urls;
  bool quiet = false;
};

constexpr const char* kFooter =
    R"(Workload (vLLM's "random" dataset): each request asks for an input length uniform in
[L*(1-r), L*(1+r)] tokens (L = --random-input-len, r = --random-range-ratio) and
max_tokens uniform in the same way around --random-output-len. With --prompt-format text
(default) the prompt is that many random common English words, each one token in usual
BPE vocabularies, so lengths are approximate (the server may add BOS or a chat template);
the input token totals use the server's usage.prompt_tokens when it reports them.
--prompt-format token-ids sends exact lists of random token ids (completions only).

Requests stream (stream: true, stream_options.include_usage: true); output tokens come
from the server's usage, else one per streamed text chunk. Metrics, as vllm bench serve:
  TTFT  send -> first chunk with generated text
  ITL   gaps between consecutive text chunks
  TPOT  (E2EL - TTFT) / (output tokens - 1)
  E2EL  send -> end of the response
  goodput  successful requests per second meeting every --goodput SLO
Failed requests (HTTP errors, refused connections, error events, timeouts) are counted
and their reasons listed; they do not enter the latency figures.

Example:
  pier bench serve --base-url http://127.0.0.1:8080 --num-prompts 200 \
    --request-rate 4 --random-input-len 256 --random-output-len 64 --ignore-eos \
    --goodput ttft:500 tpot:50 --json result.json)";

Result<std::vector<double>> ParsePercentiles(const std::string& text) {
  std::vector<double> out;
  for (const std::string& item : SplitList(text)) {
    if (item.empty()) continue;
    double value = 0;
    size_t used = 0;
    try {
      value = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || !(value >= 0 && value <= 100)) {
      return InvalidArgumentError("--percentiles: '" + item + "' is not a number in [0, 100]");
    }
    out.push_back(value);
  }
  return out;
}

Result<double> ParseRate(const std::string& text) {
  if (text == "inf" || text == "Inf" || text == "INF") {
    return std::numeric_limits<double>::infinity();
  }
  double value = 0;
  size_t used = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !(value > 0)) {
    return InvalidArgumentError("--request-rate: '" + text +
                                "' is not a positive number of requests per second or inf");
  }
  return value;
}

Status Prepare(BenchServeOptions& options) {
  loadgen::BenchmarkConfig& config = options.config;
  PIER_ASSIGN_OR_RETURN(config.request_rate, ParseRate(options.request_rate));
  PIER_ASSIGN_OR_RETURN(config.percentiles, ParsePercentiles(options.percentiles));
  PIER_ASSIGN_OR_RETURN(config.slos, loadgen::ParseSloTargets(options.goodput));
  if (options.prompt_format == "text") {
    config.workload.format = loadgen::PromptFormat::kText;
  } else if (options.prompt_format == "token-ids") {
    config.workload.format = loadgen::PromptFormat::kTokenIds;
  } else {
    return InvalidArgumentError("--prompt-format must be text or token-ids");
  }
  if (!options.extra_body.empty()) {
    try {
      config.extra_body = nlohmann::json::parse(options.extra_body);
    } catch (const nlohmann::json::exception& e) {
      return InvalidArgumentError("--extra-body is not valid JSON: " + std::string(e.what()));
    }
    if (!config.extra_body.is_object()) {
      return InvalidArgumentError("--extra-body must be a JSON object");
    }
  }
  if (!options.models.empty()) {
    config.models = SplitList(options.models);
    for (const std::string& model : config.models) {
      if (model.empty())
        return InvalidArgumentError("--models: an empty name in '" + options.models + "'");
    }
  }
  if (!options.traffic.empty()) {
    PIER_ASSIGN_OR_RETURN(config.traffic, loadgen::ParseTraffic(options.traffic));
  }
  if (!options.phases.empty()) {
    PIER_ASSIGN_OR_RETURN(config.phases,
                          loadgen::ParsePhases(options.phases, config.models, options.phase_seconds,
                                               options.hot_share));
  } else if (!config.models.empty()) {
    return InvalidArgumentError("--models needs --phases (e.g. --phases a,b,c,even)");
  }
  for (const std::string& item : options.model_urls) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      return InvalidArgumentError("--model-url: expected MODEL=URL, got '" + item + "'");
    }
    config.model_urls[item.substr(0, eq)] = item.substr(eq + 1);
  }
  if (!options.quiet) {
    config.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  }
  return Status::Ok();
}

int RunBenchServe(BenchServeOptions& options) {
  if (Status status = Prepare(options); !status.ok()) {
    std::fprintf(stderr, "pier bench serve: %s\n", status.message().c_str());
    return 1;
  }
  auto result = loadgen::RunBenchmark(options.config);
  if (!result.ok()) {
    std::fprintf(stderr, "pier bench serve: %s\n", result.status().message().c_str());
    return 1;
  }
  std::fputs(loadgen::FormatReport(*result).c_str(), stdout);
  std::fflush(stdout);
  if (!options.json_path.empty()) {
    std::ofstream file(options.json_path);
    file << loadgen::ResultToJson(*result).dump(2) << "\n";
    if (!file) {
      std::fprintf(stderr, "pier bench serve: cannot write %s\n", options.json_path.c_str());
      return 1;
    }
    std::fprintf(stderr, "results saved to %s\n", options.json_path.c_str());
  }
  return result->metrics.completed > 0 ? 0 : 1;
}

void RegisterBench(CLI::App& app, int& exit_code) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks (serve: HTTP load test of a server)");
  bench->require_subcommand(1);
  auto options = std::make_shared<BenchServeOptions>();
  loadgen::BenchmarkConfig& c = options->config;
  CLI::App* serve = bench->add_subcommand(
      "serve",
      "Load-test an OpenAI-compatible server (pier serve, llama-server, vLLM) and report "
      "throughput, goodput and TTFT/TPOT/ITL/E2EL latencies like `vllm bench serve`");
  serve->footer(kFooter);
  serve->add_option("--base-url", c.base_url, "Server URL, http:// only")->capture_default_str();
  serve
      ->add_option("--endpoint", c.endpoint,
                   "API path: /v1/completions or /v1/chat/completions (chat when it contains "
                   "\"chat\")")
      ->capture_default_str();
  serve->add_option("--model", c.model,
                    "Model name sent with each request (default: the first "
                    "id listed by GET /v1/models)");
  serve->add_option("--api-key", c.api_key, "Sent as 'Authorization: Bearer KEY'");
  serve->add_option("-n,--num-prompts", c.workload.num_prompts, "Number of requests to send")
      ->capture_default_str();
  serve
      ->add_option("--request-rate", options->request_rate,
                   "Requests per second, arrivals by a gamma process (see --burstiness); inf "
                   "sends all at once")
      ->capture_default_str();
  serve
      ->add_option("--burstiness", c.burstiness,
                   "Gamma shape of the gaps between arrivals: 1 = Poisson, < 1 burstier, > 1 "
                   "more even; the mean rate stays --request-rate")
      ->capture_default_str();
  serve
      ->add_option("--max-concurrency", c.max_concurrency,
                   "Most requests in flight at once (0 = no limit beyond 1024); arrivals wait "
                   "for a free slot")
      ->capture_default_str();
  serve->add_option("--random-input-len", c.workload.input_len, "Mean prompt length in tokens")
      ->capture_default_str();
  serve
      ->add_option("--random-output-len", c.workload.output_len,
                   "Mean max_tokens per request (exact output length with --ignore-eos)")
      ->capture_default_str();
  serve
      ->add_option("--random-range-ratio", c.workload.range_ratio,
                   "Lengths uniform in [len*(1-r), len*(1+r)], r in [0, 1)")
      ->capture_default_str();
  serve
      ->add_option("--prompt-format", options->prompt_format,
                   "text (random common words, about one token each) or token-ids (random "
                   "ids, exact length, completions only)")
      ->capture_default_str();
  serve
      ->add_option("--token-id-min", c.workload.token_id_min,
                   "Smallest token id drawn with --prompt-format token-ids")
      ->capture_default_str();
  serve
      ->add_option("--token-id-max", c.workload.token_id_max,
                   "Token ids drawn below this (keep it within the model's vocabulary)")
      ->capture_default_str();
  serve->add_flag("--ignore-eos", c.ignore_eos,
                  "Send ignore_eos: true so every request generates max_tokens tokens");
  serve->add_option("--temperature", c.temperature, "Sampling temperature sent")
      ->capture_default_str();
  serve->add_option("--extra-body", options->extra_body,
                    "JSON object merged into every request body, e.g. '{\"top_k\": 1}'");
  serve->add_option("--seed", c.workload.seed, "Seed for lengths, prompts and arrival times")
      ->capture_default_str();
  serve
      ->add_option("--timeout-seconds", c.timeout_s,
                   "Cap on the whole run; requests still running then fail, later ones are "
                   "not sent")
      ->capture_default_str();
  serve->add_option("--request-timeout-seconds", c.request_timeout_s, "Cap on each request")
      ->capture_default_str();
  serve
      ->add_option("--goodput", options->goodput,
                   "SLOs in milliseconds, KEY:MS with KEY ttft, tpot or e2el, e.g. --goodput "
                   "ttft:500 tpot:50")
      ->expected(1, 3);
  serve
      ->add_option("--percentiles", options->percentiles,
                   "Comma-separated percentiles to report (the median is always reported)")
      ->capture_default_str();
  serve->add_option("--json", options->json_path,
                    "Save the results (vLLM's key names plus per-request arrays) to this file");
  serve->add_option("--models", options->models,
                    "Comma-separated models for a shifting-load schedule (with --phases)");
  serve->add_option("--phases", options->phases,
                    "Schedule, e.g. a,b,c,even: in each phase the named model gets --hot-share "
                    "of the requests (the others split the rest); even shares them; the run "
                    "sends --request-rate x the schedule's length requests");
  serve->add_option("--phase-seconds", options->phase_seconds, "Length of each phase")
      ->capture_default_str();
  serve->add_option("--hot-share", options->hot_share, "Share of the hot model in its phases")
      ->capture_default_str();
  serve->add_option("--model-url", options->model_urls,
                    "MODEL=URL: send that model's requests to another server (one server per "
                    "model); repeatable");
  serve->add_option("--traffic", options->traffic,
                    "A QoS traffic mix, NAME:KEY:CLASS:SHARE[:DEADLINE_MS],...: each request is "
                    "drawn from one stream by share and sent with its API key (the tenant), its "
                    "priority class and deadline_ms (KEY or CLASS - for none); the report and "
                    "--json break results down by stream");
  serve->add_flag("-q,--quiet", options->quiet, "No progress lines on stderr");
  serve->callback([options, &exit_code] { exit_code = RunBenchServe(*options); });
}

}  // namespace

PIER_REGISTER_COMMAND(bench, RegisterBench);

}  // namespace pier::cli

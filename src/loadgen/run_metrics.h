// What one benchmark request measured, and the run's metrics computed from all of them the
// way `vllm bench serve` defines them:
//   TTFT  time from sending the request to the first chunk that carries generated text;
//   ITL   gaps between consecutive text-carrying chunks (pooled over all requests);
//   TPOT  (E2EL - TTFT) / (output tokens - 1), per request with more than one output token;
//   E2EL  time from sending the request to the end of the response;
// throughputs divide totals of successful requests by the run's duration; goodput counts the
// successful requests that meet every SLO given, per second.
//
// Plain data and pure functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "loadgen/stats.h"

namespace pier::loadgen {

struct RequestResult {
  bool success = false;
  std::string error;       // why it failed; empty on success
  int input_len = 0;       // prompt length asked for, in tokens
  int prompt_tokens = -1;  // usage.prompt_tokens from the server; -1 when not reported
  int output_tokens = 0;   // usage.completion_tokens, else the number of text chunks
  bool usage_reported = false;
  int text_chunks = 0;       // SSE chunks that carried generated text
  double send_offset_s = 0;  // when the request was sent, from the start of the run
  std::string model;         // the model it named (with a phase schedule; else empty)
  int phase = -1;            // its phase in the schedule, or -1
  std::string stream;        // its traffic stream (with --traffic; else empty)
  double ttft_s = 0;
  double latency_s = 0;  // end-to-end
  std::vector<double> itl_s;

  // Prompt tokens counted in the totals: the server's figure when it gave one.
  int CountedInputTokens() const { return prompt_tokens >= 0 ? prompt_tokens : input_len; }
  // 0 when the request produced at most one token.
  double TpotSeconds() const;
};

// Service-level objectives for goodput, in milliseconds; an absent one is not checked.
struct SloTargets {
  std::optional<double> ttft_ms;
  std::optional<double> tpot_ms;
  std::optional<double> e2el_ms;

  bool empty() const { return !ttft_ms && !tpot_ms && !e2el_ms; }
  bool Met(const RequestResult& request) const;
};

// Parses "ttft:500" style items (also "ttft:500,tpot:50" in one item). Keys: ttft, tpot,
// e2el; values in milliseconds, positive.
Result<SloTargets> ParseSloTargets(const std::vector<std::string>& items);

struct BenchmarkMetrics {
  size_t completed = 0;
  size_t failed = 0;
  size_t not_sent = 0;  // never sent because the run's time cap came first
  int64_t total_input_tokens = 0;
  int64_t total_output_tokens = 0;
  bool all_usage_reported = true;  // every success's output count came from usage
  double duration_s = 0;
  double request_throughput = 0;          // requests/s
  double output_throughput = 0;           // output tokens/s
  double total_token_throughput = 0;      // (input + output) tokens/s
  std::optional<double> request_goodput;  // requests/s meeting the SLOs; set when SLOs given
  size_t good_requests = 0;
  MetricSummary ttft_ms;
  MetricSummary tpot_ms;
  MetricSummary itl_ms;
  MetricSummary e2el_ms;
};

BenchmarkMetrics ComputeMetrics(const std::vector<RequestResult>& requests, size_t not_sent,
                                double duration_s, const SloTargets& slos,
                                const std::vector<double>& percentiles);

}  // namespace pier::loadgen

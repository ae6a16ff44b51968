#include "loadgen/run_metrics.h"

#include <charconv>

namespace pier::loadgen {

double RequestResult::TpotSeconds() const {
  if (output_tokens <= 1) return 0;
  return (latency_s - ttft_s) / static_cast<double>(output_tokens - 1);
}

bool SloTargets::Met(const RequestResult& request) const {
  if (ttft_ms && request.ttft_s * 1000.0 > *ttft_ms) return false;
  if (tpot_ms && request.TpotSeconds() * 1000.0 > *tpot_ms) return false;
  if (e2el_ms && request.latency_s * 1000.0 > *e2el_ms) return false;
  return true;
}

Result<SloTargets> ParseSloTargets(const std::vector<std::string>& items) {
  SloTargets out;
  for (const std::string& item_list : items) {
    std::string_view rest = item_list;
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      const std::string_view item = rest.substr(0, comma);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      if (item.empty()) continue;
      const size_t colon = item.find(':');
      const std::string_view key = item.substr(0, colon);
      const std::string_view value_text =
          colon == std::string_view::npos ? std::string_view() : item.substr(colon + 1);
      double value = 0;
      const auto [end, ec] =
          std::from_chars(value_text.data(), value_text.data() + value_text.size(), value);
      if (value_text.empty() || ec != std::errc() || end != value_text.data() + value_text.size() ||
          !(value > 0)) {
        return InvalidArgumentError("goodput SLO '" + std::string(item) +
                                    "': expected KEY:MILLISECONDS with a positive number, e.g. "
                                    "ttft:500");
      }
      if (key == "ttft") {
        out.ttft_ms = value;
      } else if (key == "tpot") {
        out.tpot_ms = value;
      } else if (key == "e2el") {
        out.e2el_ms = value;
      } else {
        return InvalidArgumentError("goodput SLO '" + std::string(item) +
                                    "': unknown metric; use ttft, tpot or e2el");
      }
    }
  }
  return out;
}

BenchmarkMetrics ComputeMetrics(const std::vector<RequestResult>& requests, size_t not_sent,
                                double duration_s, const SloTargets& slos,
                                const std::vector<double>& percentiles) {
  BenchmarkMetrics m;
  m.not_sent = not_sent;
  m.duration_s = duration_s;
  std::vector<double> ttfts_ms, tpots_ms, itls_ms, e2els_ms;
  for (const RequestResult& r : requests) {
    if (!r.success) {
      ++m.failed;
      continue;
    }
    ++m.completed;
    m.total_input_tokens += r.CountedInputTokens();
    m.total_output_tokens += r.output_tokens;
    if (!r.usage_reported) m.all_usage_reported = false;
    ttfts_ms.push_back(r.ttft_s * 1000.0);
    if (r.output_tokens > 1) tpots_ms.push_back(r.TpotSeconds() * 1000.0);
    for (double itl : r.itl_s) itls_ms.push_back(itl * 1000.0);
    e2els_ms.push_back(r.latency_s * 1000.0);
    if (!slos.empty() && slos.Met(r)) ++m.good_requests;
  }
  if (duration_s > 0) {
    m.request_throughput = static_cast<double>(m.completed) / duration_s;
    m.output_throughput = static_cast<double>(m.total_output_tokens) / duration_s;
    m.total_token_throughput =
        static_cast<double>(m.total_input_tokens + m.total_output_tokens) / duration_s;
    if (!slos.empty()) m.request_goodput = static_cast<double>(m.good_requests) / duration_s;
  } else if (!slos.empty()) {
    m.request_goodput = 0;
  }
  m.ttft_ms = Summarize(ttfts_ms, percentiles);
  m.tpot_ms = Summarize(tpots_ms, percentiles);
  m.itl_ms = Summarize(itls_ms, percentiles);
  m.e2el_ms = Summarize(e2els_ms, percentiles);
  return m;
}

}  // namespace pier::loadgen

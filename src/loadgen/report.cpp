#include "loadgen/report.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>

namespace pier::loadgen {
namespace {

std::string Line(const std::string& label, const std::string& value) {
  char text[160];
  std::snprintf(text, sizeof(text), "%-40s %-10s\n", label.c_str(), value.c_str());
  return text;
}

std::string Number(double value) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.2f", value);
  return text;
}

std::string Banner(const std::string& title, char fill) {
  constexpr size_t kWidth = 50;
  std::string out = title;
  if (out.size() < kWidth) {
    const size_t left = (kWidth - out.size()) / 2;
    out = std::string(left, fill) + out + std::string(kWidth - out.size() - left, fill);
  }
  return out + "\n";
}

std::string SummaryLines(const std::string& title, const std::string& name,
                         const MetricSummary& summary) {
  std::string out = Banner(title, '-');
  out += Line("Mean " + name + " (ms):", Number(summary.mean));
  out += Line("Median " + name + " (ms):", Number(summary.median));
  for (const auto& [p, value] : summary.percentiles) {
    if (p == 50) continue;  // printed as the median
    out += Line("P" + PercentileName(p) + " " + name + " (ms):", Number(value));
  }
  return out;
}

void AddSummary(nlohmann::json& out, const std::string& key, const MetricSummary& summary) {
  out["mean_" + key + "_ms"] = summary.mean;
  out["median_" + key + "_ms"] = summary.median;
  out["std_" + key + "_ms"] = summary.std_dev;
  for (const auto& [p, value] : summary.percentiles) {
    out["p" + PercentileName(p) + "_" + key + "_ms"] = value;
  }
}

}  // namespace

std::string PercentileName(double p) {
  if (p == std::floor(p)) return std::to_string(static_cast<int64_t>(p));
  char text[32];
  std::snprintf(text, sizeof(text), "%g", p);
  return text;
}

namespace {

double Percentile(const MetricSummary& summary, double p) {
  for (const auto& [q, value] : summary.percentiles) {
    if (q == p) return value;
  }
  return summary.median;
}

// Requests meeting every SLO among those sent (failures count as missed).
double SloAttainment(const BenchmarkMetrics& m) {
  const size_t sent = m.completed + m.failed;
  return sent == 0 ? 0.0 : static_cast<double>(m.good_requests) / static_cast<double>(sent);
}

// A table of metrics by `what` (phase, model, stream): its header, then one row per call.
class MetricsTable {
 public:
  MetricsTable(std::string* out, const char* what, bool slos) : out_(out), slos_(slos) {
    std::snprintf(line_, sizeof(line_), "%-14s %6s %6s %9s %10s %10s %10s %8s\n", what, "done",
                  "failed", "SLO met", "out tok/s", "p50 TTFT", "p99 TTFT", "p50 TPOT");
    *out_ += line_;
  }
  void Row(const std::string& name, const BenchmarkMetrics& m) {
    const std::string slo = slos_ ? Number(100.0 * SloAttainment(m)) + "%" : "-";
    std::snprintf(line_, sizeof(line_), "%-14s %6zu %6zu %9s %10.1f %9.0fms %9.0fms %6.1fms\n",
                  name.c_str(), m.completed, m.failed, slo.c_str(), m.output_throughput,
                  m.ttft_ms.median, Percentile(m.ttft_ms, 99), m.tpot_ms.median);
    *out_ += line_;
  }

 private:
  std::string* out_;
  bool slos_;
  char line_[256];
};

// One row per phase (and per model) of a shifting-load schedule.
std::string ScheduleTable(const BenchmarkResult& result) {
  std::string out = Banner(" Per phase ", '-');
  MetricsTable table(&out, "phase", !result.config.slos.empty());
  for (const BenchmarkResult::PhaseMetrics& phase : result.phases) {
    table.Row(phase.name, phase.metrics);
  }
  table.Row("overall", result.metrics);
  out += Banner(" Per model ", '-');
  for (const auto& [model, m] : result.per_model) table.Row(model, m);
  return out;
}

// One row per traffic stream (--traffic).
std::string StreamTable(const BenchmarkResult& result) {
  std::string out = Banner(" Per traffic stream ", '-');
  MetricsTable table(&out, "stream", !result.config.slos.empty());
  for (const auto& [name, m] : result.per_stream) table.Row(name, m);
  return out;
}

void AddMetrics(nlohmann::json& out, const BenchmarkMetrics& m) {
  out["completed"] = m.completed;
  out["failed"] = m.failed;
  out["output_throughput"] = m.output_throughput;
  out["request_goodput"] =
      m.request_goodput ? nlohmann::json(*m.request_goodput) : nlohmann::json(nullptr);
  out["slo_attainment"] = SloAttainment(m);
  AddSummary(out, "ttft", m.ttft_ms);
  AddSummary(out, "tpot", m.tpot_ms);
}

}  // namespace

std::string FormatReport(const BenchmarkResult& result) {
  const BenchmarkMetrics& m = result.metrics;
  const BenchmarkConfig& c = result.config;
  std::string out = Banner(" Serving Benchmark Result ", '=');
  out += Line("Successful requests:", std::to_string(m.completed));
  out += Line("Failed requests:", std::to_string(m.failed));
  if (m.not_sent > 0) out += Line("Not sent (time cap reached):", std::to_string(m.not_sent));
  out += Line("Request rate configured (RPS):",
              std::isinf(c.request_rate) ? "inf" : Number(c.request_rate));
  out += Line("Maximum request concurrency:",
              c.max_concurrency > 0 ? std::to_string(c.max_concurrency) : "none");
  out += Line("Peak concurrent requests:", std::to_string(result.max_in_flight));
  out += Line("Benchmark duration (s):", Number(m.duration_s));
  out += Line("Total input tokens:", std::to_string(m.total_input_tokens));
  out += Line("Total generated tokens:", std::to_string(m.total_output_tokens));
  out += Line("Request throughput (req/s):", Number(m.request_throughput));
  if (m.request_goodput) out += Line("Request goodput (req/s):", Number(*m.request_goodput));
  out += Line("Output token throughput (tok/s):", Number(m.output_throughput));
  out += Line("Total Token throughput (tok/s):", Number(m.total_token_throughput));
  out += SummaryLines("Time to First Token", "TTFT", m.ttft_ms);
  out += SummaryLines("Time per Output Token (excl. 1st token)", "TPOT", m.tpot_ms);
  out += SummaryLines("Inter-token Latency", "ITL", m.itl_ms);
  out += SummaryLines("End-to-end Latency", "E2EL", m.e2el_ms);
  if (!c.slos.empty()) out += Line("SLO attainment (%):", Number(100.0 * SloAttainment(m)));
  if (!result.phases.empty()) out += ScheduleTable(result);
  if (!result.per_stream.empty()) out += StreamTable(result);
  out += std::string(50, '=') + "\n";
  if (m.completed > 0 && !m.all_usage_reported) {
    out +=
        "note: the server reported no usage for some requests; their output tokens were "
        "counted as streamed chunks\n";
  }
  if (m.failed > 0) {
    std::map<std::string, size_t> reasons;
    for (const RequestResult& r : result.requests) {
      if (!r.success) ++reasons[r.error];
    }
    out += "Failure reasons:\n";
    size_t shown = 0;
    for (const auto& [reason, count] : reasons) {
      if (++shown > 5) {
        out += "  ... and " + std::to_string(reasons.size() - 5) + " more\n";
        break;
      }
      out += "  " + std::to_string(count) + " x " + reason + "\n";
    }
  }
  return out;
}

nlohmann::json ResultToJson(const BenchmarkResult& result) {
  const BenchmarkMetrics& m = result.metrics;
  const BenchmarkConfig& c = result.config;
  nlohmann::json out;
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char date[32];
  std::strftime(date, sizeof(date), "%Y%m%d-%H%M%S", std::localtime(&now));
  out["date"] = date;
  out["backend"] = "openai";
  out["base_url"] = c.base_url;
  out["endpoint"] = c.endpoint;
  out["model_id"] = result.model;
  out["num_prompts"] = c.workload.num_prompts;
  out["request_rate"] =
      std::isinf(c.request_rate) ? nlohmann::json("inf") : nlohmann::json(c.request_rate);
  out["burstiness"] = c.burstiness;
  out["max_concurrency"] =
      c.max_concurrency > 0 ? nlohmann::json(c.max_concurrency) : nlohmann::json(nullptr);
  out["random_input_len"] = c.workload.input_len;
  out["random_output_len"] = c.workload.output_len;
  out["random_range_ratio"] = c.workload.range_ratio;
  out["prompt_format"] = c.workload.format == PromptFormat::kText ? "text" : "token-ids";
  out["ignore_eos"] = c.ignore_eos;
  out["seed"] = c.workload.seed;
  out["duration"] = m.duration_s;
  out["completed"] = m.completed;
  out["failed"] = m.failed;
  out["not_sent"] = m.not_sent;
  out["max_concurrent_requests"] = result.max_in_flight;
  out["time_cap_reached"] = result.time_cap_reached;
  out["total_input_tokens"] = m.total_input_tokens;
  out["total_output_tokens"] = m.total_output_tokens;
  out["request_throughput"] = m.request_throughput;
  out["request_goodput"] =
      m.request_goodput ? nlohmann::json(*m.request_goodput) : nlohmann::json(nullptr);
  out["output_throughput"] = m.output_throughput;
  out["total_token_throughput"] = m.total_token_throughput;
  nlohmann::json goodput_config = nlohmann::json::object();
  if (c.slos.ttft_ms) goodput_config["ttft"] = *c.slos.ttft_ms;
  if (c.slos.tpot_ms) goodput_config["tpot"] = *c.slos.tpot_ms;
  if (c.slos.e2el_ms) goodput_config["e2el"] = *c.slos.e2el_ms;
  out["goodput_config"] = goodput_config;
  AddSummary(out, "ttft", m.ttft_ms);
  AddSummary(out, "tpot", m.tpot_ms);
  AddSummary(out, "itl", m.itl_ms);
  AddSummary(out, "e2el", m.e2el_ms);
  nlohmann::json input_lens = nlohmann::json::array(), output_lens = nlohmann::json::array(),
                 ttfts = nlohmann::json::array(), itls = nlohmann::json::array(),
                 latencies = nlohmann::json::array(), send_times = nlohmann::json::array(),
                 errors = nlohmann::json::array();
  for (const RequestResult& r : result.requests) {
    input_lens.push_back(r.CountedInputTokens());
    output_lens.push_back(r.output_tokens);
    ttfts.push_back(r.ttft_s);
    itls.push_back(r.itl_s);
    latencies.push_back(r.latency_s);
    send_times.push_back(r.send_offset_s);
    errors.push_back(r.error);
  }
  if (!result.phases.empty()) {
    nlohmann::json phases = nlohmann::json::array();
    for (const BenchmarkResult::PhaseMetrics& phase : result.phases) {
      nlohmann::json p = {
          {"name", phase.name}, {"start_s", phase.start_s}, {"seconds", phase.seconds}};
      AddMetrics(p, phase.metrics);
      phases.push_back(std::move(p));
    }
    out["phases"] = std::move(phases);
    nlohmann::json models = nlohmann::json::object();
    for (const auto& [model, metrics] : result.per_model) AddMetrics(models[model], metrics);
    out["per_model"] = std::move(models);
    out["slo_attainment"] = SloAttainment(m);
    nlohmann::json request_models = nlohmann::json::array();
    for (const RequestResult& r : result.requests) request_models.push_back(r.model);
    out["request_models"] = std::move(request_models);
  }
  if (!result.per_stream.empty()) {
    nlohmann::json streams = nlohmann::json::object();
    for (const auto& [name, metrics] : result.per_stream) AddMetrics(streams[name], metrics);
    out["per_stream"] = std::move(streams);
    nlohmann::json request_streams = nlohmann::json::array();
    for (const RequestResult& r : result.requests) request_streams.push_back(r.stream);
    out["request_streams"] = std::move(request_streams);
  }
  out["input_lens"] = std::move(input_lens);
  out["output_lens"] = std::move(output_lens);
  out["ttfts"] = std::move(ttfts);
  out["itls"] = std::move(itls);
  out["e2els"] = std::move(latencies);
  out["send_times"] = std::move(send_times);
  out["errors"] = std::move(errors);
  return out;
}

}  // namespace pier::loadgen

// Summary statistics for latency samples, computed the way `vllm bench serve` (numpy)
// computes them: percentiles interpolate linearly between the two nearest ranks (numpy's
// default "linear" method) and the standard deviation is the population one (ddof = 0).
//
// Pure functions on values passed in; thread-safe.
#pragma once

#include <span>
#include <utility>
#include <vector>

namespace pier::loadgen {

// The mean of `values`; 0 when empty (vLLM reports 0 for a metric with no samples).
double Mean(std::span<const double> values);

// Population standard deviation; 0 when empty.
double StdDev(std::span<const double> values);

// The p-th percentile (p in [0, 100]) of `values`, which need not be sorted; 0 when empty.
// Rank p/100 * (n - 1), interpolated between its floor and ceiling neighbours.
double Percentile(std::span<const double> values, double p);

// Mean, median, standard deviation and the requested percentiles of one metric.
struct MetricSummary {
  size_t count = 0;
  double mean = 0;
  double median = 0;
  double std_dev = 0;
  std::vector<std::pair<double, double>> percentiles;  // (p, value), in the order asked
};

MetricSummary Summarize(std::span<const double> values, std::span<const double> percentiles);

}  // namespace pier::loadgen

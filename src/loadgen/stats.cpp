#include "loadgen/stats.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"

namespace pier::loadgen {
namespace {

// Percentile of already sorted values.
double SortedPercentile(std::span<const double> sorted, double p) {
  if (sorted.empty()) return 0;
  PIER_CHECK(p >= 0 && p <= 100, "percentile outside [0, 100]");
  const double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const auto low = static_cast<size_t>(std::floor(rank));
  const auto high = static_cast<size_t>(std::ceil(rank));
  return sorted[low] + (sorted[high] - sorted[low]) * (rank - static_cast<double>(low));
}

}  // namespace

double Mean(std::span<const double> values) {
  if (values.empty()) return 0;
  double sum = 0;
  for (double v : values) sum += v;
  return sum / static_cast<double>(values.size());
}

double StdDev(std::span<const double> values) {
  if (values.empty()) return 0;
  const double mean = Mean(values);
  double sum = 0;
  for (double v : values) sum += (v - mean) * (v - mean);
  return std::sqrt(sum / static_cast<double>(values.size()));
}

double Percentile(std::span<const double> values, double p) {
  std::vector<double> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  return SortedPercentile(sorted, p);
}

MetricSummary Summarize(std::span<const double> values, std::span<const double> percentiles) {
  std::vector<double> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  MetricSummary out;
  out.count = sorted.size();
  out.mean = Mean(sorted);
  out.median = SortedPercentile(sorted, 50);
  out.std_dev = StdDev(sorted);
  for (double p : percentiles) out.percentiles.emplace_back(p, SortedPercentile(sorted, p));
  return out;
}

}  // namespace pier::loadgen

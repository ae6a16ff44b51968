// Buckets: a histogram's counts as the batchers keep them (batch sizes, queue and compute
// times), rendered as Prometheus histograms by serving/'s metrics.
//
// Plain data; not thread-safe (its owner guards it).
#pragma once

#include <cstdint>
#include <vector>

namespace pier {

// counts[i] values <= bounds[i] (and above bounds[i - 1]); the last count is above every
// bound. Not cumulative.
struct Buckets {
  std::vector<double> bounds = {};
  std::vector<uint64_t> counts = {};  // [bounds + 1]
  double sum = 0;
  void Observe(double value) {
    size_t i = 0;
    while (i < bounds.size() && value > bounds[i]) ++i;
    ++counts[i];
    sum += value;
  }
};

}  // namespace pier

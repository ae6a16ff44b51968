#include "loadgen/arrivals.h"

#include <cmath>
#include <random>
#include <string>

namespace pier::loadgen {

Result<std::vector<double>> ArrivalOffsets(size_t count, double request_rate, double burstiness,
                                           uint64_t seed) {
  if (!(request_rate > 0)) {
    return InvalidArgumentError("request rate must be positive (or inf), got " +
                                std::to_string(request_rate));
  }
  if (!(burstiness > 0) || std::isinf(burstiness)) {
    return InvalidArgumentError("burstiness must be a positive number, got " +
                                std::to_string(burstiness));
  }
  std::vector<double> offsets(count, 0.0);
  if (std::isinf(request_rate)) return offsets;
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> gap(burstiness, 1.0 / (request_rate * burstiness));
  double t = 0;
  for (size_t i = 1; i < count; ++i) {
    t += gap(rng);
    offsets[i] = t;
  }
  return offsets;
}

}  // namespace pier::loadgen

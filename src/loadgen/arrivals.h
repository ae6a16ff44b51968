// When each benchmark request is sent: arrival times of a Poisson process or, more
// generally, a renewal process with gamma-distributed gaps, as `vllm bench serve` draws them.
//
// Gaps between requests follow Gamma(shape = burstiness, scale = 1 / (rate * burstiness)):
// the mean gap is 1 / rate for every burstiness; burstiness 1 gives exponential gaps (a
// Poisson process), below 1 burstier traffic (coefficient of variation 1/sqrt(burstiness)),
// above 1 more even traffic. An infinite rate sends every request at once.
//
// Pure function of its arguments (seeded); thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"

namespace pier::loadgen {

// Offsets in seconds from the start of the run, one per request, non-decreasing; the
// first request goes at 0. Rejects a rate or burstiness that is not positive.
Result<std::vector<double>> ArrivalOffsets(size_t count, double request_rate, double burstiness,
                                           uint64_t seed);

}  // namespace pier::loadgen

// The benchmark's outputs: the text report printed at the end of a run (laid out as
// `vllm bench serve` prints it) and the JSON saved with --json (vLLM's key names:
// `request_throughput`, `mean_ttft_ms`, `p99_itl_ms`, ..., plus per-request arrays).
//
// Pure functions of a BenchmarkResult; thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "loadgen/benchmark.h"

namespace pier::loadgen {

std::string FormatReport(const BenchmarkResult& result);

nlohmann::json ResultToJson(const BenchmarkResult& result);

// "99" for 99.0, "99.9" for 99.9: how percentiles are named in labels and keys.
std::string PercentileName(double p);

}  // namespace pier::loadgen

// ReadExposition: the samples of a Prometheus text exposition (format 0.0.4), for clients of
// a Pier server's /metrics such as `pier top`.
//
// Lenient where a client should be: comment lines (# HELP, # TYPE) are skipped, a line that
// does not parse is skipped and counted, so one odd line never hides the rest. Each sample
// keeps its name, its labels (unescaped: \\, \" and \n) in the order written, and its value
// ("+Inf", "-Inf", "NaN" included). A timestamp after the value is ignored.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pier::metrics {

struct ExpositionSample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;
  // The value of label `name`, or empty.
  std::string_view Label(std::string_view label) const;
};

struct ExpositionRead {
  std::vector<ExpositionSample> samples;
  size_t bad_lines = 0;
};

ExpositionRead ReadExposition(std::string_view text);

}  // namespace pier::metrics

// The text forms of setting values shared by the server's keys (cli/serve_config.h) and the
// per-model keys (serving/model_settings.h): whole integers in a range, seconds, on/off, and
// shares. Each parser names `source` (a flag, or "serve.yaml: ctx") in its message.
//
// Thread-safety: plain functions on values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace pier {

// A whole integer in [min, max].
[[nodiscard]] Result<int64_t> ParseIntegerSetting(std::string_view value, std::string_view source,
                                                  int64_t min, int64_t max);

// Seconds as a decimal number in [min, 86400] (a trailing "s" is accepted: "2.5s").
[[nodiscard]] Result<double> ParseSecondsSetting(std::string_view value, std::string_view source,
                                                 double min);

// "on" or "off".
[[nodiscard]] Result<bool> ParseOnOffSetting(std::string_view value, std::string_view source);

// A share in [0, max] ("0.05").
[[nodiscard]] Result<double> ParseShareSetting(std::string_view value, std::string_view source,
                                               double max);

// The shortest decimal text that reads back as exactly `value` ("0.05", "120").
std::string ExactDecimal(double value);

}  // namespace pier

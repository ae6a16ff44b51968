#include "common/setting_text.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace pier {
namespace {

std::string Quote(std::string_view s) { return "\"" + std::string(s) + "\""; }

}  // namespace

Result<int64_t> ParseIntegerSetting(std::string_view value, std::string_view source, int64_t min,
                                    int64_t max) {
  int64_t parsed = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), parsed);
  if (ec != std::errc() || end != value.data() + value.size() || value.empty()) {
    return InvalidArgumentError(std::string(source) + ": expected an integer, got " + Quote(value));
  }
  if (parsed < min || parsed > max) {
    return InvalidArgumentError(std::string(source) + ": " + std::string(value) +
                                " is out of range [" + std::to_string(min) + ", " +
                                std::to_string(max) + "]");
  }
  return parsed;
}

Result<double> ParseSecondsSetting(std::string_view value, std::string_view source, double min) {
  std::string_view number = value;
  if (!number.empty() && number.back() == 's') number.remove_suffix(1);
  double parsed = 0;
  auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), parsed);
  if (ec != std::errc() || end != number.data() + number.size() || number.empty() ||
      !std::isfinite(parsed)) {
    return InvalidArgumentError(std::string(source) + ": expected seconds (e.g. 10 or 2.5), got " +
                                Quote(value));
  }
  if (parsed < min || parsed > 86400) {
    return InvalidArgumentError(std::string(source) + ": " + std::string(value) +
                                " seconds is out of range [" + std::to_string(min) + ", 86400]");
  }
  return parsed;
}

Result<bool> ParseOnOffSetting(std::string_view value, std::string_view source) {
  if (value != "on" && value != "off") {
    return InvalidArgumentError(std::string(source) + ": expected on or off, got " + Quote(value));
  }
  return value == "on";
}

Result<double> ParseShareSetting(std::string_view value, std::string_view source, double max) {
  char* end = nullptr;
  const std::string text(value);
  const double share = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !(share >= 0) || share > max) {
    return InvalidArgumentError(std::string(source) + ": expected a share 0.." + ExactDecimal(max) +
                                ", got " + Quote(text));
  }
  return share;
}

std::string ExactDecimal(double value) { return fmt::format("{}", value); }

}  // namespace pier

#include "memory/byte_size.h"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace pier {
namespace {

struct Unit {
  std::string_view name;  // lower case
  uint64_t multiplier;
};

constexpr std::array<Unit, 9> kUnits{{
    {"b", 1},
    {"kib", uint64_t{1} << 10},
    {"mib", uint64_t{1} << 20},
    {"gib", uint64_t{1} << 30},
    {"tib", uint64_t{1} << 40},
    {"kb", 1000},
    {"mb", 1000 * 1000},
    {"gb", 1000 * 1000 * 1000},
    {"tb", uint64_t{1000} * 1000 * 1000 * 1000},
}};

std::string_view TrimSpaces(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string Quote(std::string_view s) { return "\"" + std::string(s) + "\""; }

// Splits "1.5 GiB" into the number "1.5" and the unit "gib" (lower-cased).
void SplitNumber(std::string_view text, std::string_view* number, std::string* unit) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.' ||
                             text[i] == '-' || text[i] == '+')) {
    ++i;
  }
  *number = text.substr(0, i);
  unit->clear();
  for (char c : TrimSpaces(text.substr(i))) {
    unit->push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
}

Result<double> ParseNumber(std::string_view number, std::string_view text, std::string_view what) {
  std::string usage = std::string(what) + " " + Quote(text) +
                      ": expected a positive size such as 512MiB, 2GB, 1.5GiB or 80%";
  if (number.empty()) return InvalidArgumentError(usage);
  if (number.front() == '-') {
    return InvalidArgumentError(std::string(what) + " " + Quote(text) + " is negative");
  }
  if (number.front() == '+') number.remove_prefix(1);
  double value = 0;
  auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec != std::errc() || end != number.data() + number.size() || !std::isfinite(value)) {
    return InvalidArgumentError(usage);
  }
  return value;
}

}  // namespace

Result<uint64_t> ParseByteSize(std::string_view text, std::string_view what) {
  std::string_view trimmed = TrimSpaces(text);
  std::string_view number;
  std::string unit;
  SplitNumber(trimmed, &number, &unit);
  PIER_ASSIGN_OR_RETURN(double value, ParseNumber(number, text, what));
  uint64_t multiplier = 0;
  if (unit.empty()) {
    multiplier = 1;
  } else {
    for (const Unit& u : kUnits) {
      if (u.name == unit) multiplier = u.multiplier;
    }
  }
  if (multiplier == 0) {
    return InvalidArgumentError(std::string(what) + " " + Quote(text) + ": unknown unit " +
                                Quote(unit) + " (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)");
  }
  if (multiplier == 1 && value != std::floor(value)) {
    return InvalidArgumentError(std::string(what) + " " + Quote(text) +
                                ": a byte count must be a whole number");
  }
  long double bytes = static_cast<long double>(value) * multiplier;
  if (bytes < 1) {
    return InvalidArgumentError(std::string(what) + " " + Quote(text) +
                                " is zero; give a positive size");
  }
  if (bytes > static_cast<long double>(kMaxByteSize)) {
    return InvalidArgumentError(std::string(what) + " " + Quote(text) +
                                " is absurdly large (over " + FormatBytes(kMaxByteSize) +
                                "); check the unit");
  }
  return static_cast<uint64_t>(bytes);
}

Result<BudgetSpec> ParseBudget(std::string_view text, std::string_view what) {
  std::string_view trimmed = TrimSpaces(text);
  if (!trimmed.empty() && trimmed.back() == '%') {
    std::string_view number = TrimSpaces(trimmed.substr(0, trimmed.size() - 1));
    PIER_ASSIGN_OR_RETURN(double percent, ParseNumber(number, text, what));
    if (percent <= 0 || percent > 100) {
      return InvalidArgumentError(std::string(what) + " " + Quote(text) +
                                  ": a percentage of device memory must be in (0, 100]");
    }
    return BudgetSpec::Percent(percent);
  }
  PIER_ASSIGN_OR_RETURN(uint64_t bytes, ParseByteSize(text, what));
  return BudgetSpec::Bytes(bytes);
}

Result<uint64_t> BudgetSpec::Resolve(uint64_t capacity_bytes) const {
  if (!is_percent) {
    if (bytes > capacity_bytes) {
      return InvalidArgumentError("memory budget " + FormatBytes(bytes) +
                                  " is more than the device's capacity of " +
                                  FormatBytes(capacity_bytes));
    }
    return bytes;
  }
  auto resolved = static_cast<uint64_t>(static_cast<long double>(capacity_bytes) * percent / 100);
  if (resolved == 0) {
    return InvalidArgumentError("memory budget " + ToString() + " of " +
                                FormatBytes(capacity_bytes) + " is 0 bytes");
  }
  return resolved;
}

std::string BudgetSpec::ToString() const {
  if (!is_percent) return FormatBytes(bytes);
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%g%%", percent);
  return buffer;
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr std::array<const char*, 6> kNames{"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < kNames.size()) {
    value /= 1024;
    ++unit;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.1f %s", value, kNames[unit]);
  return buffer;
}

}  // namespace pier

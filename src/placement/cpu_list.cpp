#include "placement/cpu_list.h"

#include <algorithm>
#include <charconv>

namespace pier::placement {
namespace {

constexpr int kMaxCpu = 4095;

bool ParseNumber(std::string_view text, int* out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size() && *out >= 0 && *out <= kMaxCpu;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

}  // namespace

Result<std::vector<int>> ParseCpuList(std::string_view text) {
  const auto bad = [&](std::string_view why) {
    return InvalidArgumentError("CPU list \"" + std::string(text) + "\": " + std::string(why) +
                                " (expected e.g. 0-3,8)");
  };
  std::vector<int> cpus;
  std::string_view rest = text;
  if (Trim(rest).empty()) return bad("empty");
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = Trim(rest.substr(0, comma));
    const size_t dash = item.find('-');
    int first = 0, last = 0;
    if (dash == std::string_view::npos) {
      if (!ParseNumber(item, &first)) return bad("\"" + std::string(item) + "\" is not a CPU");
      last = first;
    } else if (!ParseNumber(Trim(item.substr(0, dash)), &first) ||
               !ParseNumber(Trim(item.substr(dash + 1)), &last) || first > last) {
      return bad("\"" + std::string(item) + "\" is not a range a-b");
    }
    for (int c = first; c <= last; ++c) cpus.push_back(c);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::vector<int> sorted = cpus;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::string out;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(sorted[i]);
    if (j > i) out += "-" + std::to_string(sorted[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace pier::placement

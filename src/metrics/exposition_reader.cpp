#include "metrics/exposition_reader.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <optional>

namespace pier::metrics {
namespace {

bool NameChar(char c, bool first) {
  const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
  return letter || (!first && c >= '0' && c <= '9');
}

std::optional<double> ParseNumber(std::string_view text) {
  if (text == "+Inf" || text == "Inf") return std::numeric_limits<double>::infinity();
  if (text == "-Inf") return -std::numeric_limits<double>::infinity();
  if (text == "NaN") return std::numeric_limits<double>::quiet_NaN();
  double value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

// One sample line, or nullopt when it does not parse.
std::optional<ExpositionSample> ParseLine(std::string_view line) {
  ExpositionSample s;
  size_t pos = 0;
  while (pos < line.size() && NameChar(line[pos], pos == 0)) ++pos;
  if (pos == 0) return std::nullopt;
  s.name = std::string(line.substr(0, pos));
  if (pos < line.size() && line[pos] == '{') {
    ++pos;
    while (true) {
      while (pos < line.size() && (line[pos] == ' ' || line[pos] == ',')) ++pos;
      if (pos >= line.size()) return std::nullopt;
      if (line[pos] == '}') {
        ++pos;
        break;
      }
      const size_t start = pos;
      while (pos < line.size() && NameChar(line[pos], pos == start) && line[pos] != ':') ++pos;
      if (pos == start || pos + 1 >= line.size() || line[pos] != '=' || line[pos + 1] != '"') {
        return std::nullopt;
      }
      std::string label(line.substr(start, pos - start));
      pos += 2;
      std::string value;
      bool closed = false;
      while (pos < line.size()) {
        const char c = line[pos++];
        if (c == '"') {
          closed = true;
          break;
        }
        if (c == '\\' && pos < line.size()) {
          const char e = line[pos++];
          value.push_back(e == 'n' ? '\n' : e);
        } else {
          value.push_back(c);
        }
      }
      if (!closed) return std::nullopt;
      s.labels.emplace_back(std::move(label), std::move(value));
    }
  }
  if (pos >= line.size() || (line[pos] != ' ' && line[pos] != '\t')) return std::nullopt;
  while (pos < line.size() && (line[pos] == ' ' || line[pos] == '\t')) ++pos;
  size_t end = pos;
  while (end < line.size() && line[end] != ' ' && line[end] != '\t') ++end;
  std::optional<double> value = ParseNumber(line.substr(pos, end - pos));
  if (!value.has_value()) return std::nullopt;
  s.value = *value;
  return s;
}

}  // namespace

std::string_view ExpositionSample::Label(std::string_view label) const {
  for (const auto& [name, value] : labels) {
    if (name == label) return value;
  }
  return {};
}

ExpositionRead ReadExposition(std::string_view text) {
  ExpositionRead read;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    if (std::optional<ExpositionSample> s = ParseLine(line)) {
      read.samples.push_back(std::move(*s));
    } else {
      ++read.bad_lines;
    }
  }
  return read;
}

}  // namespace pier::metrics

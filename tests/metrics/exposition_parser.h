// A strict reader of Prometheus' text exposition format (0.0.4) for the metrics tests.
//
// ParseExposition() checks every line against the grammar Pier promises:
//   # HELP <name> <escaped text>
//   # TYPE <name> counter|gauge|histogram
//   <name>[{<label>="<escaped value>",...}] <value>
// and the structure around it: each family has one HELP then one TYPE before its samples, no
// family appears twice, a sample belongs to the family declared last (`_bucket`, `_sum` and
// `_count` for histograms), every histogram series has cumulative buckets ending with
// le="+Inf" equal to its _count. It returns the samples keyed by their series text exactly as
// written (`name{a="b"}`), or every problem found.
//
// Thread-safety: pure functions.
#pragma once

#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace pier::metrics::testing {

struct Exposition {
  std::map<std::string, double> samples;     // series text -> value
  std::map<std::string, std::string> types;  // family name -> type
  std::vector<std::string> errors;
};

inline bool IsNameChar(char c, bool first, bool allow_colon) {
  bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  bool digit = c >= '0' && c <= '9';
  return letter || (!first && digit) || (allow_colon && c == ':');
}

// Reads a metric or label name at `pos`; empty when none.
inline std::string ReadName(std::string_view line, size_t& pos, bool allow_colon) {
  size_t start = pos;
  while (pos < line.size() && IsNameChar(line[pos], pos == start, allow_colon)) ++pos;
  return std::string(line.substr(start, pos - start));
}

inline bool ParseValue(std::string_view text, double* value) {
  if (text == "+Inf") {
    *value = std::numeric_limits<double>::infinity();
    return true;
  }
  if (text == "-Inf") {
    *value = -std::numeric_limits<double>::infinity();
    return true;
  }
  if (text == "NaN") {
    *value = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  if (text.empty()) return false;
  auto result = std::from_chars(text.data(), text.data() + text.size(), *value);
  return result.ec == std::errc() && result.ptr == text.data() + text.size();
}

// Parses `{a="x",b="y"}` at `pos` (which points at '{'); appends unescaped pairs.
inline bool ParseLabels(std::string_view line, size_t& pos,
                        std::vector<std::pair<std::string, std::string>>* labels) {
  ++pos;  // '{'
  while (pos < line.size() && line[pos] != '}') {
    std::string name = ReadName(line, pos, false);
    if (name.empty() || name.starts_with("__")) return false;
    if (line.substr(pos, 2) != "=\"") return false;
    pos += 2;
    std::string value;
    while (true) {
      if (pos >= line.size()) return false;
      char c = line[pos++];
      if (c == '"') break;
      if (c == '\\') {
        if (pos >= line.size()) return false;
        char e = line[pos++];
        if (e == '\\' || e == '"') {
          value.push_back(e);
        } else if (e == 'n') {
          value.push_back('\n');
        } else {
          return false;
        }
      } else if (c == '\n') {
        return false;
      } else {
        value.push_back(c);
      }
    }
    for (const auto& [seen, unused] : *labels) {
      if (seen == name) return false;
    }
    labels->emplace_back(std::move(name), std::move(value));
    if (pos < line.size() && line[pos] == ',') ++pos;
  }
  if (pos >= line.size()) return false;
  ++pos;  // '}'
  return true;
}

inline Exposition ParseExposition(std::string_view text) {
  Exposition out;
  if (!text.empty() && text.back() != '\n') out.errors.push_back("text does not end with \\n");
  std::set<std::string> families_seen;
  std::string family;  // declared last (after its TYPE)
  std::string family_type;
  std::string help_for;  // the HELP line seen last, waiting for its TYPE
  // Histogram checks: per series (labels without le), the bucket counts in order.
  std::map<std::string, std::vector<std::pair<double, double>>> buckets;
  std::map<std::string, double> counts;

  size_t line_start = 0;
  int line_number = 0;
  while (line_start < text.size()) {
    size_t end = text.find('\n', line_start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(line_start, end - line_start);
    line_start = end + 1;
    ++line_number;
    auto fail = [&](const std::string& why) {
      out.errors.push_back("line " + std::to_string(line_number) + ": " + why + ": " +
                           std::string(line));
    };
    if (line.starts_with("# HELP ")) {
      size_t pos = 7;
      std::string name = ReadName(line, pos, true);
      if (name.empty() || pos >= line.size() || line[pos] != ' ') {
        fail("bad HELP");
        continue;
      }
      for (size_t i = pos + 1; i < line.size(); ++i) {
        if (line[i] == '\\' &&
            (i + 1 >= line.size() || (line[i + 1] != '\\' && line[i + 1] != 'n'))) {
          fail("bad escape in HELP");
        }
        if (line[i] == '\\') ++i;
      }
      if (!families_seen.insert(name).second) fail("family declared twice");
      help_for = name;
      family.clear();
      continue;
    }
    if (line.starts_with("# TYPE ")) {
      size_t pos = 7;
      std::string name = ReadName(line, pos, true);
      std::string_view type = pos < line.size() ? line.substr(pos + 1) : std::string_view();
      if (name.empty() || line[pos] != ' ' ||
          (type != "counter" && type != "gauge" && type != "histogram")) {
        fail("bad TYPE");
        continue;
      }
      if (name != help_for) fail("TYPE without a HELP just before it");
      help_for.clear();
      family = name;
      family_type = std::string(type);
      out.types[name] = family_type;
      continue;
    }
    if (line.empty() || line[0] == '#') {
      fail("unexpected comment or empty line");
      continue;
    }
    size_t pos = 0;
    std::string name = ReadName(line, pos, true);
    if (name.empty()) {
      fail("no metric name");
      continue;
    }
    std::vector<std::pair<std::string, std::string>> labels;
    size_t series_end = pos;
    if (pos < line.size() && line[pos] == '{') {
      if (!ParseLabels(line, pos, &labels)) {
        fail("bad labels");
        continue;
      }
      series_end = pos;
    }
    if (pos >= line.size() || line[pos] != ' ') {
      fail("no space before the value");
      continue;
    }
    double value = 0;
    if (!ParseValue(line.substr(pos + 1), &value)) {
      fail("bad value");
      continue;
    }
    const std::string series(line.substr(0, series_end));
    if (!out.samples.emplace(series, value).second) fail("series written twice");
    if (family.empty()) {
      fail("sample without HELP/TYPE");
      continue;
    }
    if (family_type != "histogram") {
      if (name != family) fail("sample of another family than " + family);
      continue;
    }
    // Histogram: the series key is the family and its labels without le.
    std::string key = family + "|";
    double le = std::numeric_limits<double>::quiet_NaN();
    for (const auto& [label, label_value] : labels) {
      if (label == "le") {
        if (!ParseValue(label_value, &le)) fail("bad le");
      } else {
        key += label + "=" + label_value + ",";
      }
    }
    if (name == family + "_bucket") {
      if (std::isnan(le)) fail("bucket without le");
      buckets[key].emplace_back(le, value);
    } else if (name == family + "_count") {
      counts[key] = value;
    } else if (name != family + "_sum") {
      fail("sample of another family than " + family);
    }
    if (name != family + "_bucket" && !std::isnan(le)) fail("le outside a bucket");
  }
  for (const auto& [key, series] : buckets) {
    for (size_t i = 1; i < series.size(); ++i) {
      if (!(series[i - 1].first < series[i].first)) out.errors.push_back("le not increasing");
      if (series[i - 1].second > series[i].second) out.errors.push_back("buckets not cumulative");
    }
    if (series.empty() || !std::isinf(series.back().first)) {
      out.errors.push_back("histogram series without +Inf bucket: " + key);
    } else if (counts.count(key) == 0 || counts[key] != series.back().second) {
      out.errors.push_back("histogram _count differs from its +Inf bucket: " + key);
    }
  }
  if (!help_for.empty()) out.errors.push_back("HELP without TYPE: " + help_for);
  return out;
}

}  // namespace pier::metrics::testing

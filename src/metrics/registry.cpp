#include "metrics/registry.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

#include "common/check.h"

namespace pier::metrics {
namespace {

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

std::string_view TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

void AddAtomic(std::atomic<double>& target, double delta) {
  double current = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(current, current + delta, std::memory_order_relaxed)) {
  }
}

// `name{a="x",b="y"[,extra_name="extra_value"]} value\n`; no braces without labels.
void AppendSample(std::string* out, std::string_view name, const std::vector<std::string>& names,
                  const std::vector<std::string>& values, std::string_view extra_name,
                  std::string_view extra_value, std::string_view value) {
  out->append(name);
  if (!names.empty() || !extra_name.empty()) {
    out->push_back('{');
    bool first = true;
    auto add = [&](std::string_view label, std::string_view label_value) {
      if (!first) out->push_back(',');
      first = false;
      out->append(label);
      out->append("=\"");
      out->append(EscapeLabelValue(label_value));
      out->push_back('"');
    };
    for (size_t i = 0; i < names.size(); ++i) add(names[i], values[i]);
    if (!extra_name.empty()) add(extra_name, extra_value);
    out->push_back('}');
  }
  out->push_back(' ');
  out->append(value);
  out->push_back('\n');
}

void AppendHeader(std::string* out, const RenderName& as, MetricType type) {
  out->append("# HELP ");
  out->append(as.name);
  out->push_back(' ');
  out->append(EscapeHelp(as.help));
  out->append("\n# TYPE ");
  out->append(as.name);
  out->push_back(' ');
  out->append(TypeName(type));
  out->push_back('\n');
}

void CheckLabelNames(const std::vector<std::string>& label_names, bool histogram) {
  std::set<std::string_view> seen;
  for (const std::string& label : label_names) {
    PIER_CHECK(IsValidLabelName(label), "invalid Prometheus label name: " + label);
    PIER_CHECK(!histogram || label != "le", "a histogram may not have a label named le");
    PIER_CHECK(seen.insert(label).second, "duplicate label name: " + label);
  }
}

}  // namespace

bool IsValidMetricName(std::string_view name) {
  if (name.empty() || !(IsNameStart(name[0]) || name[0] == ':')) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return IsNameStart(c) || IsDigit(c) || c == ':'; });
}

bool IsValidLabelName(std::string_view name) {
  if (name.empty() || !IsNameStart(name[0]) || name.starts_with("__")) return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return IsNameStart(c) || IsDigit(c); });
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  std::to_chars_result result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  PIER_CHECK(result.ec == std::errc(), "to_chars failed for a double");
  return std::string(buffer, result.ptr);
}

std::string EscapeLabelValue(std::string_view value) {
  std::string escaped;
  escaped.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      escaped.append("\\\\");
    } else if (c == '"') {
      escaped.append("\\\"");
    } else if (c == '\n') {
      escaped.append("\\n");
    } else {
      escaped.push_back(c);
    }
  }
  return escaped;
}

std::string EscapeHelp(std::string_view help) {
  std::string escaped;
  escaped.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      escaped.append("\\\\");
    } else if (c == '\n') {
      escaped.append("\\n");
    } else {
      escaped.push_back(c);
    }
  }
  return escaped;
}

std::vector<double> OneTwoFiveBuckets(double max_value) {
  std::vector<double> bounds;
  for (double decade = 1; decade <= max_value; decade *= 10) {
    for (double step : {1.0, 2.0, 5.0}) {
      if (decade * step <= max_value) bounds.push_back(decade * step);
    }
  }
  return bounds;
}

void Counter::Increment(double delta) {
  PIER_CHECK(delta >= 0, "a counter only goes up");
  AddAtomic(value_, delta);
}

void Gauge::Increment(double delta) { AddAtomic(value_, delta); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      counts_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    PIER_CHECK(std::isfinite(bounds_[i]), "histogram bounds must be finite (+Inf is implicit)");
    PIER_CHECK(i == 0 || bounds_[i - 1] < bounds_[i], "histogram bounds must increase strictly");
  }
}

void Histogram::Observe(double value) {
  if (std::isnan(value)) return;
  // Prometheus buckets are "less than or equal": the first bound >= value.
  size_t index = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  AddAtomic(sum_, value);
  counts_[index].fetch_add(1, std::memory_order_relaxed);
}

void Histogram::AddCounts(const std::vector<uint64_t>& per_bucket, double sum) {
  if (per_bucket.size() != bounds_.size() + 1) return;
  for (size_t i = 0; i < per_bucket.size(); ++i) {
    counts_[i].fetch_add(per_bucket[i], std::memory_order_relaxed);
  }
  AddAtomic(sum_, sum);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot snapshot;
  snapshot.sum = sum_.load(std::memory_order_relaxed);
  snapshot.cumulative_counts.resize(bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    snapshot.cumulative_counts[i] = running;
  }
  snapshot.count = running;
  return snapshot;
}

std::vector<std::string> FamilyBase::ValuesOf(const Labels& labels) const {
  PIER_CHECK(labels.size() == label_names_.size(),
             "metric " + name_ + " takes " + std::to_string(label_names_.size()) + " labels");
  std::vector<std::string> values;
  values.reserve(labels.size());
  for (size_t i = 0; i < labels.size(); ++i) {
    PIER_CHECK(labels[i].first == label_names_[i], "metric " + name_ + ": label " +
                                                       labels[i].first + " where " +
                                                       label_names_[i] + " was expected");
    values.push_back(labels[i].second);
  }
  return values;
}

template <typename T>
Family<T>::Family(std::string name, std::string help, std::vector<std::string> label_names,
                  std::vector<double> bounds)
    : FamilyBase(std::move(name), std::move(help), std::move(label_names)),
      bounds_(std::move(bounds)) {
  // A family without labels has exactly one child: show it (at zero) from the start.
  if (this->label_names().empty()) WithLabels({});
}

template <typename T>
T& Family<T>::WithLabels(const Labels& labels) {
  std::vector<std::string> values = ValuesOf(labels);
  MutexLock lock(mutex_);
  auto it = children_.find(values);
  if (it == children_.end()) {
    std::unique_ptr<T> child;
    if constexpr (std::is_same_v<T, Histogram>) {
      child = std::make_unique<Histogram>(bounds_);
    } else {
      child = std::make_unique<T>();
    }
    it = children_.emplace(std::move(values), std::move(child)).first;
  }
  return *it->second;
}

template <typename T>
MetricType Family<T>::type() const {
  if constexpr (std::is_same_v<T, Counter>) {
    return MetricType::kCounter;
  } else if constexpr (std::is_same_v<T, Gauge>) {
    return MetricType::kGauge;
  } else {
    return MetricType::kHistogram;
  }
}

template <typename T>
void Family<T>::Render(const RenderName& as, std::string* out) const {
  AppendHeader(out, as, type());
  const std::vector<std::string>& names = *as.label_names;
  MutexLock lock(mutex_);
  for (const auto& [values, child] : children_) {
    if constexpr (std::is_same_v<T, Histogram>) {
      Histogram::Snapshot snapshot = child->Read();
      const std::string bucket_name = std::string(as.name) + "_bucket";
      for (size_t i = 0; i < snapshot.cumulative_counts.size(); ++i) {
        const std::string le = i < bounds_.size() ? FormatValue(bounds_[i]) : "+Inf";
        AppendSample(out, bucket_name, names, values, "le", le,
                     std::to_string(snapshot.cumulative_counts[i]));
      }
      AppendSample(out, std::string(as.name) + "_sum", names, values, {}, {},
                   FormatValue(snapshot.sum));
      AppendSample(out, std::string(as.name) + "_count", names, values, {}, {},
                   std::to_string(snapshot.count));
    } else {
      AppendSample(out, as.name, names, values, {}, {}, FormatValue(child->Value()));
    }
  }
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

void Registry::CheckNewName(const std::string& name) const {
  PIER_CHECK(IsValidMetricName(name), "invalid Prometheus metric name: " + name);
  for (const Entry& entry : entries_) {
    PIER_CHECK(entry.name != name, "metric registered twice: " + name);
  }
}

template <typename T>
Family<T>& Registry::Add(std::string name, std::string help, std::vector<std::string> label_names,
                         std::vector<double> bounds) {
  CheckLabelNames(label_names, std::is_same_v<T, Histogram>);
  MutexLock lock(mutex_);
  CheckNewName(name);
  auto family = std::make_unique<Family<T>>(name, help, std::move(label_names), std::move(bounds));
  Family<T>& ref = *family;
  entries_.push_back(Entry{&ref, std::move(name), std::move(help), &ref.label_names(), nullptr});
  families_.push_back(std::move(family));
  return ref;
}

Family<Counter>& Registry::AddCounter(std::string name, std::string help,
                                      std::vector<std::string> label_names) {
  return Add<Counter>(std::move(name), std::move(help), std::move(label_names), {});
}

Family<Gauge>& Registry::AddGauge(std::string name, std::string help,
                                  std::vector<std::string> label_names) {
  return Add<Gauge>(std::move(name), std::move(help), std::move(label_names), {});
}

Family<Histogram>& Registry::AddHistogram(std::string name, std::string help,
                                          std::vector<std::string> label_names,
                                          std::vector<double> bounds) {
  return Add<Histogram>(std::move(name), std::move(help), std::move(label_names),
                        std::move(bounds));
}

void Registry::AddAlias(const FamilyBase& target, std::string name, std::string help,
                        std::vector<std::string> label_names) {
  PIER_CHECK(label_names.size() == target.label_names().size(),
             "alias " + name + " must have as many labels as " + target.name());
  CheckLabelNames(label_names, target.type() == MetricType::kHistogram);
  MutexLock lock(mutex_);
  CheckNewName(name);
  bool found = std::any_of(families_.begin(), families_.end(),
                           [&](const auto& family) { return family.get() == &target; });
  PIER_CHECK(found, "alias " + name + " targets a family of another registry");
  auto names = std::make_unique<std::vector<std::string>>(std::move(label_names));
  const std::vector<std::string>* names_ptr = names.get();
  entries_.push_back(Entry{&target, std::move(name), std::move(help), names_ptr, std::move(names)});
}

std::string Registry::Render() const {
  std::string out;
  RenderTo(&out);
  return out;
}

void Registry::RenderTo(std::string* out) const {
  MutexLock lock(mutex_);
  for (const Entry& entry : entries_) {
    entry.family->Render(RenderName{entry.name, entry.help, entry.label_names}, out);
  }
}

}  // namespace pier::metrics

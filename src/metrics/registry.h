// Registry: a small Prometheus metrics registry with text exposition (format 0.0.4).
//
// A Registry holds metric families: Family<Counter>, Family<Gauge> and Family<Histogram>.
// Each family has a name, a help text and fixed label names; WithLabels() returns the child
// for one set of label values (created on first use). Render() writes every family:
//
//   # HELP pier_requests_total Requests finished, by finish reason.
//   # TYPE pier_requests_total counter
//   pier_requests_total{model="m",finish_reason="stop"} 3
//
// Histograms write cumulative `_bucket{...,le="..."}` samples ending with `le="+Inf"`, then
// `_sum` and `_count`. Label values are escaped (\\, \", \n), help texts too (\\, \n); values
// are printed locale-free in the shortest form that round-trips, with "+Inf", "-Inf" and "NaN"
// spelled as Prometheus parses them. An alias (AddAlias) renders an existing family again under
// another name and other label names, from the same values: recording happens once.
//
// Bad names (not [a-zA-Z_:][a-zA-Z0-9_:]*), bad label names ([a-zA-Z_][a-zA-Z0-9_]*, not
// starting with "__"), duplicate names, label values that do not match the family's label names,
// and unsorted histogram bounds are programming errors: PIER_CHECK.
//
// Ownership: the Registry owns its families, a family owns its children. References returned
// by Add*() and WithLabels() stay valid for the registry's lifetime, so hot paths keep them.
// Thread-safety: everything may be called from any thread. Recording (Increment, Set, Observe)
// is lock-free (atomics); WithLabels takes the family's mutex; Render takes the registry's and
// each family's mutex. A histogram rendered while being observed may show a _sum that lags its
// _count by an observation in flight; _count always equals the +Inf bucket.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/mutex.h"

namespace pier::metrics {

// Label name -> value pairs, in the family's label-name order.
using Labels = std::vector<std::pair<std::string, std::string>>;

enum class MetricType { kCounter, kGauge, kHistogram };

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool IsValidMetricName(std::string_view name);
// [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__" (reserved by Prometheus).
bool IsValidLabelName(std::string_view name);
// Shortest round-trip decimal ("0.25", "3", "1e-05"); "+Inf", "-Inf", "NaN".
std::string FormatValue(double value);
// Label value escaping: backslash, double quote and newline.
std::string EscapeLabelValue(std::string_view value);
// Help text escaping: backslash and newline.
std::string EscapeHelp(std::string_view help);
// 1, 2, 5, 10, 20, 50, ... up to and including the last such value <= max_value.
std::vector<double> OneTwoFiveBuckets(double max_value);

// A monotonically increasing value.
class Counter {
 public:
  // `delta` must be >= 0 (PIER_CHECK).
  void Increment(double delta = 1);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// A value that goes up and down.
class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Increment(double delta = 1);
  void Decrement(double delta = 1) { Increment(-delta); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Observations counted in buckets with upper bounds `bounds` (strictly increasing, finite)
// plus an implicit +Inf bucket.
class Histogram {
 public:
  struct Snapshot {
    std::vector<uint64_t> cumulative_counts;  // [bounds + 1]; the last is the +Inf bucket
    double sum = 0;
    uint64_t count = 0;  // == cumulative_counts.back()
  };

  explicit Histogram(std::vector<double> bounds);
  // NaN is ignored; +-Inf land in the first/last bucket that holds them.
  void Observe(double value);
  // Adds observations counted elsewhere: `per_bucket` [bounds + 1] (not cumulative) with this
  // histogram's bounds, and their sum (a scrape-time figure kept by its owner).
  void AddCounts(const std::vector<uint64_t>& per_bucket, double sum);
  const std::vector<double>& bounds() const { return bounds_; }
  Snapshot Read() const;

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // [bounds + 1], per bucket (not cumulative)
  std::atomic<double> sum_{0};
};

// What a family is rendered as: its own name, or an alias's.
struct RenderName {
  std::string_view name;
  std::string_view help;
  const std::vector<std::string>* label_names;
};

class FamilyBase {
 public:
  virtual ~FamilyBase() = default;
  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  virtual MetricType type() const = 0;
  // Appends HELP, TYPE and every child's samples to `out`.
  virtual void Render(const RenderName& as, std::string* out) const = 0;

 protected:
  FamilyBase(std::string name, std::string help, std::vector<std::string> label_names)
      : name_(std::move(name)), help_(std::move(help)), label_names_(std::move(label_names)) {}
  // The values of `labels` in label-name order; PIER_CHECK that the names match.
  std::vector<std::string> ValuesOf(const Labels& labels) const;

 private:
  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
};

// T is Counter, Gauge or Histogram.
template <typename T>
class Family final : public FamilyBase {
 public:
  Family(std::string name, std::string help, std::vector<std::string> label_names,
         std::vector<double> bounds = {});

  // The child for these labels (names in the family's order), created on first use.
  T& WithLabels(const Labels& labels);
  MetricType type() const override;
  void Render(const RenderName& as, std::string* out) const override;

 private:
  const std::vector<double> bounds_;  // histograms only
  mutable Mutex mutex_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> children_ PIER_GUARDED_BY(mutex_);
};

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  Family<Counter>& AddCounter(std::string name, std::string help,
                              std::vector<std::string> label_names = {});
  Family<Gauge>& AddGauge(std::string name, std::string help,
                          std::vector<std::string> label_names = {});
  // `bounds`: bucket upper bounds, strictly increasing and finite; "le" may not be a label.
  Family<Histogram>& AddHistogram(std::string name, std::string help,
                                  std::vector<std::string> label_names, std::vector<double> bounds);
  // Renders `target` (a family of this registry) a second time as `name`, with `label_names`
  // (as many as the target has) in place of the target's label names.
  void AddAlias(const FamilyBase& target, std::string name, std::string help,
                std::vector<std::string> label_names);

  // Families and aliases in the order they were added.
  std::string Render() const;
  void RenderTo(std::string* out) const;

 private:
  struct Entry {
    const FamilyBase* family;  // owned by families_
    std::string name;          // rendered name (the alias's for aliases)
    std::string help;
    const std::vector<std::string>* label_names;  // rendered label names
    std::unique_ptr<std::vector<std::string>> alias_label_names;
  };
  void CheckNewName(const std::string& name) const PIER_REQUIRES(mutex_);
  template <typename T>
  Family<T>& Add(std::string name, std::string help, std::vector<std::string> label_names,
                 std::vector<double> bounds);

  mutable Mutex mutex_;
  std::vector<std::unique_ptr<FamilyBase>> families_ PIER_GUARDED_BY(mutex_);
  std::vector<Entry> entries_ PIER_GUARDED_BY(mutex_);
};

}  // namespace pier::metrics

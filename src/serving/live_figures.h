// LiveFigures: the part of /metrics read at scrape time (engine, batcher, governor figures),
// built in a registry that lives for one ServingMetrics::Render(). Internal to src/metrics:
// serving_metrics.cpp renders the models' figures with it, memory_figures.cpp the devices'.
//
// Thread-safety: one Render() at a time owns it.
#pragma once

#include <algorithm>
#include <map>
#include <set>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "memory/memory_governor.h"
#include "metrics/registry.h"
#include "serving/serving_metrics.h"

namespace pier::serving {

// Label names: `model` on pier_ series, `model_name` on the vLLM aliases (vLLM's spelling).
inline std::vector<std::string> ModelLabel() { return {"model"}; }
inline std::vector<std::string> ModelNameLabel() { return {"model_name"}; }

// Figures read at scrape time, registered in a registry that lives for one Render(). Each
// family is created once, the first time any model sets it, and every model adds its child:
// one HELP/TYPE block per metric whatever the number of models.
class LiveFigures {
 public:
  metrics::Family<metrics::Gauge>& GaugeFamily(const std::string& name, const std::string& help,
                                               const std::vector<std::string>& labels) {
    return Get<metrics::Gauge>(name, help, labels);
  }
  metrics::Family<metrics::Counter>& CounterFamily(const std::string& name, const std::string& help,
                                                   const std::vector<std::string>& labels) {
    return Get<metrics::Counter>(name, help, labels);
  }
  // The model's child of a {model} histogram, holding `buckets`.
  void SetHistogram(const std::string& model, const std::string& name, const std::string& help,
                    const pier::Buckets& buckets) {
    auto it = families_.find(name);
    metrics::Family<metrics::Histogram>* family = nullptr;
    if (it != families_.end()) {
      family = static_cast<metrics::Family<metrics::Histogram>*>(it->second);
    } else {
      family = &registry_.AddHistogram(name, help, ModelLabel(), buckets.bounds);
      families_.emplace(name, family);
    }
    family->WithLabels({{"model", model}}).AddCounts(buckets.counts, buckets.sum);
  }
  // The model's child of a {model} gauge or counter, set to `value`.
  metrics::Family<metrics::Gauge>& SetGauge(const std::string& model, const std::string& name,
                                            const std::string& help, double value) {
    metrics::Family<metrics::Gauge>& family = GaugeFamily(name, help, ModelLabel());
    family.WithLabels({{"model", model}}).Set(value);
    return family;
  }
  metrics::Family<metrics::Counter>& SetCounter(const std::string& model, const std::string& name,
                                                const std::string& help, double value) {
    metrics::Family<metrics::Counter>& family = CounterFamily(name, help, ModelLabel());
    family.WithLabels({{"model", model}}).Increment(std::max(value, 0.0));
    return family;
  }
  // A {model_name} alias of `target` (vLLM's names), added once.
  void Alias(const metrics::FamilyBase& target, const std::string& name, const std::string& help) {
    if (!aliases_.insert(name).second) return;
    registry_.AddAlias(target, name, help, ModelNameLabel());
  }
  metrics::Registry& registry() { return registry_; }

 private:
  template <typename T>
  metrics::Family<T>& Get(const std::string& name, const std::string& help,
                          const std::vector<std::string>& labels) {
    auto it = families_.find(name);
    if (it != families_.end()) return *static_cast<metrics::Family<T>*>(it->second);
    metrics::Family<T>* family = nullptr;
    if constexpr (std::is_same_v<T, metrics::Gauge>) {
      family = &registry_.AddGauge(name, help, labels);
    } else {
      family = &registry_.AddCounter(name, help, labels);
    }
    families_.emplace(name, family);
    return *family;
  }

  metrics::Registry registry_;
  std::map<std::string, metrics::FamilyBase*> families_;
  std::set<std::string> aliases_;
};

// A device's memory figures once (labels: device), however many models share its governor,
// with the pressure figures, and each owner's (labels: model, device, owner).
void AddGovernorFigures(const MemoryGovernor* governor, std::span<const ModelFigures> models,
                        LiveFigures& r);

}  // namespace pier::serving

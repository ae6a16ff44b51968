#include "serving/tensor_instance_pool.h"

#include <algorithm>
#include <utility>

#include "common/check.h"

namespace pier::serving {
namespace {

// `from`'s counts added to `into`'s; `into` takes `from`'s bounds when it has none yet.
void AddBuckets(Buckets& into, const Buckets& from) {
  if (into.bounds.empty() && into.counts.empty()) {
    into = from;
    return;
  }
  if (into.bounds != from.bounds || into.counts.size() != from.counts.size()) return;
  for (size_t i = 0; i < into.counts.size(); ++i) into.counts[i] += from.counts[i];
  into.sum += from.sum;
}

}  // namespace

TensorInstancePool::TensorInstancePool(std::vector<TensorRunner*> instances)
    : instances_(std::move(instances)) {
  PIER_CHECK(!instances_.empty(), "a pool needs an instance");
}

size_t TensorInstancePool::PickInstance() const {
  size_t best = 0;
  int64_t best_load = -1;
  for (size_t i = 0; i < instances_.size(); ++i) {
    const TensorRunnerStats s = instances_[i]->Stats();
    const int64_t load = s.queued_items + s.running_items;
    if (best_load < 0 || load < best_load) {
      best = i;
      best_load = load;
    }
  }
  return best;
}

Status TensorInstancePool::Submit(TensorRequest request, std::function<void(TensorResult)> done) {
  return instances_[PickInstance()]->Submit(std::move(request), std::move(done));
}

TensorRunnerStats TensorInstancePool::Stats() const {
  TensorRunnerStats total;
  for (const TensorRunner* instance : instances_) {
    const TensorRunnerStats s = instance->Stats();
    total.queued_items += s.queued_items;
    total.running_items += s.running_items;
    total.batches += s.batches;
    total.items += s.items;
    total.requests += s.requests;
    total.expired += s.expired;
    total.cancelled += s.cancelled;
    total.window_seconds = std::max(total.window_seconds, s.window_seconds);
    AddBuckets(total.batch_items, s.batch_items);
    AddBuckets(total.queue_seconds, s.queue_seconds);
    AddBuckets(total.compute_seconds, s.compute_seconds);
  }
  return total;
}

std::optional<TensorRunnerMemory> TensorInstancePool::Memory() const {
  std::optional<TensorRunnerMemory> total;
  for (const TensorRunner* instance : instances_) {
    const std::optional<TensorRunnerMemory> m = instance->Memory();
    if (!m.has_value()) continue;
    if (!total.has_value()) {
      total = m;
      continue;
    }
    total->weights_bytes += m->weights_bytes;
    total->workspace_peak += m->workspace_peak;
    total->overhead_bytes += m->overhead_bytes;
    total->resident_delta += m->resident_delta;
    total->warmed = total->warmed && m->warmed;
  }
  return total;
}

}  // namespace pier::serving

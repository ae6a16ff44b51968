#include "serving/live/memory_history.h"

#include <algorithm>
#include <utility>

#include "engine/runner/local_model.h"

namespace pier::serving {

double PressureIndex(const GovernorStats& g) {
  if (g.capacity_bytes == 0) return 0;
  return static_cast<double>(g.reserved_bytes) / static_cast<double>(g.capacity_bytes) *
         static_cast<double>(g.waiting_allocations);
}

uint64_t LentBytes(const LeaseStats& l) {
  return (l.chunks - std::min(l.chunks, l.min_chunks)) * l.chunk_bytes;
}

uint64_t LentBytes(const GovernorStats& g) {
  uint64_t lent = 0;
  for (const LeaseStats& l : g.leases) lent += LentBytes(l);
  return lent;
}

DeviceSample SampleDevice(const GovernorStats& g) {
  DeviceSample d;
  d.name = g.device;
  d.budget_bytes = g.budget_bytes;
  d.committed_bytes = g.committed_bytes;
  d.pressure_index = PressureIndex(g);
  d.waiting_allocations = g.waiting_allocations;
  for (const OwnerStats& o : g.owners) {
    d.models[std::string(engine::OwnerModelName(o.name))] += o.committed_bytes;
  }
  return d;
}

void MemoryHistory::Record(MemorySample sample) {
  MutexLock lock(mutex_);
  samples_.push_back(std::move(sample));
  while (samples_.size() > capacity_) samples_.pop_front();
}

std::vector<MemorySample> MemoryHistory::Samples() const {
  MutexLock lock(mutex_);
  return {samples_.begin(), samples_.end()};
}

}  // namespace pier::serving

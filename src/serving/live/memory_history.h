// MemoryHistory: the devices' memory over the last minutes, sampled by the server's ticker, for
// GET /admin/history and the console's charts: per device its budget, committed bytes, the
// pressure index and allocations waiting, and the bytes of each model on it (the governor's
// owners summed by model, as /admin/models counts them). A ring of `capacity` samples, so the
// history spans capacity x interval.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "memory/memory_governor.h"

namespace pier::serving {

struct DeviceSample {
  std::string name;
  uint64_t budget_bytes = 0;
  uint64_t committed_bytes = 0;
  double pressure_index = 0;
  uint64_t waiting_allocations = 0;
  std::map<std::string, uint64_t> models;  // committed bytes by model id
};

struct MemorySample {
  double time = 0;  // Unix seconds
  std::vector<DeviceSample> devices;
};

// One device's sample from its governor's figures.
DeviceSample SampleDevice(const GovernorStats& stats);
// The field report's pressure index: held / capacity x allocations waiting (0 when none wait),
// as pier_memory_pressure_index.
double PressureIndex(const GovernorStats& stats);
// Elastic KV lent: the bytes of every lease's chunks above its minimum (what the governor may
// take back for another model), as pier_memory_lent_bytes.
uint64_t LentBytes(const GovernorStats& stats);
// The same for one lease.
uint64_t LentBytes(const LeaseStats& lease);

class MemoryHistory {
 public:
  explicit MemoryHistory(size_t capacity = 300) : capacity_(capacity) {}

  void Record(MemorySample sample);
  std::vector<MemorySample> Samples() const;
  size_t capacity() const { return capacity_; }

 private:
  const size_t capacity_;
  mutable Mutex mutex_;
  std::deque<MemorySample> samples_ PIER_GUARDED_BY(mutex_);
};

}  // namespace pier::serving

// DeviceHealthProbe: what the device itself says about a worker process, a second source of
// health beside the worker's own heartbeats (its RSS). On GPU machines it is NVML
// (metrics/gpu_telemetry.h, adapted by `pier serve`): the device memory the worker's process
// holds, checked against its grant like its resident memory, and the critical XID errors of
// the GPU it is bound to, which restart it.
//
// Thread-safety: implementations are called from the workers' supervisor threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace pier::serving {

class DeviceHealthProbe {
 public:
  virtual ~DeviceHealthProbe() = default;
  // Device memory process `pid` holds now, over every GPU; nullopt when the device does not
  // say (no NVML, no per-process figures).
  virtual std::optional<uint64_t> DeviceMemoryOf(int64_t pid) const = 0;
  // Critical errors counted so far on `gpu` (a binding's GPU: an index or a GPU-/MIG- UUID);
  // a worker bound to it is restarted when the count grows.
  virtual uint64_t ErrorsOn(const std::string& gpu) const = 0;
};

}  // namespace pier::serving

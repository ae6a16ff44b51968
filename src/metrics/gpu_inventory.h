// ReadGpuInventory: the NVIDIA GPUs on this machine and their MIG instances, as NVML sees them
// (loaded at run time, as the telemetry does), for `pier devices`: what a model's
// `device: cuda:N` or a worker's `gpu:` can name. NVML sees GPUs whether or not Pier's CUDA
// plugin can use them; the plugin's own verdict is cuda_plugin.h's.
//
// Thread-safety: a pure function (NVML is initialised and shut down within the call).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pier::metrics {

struct MigInstance {
  std::string uuid;  // "MIG-..."
  unsigned gpu_instance = 0;
  uint64_t memory_total_bytes = 0;
};

struct GpuInfo {
  unsigned index = 0;  // NVML's, which is PCI bus order (CUDA's under CUDA_DEVICE_ORDER=PCI_BUS_ID)
  std::string name;
  std::string uuid;  // "GPU-..."
  uint64_t memory_total_bytes = 0;
  uint64_t memory_free_bytes = 0;
  bool mig_enabled = false;
  std::vector<MigInstance> mig;
};

struct GpuInventory {
  std::string unavailable_reason;  // why NVML could not be read; empty when it was
  std::string driver_version;
  std::vector<GpuInfo> gpus;
};

// `library`: dlopen's name for NVML.
GpuInventory ReadGpuInventory(const std::string& library = "libnvidia-ml.so.1");

}  // namespace pier::metrics

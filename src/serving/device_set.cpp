#include "serving/device_set.h"

#include <utility>

#include "device/cpu/cpu_device.h"
#include "device/cuda/cuda_device.h"
#include "device/cuda/cuda_plugin.h"
#include "metrics/gpu_inventory.h"

namespace pier::serving {

Result<std::unique_ptr<DeviceSet>> DeviceSet::Create(const DeviceSetOptions& options) {
  if (options.cpu_capacity.has_value() && *options.cpu_capacity == 0) {
    return InvalidArgumentError("device memory must be more than 0 bytes");
  }
  std::unique_ptr<DeviceSet> set(new DeviceSet());
  CpuDeviceOptions device_options;
  if (options.cpu_capacity.has_value()) device_options.capacity_bytes = *options.cpu_capacity;
  PIER_ASSIGN_OR_RETURN(std::unique_ptr<CpuDevice> cpu, CpuDevice::Create(device_options));
  set->cpu_ = std::move(cpu);
  GovernorOptions governor_options;
  governor_options.budget = options.cpu_budget;
  governor_options.reserve_bytes = options.cpu_reserve_bytes;
  Result<std::unique_ptr<MemoryGovernor>> governor =
      MemoryGovernor::Create(set->cpu_.get(), governor_options);
  if (!governor.ok()) {
    if (!options.cpu_capacity.has_value()) return governor.status();
    return governor.status().WithContext("with --device-memory " +
                                         FormatBytes(*options.cpu_capacity));
  }
  set->cpu_governor_ = std::move(governor).value();
  PinnedHostPoolOptions swap_options;
  swap_options.limit_bytes = options.swap_space_bytes;
  set->swap_pool_ = std::make_unique<PinnedHostPool>(set->cpu_.get(), swap_options);
  set->topology_xml_ = options.topology_xml;
  return set;
}

Result<placement::Placer*> DeviceSet::placer() {
  std::lock_guard lock(placer_mutex_);
  if (placer_ == nullptr) {
    Result<placement::Topology> topology = topology_xml_.empty()
                                               ? placement::LoadSystemTopology()
                                               : placement::LoadTopologyXml(topology_xml_);
    if (!topology.ok()) return topology.status();
    placer_ = std::make_unique<placement::Placer>(std::move(topology).value());
  }
  return placer_.get();
}

Result<MemoryGovernor*> DeviceSet::GovernorFor(std::string_view device) {
  if (device == "cpu") return cpu_governor_.get();
  int index = -1;
  if (device.starts_with("cuda:") && device.size() > 5 && device.size() <= 8) {
    index = 0;
    for (char c : device.substr(5)) {
      if (c < '0' || c > '9') {
        index = -1;
        break;
      }
      index = index * 10 + (c - '0');
    }
  }
  if (device.starts_with("GPU-")) {  // a GPU's UUID, as `pier devices` and nvidia-smi show it
    const metrics::GpuInventory inventory = metrics::ReadGpuInventory();
    for (const metrics::GpuInfo& gpu : inventory.gpus) {
      if (gpu.uuid == device) index = static_cast<int>(gpu.index);
    }
    if (index < 0) {
      return UnavailableError("device " + std::string(device) + ": no GPU has this UUID" +
                              (inventory.unavailable_reason.empty()
                                   ? " (`pier devices` lists them)"
                                   : " (NVML: " + inventory.unavailable_reason + ")"));
    }
  } else if (device.starts_with("MIG-")) {
    return UnsupportedError("device " + std::string(device) +
                            ": a MIG instance is chosen when a process starts (a worker's gpu: "
                            "binding), and GPU worker processes are not there yet");
  }
  if (index < 0) {
    return InvalidArgumentError("device '" + std::string(device) +
                                "' is not a device (cpu, cuda:N for GPU N, or a GPU's UUID)");
  }
  std::lock_guard<std::mutex> lock(gpus_mutex_);
  if (auto it = gpus_.find(index); it != gpus_.end()) return it->second.governor.get();
  const cuda::CudaStatus& status = cuda::GetCudaStatus();
  if (!status.usable()) {
    return UnavailableError("device " + std::string(device) +
                            ": no usable GPU: " + status.Summary());
  }
  Result<std::unique_ptr<cuda::CudaDevice>> gpu = cuda::CudaDevice::Open(index);
  if (!gpu.ok()) return gpu.status().WithContext("device " + std::string(device));
  Gpu entry;
  entry.device = std::move(gpu).value();
  PIER_ASSIGN_OR_RETURN(entry.governor, MemoryGovernor::Create(entry.device.get()));
  MemoryGovernor* governor = entry.governor.get();
  gpus_.emplace(index, std::move(entry));
  return governor;
}

DeviceSet::~DeviceSet() {
  for (auto& [index, gpu] : gpus_) gpu.governor.reset();
  gpus_.clear();
  swap_pool_.reset();
  cpu_governor_.reset();
  cpu_.reset();
}

}  // namespace pier::serving

#include "serving/device_set.h"

#include <utility>

#include "device/cpu/cpu_device.h"
#include "device/cuda/cuda_device.h"
#include "device/cuda/cuda_plugin.h"
#include "device/device_name.h"
#include "device/ledger_device.h"
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
  set->gpu_budget_ = options.gpu_budget;
  return set;
}

Result<placement::Placer*> DeviceSet::placer() {
  MutexLock lock(placer_mutex_);
  if (placer_ == nullptr) {
    Result<placement::Topology> topology = topology_xml_.empty()
                                               ? placement::LoadSystemTopology()
                                               : placement::LoadTopologyXml(topology_xml_);
    if (!topology.ok()) return topology.status();
    placer_ = std::make_unique<placement::Placer>(std::move(topology).value());
  }
  return placer_.get();
}

namespace {

std::string NvmlSays(const metrics::GpuInventory& inventory) {
  return inventory.unavailable_reason.empty() ? " (`pier devices` lists them)"
                                              : " (NVML: " + inventory.unavailable_reason + ")";
}

}  // namespace

Result<MemoryGovernor*> DeviceSet::GovernorFor(std::string_view device) {
  if (device == "cpu") return cpu_governor_.get();
  int index = CudaOrdinalOf(device);
  if (device.starts_with("GPU-")) {  // a GPU's UUID, as `pier devices` and nvidia-smi show it
    const metrics::GpuInventory inventory = metrics::ReadGpuInventory();
    for (const metrics::GpuInfo& gpu : inventory.gpus) {
      if (gpu.uuid == device) index = static_cast<int>(gpu.index);
    }
    if (index < 0) {
      return UnavailableError("device " + std::string(device) + ": no GPU has this UUID" +
                              NvmlSays(inventory));
    }
  } else if (device.starts_with("MIG-")) {
    return UnsupportedError("device " + std::string(device) +
                            ": a MIG instance is chosen when a process starts: serve the model "
                            "in worker processes (workers: on)");
  }
  if (index < 0) {
    return InvalidArgumentError("device '" + std::string(device) +
                                "' is not a device (cpu, cuda:N for GPU N, or a GPU's UUID)");
  }
  MutexLock lock(gpus_mutex_);
  if (auto it = gpus_.find(index); it != gpus_.end()) {
    if (it->second.device->kind() == DeviceKind::kLedger) {
      return FailedPreconditionError(
          "device " + std::string(device) + ": GPU " + std::to_string(index) +
          " serves models in worker processes (workers: on), and one budget cannot be kept "
          "both here and in them: serve this model in workers too");
    }
    return it->second.governor.get();
  }
  const cuda::CudaStatus& status = cuda::GetCudaStatus();
  if (!status.usable()) {
    return UnavailableError("device " + std::string(device) +
                            ": no usable GPU: " + status.Summary());
  }
  Result<std::unique_ptr<cuda::CudaDevice>> gpu = cuda::CudaDevice::Open(index);
  if (!gpu.ok()) return gpu.status().WithContext("device " + std::string(device));
  Gpu entry;
  entry.device = std::move(gpu).value();
  GovernorOptions governor_options;
  governor_options.budget = gpu_budget_;
  PIER_ASSIGN_OR_RETURN(entry.governor,
                        MemoryGovernor::Create(entry.device.get(), governor_options));
  MemoryGovernor* governor = entry.governor.get();
  gpus_.emplace(index, std::move(entry));
  return governor;
}

Result<WorkerGpu> DeviceSet::WorkerGpuFor(std::string_view device) {
  const metrics::GpuInventory inventory = metrics::ReadGpuInventory();
  const std::string name(device);
  int index = CudaOrdinalOf(device);
  const metrics::GpuInfo* gpu = nullptr;
  const metrics::MigInstance* mig = nullptr;
  for (const metrics::GpuInfo& g : inventory.gpus) {
    if ((index >= 0 && g.index == static_cast<unsigned>(index)) || g.uuid == device) gpu = &g;
    for (const metrics::MigInstance& m : g.mig) {
      if (m.uuid == device) {
        gpu = &g;
        mig = &m;
      }
    }
  }
  if (index < 0 && !device.starts_with("GPU-") && !device.starts_with("MIG-")) {
    return InvalidArgumentError("device '" + name +
                                "' is not a GPU (cuda:N for GPU N, a GPU's UUID or a MIG "
                                "instance's)");
  }
  if (gpu == nullptr && !inventory.unavailable_reason.empty()) {
    return UnavailableError("device " + name +
                            ": a GPU served by worker processes is sized through NVML, which "
                            "cannot be read: " +
                            inventory.unavailable_reason);
  }
  if (gpu == nullptr) {
    return UnavailableError("device " + name +
                            ": no such GPU or MIG instance (`pier devices` lists them)");
  }
  if (mig == nullptr && gpu->mig_enabled) {
    return FailedPreconditionError("device " + name + ": GPU " + std::to_string(gpu->index) +
                                   " is in MIG mode: place the model on one of its instances "
                                   "(device: MIG-..., as `pier devices` lists them)");
  }
  WorkerGpu out;
  out.visible = mig != nullptr      ? mig->uuid
                : gpu->uuid.empty() ? std::to_string(gpu->index)
                                    : gpu->uuid;
  out.index = static_cast<int>(gpu->index);
  MutexLock lock(gpus_mutex_);
  if (mig == nullptr) {
    // The whole GPU: the governor of the GPU this process already computes on (then the
    // workers are charged with the in-process models), or a ledger of its own.
    if (auto it = gpus_.find(out.index); it != gpus_.end()) {
      out.governor = it->second.governor.get();
      return out;
    }
  } else if (auto it = migs_.find(mig->uuid); it != migs_.end()) {
    out.governor = it->second.governor.get();
    return out;
  }
  const uint64_t capacity = mig != nullptr ? mig->memory_total_bytes : gpu->memory_total_bytes;
  if (capacity == 0) {
    return UnavailableError("device " + name + ": NVML gives no memory size for it");
  }
  Gpu entry;
  // Named as the GPU is when this process computes on it, so its series keep their labels.
  const std::string gpu_name = gpu->name.empty() ? "" : " (" + gpu->name + ")";
  entry.device = std::make_unique<LedgerDevice>(
      out.index,
      mig != nullptr ? mig->uuid + " on cuda:" + std::to_string(out.index) + gpu_name
                     : "cuda:" + std::to_string(out.index) + gpu_name,
      capacity);
  GovernorOptions governor_options;
  governor_options.budget = gpu_budget_;
  // What other processes hold there now stays out of the budget.
  const uint64_t free_now =
      mig != nullptr || gpu->memory_free_bytes == 0 ? capacity : gpu->memory_free_bytes;
  governor_options.reserve_bytes = free_now < capacity ? capacity - free_now : 0;
  PIER_ASSIGN_OR_RETURN(entry.governor,
                        MemoryGovernor::Create(entry.device.get(), governor_options));
  out.governor = entry.governor.get();
  if (mig != nullptr) {
    migs_.emplace(mig->uuid, std::move(entry));
  } else {
    gpus_.emplace(out.index, std::move(entry));
  }
  return out;
}

std::vector<MemoryGovernor*> DeviceSet::Governors() {
  std::vector<MemoryGovernor*> out = {cpu_governor_.get()};
  MutexLock lock(gpus_mutex_);
  for (const auto& [index, gpu] : gpus_) out.push_back(gpu.governor.get());
  for (const auto& [uuid, mig] : migs_) out.push_back(mig.governor.get());
  return out;
}

DeviceSet::~DeviceSet() {
  for (auto& [index, gpu] : gpus_) gpu.governor.reset();
  gpus_.clear();
  for (auto& [uuid, mig] : migs_) mig.governor.reset();
  migs_.clear();
  swap_pool_.reset();
  cpu_governor_.reset();
  cpu_.reset();
}

}  // namespace pier::serving

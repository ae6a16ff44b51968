#include "serving/device_set.h"

#include <utility>

#include "device/cpu/cpu_device.h"

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

DeviceSet::~DeviceSet() {
  swap_pool_.reset();
  cpu_governor_.reset();
  cpu_.reset();
}

}  // namespace pier::serving

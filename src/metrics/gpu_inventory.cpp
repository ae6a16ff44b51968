#include "metrics/gpu_inventory.h"

#include <cstring>
#include <memory>

#include "metrics/nvml_library.h"

namespace pier::metrics {
namespace {

std::string Text(nvml::Return (*fn)(nvml::Device, char*, unsigned), nvml::Device device) {
  if (fn == nullptr) return "";
  char buffer[nvml::kStringBuffer] = {};
  if (fn(device, buffer, sizeof buffer) != nvml::kSuccess) return "";
  return std::string(buffer, strnlen(buffer, sizeof buffer));
}

}  // namespace

GpuInventory ReadGpuInventory(const std::string& library) {
  GpuInventory inventory;
  Result<std::unique_ptr<nvml::Library>> lib = nvml::Library::Load(library);
  if (!lib.ok()) {
    inventory.unavailable_reason = lib.status().message();
    return inventory;
  }
  const nvml::Api& api = (*lib)->api();
  if (nvml::Return r = api.init(); r != nvml::kSuccess) {
    inventory.unavailable_reason = "NVML did not initialise (" + (*lib)->ErrorText(r) + ")";
    return inventory;
  }
  if (api.driver_version != nullptr) {
    char buffer[nvml::kStringBuffer] = {};
    if (api.driver_version(buffer, sizeof buffer) == nvml::kSuccess) {
      inventory.driver_version = std::string(buffer, strnlen(buffer, sizeof buffer));
    }
  }
  unsigned count = 0;
  if (nvml::Return r = api.device_count(&count); r != nvml::kSuccess) {
    inventory.unavailable_reason = "NVML did not count the GPUs (" + (*lib)->ErrorText(r) + ")";
    api.shutdown();
    return inventory;
  }
  for (unsigned i = 0; i < count; ++i) {
    nvml::Device device = nullptr;
    if (api.device_handle(i, &device) != nvml::kSuccess) continue;
    GpuInfo gpu;
    gpu.index = i;
    gpu.name = Text(api.name, device);
    gpu.uuid = Text(api.uuid, device);
    nvml::Memory memory{};
    if (api.memory_info(device, &memory) == nvml::kSuccess) {
      gpu.memory_total_bytes = memory.total;
      gpu.memory_free_bytes = memory.free;
    }
    unsigned current = 0, pending = 0, max_mig = 0;
    gpu.mig_enabled = api.mig_mode != nullptr &&
                      api.mig_mode(device, &current, &pending) == nvml::kSuccess &&
                      current == nvml::kMigEnabled;
    if (gpu.mig_enabled && api.max_mig_devices != nullptr && api.mig_device_handle != nullptr &&
        api.max_mig_devices(device, &max_mig) == nvml::kSuccess) {
      for (unsigned m = 0; m < max_mig; ++m) {
        nvml::Device mig_device = nullptr;
        if (api.mig_device_handle(device, m, &mig_device) != nvml::kSuccess) continue;
        MigInstance mig;
        mig.uuid = Text(api.uuid, mig_device);
        if (api.gpu_instance_id != nullptr) api.gpu_instance_id(mig_device, &mig.gpu_instance);
        nvml::Memory mig_memory{};
        if (api.memory_info(mig_device, &mig_memory) == nvml::kSuccess) {
          mig.memory_total_bytes = mig_memory.total;
        }
        gpu.mig.push_back(std::move(mig));
      }
    }
    inventory.gpus.push_back(std::move(gpu));
  }
  api.shutdown();
  return inventory;
}

}  // namespace pier::metrics

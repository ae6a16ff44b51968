#include "metrics/nvml_library.h"

#include <dlfcn.h>

namespace pier::metrics::nvml {
namespace {

// Resolves `symbol` into `slot`; false when absent.
template <typename Fn>
bool Resolve(void* handle, const char* symbol, Fn* slot) {
  void* p = dlsym(handle, symbol);
  *slot = reinterpret_cast<Fn>(p);
  return p != nullptr;
}

}  // namespace

Result<std::unique_ptr<Library>> Library::Load(const std::string& soname) {
  // RTLD_LOCAL: NVML's symbols stay out of the global namespace (a CUDA plugin loaded later
  // resolves its own).
  void* handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return NotFoundError("NVML is not available (" + std::string(why ? why : soname) + ")");
  }
  std::unique_ptr<Library> lib(new Library());
  lib->handle_ = handle;
  lib->path_ = soname;
  Api& a = lib->api_;
  // The _v2 entry points exist since driver 325 (2013); a library without them, or without the
  // v3 process list's era, is too old to trust its structs' layout.
  const struct {
    const char* symbol;
    bool ok;
  } required[] = {
      {"nvmlInit_v2", Resolve(handle, "nvmlInit_v2", &a.init)},
      {"nvmlShutdown", Resolve(handle, "nvmlShutdown", &a.shutdown)},
      {"nvmlErrorString", Resolve(handle, "nvmlErrorString", &a.error_string)},
      {"nvmlDeviceGetCount_v2", Resolve(handle, "nvmlDeviceGetCount_v2", &a.device_count)},
      {"nvmlDeviceGetHandleByIndex_v2",
       Resolve(handle, "nvmlDeviceGetHandleByIndex_v2", &a.device_handle)},
      {"nvmlDeviceGetMemoryInfo", Resolve(handle, "nvmlDeviceGetMemoryInfo", &a.memory_info)},
  };
  for (const auto& r : required) {
    if (!r.ok) {
      return FailedPreconditionError("NVML in " + soname + " is too old: it lacks " + r.symbol +
                                     " (Pier needs a driver from 2013 or later)");
    }
  }
  Resolve(handle, "nvmlSystemGetDriverVersion", &a.driver_version);
  Resolve(handle, "nvmlDeviceGetName", &a.name);
  Resolve(handle, "nvmlDeviceGetUUID", &a.uuid);
  Resolve(handle, "nvmlDeviceGetUtilizationRates", &a.utilization);
  Resolve(handle, "nvmlDeviceGetTemperature", &a.temperature);
  Resolve(handle, "nvmlDeviceGetPowerUsage", &a.power_usage);
  Resolve(handle, "nvmlDeviceGetClockInfo", &a.clock_info);
  Resolve(handle, "nvmlDeviceGetPcieThroughput", &a.pcie_throughput);
  Resolve(handle, "nvmlDeviceGetTotalEccErrors", &a.total_ecc_errors);
  Resolve(handle, "nvmlDeviceGetComputeRunningProcesses_v3", &a.compute_processes);
  Resolve(handle, "nvmlDeviceGetMigMode", &a.mig_mode);
  Resolve(handle, "nvmlDeviceGetMaxMigDeviceCount", &a.max_mig_devices);
  Resolve(handle, "nvmlDeviceGetMigDeviceHandleByIndex", &a.mig_device_handle);
  Resolve(handle, "nvmlDeviceGetGpuInstanceId", &a.gpu_instance_id);
  Resolve(handle, "nvmlEventSetCreate", &a.event_set_create);
  Resolve(handle, "nvmlDeviceRegisterEvents", &a.register_events);
  Resolve(handle, "nvmlEventSetWait_v2", &a.event_set_wait);
  Resolve(handle, "nvmlEventSetFree", &a.event_set_free);
  return lib;
}

Library::~Library() {
  if (handle_ != nullptr) dlclose(handle_);
}

std::string Library::ErrorText(Return code) const {
  if (api_.error_string != nullptr) {
    if (const char* text = api_.error_string(code)) return text;
  }
  return "NVML error " + std::to_string(code);
}

}  // namespace pier::metrics::nvml

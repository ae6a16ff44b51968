#include "device/cuda/cuda_plugin.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <system_error>
#include <utility>

namespace pier::cuda {
namespace {

constexpr const char* kPluginFile = "libpier_cuda.so";

std::string VersionText(int version) {
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

std::string ExecutableDir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  return exe.parent_path().string();
}

bool FileExists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

struct ProcessState {
  CudaStatus status;
  std::unique_ptr<CudaPlugin> plugin;  // set only when usable
};

ProcessState LoadForProcess() {
  ProcessState state;
  const char* env = std::getenv("PIER_CUDA_PLUGIN");
  if (env != nullptr && std::string_view(env) == "none") {
    state.status.availability = CudaAvailability::kDisabled;
    state.status.reason = "CUDA disabled by PIER_CUDA_PLUGIN=none";
    return state;
  }
  const std::vector<std::string> paths = CudaPluginSearchPaths();
  std::string tried;
  for (const std::string& path : paths) {
    // A bare file name goes through the dynamic linker's search path; try it last.
    const bool bare = path.find('/') == std::string::npos;
    if (!bare && !FileExists(path)) {
      tried += (tried.empty() ? "" : ", ") + path;
      continue;
    }
    Result<std::unique_ptr<CudaPlugin>> plugin = CudaPlugin::Load(path);
    if (!plugin.ok()) {
      if (bare && plugin.status().code() == StatusCode::kFailedPrecondition &&
          plugin.status().message().find("cannot open shared object file") != std::string::npos) {
        tried += (tried.empty() ? "" : ", ") + path + " (dynamic linker search path)";
        continue;
      }
      state.status.availability = CudaAvailability::kBadPlugin;
      state.status.plugin_path = path;
      state.status.reason = plugin.status().message();
      return state;
    }
    state.status = (*plugin)->Probe();
    if (state.status.usable()) state.plugin = std::move(*plugin);
    return state;
  }
#ifdef PIER_CUDA_PLUGIN_BUILT
  state.status.availability = CudaAvailability::kNoPlugin;
  state.status.reason = std::string("CUDA plugin ") + kPluginFile + " not found (looked for " +
                        tried + "); set PIER_CUDA_PLUGIN to its path";
#else
  state.status.availability = CudaAvailability::kNotBuilt;
  state.status.reason = std::string(
                            "this build has no CUDA plugin (nvcc was not found when it "
                            "was built) and no ") +
                        kPluginFile + " was found (looked for " + tried + ")";
#endif
  return state;
}

const ProcessState& Process() {
  static std::once_flag once;
  static ProcessState* state = nullptr;  // never destroyed: the plugin outlives static dtors
  std::call_once(once, [] { state = new ProcessState(LoadForProcess()); });
  return *state;
}

}  // namespace

std::string_view CudaAvailabilityName(CudaAvailability availability) {
  switch (availability) {
    case CudaAvailability::kUsable:
      return "usable";
    case CudaAvailability::kDisabled:
      return "disabled";
    case CudaAvailability::kNotBuilt:
      return "not_built";
    case CudaAvailability::kNoPlugin:
      return "no_plugin";
    case CudaAvailability::kBadPlugin:
      return "bad_plugin";
    case CudaAvailability::kNoDriver:
      return "no_driver";
    case CudaAvailability::kNoDevice:
      return "no_device";
    case CudaAvailability::kError:
      return "error";
  }
  return "unknown";
}

std::string CudaStatus::Summary() const {
  if (!usable()) return "running on the CPU: " + reason;
  return "CUDA: " + std::to_string(device_count) + " device(s), driver " +
         VersionText(driver_version) + ", plugin " + plugin_path + " (" + build_info + ")";
}

Result<std::unique_ptr<CudaPlugin>> CudaPlugin::Load(const std::string& path) {
  if (path.find('/') != std::string::npos && !FileExists(path)) {
    return NotFoundError("CUDA plugin " + path + " does not exist");
  }
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    return FailedPreconditionError("cannot load CUDA plugin " + path + ": " +
                                   (error != nullptr ? error : "unknown dlopen error"));
  }
  auto entry =
      reinterpret_cast<PierCudaPluginEntryFn>(dlsym(handle, PIER_CUDA_PLUGIN_ENTRY_SYMBOL));
  if (entry == nullptr) {
    return FailedPreconditionError("CUDA plugin " + path + " has no " +
                                   PIER_CUDA_PLUGIN_ENTRY_SYMBOL + " symbol; is it Pier's?");
  }
  const PierCudaPluginApi* api = entry(PIER_CUDA_PLUGIN_ABI_VERSION);
  if (api == nullptr || api->abi_version != PIER_CUDA_PLUGIN_ABI_VERSION ||
      api->struct_size < sizeof(PierCudaPluginApi)) {
    return FailedPreconditionError("CUDA plugin " + path +
                                   " was built for another plugin ABI (this pier expects version " +
                                   std::to_string(PIER_CUDA_PLUGIN_ABI_VERSION) +
                                   "); use the libpier_cuda.so built with this pier");
  }
  return std::unique_ptr<CudaPlugin>(new CudaPlugin(path, api));
}

Status CudaPlugin::ToStatus(PierCudaResult result, std::string_view what) const {
  if (result == PIER_CUDA_OK) return Status::Ok();
  std::string message(what);
  const char* detail = api_->last_error();
  if (detail != nullptr && detail[0] != '\0') {
    message += ": ";
    message += detail;
  }
  switch (result) {
    case PIER_CUDA_ERROR_OUT_OF_MEMORY:
      return ResourceExhaustedError(std::move(message));
    case PIER_CUDA_ERROR_INVALID_ARGUMENT:
      return InvalidArgumentError(std::move(message));
    case PIER_CUDA_ERROR_UNSUPPORTED:
      return UnsupportedError(std::move(message));
    case PIER_CUDA_ERROR_NO_DRIVER:
    case PIER_CUDA_ERROR_NO_DEVICE:
      return UnavailableError(std::move(message));
    default:
      return InternalError(std::move(message));
  }
}

CudaStatus CudaPlugin::Probe() const {
  CudaStatus status;
  status.plugin_path = path_;
  status.build_info = api_->build_info();
  int32_t runtime = 0;
  int32_t driver = 0;
  if (api_->versions(&runtime, &driver) == PIER_CUDA_OK) {
    status.runtime_version = runtime;
    status.driver_version = driver;
  }
  int32_t count = 0;
  const PierCudaResult result = api_->device_count(&count);
  const std::string detail = api_->last_error();
  switch (result) {
    case PIER_CUDA_OK:
      status.availability = CudaAvailability::kUsable;
      status.device_count = count;
      return status;
    case PIER_CUDA_ERROR_NO_DRIVER:
      status.availability = CudaAvailability::kNoDriver;
      if (driver == 0) {
        status.reason =
            "no CUDA driver (libcuda.so.1 is not installed or not loadable; " + detail + ")";
      } else {
        status.reason = "the NVIDIA driver supports CUDA " + VersionText(driver) +
                        " but the plugin needs CUDA " + VersionText(runtime) +
                        "; update the driver (" + detail + ")";
      }
      return status;
    case PIER_CUDA_ERROR_NO_DEVICE:
      status.availability = CudaAvailability::kNoDevice;
      status.reason =
          "no CUDA device (the driver is there but no GPU is visible; check "
          "CUDA_VISIBLE_DEVICES; " +
          detail + ")";
      return status;
    default:
      status.availability = CudaAvailability::kError;
      status.reason = "CUDA failed while probing devices: " + detail;
      return status;
  }
}

CudaStatus ProbeCudaPluginAt(const std::string& path) {
  Result<std::unique_ptr<CudaPlugin>> plugin = CudaPlugin::Load(path);
  if (!plugin.ok()) {
    CudaStatus status;
    status.plugin_path = path;
    status.availability = plugin.status().code() == StatusCode::kNotFound
                              ? CudaAvailability::kNoPlugin
                              : CudaAvailability::kBadPlugin;
    status.reason = plugin.status().message();
    return status;
  }
  return (*plugin)->Probe();
}

std::vector<std::string> CudaPluginSearchPaths() {
  const char* env = std::getenv("PIER_CUDA_PLUGIN");
  if (env != nullptr && env[0] != '\0') return {env};
  std::vector<std::string> paths;
  const std::string dir = ExecutableDir();
  if (!dir.empty()) {
    paths.push_back(dir + "/" + kPluginFile);
    paths.push_back(dir + "/../lib/" + kPluginFile);
    paths.push_back(dir + "/../lib/pier/" + kPluginFile);
  }
#ifdef PIER_CUDA_PLUGIN_BUILD_PATH
  paths.push_back(PIER_CUDA_PLUGIN_BUILD_PATH);
#endif
  paths.push_back(kPluginFile);
  return paths;
}

const CudaStatus& GetCudaStatus() { return Process().status; }

const CudaPlugin* GetCudaPlugin() { return Process().plugin.get(); }

}  // namespace pier::cuda

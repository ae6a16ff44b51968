// The CUDA plugin loader: finds libpier_cuda.so, dlopens it and says whether Pier can use
// a GPU, and if not, why.
//
// Plain C++ (no CUDA header, no CUDA library): `pier` links this and still runs on a machine
// with no CUDA at all. The process-wide entry points (GetCudaStatus, GetCudaPlugin) search
// for the plugin, load and probe it once, on first use, under std::call_once; afterwards
// they only read immutable state, so they are thread-safe. The plugin is never unloaded
// (its static CUDA runtime registers exit handlers), so a CudaPlugin never calls dlclose.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "device/cuda/cuda_plugin_api.h"

namespace pier::cuda {

// Why Pier does or does not run on a GPU.
enum class CudaAvailability : uint8_t {
  kUsable = 0,
  kDisabled,   // PIER_CUDA_PLUGIN=none
  kNotBuilt,   // this build has no plugin (nvcc was not found when it was built)
  kNoPlugin,   // libpier_cuda.so was not found where Pier looks
  kBadPlugin,  // found but it does not load, or it was built for another ABI
  kNoDriver,   // no NVIDIA driver, or one older than the plugin's CUDA runtime
  kNoDevice,   // a driver but no GPU (or none visible, e.g. CUDA_VISIBLE_DEVICES="")
  kError,      // any other CUDA failure while probing
};

// "usable", "disabled", "not_built", "no_plugin", "bad_plugin", "no_driver", "no_device",
// "error": stable names for logs and metrics labels.
std::string_view CudaAvailabilityName(CudaAvailability availability);

// The outcome of looking for and probing the plugin.
struct CudaStatus {
  CudaAvailability availability = CudaAvailability::kNoPlugin;
  std::string reason;       // why the CPU is used; empty when usable
  std::string plugin_path;  // the plugin that was tried ("" if none was found)
  std::string build_info;   // the plugin's own description, e.g. "CUDA runtime 13.0, ..."
  int device_count = 0;
  int runtime_version = 0;  // 13000 for CUDA 13.0; 0 when unknown
  int driver_version = 0;   // CUDA version the driver supports; 0 when no driver

  bool usable() const { return availability == CudaAvailability::kUsable; }
  // One line for the log: "CUDA: 1 device(s), driver 13.0, plugin /x/libpier_cuda.so
  // (CUDA runtime 13.0, built for sm_90)" or "running on the CPU: <reason>".
  std::string Summary() const;
};

// A loaded plugin. Immutable after Load; thread-safe.
class CudaPlugin {
 public:
  // dlopens `path` and fetches its API table. Errors: kNotFound when the file is missing,
  // kFailedPrecondition when it does not load, lacks the entry symbol or has another ABI.
  [[nodiscard]] static Result<std::unique_ptr<CudaPlugin>> Load(const std::string& path);

  CudaPlugin(const CudaPlugin&) = delete;
  CudaPlugin& operator=(const CudaPlugin&) = delete;

  const PierCudaPluginApi& api() const { return *api_; }
  const std::string& path() const { return path_; }

  // Converts a plugin result into a Status carrying "what: <plugin message>": OUT_OF_MEMORY
  // becomes kResourceExhausted, INVALID_ARGUMENT kInvalidArgument, UNSUPPORTED kUnsupported,
  // NO_DRIVER / NO_DEVICE kUnavailable, anything else kInternal.
  Status ToStatus(PierCudaResult result, std::string_view what) const;

  // Asks the plugin for versions and devices; availability is kUsable, kNoDriver, kNoDevice
  // or kError, with the reason filled in.
  CudaStatus Probe() const;

 private:
  CudaPlugin(std::string path, const PierCudaPluginApi* api) : path_(std::move(path)), api_(api) {}

  std::string path_;
  const PierCudaPluginApi* api_;
};

// Loads and probes the plugin at `path`, without touching the process-wide state (tests and
// `pier inspect` use it). Never fails: every outcome is described in the CudaStatus.
CudaStatus ProbeCudaPluginAt(const std::string& path);

// Where the process-wide loader looks, in order: $PIER_CUDA_PLUGIN alone when set; else
// libpier_cuda.so beside the executable, in ../lib and ../lib/pier from it, the build tree's
// plugin (builds with nvcc), then the dynamic linker's search path.
std::vector<std::string> CudaPluginSearchPaths();

// Finds, loads and probes the plugin once per process (thread-safe).
const CudaStatus& GetCudaStatus();
// The process-wide plugin when a GPU is usable, else nullptr.
const CudaPlugin* GetCudaPlugin();

// Logs GetCudaStatus().Summary() once per process (info when usable, warning otherwise).
void LogCudaStatusOnce();

}  // namespace pier::cuda

// A stand-in for libpier_cuda.so with no CUDA in it, for the loader's unit tests.
//
// PIER_FAKE_CUDA_MODE (read on every call) picks what it pretends: "usable" (one device),
// "no_driver" (no libcuda), "old_driver" (a CUDA 12.0 driver), "no_device", or "other_abi"
// (the entry point refuses this ABI version, as a plugin from another release would).
#include <cstdlib>
#include <cstring>

#include "device/cuda/cuda_plugin_api.h"

namespace {

const char* Mode() {
  const char* mode = std::getenv("PIER_FAKE_CUDA_MODE");
  return mode != nullptr ? mode : "usable";
}
bool ModeIs(const char* name) { return std::strcmp(Mode(), name) == 0; }

thread_local const char* t_last_error = "";

const char* BuildInfo() { return "fake CUDA plugin"; }
const char* LastError() { return t_last_error; }

PierCudaResult Versions(int32_t* runtime_version, int32_t* driver_version) {
  *runtime_version = 13000;
  *driver_version = ModeIs("no_driver") ? 0 : ModeIs("old_driver") ? 12000 : 13000;
  return PIER_CUDA_OK;
}

PierCudaResult DeviceCount(int32_t* count) {
  if (ModeIs("no_driver") || ModeIs("old_driver")) {
    t_last_error =
        "cudaGetDeviceCount: cudaErrorInsufficientDriver: CUDA driver version is insufficient "
        "for CUDA runtime version";
    return PIER_CUDA_ERROR_NO_DRIVER;
  }
  if (ModeIs("no_device")) {
    t_last_error = "cudaGetDeviceCount: cudaErrorNoDevice: no CUDA-capable device is detected";
    return PIER_CUDA_ERROR_NO_DEVICE;
  }
  *count = 1;
  t_last_error = "fake: out of memory";  // what ToStatus should quote
  return PIER_CUDA_OK;
}

PierCudaPluginApi MakeApi() {
  PierCudaPluginApi api{};
  api.abi_version = PIER_CUDA_PLUGIN_ABI_VERSION;
  api.struct_size = sizeof(PierCudaPluginApi);
  api.build_info = BuildInfo;
  api.last_error = LastError;
  api.versions = Versions;
  api.device_count = DeviceCount;
  return api;
}

const PierCudaPluginApi kApi = MakeApi();

}  // namespace

extern "C" __attribute__((visibility("default"))) const PierCudaPluginApi* pier_cuda_plugin_api(
    uint32_t abi_version) {
  if (ModeIs("other_abi") || abi_version != PIER_CUDA_PLUGIN_ABI_VERSION) return nullptr;
  return &kApi;
}

// Virtual-memory arenas through the CUDA driver API, inside the plugin.
//
// The driver functions (cuMemCreate, cuMemAddressReserve, cuMemMap, cuMemSetAccess,
// cuMemUnmap, cuMemRelease, cuMemAddressFree) are looked up once at run time with
// cudaGetDriverEntryPointByVersion, so neither the plugin nor pier links libcuda. The table
// is resolved under std::call_once and read-only afterwards: thread-safe.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <mutex>
#include <string>

#include "device/cuda/plugin_internal.h"

namespace pier::cuda_plugin {
namespace {

// The ABI versions of the driver functions we call (all unchanged since CUDA 10.2/11.0).
constexpr unsigned int kDriverApiVersion = 12000;

struct DriverApi {
  decltype(&cuGetErrorName) get_error_name = nullptr;
  decltype(&cuDeviceGet) device_get = nullptr;
  decltype(&cuDeviceGetAttribute) device_get_attribute = nullptr;
  decltype(&cuMemGetAllocationGranularity) get_granularity = nullptr;
  decltype(&cuMemAddressReserve) address_reserve = nullptr;
  decltype(&cuMemAddressFree) address_free = nullptr;
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemSetAccess) set_access = nullptr;
  std::string missing;  // empty when every function was found
};

template <typename Fn>
void Resolve(const char* symbol, Fn* fn, std::string* missing) {
  void* address = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t error = cudaGetDriverEntryPointByVersion(symbol, &address, kDriverApiVersion,
                                                             cudaEnableDefault, &found);
  if (error != cudaSuccess || found != cudaDriverEntryPointSuccess || address == nullptr) {
    cudaGetLastError();
    if (!missing->empty()) *missing += ", ";
    *missing += symbol;
    return;
  }
  *fn = reinterpret_cast<Fn>(address);
}

const DriverApi& Driver() {
  static std::once_flag once;
  static DriverApi api;
  std::call_once(once, [] {
    Resolve("cuGetErrorName", &api.get_error_name, &api.missing);
    Resolve("cuDeviceGet", &api.device_get, &api.missing);
    Resolve("cuDeviceGetAttribute", &api.device_get_attribute, &api.missing);
    Resolve("cuMemGetAllocationGranularity", &api.get_granularity, &api.missing);
    Resolve("cuMemAddressReserve", &api.address_reserve, &api.missing);
    Resolve("cuMemAddressFree", &api.address_free, &api.missing);
    Resolve("cuMemCreate", &api.create, &api.missing);
    Resolve("cuMemRelease", &api.release, &api.missing);
    Resolve("cuMemMap", &api.map, &api.missing);
    Resolve("cuMemUnmap", &api.unmap, &api.missing);
    Resolve("cuMemSetAccess", &api.set_access, &api.missing);
  });
  return api;
}

// Makes `device` current (creating its primary context) and checks the driver table.
PierCudaResult Prepare(int32_t device, const DriverApi** api) {
  if (PierCudaResult rc = UseDevice(device)) return rc;
  const DriverApi& driver = Driver();
  if (!driver.missing.empty()) {
    return Fail(PIER_CUDA_ERROR_UNSUPPORTED,
                "CUDA driver lacks virtual-memory functions: " + driver.missing);
  }
  *api = &driver;
  return PIER_CUDA_OK;
}

PierCudaResult FromDriver(const DriverApi& api, CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return PIER_CUDA_OK;
  const char* name = nullptr;
  if (api.get_error_name(result, &name) != CUDA_SUCCESS || name == nullptr) name = "unknown";
  std::string message = std::string(what) + ": " + name + " (" + std::to_string(result) + ")";
  switch (result) {
    case CUDA_ERROR_OUT_OF_MEMORY:
      return Fail(PIER_CUDA_ERROR_OUT_OF_MEMORY, std::move(message));
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_INVALID_HANDLE:
      return Fail(PIER_CUDA_ERROR_INVALID_ARGUMENT, std::move(message));
    case CUDA_ERROR_NOT_SUPPORTED:
      return Fail(PIER_CUDA_ERROR_UNSUPPORTED, std::move(message));
    default:
      return Fail(PIER_CUDA_ERROR_FAILED, std::move(message));
  }
}

CUmemAllocationProp PinnedOn(CUdevice device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

CUdeviceptr ToDevicePtr(void* p) { return reinterpret_cast<CUdeviceptr>(p); }

}  // namespace

PierCudaResult VmSupport(int32_t device, int32_t* supported, uint64_t* granularity) {
  const DriverApi* api = nullptr;
  if (PierCudaResult rc = Prepare(device, &api)) return rc;
  CUdevice dev = 0;
  if (PierCudaResult rc = FromDriver(*api, api->device_get(&dev, device), "cuDeviceGet")) {
    return rc;
  }
  int vm = 0;
  if (PierCudaResult rc =
          FromDriver(*api,
                     api->device_get_attribute(
                         &vm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev),
                     "cuDeviceGetAttribute")) {
    return rc;
  }
  *supported = vm;
  *granularity = 0;
  if (!vm) return PIER_CUDA_OK;
  const CUmemAllocationProp prop = PinnedOn(dev);
  size_t g = 0;
  if (PierCudaResult rc =
          FromDriver(*api, api->get_granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                     "cuMemGetAllocationGranularity")) {
    return rc;
  }
  *granularity = g;
  return PIER_CUDA_OK;
}

PierCudaResult VmReserve(int32_t device, uint64_t bytes, void** base) {
  if (base == nullptr || bytes == 0) {
    return Fail(PIER_CUDA_ERROR_INVALID_ARGUMENT, "vm_reserve: zero size or null output");
  }
  const DriverApi* api = nullptr;
  if (PierCudaResult rc = Prepare(device, &api)) return rc;
  CUdeviceptr ptr = 0;
  if (PierCudaResult rc =
          FromDriver(*api, api->address_reserve(&ptr, bytes, 0, 0, 0), "cuMemAddressReserve")) {
    return rc;
  }
  *base = reinterpret_cast<void*>(ptr);
  return PIER_CUDA_OK;
}

PierCudaResult VmRelease(int32_t device, void* base, uint64_t bytes) {
  const DriverApi* api = nullptr;
  if (PierCudaResult rc = Prepare(device, &api)) return rc;
  return FromDriver(*api, api->address_free(ToDevicePtr(base), bytes), "cuMemAddressFree");
}

PierCudaResult VmMap(int32_t device, void* address, uint64_t bytes, uint64_t* handle) {
  if (handle == nullptr || bytes == 0) {
    return Fail(PIER_CUDA_ERROR_INVALID_ARGUMENT, "vm_map: zero size or null output");
  }
  const DriverApi* api = nullptr;
  if (PierCudaResult rc = Prepare(device, &api)) return rc;
  CUdevice dev = 0;
  if (PierCudaResult rc = FromDriver(*api, api->device_get(&dev, device), "cuDeviceGet")) {
    return rc;
  }
  const CUmemAllocationProp prop = PinnedOn(dev);
  CUmemGenericAllocationHandle physical = 0;
  if (PierCudaResult rc =
          FromDriver(*api, api->create(&physical, bytes, &prop, 0), "cuMemCreate")) {
    return rc;
  }
  const CUdeviceptr ptr = ToDevicePtr(address);
  if (PierCudaResult rc = FromDriver(*api, api->map(ptr, bytes, 0, physical, 0), "cuMemMap")) {
    api->release(physical);
    return rc;
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = dev;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (PierCudaResult rc =
          FromDriver(*api, api->set_access(ptr, bytes, &access, 1), "cuMemSetAccess")) {
    api->unmap(ptr, bytes);
    api->release(physical);
    return rc;
  }
  *handle = static_cast<uint64_t>(physical);
  return PIER_CUDA_OK;
}

PierCudaResult VmUnmap(int32_t device, void* address, uint64_t bytes, uint64_t handle) {
  const DriverApi* api = nullptr;
  if (PierCudaResult rc = Prepare(device, &api)) return rc;
  if (PierCudaResult rc = FromDriver(*api, api->unmap(ToDevicePtr(address), bytes), "cuMemUnmap")) {
    return rc;
  }
  return FromDriver(*api, api->release(static_cast<CUmemGenericAllocationHandle>(handle)),
                    "cuMemRelease");
}

}  // namespace pier::cuda_plugin

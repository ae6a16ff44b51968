// Helpers shared by the files of the CUDA plugin (libpier_cuda.so); not part of its ABI.
//
// The plugin reports failures as PierCudaResult codes plus a per-thread message (see
// cuda_plugin_api.h). These helpers build both from CUDA runtime errors. Thread-safe: the
// message lives in thread-local storage.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "device/cuda/cuda_plugin_api.h"

namespace pier::cuda_plugin {

// Stores `message` as the calling thread's last error and returns `result`.
PierCudaResult Fail(PierCudaResult result, std::string message);

// Maps a runtime error to a result code and records "what: cudaErrorName: description".
// Clears the runtime's last-error state so that a recoverable error (out of memory) does not
// leak into the next call. Returns PIER_CUDA_OK for cudaSuccess.
PierCudaResult FromCuda(cudaError_t error, const char* what);

// Makes `device` current on the calling thread.
PierCudaResult UseDevice(int32_t device);

// Driver-API virtual memory (plugin_vm.cpp), resolved at run time without linking libcuda.
PierCudaResult VmSupport(int32_t device, int32_t* supported, uint64_t* granularity);
PierCudaResult VmReserve(int32_t device, uint64_t bytes, void** base);
PierCudaResult VmRelease(int32_t device, void* base, uint64_t bytes);
PierCudaResult VmMap(int32_t device, void* address, uint64_t bytes, uint64_t* handle);
PierCudaResult VmUnmap(int32_t device, void* address, uint64_t bytes, uint64_t handle);

}  // namespace pier::cuda_plugin

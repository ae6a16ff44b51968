// OrtLibrary: ONNX Runtime's C API, loaded at run time with dlopen (as Pier loads NVML and its
// CUDA plugin), so `pier` links nothing of it and a machine without it still serves every
// other model: only ONNX models are refused, with the paths that were tried.
//
// Where it looks, in order: the path given to SetOrtLibraryPath (`--onnxruntime-library`),
// else the library scripts/bootstrap placed beside the checkout (its path is recorded at build
// time), `libonnxruntime.so.1` beside the executable, in ../lib/pier/ from it (the OCI image),
// and last the dynamic loader's own search. A library whose OrtGetApiBase()->GetApi does not
// offer the API version Pier's headers were written for (ORT_API_VERSION, ONNX Runtime 1.21)
// is too old and refused by name.
//
// The process has one ONNX Runtime environment (ONNX Runtime allows no second one): it is made
// with the library, logs through spdlog, and has Pier's allocator registered (ort_allocator.h),
// so every session that opts in allocates through the memory governor.
//
// Lifetime: loaded once, kept until the process ends (ONNX Runtime's own threads and static
// state make unloading it unsafe). Thread-safety: every function may be called from any thread.
#pragma once

#include <string>

#include "common/status.h"

struct OrtApi;
struct OrtEnv;

namespace pier::tensor_models {

class OrtChargingAllocator;

// The library to load instead of the default search; empty restores the search. Only before
// the first OrtLibrary::Get (later: FAILED_PRECONDITION naming the one loaded).
[[nodiscard]] Status SetOrtLibraryPath(std::string path);

class OrtLibrary {
 public:
  // The loaded library, loading it on the first call. FAILED_PRECONDITION naming every path
  // tried and why each failed (absent, not ONNX Runtime, too old), or the environment's error;
  // the same error again on later calls (no second try within a process).
  [[nodiscard]] static Result<OrtLibrary*> Get();

  const OrtApi& api() const { return *api_; }
  OrtEnv* env() const { return env_; }
  OrtChargingAllocator& allocator() const { return *allocator_; }
  const std::string& path() const { return path_; }        // the file loaded
  const std::string& version() const { return version_; }  // e.g. "1.32.0"

 private:
  OrtLibrary() = default;
  static Result<OrtLibrary*> Load(const std::string& path_override);

  const OrtApi* api_ = nullptr;
  OrtEnv* env_ = nullptr;
  OrtChargingAllocator* allocator_ = nullptr;  // lives as long as the process
  std::string path_;
  std::string version_;
};

// An OrtStatus turned into Pier's Status (released here); Ok for null. `what` prefixes the
// message ("creating the session: ...").
Status FromOrtStatus(const OrtApi& api, void* ort_status, std::string_view what);

}  // namespace pier::tensor_models

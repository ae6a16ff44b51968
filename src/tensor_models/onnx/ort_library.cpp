#include "tensor_models/onnx/ort_library.h"

#include <dlfcn.h>
#include <onnxruntime_c_api.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <optional>
#include <vector>

#include "common/mutex.h"
#include "tensor_models/onnx/ort_allocator.h"

namespace pier::tensor_models {
namespace {

struct LoadState {
  Mutex mutex;
  std::string path_override PIER_GUARDED_BY(mutex);
  bool tried PIER_GUARDED_BY(mutex) = false;
  std::optional<Result<OrtLibrary*>> result PIER_GUARDED_BY(mutex);
};

LoadState& State() {
  static LoadState* state = new LoadState();  // never destroyed: see the header's Lifetime
  return *state;
}

std::vector<std::string> CandidatePaths(const std::string& override_path) {
  if (!override_path.empty()) return {override_path};
  std::vector<std::string> paths;
#ifdef PIER_ONNXRUNTIME_LIBRARY
  paths.push_back(PIER_ONNXRUNTIME_LIBRARY);
#endif
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    paths.push_back((exe.parent_path() / "libonnxruntime.so.1").string());
    paths.push_back((exe.parent_path() / ".." / "lib" / "pier" / "libonnxruntime.so.1").string());
  }
  paths.push_back("libonnxruntime.so.1");  // the dynamic loader's search
  return paths;
}

void LogFromOrt(void* /*param*/, OrtLoggingLevel severity, const char* category,
                const char* /*logid*/, const char* code_location, const char* message) {
  const spdlog::level::level_enum level = severity >= ORT_LOGGING_LEVEL_ERROR ? spdlog::level::err
                                          : severity == ORT_LOGGING_LEVEL_WARNING
                                              ? spdlog::level::warn
                                              : spdlog::level::debug;
  spdlog::log(level, "onnxruntime [{}] {} ({})", category ? category : "", message ? message : "",
              code_location ? code_location : "");
}

}  // namespace

Status FromOrtStatus(const OrtApi& api, void* ort_status, std::string_view what) {
  if (ort_status == nullptr) return Status::Ok();
  auto* status = static_cast<OrtStatus*>(ort_status);
  const OrtErrorCode code = api.GetErrorCode(status);
  std::string message = std::string(what) + ": " + api.GetErrorMessage(status);
  api.ReleaseStatus(status);
  switch (code) {
    case ORT_INVALID_ARGUMENT:
    case ORT_INVALID_GRAPH:
    case ORT_INVALID_PROTOBUF:
    case ORT_NO_MODEL:
    case ORT_NO_SUCHFILE:
    case ORT_NOT_IMPLEMENTED:
      return InvalidArgumentError(std::move(message));
    case ORT_FAIL:
    case ORT_ENGINE_ERROR:
    case ORT_RUNTIME_EXCEPTION:
    case ORT_EP_FAIL:
    default:
      return InternalError(std::move(message));
  }
}

Status SetOrtLibraryPath(std::string path) {
  LoadState& state = State();
  MutexLock lock(state.mutex);
  if (state.tried && state.result->ok()) {
    return FailedPreconditionError("ONNX Runtime is already loaded from " +
                                   state.result->value()->path());
  }
  state.path_override = std::move(path);
  state.tried = false;
  state.result.reset();
  return Status::Ok();
}

Result<OrtLibrary*> OrtLibrary::Get() {
  LoadState& state = State();
  MutexLock lock(state.mutex);
  if (!state.tried) {
    state.tried = true;
    state.result = Load(state.path_override);
    if (!state.result->ok()) spdlog::warn("{}", state.result->status().message());
  }
  return *state.result;
}

Result<OrtLibrary*> OrtLibrary::Load(const std::string& path_override) {
  const std::vector<std::string> paths = CandidatePaths(path_override);
  std::string tried;
  for (const std::string& path : paths) {
    // RTLD_LOCAL: its symbols stay out of the global namespace.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      tried += "\n  " + path + ": " + (why ? why : "cannot be loaded");
      continue;
    }
    using GetApiBaseFn = const OrtApiBase* (*)();
    auto get_base = reinterpret_cast<GetApiBaseFn>(dlsym(handle, "OrtGetApiBase"));
    if (get_base == nullptr) {
      tried += "\n  " + path + ": not ONNX Runtime (no OrtGetApiBase)";
      dlclose(handle);
      continue;
    }
    const OrtApiBase* base = get_base();
    const char* version = base->GetVersionString ? base->GetVersionString() : "unknown";
    const OrtApi* api = base->GetApi(ORT_API_VERSION);
    if (api == nullptr) {
      tried += "\n  " + path + ": ONNX Runtime " + version + " is too old (Pier needs API " +
               std::to_string(ORT_API_VERSION) + ", ONNX Runtime 1.21 or later)";
      dlclose(handle);
      continue;
    }
    auto* library = new OrtLibrary();  // never freed: see the header's Lifetime
    library->api_ = api;
    library->path_ = path;
    library->version_ = version;
    OrtEnv* env = nullptr;
    if (Status made =
            FromOrtStatus(*api,
                          api->CreateEnvWithCustomLogger(LogFromOrt, nullptr,
                                                         ORT_LOGGING_LEVEL_WARNING, "pier", &env),
                          "creating ONNX Runtime's environment");
        !made.ok()) {
      delete library;
      return FailedPreconditionError(made.message());
    }
    library->env_ = env;
    Result<OrtChargingAllocator*> allocator = OrtChargingAllocator::Register(*api, env);
    if (!allocator.ok()) {
      delete library;  // the environment stays: ONNX Runtime allows no second one anyway
      return FailedPreconditionError("ONNX Runtime " + std::string(version) + " from " + path +
                                     ": " + allocator.status().message());
    }
    library->allocator_ = *allocator;
    spdlog::info("ONNX Runtime {} loaded from {}", version, path);
    return library;
  }
  return FailedPreconditionError(
      "ONNX Runtime is not available, so ONNX models cannot be served; tried:" + tried +
      "\n(scripts/bootstrap fetches it; --onnxruntime-library PATH names another copy)");
}

}  // namespace pier::tensor_models

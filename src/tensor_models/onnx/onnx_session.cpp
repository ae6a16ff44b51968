#include "tensor_models/onnx/onnx_session.h"

#include <onnxruntime_c_api.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <optional>
#include <utility>

#include "tensor_models/batch_tensors.h"
#include "tensor_models/onnx/ort_library.h"

namespace pier::tensor_models {
namespace {

std::optional<ElementType> FromOnnxType(ONNXTensorElementDataType type) {
  switch (type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT:
      return ElementType::kFp32;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8:
      return ElementType::kUint8;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8:
      return ElementType::kInt8;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16:
      return ElementType::kUint16;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16:
      return ElementType::kInt16;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32:
      return ElementType::kInt32;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64:
      return ElementType::kInt64;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING:
      return ElementType::kBytes;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL:
      return ElementType::kBool;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16:
      return ElementType::kFp16;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE:
      return ElementType::kFp64;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32:
      return ElementType::kUint32;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64:
      return ElementType::kUint64;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16:
      return ElementType::kBf16;
    default:
      return std::nullopt;
  }
}

ONNXTensorElementDataType ToOnnxType(ElementType type) {
  switch (type) {
    case ElementType::kFp32:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
    case ElementType::kUint8:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8;
    case ElementType::kInt8:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8;
    case ElementType::kUint16:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16;
    case ElementType::kInt16:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16;
    case ElementType::kInt32:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32;
    case ElementType::kInt64:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
    case ElementType::kBytes:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING;
    case ElementType::kBool:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL;
    case ElementType::kFp16:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
    case ElementType::kFp64:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE;
    case ElementType::kUint32:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32;
    case ElementType::kUint64:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64;
    case ElementType::kBf16:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16;
  }
  return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
}

}  // namespace

uint64_t ProcessResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t pages = 0;
  uint64_t resident = 0;
  if (!(statm >> pages >> resident)) return 0;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// What the session holds of ONNX Runtime's objects, released in the destructor.
struct OnnxSession::Ort {
  const OrtApi* api = nullptr;
  OrtSession* session = nullptr;
  OrtMemoryInfo* cpu = nullptr;  // describes input buffers Pier owns
  std::vector<std::string> input_names;
  std::vector<std::string> output_names;
  std::vector<const char*> input_name_ptrs;
  std::vector<const char*> output_name_ptrs;

  ~Ort() {
    if (session != nullptr) api->ReleaseSession(session);
    if (cpu != nullptr) api->ReleaseMemoryInfo(cpu);
  }
};

namespace {

// Reads one input's or output's name, type and shape. INVALID_ARGUMENT for a non-tensor value
// (a sequence or a map) or an element type Pier does not carry.
Result<TensorSpec> ReadSpec(const OrtApi& api, OrtSession* session, size_t index, bool input) {
  OrtAllocator* names = nullptr;
  PIER_RETURN_IF_ERROR(
      FromOrtStatus(api, api.GetAllocatorWithDefaultOptions(&names), "reading the graph"));
  char* raw_name = nullptr;
  PIER_RETURN_IF_ERROR(
      FromOrtStatus(api,
                    input ? api.SessionGetInputName(session, index, names, &raw_name)
                          : api.SessionGetOutputName(session, index, names, &raw_name),
                    "reading the graph's names"));
  TensorSpec spec;
  spec.name = raw_name;
  if (OrtStatus* freed = api.AllocatorFree(names, raw_name)) api.ReleaseStatus(freed);
  const char* what = input ? "input" : "output";
  OrtTypeInfo* type_info = nullptr;
  PIER_RETURN_IF_ERROR(FromOrtStatus(api,
                                     input
                                         ? api.SessionGetInputTypeInfo(session, index, &type_info)
                                         : api.SessionGetOutputTypeInfo(session, index, &type_info),
                                     "reading the graph's types"));
  const OrtTensorTypeAndShapeInfo* tensor = nullptr;
  Status cast = FromOrtStatus(api, api.CastTypeInfoToTensorInfo(type_info, &tensor),
                              "reading the graph's types");
  Status result = Status::Ok();
  if (cast.ok() && tensor == nullptr) {
    result = InvalidArgumentError(std::string(what) + " '" + spec.name +
                                  "' is not a tensor (a sequence, map or optional): Pier serves "
                                  "tensor inputs and outputs only");
  } else if (!cast.ok()) {
    result = cast;
  } else {
    ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    size_t rank = 0;
    result = FromOrtStatus(api, api.GetTensorElementType(tensor, &type), "reading a type");
    if (result.ok()) {
      result = FromOrtStatus(api, api.GetDimensionsCount(tensor, &rank), "reading a shape");
    }
    if (result.ok()) {
      spec.shape.resize(rank);
      result =
          FromOrtStatus(api, api.GetDimensions(tensor, spec.shape.data(), rank), "reading a shape");
    }
    if (result.ok()) {
      std::optional<ElementType> element = FromOnnxType(type);
      if (!element) {
        result = InvalidArgumentError(std::string(what) + " '" + spec.name +
                                      "' has an element type Pier does not carry (ONNX type " +
                                      std::to_string(static_cast<int>(type)) + ")");
      } else {
        spec.type = *element;
      }
    }
    for (int64_t& dim : spec.shape) {
      if (dim < 0) dim = -1;  // symbolic or unknown: open
    }
  }
  api.ReleaseTypeInfo(type_info);
  if (!result.ok()) return result;
  return spec;
}

}  // namespace

Result<std::unique_ptr<OnnxSession>> OnnxSession::Open(const OnnxSessionOptions& options) {
  if (options.governor == nullptr) {
    return InvalidArgumentError("an ONNX session needs its device's governor");
  }
  PIER_ASSIGN_OR_RETURN(OnnxFileInfo file_info, ReadOnnxFileInfo(options.path));
  PIER_ASSIGN_OR_RETURN(OrtLibrary * library, OrtLibrary::Get());
  const OrtApi& api = library->api();

  std::unique_ptr<OnnxSession> session(new OnnxSession());
  session->options_ = options;
  session->file_info_ = file_info;
  session->ort_ = std::make_unique<Ort>();
  Ort& ort = *session->ort_;
  ort.api = &api;
  PIER_RETURN_IF_ERROR(
      FromOrtStatus(api, api.CreateCpuMemoryInfo(OrtDeviceAllocator, OrtMemTypeDefault, &ort.cpu),
                    "describing host memory"));

  OrtSessionOptions* session_options = nullptr;
  PIER_RETURN_IF_ERROR(
      FromOrtStatus(api, api.CreateSessionOptions(&session_options), "making session options"));
  struct ReleaseOptions {
    const OrtApi& api;
    OrtSessionOptions* options;
    ~ReleaseOptions() { api.ReleaseSessionOptions(options); }
  } release_options{api, session_options};
  const bool open_inner_dims = !file_info.inputs_with_open_inner_dims.empty();
  const std::pair<const char*, const char*> config[] = {
      {"session.use_env_allocators", "1"},
      {"session.use_device_allocator_for_initializers", "1"},
      {"session.intra_op.allow_spinning", "0"},
      {"session.inter_op.allow_spinning", "0"},
  };
  for (const auto& [key, value] : config) {
    PIER_RETURN_IF_ERROR(FromOrtStatus(api, api.AddSessionConfigEntry(session_options, key, value),
                                       "setting session options"));
  }
  PIER_RETURN_IF_ERROR(
      FromOrtStatus(api, api.SetIntraOpNumThreads(session_options, std::max(1, options.threads)),
                    "setting session options"));
  PIER_RETURN_IF_ERROR(
      FromOrtStatus(api, api.SetInterOpNumThreads(session_options, 1), "setting session options"));
  PIER_RETURN_IF_ERROR(FromOrtStatus(api,
                                     api.SetSessionExecutionMode(session_options, ORT_SEQUENTIAL),
                                     "setting session options"));
  PIER_RETURN_IF_ERROR(
      FromOrtStatus(api, api.DisableCpuMemArena(session_options), "setting session options"));
  if (open_inner_dims) {
    PIER_RETURN_IF_ERROR(
        FromOrtStatus(api, api.DisableMemPattern(session_options), "setting session options"));
  }
  PIER_RETURN_IF_ERROR(
      FromOrtStatus(api, api.SetSessionGraphOptimizationLevel(session_options, ORT_ENABLE_ALL),
                    "setting session options"));

  {
    const uint64_t resident_before = ProcessResidentBytes();
    OrtChargeScope scope(options.governor, options.owner, session->counter_);
    Status made = FromOrtStatus(
        api, api.CreateSession(library->env(), options.path.c_str(), session_options, &ort.session),
        options.path);
    if (!scope.refusal().empty()) {
      return ResourceExhaustedError(options.path + " does not fit: " + scope.refusal());
    }
    PIER_RETURN_IF_ERROR(made);
    const uint64_t resident_after = ProcessResidentBytes();
    session->figures_.charged_bytes = session->counter_->bytes.load();
    session->figures_.peak_bytes = session->counter_->peak.load();
    session->figures_.resident_delta =
        resident_after > resident_before ? resident_after - resident_before : 0;
  }

  size_t inputs = 0;
  size_t outputs = 0;
  PIER_RETURN_IF_ERROR(
      FromOrtStatus(api, api.SessionGetInputCount(ort.session, &inputs), "reading the graph"));
  PIER_RETURN_IF_ERROR(
      FromOrtStatus(api, api.SessionGetOutputCount(ort.session, &outputs), "reading the graph"));
  TensorModelInfo& info = session->info_;
  for (size_t i = 0; i < inputs; ++i) {
    PIER_ASSIGN_OR_RETURN(TensorSpec spec, ReadSpec(api, ort.session, i, true));
    info.inputs.push_back(std::move(spec));
  }
  for (size_t i = 0; i < outputs; ++i) {
    PIER_ASSIGN_OR_RETURN(TensorSpec spec, ReadSpec(api, ort.session, i, false));
    info.outputs.push_back(std::move(spec));
  }
  if (info.outputs.empty()) return InvalidArgumentError(options.path + " has no outputs");

  // Overrides of open dimensions.
  for (const auto& entry : options.input_shapes) {
    const std::string& name = entry.first;  // (clang 14 lambdas cannot capture bindings)
    const std::vector<int64_t>& shape = entry.second;
    auto it = std::find_if(info.inputs.begin(), info.inputs.end(),
                           [&](const TensorSpec& spec) { return spec.name == name; });
    if (it == info.inputs.end()) {
      return InvalidArgumentError("inputs: '" + name + "' is not an input of " + options.path);
    }
    if (shape.size() != it->shape.size()) {
      return InvalidArgumentError("inputs: '" + name + "': shape " + ShapeText(shape) +
                                  " has rank " + std::to_string(shape.size()) +
                                  ", the model's input " + ShapeText(it->shape) + " has rank " +
                                  std::to_string(it->shape.size()));
    }
    for (size_t d = 0; d < shape.size(); ++d) {
      if (it->shape[d] >= 0 && shape[d] >= 0 && shape[d] != it->shape[d]) {
        return InvalidArgumentError("inputs: '" + name + "': shape " + ShapeText(shape) +
                                    " contradicts the model's fixed " + ShapeText(it->shape));
      }
      if (it->shape[d] < 0 && shape[d] >= 0) it->shape[d] = shape[d];
    }
  }

  auto open_first = [](const TensorSpec& spec) { return !spec.shape.empty() && spec.shape[0] < 0; };
  const bool batchable = options.max_batch_size > 0 &&
                         std::all_of(info.inputs.begin(), info.inputs.end(), open_first) &&
                         std::all_of(info.outputs.begin(), info.outputs.end(), open_first);
  info.max_batch_size = batchable ? options.max_batch_size : 0;
  for (int64_t size : options.preferred_batch_sizes) {
    if (info.max_batch_size == 0) break;  // unbatched: nothing to prefer
    if (size < 1 || size > info.max_batch_size) {
      return InvalidArgumentError("preferred batch size " + std::to_string(size) +
                                  " is outside 1..max_batch_size (" +
                                  std::to_string(info.max_batch_size) + ")");
    }
    info.preferred_batch_sizes.push_back(size);
  }
  std::sort(info.preferred_batch_sizes.begin(), info.preferred_batch_sizes.end());
  info.opset = file_info.opset;
  info.producer = file_info.producer;
  info.parameter_bytes = file_info.parameter_bytes;

  for (const TensorSpec& spec : info.inputs) ort.input_names.push_back(spec.name);
  for (const TensorSpec& spec : info.outputs) ort.output_names.push_back(spec.name);
  for (const std::string& name : ort.input_names) ort.input_name_ptrs.push_back(name.c_str());
  for (const std::string& name : ort.output_names) ort.output_name_ptrs.push_back(name.c_str());
  return session;
}

OnnxSession::~OnnxSession() {
  if (ort_ != nullptr && ort_->session != nullptr) {
    // Its weights were charged to the owner: free them under the same scope's governor (a
    // Free needs none, but any allocation ONNX Runtime makes while tearing down is charged).
    OrtChargeScope scope(options_.governor, options_.owner, counter_);
    ort_.reset();
  }
}

Result<std::vector<HostTensor>> OnnxSession::Run(const std::vector<HostTensor>& inputs) {
  const OrtApi& api = *ort_->api;
  OrtChargeScope scope(options_.governor,
                       options_.run_owner.value != 0 ? options_.run_owner : options_.owner,
                       counter_);
  OrtAllocator* allocator = nullptr;
  PIER_RETURN_IF_ERROR(
      FromOrtStatus(api, api.GetAllocatorWithDefaultOptions(&allocator), "running the graph"));

  std::vector<OrtValue*> input_values(info_.inputs.size(), nullptr);
  std::vector<OrtValue*> output_values(info_.outputs.size(), nullptr);
  struct ReleaseValues {
    const OrtApi& api;
    std::vector<OrtValue*>& a;
    std::vector<OrtValue*>& b;
    ~ReleaseValues() {
      for (OrtValue* v : a) {
        if (v != nullptr) api.ReleaseValue(v);
      }
      for (OrtValue* v : b) {
        if (v != nullptr) api.ReleaseValue(v);
      }
    }
  } release_values{api, input_values, output_values};

  for (size_t i = 0; i < info_.inputs.size(); ++i) {
    const std::string& name = info_.inputs[i].name;
    auto it = std::find_if(inputs.begin(), inputs.end(),
                           [&](const HostTensor& t) { return t.name == name; });
    if (it == inputs.end()) return InvalidArgumentError("input '" + name + "' is missing");
    const HostTensor& tensor = *it;
    const ONNXTensorElementDataType type = ToOnnxType(tensor.type);
    if (tensor.type == ElementType::kBytes) {
      Result<std::vector<std::string_view>> strings =
          SplitBytesElements(tensor.bytes, ElementCount(tensor.shape));
      if (!strings.ok()) {
        return InvalidArgumentError("input '" + name + "': " + strings.status().message());
      }
      PIER_RETURN_IF_ERROR(
          FromOrtStatus(api,
                        api.CreateTensorAsOrtValue(allocator, tensor.shape.data(),
                                                   tensor.shape.size(), type, &input_values[i]),
                        "input '" + name + "'"));
      // Each element with its length: FillStringTensor takes C strings and would cut an
      // element at its first NUL, and BYTES elements are any bytes.
      for (size_t k = 0; k < strings->size(); ++k) {
        const std::string_view s = (*strings)[k];
        char* buffer = nullptr;
        PIER_RETURN_IF_ERROR(FromOrtStatus(
            api, api.GetResizedStringTensorElementBuffer(input_values[i], k, s.size(), &buffer),
            "input '" + name + "'"));
        if (!s.empty()) std::memcpy(buffer, s.data(), s.size());
      }
    } else {
      // Borrowed: ONNX Runtime reads the request's bytes in place.
      PIER_RETURN_IF_ERROR(FromOrtStatus(
          api,
          api.CreateTensorWithDataAsOrtValue(ort_->cpu, const_cast<char*>(tensor.bytes.data()),
                                             tensor.bytes.size(), tensor.shape.data(),
                                             tensor.shape.size(), type, &input_values[i]),
          "input '" + name + "'"));
    }
  }

  OrtRunOptions* run_options = nullptr;
  PIER_RETURN_IF_ERROR(FromOrtStatus(api, api.CreateRunOptions(&run_options), "running the graph"));
  {
    MutexLock lock(run_mutex_);
    running_options_ = run_options;
  }
  Status ran =
      FromOrtStatus(api,
                    api.Run(ort_->session, run_options, ort_->input_name_ptrs.data(),
                            input_values.data(), input_values.size(), ort_->output_name_ptrs.data(),
                            output_values.size(), output_values.data()),
                    "running the graph");
  bool stopped = false;
  {
    MutexLock lock(run_mutex_);
    running_options_ = nullptr;
  }
  // The flag is read back through the options: ONNX Runtime offers no getter, so remember it.
  stopped = stop_requested_.exchange(false);
  api.ReleaseRunOptions(run_options);
  if (!scope.refusal().empty()) {
    return ResourceExhaustedError("the run's working memory does not fit: " + scope.refusal());
  }
  if (stopped && !ran.ok()) return UnavailableError("the run was stopped");
  PIER_RETURN_IF_ERROR(ran);

  std::vector<HostTensor> outputs;
  outputs.reserve(output_values.size());
  for (size_t i = 0; i < output_values.size(); ++i) {
    HostTensor out;
    out.name = info_.outputs[i].name;
    OrtTensorTypeAndShapeInfo* shape_info = nullptr;
    PIER_RETURN_IF_ERROR(FromOrtStatus(
        api, api.GetTensorTypeAndShape(output_values[i], &shape_info), "reading an output"));
    ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    size_t rank = 0;
    Status read = FromOrtStatus(api, api.GetTensorElementType(shape_info, &type), "an output");
    if (read.ok())
      read = FromOrtStatus(api, api.GetDimensionsCount(shape_info, &rank), "an output");
    if (read.ok()) {
      out.shape.resize(rank);
      read = FromOrtStatus(api, api.GetDimensions(shape_info, out.shape.data(), rank), "an output");
    }
    api.ReleaseTensorTypeAndShapeInfo(shape_info);
    PIER_RETURN_IF_ERROR(read);
    std::optional<ElementType> element = FromOnnxType(type);
    if (!element) return InternalError("output '" + out.name + "' has an unknown element type");
    out.type = *element;
    const int64_t count = ElementCount(out.shape);
    if (count < 0) return InternalError("output '" + out.name + "' has a bad shape");
    if (out.type == ElementType::kBytes) {
      size_t total = 0;
      PIER_RETURN_IF_ERROR(
          FromOrtStatus(api, api.GetStringTensorDataLength(output_values[i], &total), "an output"));
      std::string content(total, '\0');
      std::vector<size_t> offsets(static_cast<size_t>(count));
      PIER_RETURN_IF_ERROR(
          FromOrtStatus(api,
                        api.GetStringTensorContent(output_values[i], content.data(), total,
                                                   offsets.data(), offsets.size()),
                        "an output"));
      out.bytes.reserve(total + 4 * offsets.size());
      for (size_t e = 0; e < offsets.size(); ++e) {
        const size_t end = e + 1 < offsets.size() ? offsets[e + 1] : total;
        AppendBytesElement(out.bytes,
                           std::string_view(content.data() + offsets[e], end - offsets[e]));
      }
    } else {
      void* data = nullptr;
      PIER_RETURN_IF_ERROR(
          FromOrtStatus(api, api.GetTensorMutableData(output_values[i], &data), "an output"));
      out.bytes.assign(static_cast<const char*>(data),
                       static_cast<size_t>(count * ElementSize(out.type)));
    }
    outputs.push_back(std::move(out));
  }
  return outputs;
}

void OnnxSession::StopRun() {
  MutexLock lock(run_mutex_);
  if (running_options_ == nullptr) return;
  stop_requested_.store(true);
  if (OrtStatus* set =
          ort_->api->RunOptionsSetTerminate(static_cast<OrtRunOptions*>(running_options_))) {
    ort_->api->ReleaseStatus(set);
  }
}

}  // namespace pier::tensor_models

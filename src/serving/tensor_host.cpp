#include "serving/tensor_host.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <utility>

#include "engine/request.h"
#include "memory/byte_size.h"
#include "tensor_models/input_pad.h"
#include "tensor_models/onnx/onnx_file_info.h"
#include "tensor_models/onnx/onnx_session.h"
#include "tensor_models/tensor_batcher.h"

namespace pier::serving {
namespace {

// The EngineClient of a tensor model: no generation; the batcher's queue as its load.
class TensorEngineClient final : public engine::EngineClient {
 public:
  TensorEngineClient(std::string id, tensor_models::TensorBatcher* batcher)
      : id_(std::move(id)), batcher_(batcher) {}

  Result<std::shared_ptr<engine::RequestHandle>> Submit(engine::Request) override {
    return InvalidArgumentError("model '" + id_ +
                                "' is a tensor (ONNX) model: it serves KServe v2 infer "
                                "(POST /v2/models/" +
                                id_ + "/infer), not text generation");
  }
  void Abort(const std::string&) override {}
  // A model being unloaded: what still waits fails (the batch running finishes).
  void AbortAll(std::string reason) override { batcher_->CancelQueued(reason); }
  engine::EngineStats Stats() const override {
    const TensorRunnerStats b = batcher_->Stats();
    engine::EngineStats s;
    s.waiting = b.queued_items;
    s.running = b.running_items;
    s.steps = b.batches;
    s.requests_finished = b.requests;
    // Its heartbeat is now: a batcher has no step loop to stall, and a batch is bounded.
    s.last_step_at_us = engine::NowUs();
    return s;
  }

 private:
  const std::string id_;
  tensor_models::TensorBatcher* const batcher_;
};

// Zeros for every input at `batch` items (the declared shapes for an unbatched model), open
// dimensions past the batch at their `warmup` size (inputs: {x: {warmup: [...]}}), else 1.
std::vector<HostTensor> ZeroInputs(const TensorModelInfo& info, int64_t batch,
                                   const std::map<std::string, std::vector<int64_t>>& warmup) {
  std::vector<HostTensor> inputs;
  for (const TensorSpec& spec : info.inputs) {
    HostTensor t;
    t.name = spec.name;
    t.type = spec.type;
    t.shape = spec.shape;
    const auto sizes = warmup.find(spec.name);
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (d == 0 && info.max_batch_size > 0) {
        t.shape[d] = batch;
      } else if (t.shape[d] < 0) {
        const bool given =
            sizes != warmup.end() && d < sizes->second.size() && sizes->second[d] > 0;
        t.shape[d] = given ? sizes->second[d] : 1;
      }
    }
    const int64_t count = ElementCount(t.shape);
    if (t.type == ElementType::kBytes) {
      t.bytes.assign(static_cast<size_t>(count) * 4, '\0');  // empty strings
    } else {
      t.bytes.assign(static_cast<size_t>(count * ElementSize(t.type)), '\0');
    }
    inputs.push_back(std::move(t));
  }
  return inputs;
}

bool HasOpenInnerDims(const TensorModelInfo& info) {
  for (const TensorSpec& spec : info.inputs) {
    for (size_t d = 1; d < spec.shape.size(); ++d) {
      if (spec.shape[d] < 0) return true;
    }
    if (info.max_batch_size == 0 && !spec.shape.empty() && spec.shape[0] < 0) return true;
  }
  return false;
}

}  // namespace

struct TensorHost::Executor final : tensor_models::BatchExecutor {
  explicit Executor(tensor_models::OnnxSession& session) : session(session) {}
  Result<std::vector<HostTensor>> Run(std::vector<HostTensor> inputs) override {
    return session.Run(inputs);
  }
  void StopRun() override { session.StopRun(); }
  tensor_models::OnnxSession& session;
};

Result<std::unique_ptr<TensorHost>> TensorHost::Open(const TensorHostOptions& options,
                                                     MemoryGovernor* governor) {
  if (governor == nullptr)
    return InvalidArgumentError("a tensor model needs its device's governor");
  std::unique_ptr<TensorHost> host(new TensorHost());
  host->governor_ = governor;
  host->id_ = options.id;
  const char* kinds[] = {"/weights", "/workspace", "/ort_overhead"};
  OwnerId* slots[] = {&host->weights_owner_, &host->workspace_owner_, &host->overhead_owner_};
  for (int i = 0; i < 3; ++i) {
    const std::string& prefix = options.owner_prefix.empty() ? options.id : options.owner_prefix;
    PIER_ASSIGN_OR_RETURN(*slots[i], governor->AddOwner({.name = prefix + kinds[i],
                                                         .priority = options.owner_priority}));
    host->owners_.push_back(*slots[i]);
  }
  // Admission: the provisional figure is set aside while the session is made; the measured
  // figures replace it.
  PIER_ASSIGN_OR_RETURN(const uint64_t provisional, EstimateBytes(options));
  // Other models' KV lent beyond their minimum comes back first (as for an LLM's load); when
  // it cannot, the Reserve below says why.
  (void)governor->MakeRoom(host->overhead_owner_, provisional, std::chrono::seconds(5));
  MemoryResult<Reservation> provisional_hold =
      governor->Reserve(host->overhead_owner_, provisional);
  if (!provisional_hold.ok()) {
    return ResourceExhaustedError("does not fit: loading it needs about " +
                                  FormatBytes(provisional) + " (" +
                                  provisional_hold.error().ToStatus().message() + ")");
  }
  const uint64_t resident_before = tensor_models::ProcessResidentBytes();
  tensor_models::OnnxSessionOptions session_options;
  session_options.path = options.path;
  session_options.governor = governor;
  session_options.owner = host->weights_owner_;
  session_options.run_owner = host->workspace_owner_;
  session_options.threads = options.threads;
  session_options.max_batch_size = options.max_batch_size;
  std::map<std::string, tensor_models::PadRule> pad_rules;
  for (const auto& [name, input] : options.inputs) {
    if (!input.shape.empty()) session_options.input_shapes[name] = input.shape;
    if (input.pad) pad_rules[name] = *input.pad;
    if (!input.warmup.empty()) host->warmup_[name] = input.warmup;
  }
  session_options.preferred_batch_sizes = options.preferred_batch_sizes;
  Result<std::unique_ptr<tensor_models::OnnxSession>> session =
      tensor_models::OnnxSession::Open(session_options);
  // Its message names the file; the model's name is the caller's to add (the manager does).
  if (!session.ok()) return session.status();
  host->session_ = std::move(*session);
  const TensorModelInfo& info = host->session_->info();
  // Checked against the graph as loaded (with the `shape` overrides), before warm-up.
  PIER_ASSIGN_OR_RETURN(std::vector<tensor_models::InputPad> pads,
                        tensor_models::ResolvePadRules(info, pad_rules));
  for (const auto& [name, sizes] : host->warmup_) {
    auto spec = std::find_if(info.inputs.begin(), info.inputs.end(),
                             [&](const TensorSpec& t) { return t.name == name; });
    if (spec == info.inputs.end()) {
      return InvalidArgumentError("inputs." + name + ".warmup: the model has no input '" + name +
                                  "'");
    }
    if (sizes.size() != spec->shape.size()) {
      return InvalidArgumentError("inputs." + name + ".warmup: " + ShapeText(sizes) + " has " +
                                  std::to_string(sizes.size()) + " dimensions; input '" + name +
                                  "' is " + ShapeText(spec->shape));
    }
  }
  host->memory_.weights_bytes = host->session_->memory().bytes.load();
  PIER_RETURN_IF_ERROR(host->WarmUp());
  const uint64_t resident_after = tensor_models::ProcessResidentBytes();
  host->memory_.resident_delta =
      resident_after > resident_before ? resident_after - resident_before : 0;
  provisional_hold->Release();
  const uint64_t explained = host->memory_.weights_bytes + host->memory_.workspace_peak;
  if (host->memory_.resident_delta > explained) {
    host->memory_.overhead_bytes = host->memory_.resident_delta - explained;
    MemoryResult<ExternalCharge> charge =
        governor->ChargeExternal(host->overhead_owner_, host->memory_.overhead_bytes);
    if (!charge.ok()) {
      return ResourceExhaustedError(
          "does not fit: it holds " + FormatBytes(host->memory_.weights_bytes) +
          " through Pier's allocator, " + FormatBytes(host->memory_.workspace_peak) +
          " of working memory, and " + FormatBytes(host->memory_.overhead_bytes) +
          " that ONNX Runtime allocated itself (weights it loads and folds, graph, threads); " +
          charge.error().ToStatus().message());
    }
    host->overhead_charge_ = std::move(*charge);
  }

  host->executor_ = std::make_unique<Executor>(*host->session_);
  tensor_models::TensorBatcherOptions batcher;
  batcher.max_queue_delay = options.max_queue_delay;
  batcher.adaptive_window = options.adaptive_window;
  if (!pad_rules.empty()) batcher.pads = std::move(pads);
  host->batcher_ =
      std::make_unique<tensor_models::TensorBatcher>(options.id, info, *host->executor_, batcher);
  host->client_ = std::make_unique<TensorEngineClient>(options.id, host->batcher_.get());
  spdlog::info(
      "loaded tensor model {} ({} inputs, {} outputs, opset {}, max_batch_size {}; weights {}, "
      "working memory {}, ONNX Runtime overhead {})",
      options.id, info.inputs.size(), info.outputs.size(), info.opset, info.max_batch_size,
      FormatBytes(host->memory_.weights_bytes), FormatBytes(host->memory_.workspace_peak),
      FormatBytes(host->memory_.overhead_bytes));
  return host;
}

Status TensorHost::WarmUp() {
  const TensorModelInfo& info = session_->info();
  std::vector<int64_t> sizes = info.preferred_batch_sizes;
  if (info.max_batch_size > 0) sizes.push_back(info.max_batch_size);
  if (info.max_batch_size == 0) sizes = {0};
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  const bool open_inner = HasOpenInnerDims(info);
  session_->ResetPeak();
  for (int64_t batch : sizes) {
    Result<std::vector<HostTensor>> outputs = session_->Run(ZeroInputs(info, batch, warmup_));
    if (!outputs.ok()) {
      if (outputs.status().code() == StatusCode::kResourceExhausted) {
        return Status(outputs.status().code(), "warm-up at batch " + std::to_string(batch) + ": " +
                                                   outputs.status().message());
      }
      if (open_inner) {
        spdlog::warn(
            "model {}: warm-up with open dimensions at 1 failed ({}); its first requests warm "
            "it up (set `inputs` shapes to warm it at load)",
            id_, outputs.status().message());
        return Status::Ok();
      }
      return Status(outputs.status().code(), "warm-up at batch " + std::to_string(batch) +
                                                 " failed: " + outputs.status().message());
    }
    if (info.max_batch_size > 0) {
      for (const HostTensor& out : *outputs) {
        if (out.shape.empty() || out.shape[0] != batch) {
          return InvalidArgumentError(
              "output '" + out.name + "' has shape " + ShapeText(out.shape) + " at batch " +
              std::to_string(batch) +
              ": its first dimension does not follow the batch, so requests cannot share a "
              "run; serve it with max_batch_size: 0");
        }
      }
    }
  }
  const uint64_t peak = session_->memory().peak.load();
  memory_.workspace_peak = peak > memory_.weights_bytes ? peak - memory_.weights_bytes : 0;
  memory_.warmed = true;
  // The measured working memory stays set aside, so a later run finds it (none measured: no
  // reservation, which the governor refuses at 0 bytes).
  if (memory_.workspace_peak == 0) return Status::Ok();
  MemoryResult<Reservation> reserved = governor_->Reserve(workspace_owner_, memory_.workspace_peak);
  if (!reserved.ok()) {
    return ResourceExhaustedError("its working memory (" + FormatBytes(memory_.workspace_peak) +
                                  ") does not fit: " + reserved.error().ToStatus().message());
  }
  workspace_reservation_ = std::move(*reserved);
  return Status::Ok();
}

TensorHost::~TensorHost() {
  client_.reset();
  batcher_.reset();
  executor_.reset();
  session_.reset();
  workspace_reservation_.Release();
  overhead_charge_.Release();
  for (OwnerId owner : owners_) {
    if (Status removed = governor_->RemoveOwner(owner); !removed.ok()) {
      spdlog::warn("tensor model owner not removed: {}", removed.ToString());
    }
  }
}

const TensorModelInfo& TensorHost::info() const { return session_->info(); }

Status TensorHost::Submit(TensorRequest request, std::function<void(TensorResult)> done) {
  return batcher_->Submit(std::move(request), std::move(done));
}

TensorRunnerStats TensorHost::Stats() const { return batcher_->Stats(); }

Result<uint64_t> TensorHost::EstimateBytes(const TensorHostOptions& options) {
  PIER_ASSIGN_OR_RETURN(tensor_models::OnnxFileInfo file,
                        tensor_models::ReadOnnxFileInfo(options.path));
  constexpr uint64_t kMargin = uint64_t{32} << 20;
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  // A file may claim initializers of any size (saturated at the largest number): such a
  // claim reads as more than any budget, not as a small number wrapped around.
  if (file.parameter_bytes > (kMax - file.file_bytes - kMargin) / 2) return kMax;
  return 2 * file.parameter_bytes + file.file_bytes + kMargin;
}

}  // namespace pier::serving

#include "serving/model_loader.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

#include "common/mutex.h"
#include "encoder/encoder_info.h"
#include "engine/runner/local_model.h"
#include "model/gguf_file.h"
#include "model/gguf_tokenizer.h"
#include "model/model_info.h"
#include "serving/class_labels.h"
#include "serving/encoder_host.h"
#include "serving/image_input.h"
#include "serving/instance_pool_client.h"
#include "serving/model_host.h"
#include "serving/tensor_front.h"
#include "serving/tensor_host.h"
#include "serving/tensor_instance_pool.h"
#include "serving/worker_client.h"
#include "tensor_models/onnx/onnx_file_info.h"

namespace pier::serving {
namespace {

// The model's `created`: the file's modification time, else now.
int64_t CreatedUnixSeconds(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0) return static_cast<int64_t>(info.st_mtime);
  return static_cast<int64_t>(std::time(nullptr));
}

}  // namespace

std::string ModelIdFromPath(std::string_view path) {
  std::string id = std::filesystem::path(path).filename().string();
  for (std::string_view suffix : {std::string_view(".gguf"), std::string_view(".onnx")}) {
    if (id.size() > suffix.size() && id.ends_with(suffix)) id.resize(id.size() - suffix.size());
  }
  return id;
}

namespace {

// What a ServedModel's pointers point into.
// The workers of one model, for their rehome callbacks (a worker that ends hands its requests
// that had not started to a sibling): `alive` turns false before any worker is destroyed, and
// a callback holds the mutex while it uses a sibling.
struct Siblings {
  explicit Siblings(std::vector<WorkerClient*> all) : workers(std::move(all)) {}
  Mutex mutex;
  bool alive PIER_GUARDED_BY(mutex) = true;
  const std::vector<WorkerClient*> workers;
};

struct ModelParts {
  std::unique_ptr<EncoderHost> encoder;              // an embedding model
  std::vector<std::unique_ptr<TensorHost>> tensors;  // a tensor (ONNX) model's instances
  // A tensor model's TensorRunner over its instances (in process or in workers).
  std::vector<std::unique_ptr<TensorRunner>> tensor_runners;  // one per worker
  std::unique_ptr<TensorRunner> tensor_pool;                  // with several instances
  std::vector<std::unique_ptr<ModelHost>> hosts;
  std::unique_ptr<engine::EngineClient> pool;  // with several instances
  // With worker processes: the front end's own copy of the file (tokenizer and template) and
  // the workers.
  std::unique_ptr<model::GgufFile> file;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::optional<tokenizer::ChatTemplate> chat_template;
  std::vector<std::unique_ptr<WorkerClient>> workers;
  std::vector<std::unique_ptr<placement::Placement>> placements;  // the workers' cores
  std::shared_ptr<Siblings> siblings;
  // A tensor model's image input and labels, in front of its runners (tensor_front.h).
  std::unique_ptr<TensorRunner> tensor_front;
  ~ModelParts() {
    tensor_front.reset();  // its decoding threads hand requests to the runners
    if (siblings != nullptr) {
      MutexLock lock(siblings->mutex);
      siblings->alive = false;
    }
    pool.reset();
    while (!hosts.empty()) hosts.pop_back();  // the last instance loaded goes first
    while (!workers.empty()) workers.pop_back();
    placements.clear();  // after the workers: their cores are free once they are gone
  }
};

// The template of `path` (a model's chat_template setting); errors name the file.
Result<tokenizer::ChatTemplate> ReadChatTemplateFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("chat_template: cannot read " + path);
  std::ostringstream text;
  text << in.rdbuf();
  Result<tokenizer::ChatTemplate> parsed = tokenizer::ChatTemplate::Parse(text.str());
  if (!parsed.ok()) {
    return Status(parsed.status().code(),
                  "chat_template " + path + ": " + parsed.status().message());
  }
  return parsed;
}

// One instance's options as a worker runs them (an elastic KV cache stays elastic: its
// growth above the minimum is lent through the supervisor, worker_client.h).
ModelLoadOptions WorkerInstanceOptions(const ModelLoadOptions& options) {
  ModelLoadOptions one = options;
  one.instances = 1;
  return one;
}

}  // namespace

namespace {

// The model's compute threads: its setting, or every core.
int ThreadsOf(const ModelSettings& settings) {
  if (settings.threads > 0) return settings.threads;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace

ModelHostOptions HostOptionsOf(const ModelLoadOptions& options, const std::string& id) {
  const ModelSettings& s = options.settings;
  ModelHostOptions host_options;
  // The KV cache holds `ctx` positions for all requests together (or kv_max); one request may
  // use at most ctx and the model's trained context of them (the engine's max_request_tokens).
  host_options.model.kv_tokens = s.ctx;
  host_options.model.path = options.path;
  host_options.model.owner_name = id;  // the governor's owners read "<id>/kv" ("<id>#2/kv", ...)
  host_options.model.owner_priority = options.priority;
  host_options.model.threads = ThreadsOf(s);
  host_options.model.kv_dtype = s.kv_dtype;
  host_options.model.weights_dtype = s.weights_dtype;
  host_options.model.kv_policy = s.kv_policy;
  host_options.model.kv_min = s.kv_min;
  host_options.model.kv_max = s.kv_max;
  host_options.engine.max_request_tokens = s.ctx;
  host_options.engine.scheduler.max_batched_tokens = s.max_batched_tokens;
  host_options.engine.scheduler.prefill_chunk_while_decoding = s.prefill_chunk_while_decoding;
  host_options.engine.scheduler.max_seqs = s.max_seqs;
  host_options.engine.scheduler.reserved_share = s.qos_reserve;
  host_options.engine.scheduler.qos = s.qos;
  host_options.engine.stop_steps_for_critical = s.qos_stop_steps;
  host_options.engine.adaptive = {.enabled = s.adaptive_batching,
                                  .min_batched_tokens = s.min_batched_tokens,
                                  .max_prefill_chunk = s.max_prefill_chunk > 0
                                                           ? s.max_prefill_chunk
                                                           : 4 * s.prefill_chunk_while_decoding};
  host_options.max_waiting = s.max_queued;
  host_options.swap_space_bytes = s.swap_space;
  host_options.engine.kv_idle_release =
      std::chrono::milliseconds(static_cast<int64_t>(s.kv_idle_release_seconds * 1000));
  host_options.engine.speculative.method = s.speculative.method;
  host_options.engine.speculative.max_tokens = s.speculative.max_tokens;
  host_options.engine.speculative.ngram_min = s.speculative.ngram_min;
  host_options.engine.speculative.ngram_max = s.speculative.ngram_max;
  host_options.engine.speculative.draft_model = s.speculative.model;
  host_options.engine.speculative.proposer = options.draft_proposer;
  return host_options;
}

namespace {

// Whether the file holds an encoder (embedding) model, by its architecture.
Result<bool> IsEncoderFile(const model::GgufFile& file) {
  PIER_ASSIGN_OR_RETURN(std::string_view arch, file.GetString("general.architecture"));
  return encoder::IsEncoderArchitecture(arch);
}

EncoderHostOptions EncoderOptionsOf(const ModelLoadOptions& options, const std::string& id) {
  EncoderHostOptions e;
  e.path = options.path;
  e.id = id;
  e.owner_priority = options.priority;
  e.threads = ThreadsOf(options.settings);
  e.batch_tokens = options.settings.embed_batch_tokens;
  e.batcher.max_queue_delay = std::chrono::milliseconds(options.settings.max_queue_delay_ms);
  e.batcher.max_batch_texts = options.settings.max_batch_texts;
  e.batcher.adaptive_window = options.settings.adaptive_batch_window;
  return e;
}

// OpenModel for an embedding model: one EncoderHost in this process.
Result<ModelRef> OpenEncoderModel(const ModelLoadOptions& options, DeviceSet& devices,
                                  const std::string& id) {
  if (options.instances != 1) {
    return InvalidArgumentError("model " + id +
                                ": an embedding model runs as one instance (its batcher "
                                "fills the cores); instances must be 1");
  }
  if (!options.chat_template_path.empty()) {
    return InvalidArgumentError("model " + id + ": an embedding model has no chat template");
  }
  if (options.workers) {
    spdlog::info(
        "model {} is an embedding model: it runs in the server process (worker "
        "processes serve LLMs)",
        id);
  }
  auto parts = std::make_shared<ModelParts>();
  PIER_ASSIGN_OR_RETURN(parts->encoder,
                        EncoderHost::Open(EncoderOptionsOf(options, id), &devices.cpu_governor()));
  EncoderHost& host = *parts->encoder;
  auto model = std::make_shared<ServedModel>();
  model->tool_format = options.settings.tool_format;
  model->id = id;
  model->aliases = options.aliases;
  model->created_unix_seconds = CreatedUnixSeconds(options.path);
  model->kind = ModelKind::kEmbed;
  model->embedder = &host;
  model->embedding_dim = host.info().embedding_length;
  model->per_token_embeddings = host.info().pooling == encoder::Pooling::kNone;
  model->max_request_tokens = host.max_text_tokens();
  model->client = &host.client();
  model->instances = {&host.client()};
  model->tokenizer = &host.tokenizer();
  model->governor = &host.governor();
  model->parts = std::move(parts);
  return ModelRef(std::move(model));
}

}  // namespace

bool IsOnnxPath(std::string_view path) { return path.ends_with(".onnx"); }

TensorHostOptions TensorOptionsOf(const ModelLoadOptions& options, const std::string& id) {
  TensorHostOptions t;
  t.path = options.path;
  t.id = id;
  t.owner_priority = options.priority;
  t.threads = ThreadsOf(options.settings);
  t.max_batch_size = options.settings.max_batch_size;
  t.preferred_batch_sizes = options.settings.preferred_batch_sizes;
  t.max_queue_delay = std::chrono::milliseconds(options.settings.max_queue_delay_ms);
  t.adaptive_window = options.settings.adaptive_batch_window;
  t.inputs = options.settings.inputs;
  return t;
}

namespace {

// A tensor model's ServedModel once its instances (`runners`, whose clients are in
// model->instances) are up, in process or in workers: a pool over them when there are several.
Result<ModelRef> PublishTensorModel(const ModelLoadOptions& options, const std::string& id,
                                    const std::string& owner_prefix,
                                    const std::vector<TensorRunner*>& runners,
                                    MemoryGovernor* governor, std::shared_ptr<ModelParts> parts,
                                    std::shared_ptr<ServedModel> model) {
  model->id = id;
  model->aliases = options.aliases;
  model->created_unix_seconds = CreatedUnixSeconds(options.path);
  model->kind = ModelKind::kTensor;
  if (runners.size() > 1) {
    parts->tensor_pool = std::make_unique<TensorInstancePool>(runners);
    parts->pool = std::make_unique<InstancePoolClient>(model->instances);
  }
  model->tensors = runners.size() > 1 ? parts->tensor_pool.get() : runners.front();
  model->client = runners.size() > 1 ? parts->pool.get() : model->instances.front();
  model->governor = governor;
  if (options.settings.preprocess.has_value() || !options.labels.empty()) {
    TensorFrontOptions front;
    front.model = id;
    front.governor = governor;
    front.owner_prefix = owner_prefix;
    front.owner_priority = options.priority;
    const TensorModelInfo& info = model->tensors->info();
    if (options.settings.preprocess.has_value()) {
      PIER_ASSIGN_OR_RETURN(front.image, ResolveImageInput(*options.settings.preprocess, info, id));
    }
    if (!options.labels.empty()) {
      std::map<std::string, std::string> metadata;
      if (options.labels.starts_with("metadata")) {
        PIER_ASSIGN_OR_RETURN(tensor_models::OnnxFileInfo file,
                              tensor_models::ReadOnnxFileInfo(options.path));
        metadata = std::move(file.metadata);
      }
      Result<std::vector<std::string>> labels = ReadClassLabels(options.labels, metadata);
      if (!labels.ok()) return labels.status().WithContext("model " + id);
      PIER_ASSIGN_OR_RETURN(front.labels, AssignClassLabels(std::move(labels).value(), info, id));
    }
    PIER_ASSIGN_OR_RETURN(parts->tensor_front,
                          TensorFront::Create(model->tensors, std::move(front)));
    model->tensors = parts->tensor_front.get();
  }
  model->parts = std::move(parts);
  return ModelRef(std::move(model));
}

// A tensor model served by a worker process: the front end's TensorRunner forwards to it.
class WorkerTensorRunner final : public TensorRunner {
 public:
  explicit WorkerTensorRunner(WorkerClient& worker) : worker_(worker) {}
  const TensorModelInfo& info() const override { return *worker_.tensor_info(); }
  Status Submit(TensorRequest request, std::function<void(TensorResult)> done) override {
    // Checked here too, so a bad request is refused before it crosses to the worker.
    PIER_RETURN_IF_ERROR(CheckTensorRequest(worker_.name(), info(), request));
    return worker_.SubmitTensor(std::move(request), std::move(done));
  }
  TensorRunnerStats Stats() const override { return worker_.TensorStats(); }
  // What the worker measured when it loaded (the latest load, after a restart).
  std::optional<TensorRunnerMemory> Memory() const override { return worker_.tensor_memory(); }

 private:
  WorkerClient& worker_;
};

// OpenModel for a tensor (ONNX) model with workers: one worker process. Its grant starts at
// the provisional estimate and grows to what the worker measured once loaded (it loads under
// what the device's budget has free).
Result<ModelRef> OpenTensorModelInWorker(const ModelLoadOptions& options, DeviceSet& devices,
                                         const std::string& id) {
  auto parts = std::make_shared<ModelParts>();
  MemoryGovernor* governor = &devices.cpu_governor();
  const std::string first_prefix = engine::UniqueOwnerPrefix(*governor, id);
  PIER_ASSIGN_OR_RETURN(const uint64_t provisional,
                        TensorHost::EstimateBytes(TensorOptionsOf(options, id)));
  auto model = std::make_shared<ServedModel>();
  std::vector<TensorRunner*> runners;
  for (int i = 0; i < options.instances; ++i) {
    WorkerOptions worker;
    if (!options.bindings.empty()) {
      PIER_ASSIGN_OR_RETURN(placement::Placer * placer, devices.placer());
      const std::string who = "model " + id + " instance " + std::to_string(i + 1);
      const placement::BindingRequest& request = options.bindings.size() == 1
                                                     ? options.bindings.front()
                                                     : options.bindings.at(static_cast<size_t>(i));
      PIER_ASSIGN_OR_RETURN(std::unique_ptr<placement::Placement> placed,
                            placer->Place(request, ThreadsOf(options.settings), who));
      worker.binding = placed->binding();
      spdlog::info("{}: {}", who, worker.binding.Describe());
      parts->placements.push_back(std::move(placed));
    }
    const GovernorStats stats = governor->Stats();
    worker.load = options;
    worker.instance = i + 1;
    worker.budget_bytes = provisional;
    // What the device's budget has free, less an eighth: the worker measures its own device's
    // capacity a moment later, and other processes move meanwhile.
    const uint64_t free_bytes =
        stats.budget_bytes - std::min(stats.budget_bytes, stats.committed_bytes);
    worker.load_budget_bytes = std::max(provisional, free_bytes - free_bytes / 8);
    worker.device_governor = governor;
    worker.heartbeat_timeout = options.heartbeat_timeout;
    worker.leak_margin_bytes = options.worker_leak_margin_bytes;
    worker.drain_grace = options.worker_drain_grace;
    worker.environment = options.worker_environment;
    PIER_ASSIGN_OR_RETURN(std::unique_ptr<WorkerClient> client,
                          WorkerClient::Start(std::move(worker)));
    parts->tensor_runners.push_back(std::make_unique<WorkerTensorRunner>(*client));
    runners.push_back(parts->tensor_runners.back().get());
    model->instances.push_back(client.get());
    model->workers.push_back(client.get());
    parts->workers.push_back(std::move(client));
  }
  return PublishTensorModel(options, id, first_prefix, runners, governor, std::move(parts),
                            std::move(model));
}

// OpenModel for a tensor (ONNX) model: one TensorHost in this process, on the CPU.
Result<ModelRef> OpenTensorModel(const ModelLoadOptions& options, DeviceSet& devices,
                                 const std::string& id) {
  if (options.device != "cpu") {
    if (!options.device_from_server) {
      return UnsupportedError("model " + id + ": device " + options.device +
                              ": the ONNX Runtime Pier loads has no CUDA execution provider, so "
                              "tensor (ONNX) models run on the CPU (device: cpu)");
    }
    spdlog::info("model {} is a tensor (ONNX) model: it runs on the CPU, not on --device {}", id,
                 options.device);
  }
  if (!options.chat_template_path.empty()) {
    return InvalidArgumentError("model " + id + ": a tensor model has no chat template");
  }
  if (options.workers) return OpenTensorModelInWorker(options, devices, id);
  if (!options.bindings.empty()) {
    return InvalidArgumentError("model " + id +
                                ": cpus and numa_node bind worker processes: they need "
                                "workers: on");
  }
  auto parts = std::make_shared<ModelParts>();
  auto model = std::make_shared<ServedModel>();
  MemoryGovernor* governor = &devices.cpu_governor();
  const std::string first_prefix = engine::UniqueOwnerPrefix(*governor, id);
  std::vector<TensorRunner*> runners;
  // One instance at a time: each admission sees what the previous ones hold. Each names its
  // owners with the first free prefix ("<id>", "<id>#2", ...), so a reload's new version loads
  // beside the old one.
  for (int i = 0; i < options.instances; ++i) {
    TensorHostOptions host_options = TensorOptionsOf(options, id);
    host_options.owner_prefix = engine::UniqueOwnerPrefix(*governor, id);
    PIER_ASSIGN_OR_RETURN(std::unique_ptr<TensorHost> host,
                          TensorHost::Open(host_options, governor));
    runners.push_back(host.get());
    model->instances.push_back(&host->client());
    parts->tensors.push_back(std::move(host));
  }
  return PublishTensorModel(options, id, first_prefix, runners, governor, std::move(parts),
                            std::move(model));
}

}  // namespace

Result<uint64_t> DeviceBytes(const ModelLoadOptions& options) {
  PIER_ASSIGN_OR_RETURN(const uint64_t bytes, GuaranteedBytes(options));
  PIER_ASSIGN_OR_RETURN(const std::string device, EffectiveDevice(options));
  if (device == "cpu" || !options.workers) return bytes;
  return bytes + kGpuWorkerContextBytes * static_cast<uint64_t>(std::max(1, options.instances));
}

Result<std::string> EffectiveDevice(const ModelLoadOptions& options) {
  if (options.device == "cpu" || !options.device_from_server) return options.device;
  if (IsOnnxPath(options.path)) return std::string("cpu");
  PIER_ASSIGN_OR_RETURN(std::unique_ptr<model::GgufFile> file, model::GgufFile::Open(options.path));
  PIER_ASSIGN_OR_RETURN(const bool is_encoder, IsEncoderFile(*file));
  return is_encoder ? std::string("cpu") : options.device;
}

Result<uint64_t> GuaranteedBytes(const ModelLoadOptions& options) {
  if (IsOnnxPath(options.path)) {
    const std::string id = options.id.empty() ? ModelIdFromPath(options.path) : options.id;
    PIER_ASSIGN_OR_RETURN(const uint64_t one,
                          TensorHost::EstimateBytes(TensorOptionsOf(options, id)));
    const uint64_t instances = static_cast<uint64_t>(std::max(1, options.instances));
    return one > std::numeric_limits<uint64_t>::max() / instances
               ? std::numeric_limits<uint64_t>::max()
               : one * instances;
  }
  PIER_ASSIGN_OR_RETURN(std::unique_ptr<model::GgufFile> file, model::GgufFile::Open(options.path));
  const std::string id = options.id.empty() ? ModelIdFromPath(options.path) : options.id;
  PIER_ASSIGN_OR_RETURN(const bool is_encoder, IsEncoderFile(*file));
  if (is_encoder) return EncoderHost::EstimateBytes(EncoderOptionsOf(options, id));
  const ModelLoadOptions one = options.workers ? WorkerInstanceOptions(options) : options;
  engine::LocalModelOptions sized = ResolvedModelOptions(HostOptionsOf(one, id));
  // On a GPU: what the CUDA runner allocates there (its weight block, workspaces and graphs).
  sized.device = options.device == "cpu" ? DeviceKind::kCpu : DeviceKind::kCuda;
  PIER_ASSIGN_OR_RETURN(engine::MemoryEstimate estimate, engine::EstimateMemory(*file, sized));
  return estimate.total_bytes() * static_cast<uint64_t>(std::max(1, options.instances));
}

namespace {

// The GPU (or MIG instance) a GPU model's workers run on, as the server keeps it, after
// admission: the grants of every instance must fit what its books have free, refused before a
// worker starts, with the breakdown and what would help.
Result<WorkerGpu> AdmitOnGpu(const ModelLoadOptions& options, const ModelLoadOptions& one,
                             const std::string& id, uint64_t grant, const model::GgufFile& file,
                             DeviceSet& devices) {
  PIER_ASSIGN_OR_RETURN(WorkerGpu gpu, devices.WorkerGpuFor(options.device));
  const GovernorStats stats = gpu.governor->Stats();
  const uint64_t free_bytes =
      stats.budget_bytes - std::min(stats.budget_bytes, stats.committed_bytes);
  const uint64_t needed =
      (grant + kGpuWorkerContextBytes) * static_cast<uint64_t>(options.instances);
  if (needed <= free_bytes) return gpu;
  engine::LocalModelOptions sized = ResolvedModelOptions(HostOptionsOf(one, id));
  sized.device = DeviceKind::kCuda;
  PIER_ASSIGN_OR_RETURN(engine::MemoryEstimate estimate, engine::EstimateMemory(file, sized));
  const std::string advice =
      estimate.weight_bytes() > free_bytes
          ? "its weights alone do not fit: a smaller quantization, or another GPU"
          : "lower ctx or kv_min, or unload a model on this GPU";
  return ResourceExhaustedError(
      "model " + id + " needs " + FormatBytes(needed) + " on " + stats.device + ": " +
      std::to_string(options.instances) + " instance(s) of " + FormatBytes(grant) + " and " +
      FormatBytes(kGpuWorkerContextBytes) +
      " for its process's CUDA "
      "context, each " +
      estimate.Breakdown() + "; its budget of " + FormatBytes(stats.budget_bytes) + " has " +
      FormatBytes(free_bytes) + " free; " + advice);
}

// A GPU worker sees only its device: CUDA_VISIBLE_DEVICES (a UUID) in PCI bus order, replacing
// what a placement set from the GPU's index.
void SeeOnlyGpu(const std::string& visible, placement::Binding& binding) {
  binding.gpu = visible;
  std::erase_if(binding.environment, [](const std::string& e) {
    return e.starts_with("CUDA_VISIBLE_DEVICES=") || e.starts_with("CUDA_DEVICE_ORDER=");
  });
  binding.environment.push_back("CUDA_DEVICE_ORDER=PCI_BUS_ID");
  binding.environment.push_back("CUDA_VISIBLE_DEVICES=" + visible);
}

// What a GPU worker holds on the host, which its resident memory is checked against (its grant
// is GPU memory): the mapped file (read while uploading), the CUDA runtime and context (about
// 1 GiB), pinned staging of logits for the largest step and the decode graphs, swap space.
uint64_t GpuWorkerHostBytes(const ModelLoadOptions& one, const model::GgufFile& file) {
  uint64_t vocab = 0;
  if (Result<model::ModelInfo> info = model::ReadModelInfo(file); info.ok()) {
    vocab = static_cast<uint64_t>(std::max<int64_t>(info->vocab_size, 0));
  }
  const auto logit_rows =
      static_cast<uint64_t>(std::min(one.settings.max_seqs, one.settings.max_batched_tokens) + 64);
  return file.file_size() + (uint64_t{1} << 30) + logit_rows * vocab * sizeof(float) +
         one.settings.swap_space;
}

// OpenModel with every instance in its own worker process.
Result<ModelRef> OpenModelInWorkers(const ModelLoadOptions& options, DeviceSet& devices,
                                    const std::string& id) {
  auto parts = std::make_shared<ModelParts>();
  PIER_ASSIGN_OR_RETURN(parts->file, model::GgufFile::Open(options.path));
  PIER_ASSIGN_OR_RETURN(parts->tokenizer, model::LoadTokenizer(*parts->file));
  Result<tokenizer::ChatTemplate> chat_template =
      options.chat_template_path.empty() ? model::LoadChatTemplate(*parts->file)
                                         : ReadChatTemplateFile(options.chat_template_path);
  if (!chat_template.ok() && !options.chat_template_path.empty()) return chat_template.status();
  if (chat_template.ok()) {
    parts->chat_template = std::move(chat_template).value();
  } else {
    spdlog::warn("model {} has no chat template ({}); /v1/chat/completions will refuse it", id,
                 chat_template.status().message());
  }
  ModelLoadOptions one = WorkerInstanceOptions(options);
  one.id = id;
  PIER_ASSIGN_OR_RETURN(const uint64_t grant, GuaranteedBytes(one));
  // On a GPU: the server keeps that GPU's books (no CUDA context here); each worker sees only
  // its GPU (or MIG instance), as cuda:0.
  MemoryGovernor* device_governor = &devices.cpu_governor();
  std::vector<placement::BindingRequest> bindings = options.bindings;
  std::optional<WorkerGpu> gpu;
  if (options.device != "cpu") {
    PIER_ASSIGN_OR_RETURN(gpu, AdmitOnGpu(options, one, id, grant, *parts->file, devices));
    device_governor = gpu->governor;
    for (placement::BindingRequest& binding : bindings) {
      if (!binding.gpu.empty() && binding.gpu != gpu->visible &&
          binding.gpu != std::to_string(gpu->index)) {
        return InvalidArgumentError("model " + id + ": device " + options.device +
                                    " places it on GPU " + gpu->visible +
                                    ", but its gpu: binding names " + binding.gpu +
                                    " (leave gpu: out: device: picks the GPU)");
      }
      // The GPU by index for the Placer's locality (a MIG instance's: its parent's); the
      // worker's CUDA_VISIBLE_DEVICES is set to the exact device below.
      binding.gpu = std::to_string(gpu->index);
    }
    one.device = "cuda:0";
  }
  auto model = std::make_shared<ServedModel>();
  model->tool_format = options.settings.tool_format;
  model->id = id;
  model->aliases = options.aliases;
  model->created_unix_seconds = CreatedUnixSeconds(options.path);
  placement::Placer* placer = nullptr;
  if (!bindings.empty()) {
    PIER_ASSIGN_OR_RETURN(placer, devices.placer());
  }
  for (int i = 0; i < options.instances; ++i) {
    WorkerOptions worker;
    if (placer != nullptr) {
      const placement::BindingRequest& request =
          bindings.size() == 1 ? bindings.front() : bindings.at(static_cast<size_t>(i));
      const std::string who = "model " + id + " instance " + std::to_string(i + 1);
      PIER_ASSIGN_OR_RETURN(std::unique_ptr<placement::Placement> placed,
                            placer->Place(request, ThreadsOf(options.settings), who));
      worker.binding = placed->binding();
      spdlog::info("{}: {}", who, worker.binding.Describe());
      for (const std::string& warning : worker.binding.warnings) {
        spdlog::warn("{}: {}", who, warning);
      }
      parts->placements.push_back(std::move(placed));
    }
    if (gpu.has_value()) SeeOnlyGpu(gpu->visible, worker.binding);
    worker.load = one;
    worker.instance = i + 1;
    worker.budget_bytes = grant;
    worker.device_governor = device_governor;
    worker.heartbeat_timeout = options.heartbeat_timeout;
    worker.leak_margin_bytes = options.worker_leak_margin_bytes;
    if (gpu.has_value()) {
      worker.host_allowance_bytes = GpuWorkerHostBytes(one, *parts->file);
      worker.device_overhead_bytes = kGpuWorkerContextBytes;
    }
    worker.device_health = options.device_health;
    worker.drain_grace = options.worker_drain_grace;
    worker.environment = options.worker_environment;
    PIER_ASSIGN_OR_RETURN(std::unique_ptr<WorkerClient> client,
                          WorkerClient::Start(std::move(worker)));
    const int64_t limit = client->max_request_tokens();
    model->max_request_tokens = i == 0 ? limit : std::min(model->max_request_tokens, limit);
    model->instances.push_back(client.get());
    model->workers.push_back(client.get());
    parts->workers.push_back(std::move(client));
  }
  if (parts->workers.size() > 1) {
    parts->pool = std::make_unique<InstancePoolClient>(model->instances);
    // A worker that ends hands its requests that had not started to the first sibling that
    // serves now (least loaded first), instead of keeping them for its restart.
    parts->siblings = std::make_shared<Siblings>(model->workers);
    for (WorkerClient* self : model->workers) {
      std::weak_ptr<Siblings> weak = parts->siblings;
      self->SetRehome([weak, self](const engine::Request& request,
                                   const std::shared_ptr<engine::RequestHandle>& handle) {
        std::shared_ptr<Siblings> siblings = weak.lock();
        if (siblings == nullptr) return false;
        MutexLock lock(siblings->mutex);
        if (!siblings->alive) return false;
        std::vector<WorkerClient*> order;
        for (WorkerClient* w : siblings->workers) {
          if (w != self && w->Serving()) order.push_back(w);
        }
        std::stable_sort(order.begin(), order.end(), [](WorkerClient* a, WorkerClient* b) {
          const engine::EngineStats sa = a->Stats(), sb = b->Stats();
          return sa.running + sa.waiting < sb.running + sb.waiting;
        });
        for (WorkerClient* w : order) {
          if (w->Adopt(request, handle)) return true;
        }
        return false;
      });
    }
  }
  model->client = parts->pool != nullptr ? parts->pool.get() : parts->workers.front().get();
  model->tokenizer = parts->tokenizer.get();
  model->chat_template = parts->chat_template ? &*parts->chat_template : nullptr;
  model->governor = device_governor;
  model->parts = std::move(parts);
  return ModelRef(std::move(model));
}

}  // namespace

Result<ModelRef> OpenModel(const ModelLoadOptions& options, DeviceSet& devices) {
  const std::string id = options.id.empty() ? ModelIdFromPath(options.path) : options.id;
  if (options.instances < 1) return InvalidArgumentError("model " + id + ": instances < 1");
  if (IsOnnxPath(options.path)) return OpenTensorModel(options, devices, id);
  // (preprocess, like the other tensor-model keys, may be a server-wide default: GGUF models
  // ignore it; labels is a model entry's own key.)
  if (!options.labels.empty()) {
    return InvalidArgumentError("model " + id + ": labels is for tensor (ONNX) models; " +
                                options.path + " is a GGUF model");
  }
  {
    PIER_ASSIGN_OR_RETURN(std::unique_ptr<model::GgufFile> file,
                          model::GgufFile::Open(options.path));
    PIER_ASSIGN_OR_RETURN(const bool is_encoder, IsEncoderFile(*file));
    if (is_encoder && options.device != "cpu") {
      if (!options.device_from_server) {
        return UnsupportedError("model " + id + ": embedding models run on the CPU (device: cpu)");
      }
      spdlog::info("model {} is an embedding model: it runs on the CPU, not on --device {}", id,
                   options.device);
    }
    if (is_encoder) return OpenEncoderModel(options, devices, id);
  }
  if (options.settings.speculative.method == engine::SpeculativeMethod::kDraft) {
    // The draft is asked from the target's engine thread: both engines live in this process.
    if (options.workers) {
      return UnsupportedError("model " + id +
                              ": speculative method draft runs the draft in the "
                              "server's process, and this model runs in worker processes "
                              "(workers: on); use method: ngram, or workers: off");
    }
    if (options.draft_proposer == nullptr) {
      return FailedPreconditionError(
          "model " + id + ": its speculative draft model " + options.settings.speculative.model +
          " is not loaded (list it before " + id + " in models:, load: on_start)");
    }
  }
  // Workers first: a GPU served by workers is never opened in this process.
  if (options.workers) return OpenModelInWorkers(options, devices, id);
  PIER_ASSIGN_OR_RETURN(MemoryGovernor * governor, devices.GovernorFor(options.device));
  if (!options.bindings.empty()) {
    return InvalidArgumentError("model " + id +
                                ": cpus, numa_node and gpu bind worker processes: they need "
                                "workers: on");
  }
  ModelHostOptions host_options = HostOptionsOf(options, id);
  host_options.swap_pool = &devices.swap_pool();
  // Every model on the device shares one fair-share ledger: a tenant's tokens on one model
  // count against its share on the others.
  host_options.engine.scheduler.fair_share_ledger = devices.fair_share_ledger();
  spdlog::info("loading {} as {} ({} threads, KV cache {} {})", options.path, id,
               host_options.model.threads,
               options.settings.kv_policy == engine::KvPolicy::kElastic ? "elastic, up to" : "of",
               options.settings.kv_max.is_set() ? options.settings.kv_max.ToString()
                                                : std::to_string(options.settings.ctx) + " tokens");
  if (options.instances < 1) return InvalidArgumentError("model " + id + ": instances < 1");
  // One instance at a time: each admission sees what the previous ones hold.
  auto parts = std::make_shared<ModelParts>();
  if (!options.chat_template_path.empty()) {
    PIER_ASSIGN_OR_RETURN(parts->chat_template, ReadChatTemplateFile(options.chat_template_path));
  }
  for (int i = 0; i < options.instances; ++i) {
    PIER_ASSIGN_OR_RETURN(std::unique_ptr<ModelHost> host, ModelHost::Open(host_options, governor));
    parts->hosts.push_back(std::move(host));
  }
  ModelHost& first = *parts->hosts.front();
  if (first.chat_template() == nullptr && !parts->chat_template.has_value()) {
    spdlog::warn("model {} has no chat template ({}); /v1/chat/completions will refuse it", id,
                 first.chat_template_error());
  }
  auto model = std::make_shared<ServedModel>();
  model->tool_format = options.settings.tool_format;
  model->id = id;
  model->aliases = options.aliases;
  model->created_unix_seconds = CreatedUnixSeconds(options.path);
  model->max_request_tokens = first.max_request_tokens();
  for (const auto& host : parts->hosts) {
    model->instances.push_back(&host->client());
    model->max_request_tokens = std::min(model->max_request_tokens, host->max_request_tokens());
  }
  if (parts->hosts.size() > 1) parts->pool = std::make_unique<InstancePoolClient>(model->instances);
  model->client = parts->pool != nullptr ? parts->pool.get() : &first.client();
  model->tokenizer = &first.tokenizer();
  model->chat_template =
      parts->chat_template.has_value() ? &*parts->chat_template : first.chat_template();
  model->governor = &first.model().governor();
  model->parts = std::move(parts);
  return ModelRef(std::move(model));
}

}  // namespace pier::serving

#include "serving/pipeline_set.h"

#include <mutex>

#include "serving/embedder.h"
#include "serving/tensor_runner.h"
#include "tensor_models/onnx/onnx_file_info.h"

namespace pier::serving {

pipelines::ModelResolver RegistryModels(const ModelRegistry* registry,
                                        std::function<std::string(const std::string& id)> path_of,
                                        std::shared_ptr<const std::atomic<bool>> request_loads) {
  // An ONNX graph's metadata is read from its file once per path.
  struct MetadataCache {
    std::mutex mutex;
    std::map<std::string, std::map<std::string, std::string>> by_path;
  };
  auto cache = std::make_shared<MetadataCache>();
  return [registry, path_of, cache,
          request_loads](std::string_view name) -> Result<pipelines::ModelAccess> {
    Result<ModelRef> resolved = registry->Resolve(name);
    if (!resolved.ok()) {
      if (resolved.status().code() == StatusCode::kUnavailable && request_loads != nullptr &&
          request_loads->load()) {
        Result<ModelEntry> entry = registry->Lookup(name);
        if (entry.ok() && entry->load == LoadPolicy::kOnDemand &&
            entry->state == ModelState::kUnloaded && registry->RequestLoad(entry->id)) {
          return UnavailableError(resolved.status().message() +
                                  "; its load has been requested: retry when it is ready");
        }
      }
      return resolved.status();
    }
    ModelRef model = std::move(resolved).value();
    pipelines::ModelAccess access;
    access.id = model->id;
    access.keep = model;
    if (model->kind == ModelKind::kTensor && model->tensors != nullptr) {
      access.kind = pipelines::ModelAccess::Kind::kTensor;
      access.info = &model->tensors->info();
      TensorRunner* runner = model->tensors;
      access.submit = [runner, model](TensorRequest request,
                                      std::function<void(TensorResult)> done) {
        return runner->Submit(std::move(request), std::move(done));
      };
      const std::string path = path_of ? path_of(model->id) : std::string();
      access.metadata = [cache, path, id = model->id](std::string_view key) -> Result<std::string> {
        if (path.empty()) return NotFoundError("the file of model '" + id + "' is not known");
        std::lock_guard<std::mutex> lock(cache->mutex);
        auto it = cache->by_path.find(path);
        if (it == cache->by_path.end()) {
          PIER_ASSIGN_OR_RETURN(tensor_models::OnnxFileInfo info,
                                tensor_models::ReadOnnxFileInfo(path));
          it = cache->by_path.emplace(path, std::move(info.metadata)).first;
        }
        auto entry = it->second.find(std::string(key));
        if (entry == it->second.end()) {
          return NotFoundError("model '" + id + "' has no metadata entry '" + std::string(key) +
                               "'");
        }
        return entry->second;
      };
    } else if (model->kind == ModelKind::kEmbed && model->embedder != nullptr) {
      access.kind = pipelines::ModelAccess::Kind::kEmbed;
      access.tokenizer = model->tokenizer;
      access.max_request_tokens = model->max_request_tokens;
      Embedder* embedder = model->embedder;
      access.embed = [embedder, model](EmbedRequest request,
                                       std::function<void(EmbedResult)> done) {
        return embedder->Submit(std::move(request), std::move(done));
      };
    } else if (model->kind == ModelKind::kGenerate && model->client != nullptr) {
      access.kind = pipelines::ModelAccess::Kind::kGenerate;
      access.client = model->client;
      access.tokenizer = model->tokenizer;
      access.chat_template = model->chat_template;
      access.max_request_tokens = model->max_request_tokens;
    }
    return access;
  };
}

Result<std::unique_ptr<PipelineSet>> PipelineSet::Create(
    std::vector<pipelines::PipelineSpec> specs, const ModelRegistry* registry,
    MemoryGovernor* governor, std::function<std::string(const std::string& id)> path_of) {
  auto set = std::unique_ptr<PipelineSet>(new PipelineSet());
  // Building looks at the models as they are; only requests ask for loads.
  auto request_loads = std::make_shared<std::atomic<bool>>(false);
  pipelines::ModelResolver models = RegistryModels(registry, std::move(path_of), request_loads);
  for (pipelines::PipelineSpec& spec : specs) {
    if (Result<ModelEntry> model = registry->Lookup(spec.name); model.ok()) {
      return InvalidArgumentError(
          spec.source + ".name: '" + spec.name + "' is already a model's name" +
          (model->id == spec.name ? "" : " (an alias of " + model->id + ")") +
          "; pipelines and models share one namespace");
    }
    PIER_ASSIGN_OR_RETURN(std::shared_ptr<pipelines::Pipeline> pipeline,
                          pipelines::Pipeline::Create(std::move(spec), {governor, models}));
    set->pipelines_.push_back(std::move(pipeline));
  }
  request_loads->store(true);
  return set;
}

PipelineSet::~PipelineSet() { StopAll(); }

std::shared_ptr<pipelines::Pipeline> PipelineSet::Find(std::string_view name) const {
  for (const auto& pipeline : pipelines_) {
    if (pipeline->spec().name == name) return pipeline;
  }
  return nullptr;
}

void PipelineSet::StopAll() {
  for (const auto& pipeline : pipelines_) pipeline->Stop();
}

}  // namespace pier::serving

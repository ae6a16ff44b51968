#include "api/kserve/tensor_fallback.h"

#include <algorithm>

#include "api/kserve/kserve_api.h"
#include "serving/tensor_runner.h"

namespace pier::api {
namespace {

// Whether `fallback` takes what `primary` takes: the same inputs by name and type.
bool SameInputs(const serving::TensorModelInfo& primary, const serving::TensorModelInfo& fallback) {
  if (primary.inputs.size() != fallback.inputs.size()) return false;
  for (const TensorSpec& p : primary.inputs) {
    auto it = std::find_if(fallback.inputs.begin(), fallback.inputs.end(),
                           [&](const TensorSpec& f) { return f.name == p.name; });
    if (it == fallback.inputs.end() || it->type != p.type) return false;
  }
  return true;
}

}  // namespace

bool FallbackAllowed(std::optional<std::string_view> no_fallback) {
  return !no_fallback.has_value() || *no_fallback == "0" || *no_fallback == "false";
}

serving::ModelRef ChooseTensorModel(const TensorFallbackContext& context, bool allowed,
                                    const serving::ModelRef& primary, int priority,
                                    const Principal& principal, std::string* diverted_from) {
  if (!allowed || !context.route_of || context.fallback_switch == nullptr ||
      primary->tensors == nullptr) {
    return primary;
  }
  const std::optional<serving::FallbackRoute> route = context.route_of(primary->id);
  if (!route.has_value() || route->model.empty()) return primary;
  const serving::TensorModelInfo& info = primary->tensors->info();
  const serving::TensorRunnerStats stats = primary->tensors->Stats();
  const double capacity = static_cast<double>(std::max<int64_t>(1, info.max_batch_size) *
                                              std::max<size_t>(1, primary->instances.size()));
  const double load =
      static_cast<double>(stats.queued_images + stats.queued_items + stats.running_items) /
      capacity;
  const double batch_ms =
      stats.batches > 0 ? stats.compute_seconds.sum * 1e3 / static_cast<double>(stats.batches) : 0;
  const double wait_ms = static_cast<double>(stats.queued_items) / capacity * batch_ms;
  const engine::Priority level = ClassOfBatcherPriority(priority);
  const std::optional<std::string_view> reason =
      context.fallback_switch->Divert(primary->id, route->when, load, wait_ms, level);
  if (!reason.has_value()) return primary;
  const std::string class_name(engine::PriorityName(level));
  Result<serving::ModelEntry> fallback = context.registry->Lookup(route->model);
  if (!fallback.ok() || fallback->state != serving::ModelState::kReady ||
      fallback->model == nullptr || fallback->model->tensors == nullptr ||
      !SameInputs(info, fallback->model->tensors->info())) {
    if (context.metrics != nullptr) {
      context.metrics->RecordQosOutcome(primary->id, principal.tenant, class_name,
                                        "fallback_unavailable");
    }
    return primary;
  }
  if (context.metrics != nullptr) {
    context.metrics->RecordQosOutcome(primary->id, principal.tenant, class_name,
                                      "fallback_" + std::string(*reason));
  }
  *diverted_from = primary->id;
  return fallback->model;
}

}  // namespace pier::api

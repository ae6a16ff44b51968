#include "serving/worker_spec.h"

#include <nlohmann/json.hpp>
#include <string>

#include "device/device_name.h"

namespace pier::serving {

ipc::proto::LoadSpec ToLoadSpec(const ModelLoadOptions& o, int instance, uint64_t budget_bytes) {
  ipc::proto::LoadSpec spec;
  spec.set_path(o.path);
  spec.set_id(o.id);
  spec.set_instance(instance);
  spec.set_priority(o.priority);
  if (o.device != "cpu") spec.set_device(o.device);
  spec.set_settings_json(ModelSettingsToJson(o.settings).dump());
  spec.set_budget_bytes(budget_bytes);
  return spec;
}

Result<ModelLoadOptions> FromLoadSpec(const ipc::proto::LoadSpec& spec) {
  ModelLoadOptions o;
  o.path = spec.path();
  o.id = spec.id();
  o.priority = spec.priority();
  o.instances = 1;
  if (o.path.empty()) return InvalidArgumentError("worker load spec for " + o.id + ": no path");
  if (!spec.device().empty()) {
    if (spec.device() != "cpu" && CudaOrdinalOf(spec.device()) < 0) {
      return InvalidArgumentError("LoadSpec: device '" + spec.device() + "' is not cpu or cuda:N");
    }
    o.device = spec.device();
  }
  const std::string& text = spec.settings_json().empty() ? "{}" : spec.settings_json();
  const nlohmann::json settings = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (settings.is_discarded()) {
    return InvalidArgumentError("worker load spec for " + o.id + ": settings are not JSON");
  }
  PIER_ASSIGN_OR_RETURN(o.settings,
                        ModelSettingsFromJson(settings, "worker load spec for " + o.id));
  return o;
}

}  // namespace pier::serving

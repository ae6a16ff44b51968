// /admin/models' "devices": each device's budget split by owner, as the web console draws it
// (issue #47): every governor owner with its model and part (weights, workspace, kv, ...), its
// committed bytes and the elastic KV above its lease's minimum (memory lent to it that the
// governor may take back for another model), the reserve, what is free, the pressure figures,
// and NVML's readings for a GPU when there are any. The governor's own figures: the owners'
// committed bytes are the ones each model lists under pier.memory.owners.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "api/admin/admin_routes.h"
#include "engine/runner/local_model.h"

namespace pier::api {
namespace {

using Json = nlohmann::ordered_json;

// The part of an owner's name after its model: "chat/kv" -> "kv", "chat#2/weights" ->
// "weights"; a name without a slash is its own part ("other").
std::string OwnerPart(std::string_view owner) {
  const size_t slash = owner.rfind('/');
  return slash == std::string_view::npos ? "other" : std::string(owner.substr(slash + 1));
}

// NVML's reading of a device's GPU, when the telemetry has one: a governor named "cuda:N ..."
// is GPU N as a whole, one named "MIG-<uuid> on cuda:N ..." that MIG instance.
Json GpuReadingJson(const metrics::GpuTelemetry* telemetry, std::string_view device) {
  if (telemetry == nullptr) return nullptr;
  const bool mig = device.starts_with("MIG-");
  if (!mig && !device.starts_with("cuda:")) return nullptr;
  const std::string_view mig_uuid = device.substr(0, device.find(' '));
  const unsigned index =
      mig ? 0 : static_cast<unsigned>(std::atoi(std::string(device.substr(5)).c_str()));
  const metrics::GpuTelemetrySnapshot snapshot = telemetry->Snapshot();
  if (!snapshot.available) return nullptr;
  for (const metrics::GpuReading& r : snapshot.gpus) {
    const bool match = mig ? r.uuid == mig_uuid : (r.gpu == index && r.mig < 0);
    if (!match) continue;
    auto optional = [](const auto& value) {
      return value.has_value() ? Json(*value) : Json(nullptr);
    };
    return {{"name", r.name},
            {"uuid", r.uuid},
            {"utilization_percent",
             r.utilization.has_value() ? Json(*r.utilization * 100.0) : Json(nullptr)},
            {"memory_used_bytes", optional(r.memory_used_bytes)},
            {"memory_total_bytes", optional(r.memory_total_bytes)},
            {"temperature_c", optional(r.temperature_celsius)},
            {"power_watts", optional(r.power_watts)}};
  }
  return nullptr;
}

}  // namespace

nlohmann::ordered_json DeviceDetail(const MemoryGovernor& governor,
                                    const metrics::GpuTelemetry* telemetry) {
  const GovernorStats g = governor.Stats();
  // Elastic KV above each lease's minimum, by owner.
  std::map<OwnerId, uint64_t> elastic;
  uint64_t lent = 0;
  for (const LeaseStats& l : g.leases) {
    const uint64_t above = serving::LentBytes(l);
    elastic[l.owner] += above;
    lent += above;
  }
  Json owners = Json::array();
  for (const OwnerStats& o : g.owners) {
    const auto it = elastic.find(o.id);
    owners.push_back({{"owner", o.name},
                      {"model", engine::OwnerModelName(o.name)},
                      {"part", OwnerPart(o.name)},
                      {"committed_bytes", o.committed_bytes},
                      {"used_bytes", o.allocated_bytes},
                      {"guaranteed_bytes", o.guaranteed_bytes},
                      {"elastic_bytes", it == elastic.end() ? 0 : it->second}});
  }
  Json device{
      {"name", g.device},
      {"kind", std::string(DeviceKindName(governor.device().kind()))},
      {"capacity_bytes", g.capacity_bytes},
      {"budget_bytes", g.budget_bytes},
      {"reserve_bytes", g.reserve_bytes},
      {"committed_bytes", g.committed_bytes},
      {"free_bytes", g.budget_bytes > g.committed_bytes ? g.budget_bytes - g.committed_bytes : 0},
      {"pressure_index", serving::PressureIndex(g)},
      {"waiting_allocations", g.waiting_allocations},
      {"lent_bytes", lent},
      {"owners", std::move(owners)}};
  if (Json gpu = GpuReadingJson(telemetry, g.device); !gpu.is_null())
    device["gpu"] = std::move(gpu);
  return device;
}

}  // namespace pier::api

// GET /admin/qos (issue #16): the live QoS state of every loaded text-generation model -- its
// queue per class with the predicted wait of a new request of each class, the drain rate, the
// top class's reserve and its use, deadlines expired or delayed, and each tenant's fair share
// (weight, virtual time against the clock, live sequences, tokens) -- with the classes'
// configuration. Admin-gated like the other /admin routes.
#include <nlohmann/json.hpp>

#include "api/admin/admin_routes.h"

namespace pier::api {
namespace {

using Json = nlohmann::ordered_json;

constexpr engine::Priority kClasses[] = {engine::Priority::kCritical, engine::Priority::kHigh,
                                         engine::Priority::kNormal, engine::Priority::kLow};

Json ClassConfig(const serving::ClassQueueLimits& limits, const serving::ClassSloTargets& slo) {
  Json classes = Json::object();
  for (engine::Priority p : kClasses) {
    const auto c = static_cast<size_t>(p);
    classes[std::string(engine::PriorityName(p))] = {
        {"max_queue_ms", limits.max_queue_ms[c]},
        {"deadline_action", limits.delay[c] ? "delay" : "reject"},
        {"ttft_target_ms", slo.ttft_ms[c]},
        {"tpot_target_ms", slo.tpot_ms[c]}};
  }
  return classes;
}

Json ModelQos(const engine::EngineStats& s) {
  Json queue = Json::object();
  for (engine::Priority p : kClasses) {
    const std::optional<double> wait = serving::PredictQueueWaitMs(s, p);
    queue[std::string(engine::PriorityName(p))] = {
        {"waiting", s.waiting_by_class[static_cast<size_t>(p)]},
        {"predicted_wait_ms", wait.has_value() ? Json(*wait) : Json(nullptr)}};
  }
  Json clocks = Json::object();
  for (engine::Priority p : kClasses) {
    clocks[std::string(engine::PriorityName(p))] = s.fair_share_clocks[static_cast<size_t>(p)];
  }
  Json tenants = Json::array();
  for (const engine::TenantShare& t : s.tenants) {
    tenants.push_back(
        {{"tenant", t.tenant},
         {"class", engine::PriorityName(t.priority)},
         {"weight", t.weight},
         {"virtual_time", t.virtual_time},
         {"ahead_of_clock", t.virtual_time - s.fair_share_clocks[static_cast<size_t>(t.priority)]},
         {"waiting", t.waiting},
         {"live_sequences", t.live_sequences},
         {"tokens", t.tokens}});
  }
  return {{"running", s.running},
          {"max_seqs", s.max_seqs},
          {"queue", std::move(queue)},
          {"admissions_per_s", s.admissions_per_s},
          {"queue_expired", s.queue_expired},
          {"queue_delayed", s.queue_delayed},
          {"steps_stopped_early", s.steps_stopped_early},
          {"reserve",
           {{"slots", s.reserved_seqs},
            {"tokens", s.reserved_tokens},
            {"kv_blocks", s.reserved_blocks},
            {"critical_running", s.running_critical}}},
          {"fair_share_clocks", std::move(clocks)},
          {"tenants", std::move(tenants)}};
}

}  // namespace

HttpResponse AdminRoutes::AdminQos(const HttpRequest& request) {
  if (auto denied = RequireAdmin(request)) return std::move(*denied);
  Json models = Json::array();
  for (const serving::ModelEntry& entry : registry_->Snapshot()) {
    if (entry.model == nullptr || entry.model->kind != serving::ModelKind::kGenerate ||
        entry.model->client == nullptr) {
      continue;
    }
    Json model = ModelQos(entry.model->client->Stats());
    model["model"] = entry.id;
    models.push_back(std::move(model));
  }
  Json body = {{"qos", options_.qos ? "on" : "off"},
               {"reserve_share", options_.qos_reserve},
               {"stop_steps", options_.qos_stop_steps ? "on" : "off"},
               {"classes", ClassConfig(options_.class_max_queue, options_.class_slo)},
               {"models", std::move(models)}};
  HttpResponse response;
  response.status = 200;
  response.content_type = "application/json";
  response.body = body.dump();
  return response;
}

}  // namespace pier::api

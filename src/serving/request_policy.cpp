#include "serving/request_policy.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <utility>

namespace pier::serving {

std::optional<engine::Priority> ParsePriorityValue(std::string_view text) {
  if (text.size() == 1 && text[0] >= '0' && text[0] <= '3') {
    return static_cast<engine::Priority>(text[0] - '0');
  }
  Result<engine::Priority> named = engine::ParsePriority(text);
  if (!named.ok()) return std::nullopt;
  return *named;
}

engine::Priority ClampPriority(engine::Priority requested, engine::Priority ceiling) {
  // A lower value is served first: the ceiling is the smallest value allowed.
  return static_cast<uint8_t>(requested) < static_cast<uint8_t>(ceiling) ? ceiling : requested;
}

Result<RequestClass> ResolveRequestClass(std::optional<engine::Priority> body,
                                         std::optional<std::string_view> header, std::string tenant,
                                         engine::Priority ceiling) {
  RequestClass result;
  result.tenant = std::move(tenant);
  if (body.has_value()) {
    result.priority = *body;
  } else if (header.has_value()) {
    std::optional<engine::Priority> parsed = ParsePriorityValue(*header);
    if (!parsed.has_value()) {
      return InvalidArgumentError(
          "the X-Priority header must be critical, high, normal, low or 0..3");
    }
    result.priority = *parsed;
  }
  result.priority = ClampPriority(result.priority, ceiling);
  return result;
}

namespace {

// Splits "CLASS=VALUE,..." and calls `take(class, value, part)` for each part; the first
// error, naming `setting` and the part.
template <typename Take>
Status ForEachClassValue(std::string_view setting, std::string_view text, std::string_view form,
                         Take take) {
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view part = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    const size_t equals = part.find('=');
    const std::string shown(part);
    if (equals == std::string_view::npos) {
      return InvalidArgumentError(std::string(setting) + ": '" + shown + "' is not " +
                                  std::string(form));
    }
    const std::optional<engine::Priority> priority = ParsePriorityValue(part.substr(0, equals));
    if (!priority.has_value()) {
      return InvalidArgumentError(std::string(setting) + ": '" + shown +
                                  "' names no class (critical, high, normal, low)");
    }
    PIER_RETURN_IF_ERROR(take(static_cast<size_t>(*priority), part.substr(equals + 1), shown));
  }
  return Status::Ok();
}

}  // namespace

Result<std::array<int64_t, 4>> ParseClassMilliseconds(std::string_view setting,
                                                      std::string_view text) {
  std::array<int64_t, 4> values = {0, 0, 0, 0};
  PIER_RETURN_IF_ERROR(ForEachClassValue(
      setting, text, "CLASS=MILLISECONDS (e.g. normal=10000)",
      [&](size_t cls, std::string_view number, const std::string& shown) -> Status {
        int64_t ms = 0;
        const auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), ms);
        if (error != std::errc() || end != number.data() + number.size() || ms < 0 ||
            ms > 3'600'000) {
          return InvalidArgumentError(std::string(setting) + ": '" + shown +
                                      "' needs 0..3600000 milliseconds (0: no limit)");
        }
        values[cls] = ms;
        return Status::Ok();
      }));
  return values;
}

Status ParseClassDeadlineActions(std::string_view text, ClassQueueLimits* limits) {
  return ForEachClassValue(
      "class_deadline_action", text, "CLASS=reject or CLASS=delay",
      [&](size_t cls, std::string_view action, const std::string& shown) -> Status {
        if (action != "reject" && action != "delay") {
          return InvalidArgumentError("class_deadline_action: '" + shown +
                                      "' needs reject or delay");
        }
        limits->delay[cls] = action == "delay";
        return Status::Ok();
      });
}

Result<std::optional<int64_t>> ResolveClientDeadlineMs(std::optional<int64_t> body_ms,
                                                       std::optional<std::string_view> header) {
  constexpr int64_t kMaxMs = 3'600'000;
  if (body_ms.has_value()) {
    if (*body_ms < 1 || *body_ms > kMaxMs) {
      return InvalidArgumentError("deadline_ms must be 1..3600000 milliseconds from now, got " +
                                  std::to_string(*body_ms));
    }
    return body_ms;
  }
  if (!header.has_value()) return std::optional<int64_t>();
  int64_t ms = 0;
  const auto [end, error] = std::from_chars(header->data(), header->data() + header->size(), ms);
  if (header->empty() || error != std::errc() || end != header->data() + header->size() || ms < 1 ||
      ms > kMaxMs) {
    return InvalidArgumentError(
        "the X-Request-Deadline-Ms header must be 1..3600000 milliseconds from now, got '" +
        std::string(header->substr(0, 40)) + "'");
  }
  return std::optional<int64_t>(ms);
}

std::optional<std::chrono::steady_clock::time_point> RequestQueueDeadline(
    const ClassQueueLimits& limits, engine::Priority priority,
    std::optional<int64_t> client_deadline_ms, std::chrono::steady_clock::time_point now) {
  int64_t ms = limits.max_queue_ms[static_cast<size_t>(priority)];
  if (client_deadline_ms.has_value() && (ms <= 0 || *client_deadline_ms < ms)) {
    ms = *client_deadline_ms;
  }
  if (ms <= 0) return std::nullopt;
  return now + std::chrono::milliseconds(ms);
}

std::optional<double> PredictQueueWaitMs(const engine::EngineStats& stats,
                                         engine::Priority priority, std::string_view tenant) {
  const auto cls = static_cast<size_t>(priority);
  int64_t ahead = 0;
  for (size_t c = 0; c < cls; ++c) ahead += stats.waiting_by_class[c];
  int64_t same_class = stats.waiting_by_class[cls];
  if (!tenant.empty() && !stats.tenants.empty()) {
    double own_waiting = 0, own_weight = 1;
    for (const engine::TenantShare& t : stats.tenants) {
      if (t.priority != priority) continue;  // fair share is within the class
      if (t.tenant == tenant) {
        own_waiting += static_cast<double>(t.waiting);
        own_weight = t.weight > 0 ? t.weight : 1;
      }
    }
    // Submissions the engine has not taken yet are in the class's count but in no tenant's:
    // they count as ahead (their tenants are unknown).
    double attributed = 0;
    for (const engine::TenantShare& t : stats.tenants) {
      if (t.priority == priority) attributed += static_cast<double>(t.waiting);
    }
    double fair =
        own_waiting + std::max(0.0, static_cast<double>(stats.waiting_by_class[cls]) - attributed);
    for (const engine::TenantShare& t : stats.tenants) {
      if (t.priority != priority || t.tenant == tenant) continue;
      fair += std::min(static_cast<double>(t.waiting), (own_waiting + 1) * t.weight / own_weight);
    }
    same_class = std::min(same_class, static_cast<int64_t>(std::ceil(fair)));
  }
  ahead += same_class;
  const int64_t slots =
      stats.max_seqs - (priority == engine::Priority::kCritical ? 0 : stats.reserved_seqs);
  const int64_t free = std::max<int64_t>(0, slots - stats.running);
  if (ahead < free) return 0.0;
  if (!(stats.admissions_per_s > 0)) return std::nullopt;
  // It starts once the `ahead - free` before it and then itself have been admitted.
  return static_cast<double>(ahead - free + 1) * 1000.0 / stats.admissions_per_s;
}

Result<ClassQueueLimits> ParseClassQueueLimits(std::string_view text) {
  ClassQueueLimits limits;
  PIER_ASSIGN_OR_RETURN(limits.max_queue_ms, ParseClassMilliseconds("class_max_queue_ms", text));
  return limits;
}

std::chrono::steady_clock::time_point QueueDeadline(const ClassQueueLimits& limits,
                                                    engine::Priority priority,
                                                    std::chrono::steady_clock::time_point now) {
  const int64_t ms = limits.max_queue_ms[static_cast<size_t>(priority)];
  if (ms <= 0) return std::chrono::steady_clock::time_point::max();
  return now + std::chrono::milliseconds(ms);
}

}  // namespace pier::serving

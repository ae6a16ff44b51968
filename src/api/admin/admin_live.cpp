// The web console's live routes (issue #47): GET /admin/events (the event log as server-sent
// events, or as JSON), GET /admin/history (the devices' memory over the last minutes),
// GET /admin/requests (the requests running and waiting now), and POST
// /admin/models/{name}/drain. Admin-gated like the other /admin routes.
#include <charconv>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "api/admin/admin_routes.h"
#include "serving/worker_client.h"

namespace pier::api {
namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

HttpResponse JsonBody(int status, std::string body) {
  HttpResponse response;
  response.status = status;
  response.body = std::move(body);
  response.headers.emplace_back("Cache-Control", "no-store");
  return response;
}

// The value of `name` in a query string ("a=1&b=2"), undecoded; nullopt when absent.
std::optional<std::string_view> QueryValue(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) == name) {
      return eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

// A non-negative integer parameter: nullopt when absent; an error message when malformed.
std::optional<uint64_t> UnsignedParam(std::string_view query, std::string_view name,
                                      std::string* error) {
  const std::optional<std::string_view> text = QueryValue(query, name);
  if (!text.has_value()) return std::nullopt;
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (ec != std::errc() || end != text->data() + text->size() || text->empty()) {
    *error = "query parameter " + std::string(name) + " must be a non-negative integer, not '" +
             std::string(*text) + "'";
  }
  return value;
}

// One event as an SSE frame: its seq as the id (a reconnecting reader resumes after it).
void AppendFrame(const serving::ServerEvent& event, std::string* out) {
  *out += "id: " + std::to_string(event.seq) + "\nevent: " + event.type + "\ndata: " + event.json +
          "\n\n";
}

std::string DroppedJson(uint64_t dropped) {
  return Json{{"dropped", dropped},
              {"message", "this follower fell behind: the " + std::to_string(dropped) +
                              " oldest events it had not read were dropped"}}
      .dump();
}

// GET /admin/events as a stream: events after the cursor as they are published, a heartbeat
// comment when nothing was sent for kHeartbeat (the log's pulses wake it), and a `dropped`
// event when the ring overtook this reader. Never a backlog: what it has not read waits in the
// log's ring, not in this stream (so a slow reader loses the oldest events instead of being
// cut off or growing memory).
class EventStream final : public ResponseStream {
 public:
  static constexpr std::chrono::seconds kHeartbeat{5};
  static constexpr size_t kMaxPerPoll = 256;

  EventStream(serving::EventLog* log, uint64_t cursor) : log_(log), cursor_(cursor) {}
  ~EventStream() override { Stop(); }

  void Start(std::function<void()> wake) override {
    wake_ = wake;
    follower_ = log_->Follow(std::move(wake));
  }

  StreamChunk Poll() override {
    StreamChunk chunk;
    if (!started_) {
      started_ = true;
      // Reconnect after 2 s when the stream ends; the first comment tells the reader it is live.
      chunk.data = "retry: 2000\n: connected to pier's event log\n\n";
    }
    const serving::EventRead read = log_->ReadAfter(cursor_, kMaxPerPoll);
    if (read.dropped > 0) {
      chunk.data += "event: dropped\ndata: " + DroppedJson(read.dropped) + "\n\n";
    }
    for (const auto& event : read.events) AppendFrame(*event, &chunk.data);
    cursor_ = read.next;
    const Clock::time_point now = Clock::now();
    if (chunk.data.empty() && now - last_sent_ >= kHeartbeat) chunk.data = ": heartbeat\n\n";
    if (!chunk.data.empty()) last_sent_ = now;
    // More than one poll's worth waiting: ask to be polled again after this write.
    if (read.events.size() == kMaxPerPoll && wake_) wake_();
    return chunk;
  }

  size_t backlog() const override { return 0; }
  void Cancel(std::string_view) override { Stop(); }
  std::string CancelWithEnding(std::string_view reason) override {
    Stop();
    return "event: shutdown\ndata: " + Json{{"message", reason}}.dump() + "\n\n";
  }

 private:
  void Stop() {
    if (follower_ != 0) log_->Unfollow(follower_);
    follower_ = 0;
  }

  serving::EventLog* const log_;
  uint64_t cursor_;
  uint64_t follower_ = 0;
  bool started_ = false;
  std::function<void()> wake_;
  Clock::time_point last_sent_ = Clock::now();
};

}  // namespace

void AdminRoutes::PublishAction(const HttpRequest& request, const std::string& model,
                                const std::string& message, serving::EventLevel level) const {
  if (options_.events == nullptr) return;
  options_.events->Publish("admin_action", level, model, message,
                           nlohmann::json{{"from", request.remote_address}});
}

HttpResponse AdminRoutes::AdminEvents(const HttpRequest& request) {
  if (auto denied = RequireAdmin(request)) return std::move(*denied);
  if (options_.events == nullptr) return ErrorResponse(501, "this server keeps no event log");
  serving::EventLog& log = *options_.events;
  std::string error;
  std::optional<uint64_t> after = UnsignedParam(request.query, "after", &error);
  const std::optional<uint64_t> replay = UnsignedParam(request.query, "replay", &error);
  const std::optional<uint64_t> limit = UnsignedParam(request.query, "limit", &error);
  if (!error.empty()) return ErrorResponse(400, error);
  // EventSource's reconnect names the last event it saw.
  if (!after.has_value()) {
    if (const std::optional<std::string_view> last = request.Header("last-event-id")) {
      uint64_t value = 0;
      const auto [end, ec] = std::from_chars(last->data(), last->data() + last->size(), value);
      if (ec == std::errc() && end == last->data() + last->size()) after = value;
    }
  }
  const uint64_t last_seq = log.last_seq();
  const uint64_t wanted = std::min<uint64_t>(replay.value_or(100), log.capacity());
  const uint64_t cursor = after.value_or(last_seq > wanted ? last_seq - wanted : 0);
  const std::string_view format = QueryValue(request.query, "format").value_or("sse");
  if (format == "json") {
    const serving::EventRead read =
        log.ReadAfter(cursor, static_cast<size_t>(std::min<uint64_t>(limit.value_or(1000), 10000)));
    std::string body = "{\"events\":[";
    for (size_t i = 0; i < read.events.size(); ++i) {
      if (i > 0) body += ',';
      body += read.events[i]->json;
    }
    body += "],\"next\":" + std::to_string(read.next) +
            ",\"dropped\":" + std::to_string(read.dropped) + "}";
    return JsonBody(200, std::move(body));
  }
  if (format != "sse") {
    return ErrorResponse(400, "format must be sse or json, not '" + std::string(format) + "'");
  }
  HttpResponse response;
  response.content_type = "text/event-stream";
  response.chunked = true;
  response.headers.emplace_back("Cache-Control", "no-store");
  response.stream = std::make_shared<EventStream>(&log, cursor);
  return response;
}

HttpResponse AdminRoutes::AdminHistory(const HttpRequest& request) {
  if (auto denied = RequireAdmin(request)) return std::move(*denied);
  if (options_.history == nullptr) return ErrorResponse(501, "this server keeps no history");
  Json samples = Json::array();
  for (const serving::MemorySample& sample : options_.history->Samples()) {
    Json devices = Json::array();
    for (const serving::DeviceSample& d : sample.devices) {
      Json models = Json::object();
      for (const auto& [model, bytes] : d.models) models[model] = bytes;
      devices.push_back({{"name", d.name},
                         {"budget_bytes", d.budget_bytes},
                         {"committed_bytes", d.committed_bytes},
                         {"pressure_index", d.pressure_index},
                         {"waiting_allocations", d.waiting_allocations},
                         {"models", std::move(models)}});
    }
    samples.push_back({{"time", sample.time}, {"devices", std::move(devices)}});
  }
  const double interval = static_cast<double>(options_.history_interval.count()) / 1000.0;
  Json body{{"interval_seconds", interval},
            {"window_seconds", interval * static_cast<double>(options_.history->capacity())},
            {"samples", std::move(samples)}};
  return JsonBody(200, body.dump(-1, ' ', false, Json::error_handler_t::replace));
}

HttpResponse AdminRoutes::AdminRequests(const HttpRequest& request) {
  if (auto denied = RequireAdmin(request)) return std::move(*denied);
  if (options_.requests == nullptr) return ErrorResponse(501, "this server keeps no request board");
  std::string error;
  const uint64_t limit = UnsignedParam(request.query, "limit", &error).value_or(500);
  if (!error.empty()) return ErrorResponse(400, error);
  size_t total = 0;
  Json data = Json::array();
  for (const serving::LiveRequestRow& row :
       options_.requests->Snapshot(static_cast<size_t>(std::min<uint64_t>(limit, 10000)), &total)) {
    data.push_back({{"id", row.info.request_id},
                    {"model", row.info.model},
                    {"route", row.info.route},
                    {"tenant", row.info.tenant},
                    {"class", row.info.priority_class},
                    {"state", row.running ? "running" : "queued"},
                    {"age_seconds", row.age_seconds},
                    {"tokens", row.tokens},
                    {"stage", row.stage}});
  }
  const size_t shown = data.size();
  Json body{{"object", "list"},
            {"data", std::move(data)},
            {"total", total},
            {"truncated", shown < total}};
  return JsonBody(200, body.dump(-1, ' ', false, Json::error_handler_t::replace));
}

HttpResponse AdminRoutes::AdminDrain(const HttpRequest& request, const serving::ModelEntry& entry) {
  if (entry.model == nullptr || entry.model->workers.empty()) {
    return ErrorResponse(
        409,
        "model " + entry.id +
            (entry.model == nullptr ? " is not loaded"
                                    : " has no worker processes to drain "
                                      "(pier serve --workers on); unload drains it"),
        "model");
  }
  std::string error;
  const std::optional<uint64_t> instance = UnsignedParam(request.query, "instance", &error);
  if (!error.empty()) return ErrorResponse(400, error);
  const size_t count = entry.model->workers.size();
  if (instance.has_value() && (*instance < 1 || *instance > count)) {
    return ErrorResponse(400,
                         "instance must be 1.." + std::to_string(count) + " for model " + entry.id);
  }
  Json draining = Json::array();
  Json skipped = Json::array();
  for (size_t n = 0; n < count; ++n) {
    if (instance.has_value() && n + 1 != *instance) continue;
    const bool started = entry.model->workers[n]->Drain(
        "drained by an operator (POST /admin/models/" + entry.id + "/drain)");
    (started ? draining : skipped).push_back(n + 1);
  }
  PublishAction(request, entry.id,
                "drain of " + entry.id + " asked: instance(s) " + draining.dump() +
                    " restart once their requests finish",
                serving::EventLevel::kInfo);
  return JsonBody(200, Json{{"model", entry.id},
                            {"draining", std::move(draining)},
                            {"not_ready", std::move(skipped)}}
                           .dump());
}

}  // namespace pier::api

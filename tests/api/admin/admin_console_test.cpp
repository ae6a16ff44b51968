// The web console's server side (issue #47): the admin guard (Origin and Host), the /ui routes
// (embedded files, security headers on every answer, loopback-only without a key), and the
// live admin routes: /admin/events (JSON and the SSE stream with heartbeats and drops),
// /admin/history, /admin/requests, /admin/models' devices and drain. No sockets, no model.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../../memory/test_util.h"
#include "api/admin/admin_guard.h"
#include "api/admin/admin_routes.h"
#include "api/console/console_routes.h"
#include "api/console/static_files.h"

namespace pier::api {
namespace {

using Json = nlohmann::json;
using Headers = std::vector<std::pair<std::string, std::string>>;

HttpRequest Request(std::string method, std::string target, Headers headers = {},
                    std::string remote = "127.0.0.1:40000") {
  HttpRequest request;
  request.method = std::move(method);
  request.target = target;
  const size_t q = target.find('?');
  request.path = target.substr(0, q);
  request.query = q == std::string::npos ? "" : target.substr(q + 1);
  request.headers = std::move(headers);
  request.remote_address = std::move(remote);
  return request;
}

std::optional<std::string> HeaderOf(const HttpResponse& response, std::string_view name) {
  for (const auto& [key, value] : response.headers) {
    if (key == name) return value;
  }
  return std::nullopt;
}

TEST(AdminGuardTest, HostMustBeAnAddressWithoutAKey) {
  EXPECT_TRUE(IsIpLiteralOrLocalhost("127.0.0.1:8080"));
  EXPECT_TRUE(IsIpLiteralOrLocalhost("localhost:8080"));
  EXPECT_TRUE(IsIpLiteralOrLocalhost("LOCALHOST"));
  EXPECT_TRUE(IsIpLiteralOrLocalhost("[::1]:8080"));
  EXPECT_TRUE(IsIpLiteralOrLocalhost("10.1.2.3"));
  EXPECT_FALSE(IsIpLiteralOrLocalhost("evil.example:8080"));
  EXPECT_FALSE(IsIpLiteralOrLocalhost("127.0.0.1.nip.io:8080"));
  EXPECT_FALSE(IsIpLiteralOrLocalhost("localhost.evil.example"));

  const auto rebinding =
      CheckAdminOrigin(Request("GET", "/admin/models", {{"host", "evil.example:8080"}}), true);
  ASSERT_TRUE(rebinding.has_value());
  EXPECT_EQ(rebinding->status, 403);
  EXPECT_NE(rebinding->body.find("DNS-rebinding"), std::string::npos);
  // With a key a page cannot forge the Authorization header: any name may reach the server.
  EXPECT_FALSE(
      CheckAdminOrigin(Request("GET", "/admin/models", {{"host", "pier.internal:8080"}}), false));
  EXPECT_FALSE(
      CheckAdminOrigin(Request("GET", "/admin/models", {{"host", "127.0.0.1:8080"}}), true));
}

TEST(AdminGuardTest, APostFromAForeignOriginIsRefusedKeyOrNot) {
  for (const bool keyless : {true, false}) {
    const Headers same = {{"host", "127.0.0.1:8080"}, {"origin", "http://127.0.0.1:8080"}};
    EXPECT_FALSE(CheckAdminOrigin(Request("POST", "/admin/reload", same), keyless));
    for (const char* origin : {"http://evil.example", "http://127.0.0.1:9999", "null",
                               "http://127.0.0.1:8080/x", "file://"}) {
      const Headers foreign = {{"host", "127.0.0.1:8080"}, {"origin", origin}};
      const auto refused = CheckAdminOrigin(Request("POST", "/admin/reload", foreign), keyless);
      ASSERT_TRUE(refused.has_value()) << origin;
      EXPECT_EQ(refused->status, 403);
      EXPECT_NE(refused->body.find("cross-origin"), std::string::npos);
    }
    // curl and scripts send no Origin.
    EXPECT_FALSE(
        CheckAdminOrigin(Request("POST", "/admin/reload", {{"host", "127.0.0.1:8080"}}), keyless));
  }
}

class ConsoleRoutesTest : public ::testing::Test {
 protected:
  HttpResponse Get(const std::string& path, bool key_set, std::string remote = "127.0.0.1:1") {
    Router router;
    ConsoleRoutes({.admin_key_set = key_set, .files_dir = ""}).Register(router);
    return router.Dispatch(Request("GET", path, {}, std::move(remote)));
  }
  static void ExpectSecurityHeaders(const HttpResponse& response) {
    const std::optional<std::string> csp = HeaderOf(response, "Content-Security-Policy");
    ASSERT_TRUE(csp.has_value());
    EXPECT_NE(csp->find("frame-ancestors 'none'"), std::string::npos);
    EXPECT_NE(csp->find("script-src 'self'"), std::string::npos);
    EXPECT_EQ(csp->find("unsafe-inline"), std::string::npos);
    EXPECT_EQ(HeaderOf(response, "X-Frame-Options"), "DENY");
    EXPECT_EQ(HeaderOf(response, "X-Content-Type-Options"), "nosniff");
  }
};

TEST_F(ConsoleRoutesTest, ServesTheEmbeddedFilesWithTheirTypes) {
  const auto& files = console::EmbeddedFiles();
  bool has_index = false;
  for (const auto& file : files) has_index |= file.name == "index.html";
  ASSERT_TRUE(has_index) << "src/api/console/static/index.html was not embedded";
  for (const std::string path : {"/ui", "/ui/", "/ui/index.html"}) {
    const HttpResponse page = Get(path, false);
    EXPECT_EQ(page.status, 200) << path;
    EXPECT_EQ(page.content_type, "text/html; charset=utf-8");
    EXPECT_NE(page.body.find("<html"), std::string::npos);
    ExpectSecurityHeaders(page);
  }
  for (const auto& file : files) {
    const HttpResponse response = Get("/ui/" + std::string(file.name), false);
    EXPECT_EQ(response.status, 200) << file.name;
    EXPECT_EQ(response.body, file.bytes);
    if (file.name.ends_with(".js")) {
      EXPECT_EQ(response.content_type, "text/javascript; charset=utf-8");
    }
    if (file.name.ends_with(".css")) {
      EXPECT_EQ(response.content_type, "text/css; charset=utf-8");
    }
    ExpectSecurityHeaders(response);
  }
}

TEST_F(ConsoleRoutesTest, UnknownFilesAndPathsAre404PagesWithThePolicy) {
  for (const std::string path :
       {"/ui/nope.js", "/ui/../etc/passwd", "/ui/..", "/ui/.hidden", "/ui/a/b.js", "/ui/%2e%2e"}) {
    const HttpResponse response = Get(path, false);
    EXPECT_EQ(response.status, 404) << path;
    EXPECT_EQ(response.content_type, "text/html; charset=utf-8");
    ExpectSecurityHeaders(response);
  }
}

TEST_F(ConsoleRoutesTest, WithoutAKeyOnlyLoopbackGetsThePage) {
  const HttpResponse refused = Get("/ui", false, "10.0.0.7:5000");
  EXPECT_EQ(refused.status, 403);
  EXPECT_NE(refused.body.find("--admin-key"), std::string::npos);
  ExpectSecurityHeaders(refused);
  EXPECT_NE(Get("/ui", false, "[::1]:5000").status, 403);
  EXPECT_NE(Get("/ui", true, "10.0.0.7:5000").status, 403);
}

class AdminLiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(registry_.Declare("tiny", {}, serving::LoadPolicy::kOnStart).ok());
    AdminRoutesOptions options;
    options.events = &events_;
    options.history = &history_;
    options.requests = &board_;
    options.device_governor = governor_.get();
    routes_ = std::make_unique<AdminRoutes>(options, &registry_, nullptr, &metrics_);
    routes_->Register(router_);
  }
  HttpResponse Call(const std::string& method, const std::string& target, Headers headers = {}) {
    return router_.Dispatch(Request(method, target, std::move(headers)));
  }

  serving::ModelRegistry registry_;
  serving::ServingMetrics metrics_{"tiny"};
  serving::EventLog events_{16};
  serving::MemoryHistory history_;
  serving::RequestBoard board_;
  FakeDevice device_{FakeDeviceOptions{.capacity_bytes = 64 * pier::testing::kMiB}};
  std::unique_ptr<MemoryGovernor> governor_ =
      pier::testing::MakeGovernor(&device_, pier::testing::BudgetOf(32 * pier::testing::kMiB));
  std::unique_ptr<AdminRoutes> routes_;
  Router router_;
};

TEST_F(AdminLiveTest, EventsAsJsonFromACursor) {
  events_.Publish("model_loaded", serving::EventLevel::kInfo, "tiny", "tiny loaded");
  events_.Publish("worker_down", serving::EventLevel::kWarning, "tiny", "down");
  Json body = Json::parse(Call("GET", "/admin/events?format=json").body);
  ASSERT_EQ(body["events"].size(), 2u);
  EXPECT_EQ(body["events"][0]["type"], "model_loaded");
  EXPECT_EQ(body["next"], 2);
  EXPECT_EQ(body["dropped"], 0);
  body = Json::parse(Call("GET", "/admin/events?format=json&after=1").body);
  ASSERT_EQ(body["events"].size(), 1u);
  EXPECT_EQ(body["events"][0]["type"], "worker_down");
  for (int i = 0; i < 40; ++i) events_.Publish("e", serving::EventLevel::kInfo, "", "");
  body = Json::parse(Call("GET", "/admin/events?format=json&after=0").body);
  EXPECT_EQ(body["events"].size(), 16u);
  EXPECT_EQ(body["dropped"], 42 - 16);
  for (const char* bad : {"?after=x", "?after=-1", "?replay=1e3", "?format=xml"}) {
    EXPECT_EQ(Call("GET", std::string("/admin/events") + bad).status, 400) << bad;
  }
}

TEST_F(AdminLiveTest, TheEventStreamSendsFramesDropsAndHeartbeats) {
  events_.Publish("model_loaded", serving::EventLevel::kInfo, "tiny", "tiny loaded");
  HttpResponse response = Call("GET", "/admin/events");
  ASSERT_EQ(response.status, 200);
  EXPECT_EQ(response.content_type, "text/event-stream");
  ASSERT_NE(response.stream, nullptr);
  int wakes = 0;
  response.stream->Start([&] { ++wakes; });
  std::string data = response.stream->Poll().data;
  EXPECT_NE(data.find("retry: 2000"), std::string::npos);
  EXPECT_NE(data.find("id: 1\nevent: model_loaded\ndata: {"), std::string::npos);
  EXPECT_TRUE(response.stream->Poll().data.empty());  // nothing new, no heartbeat yet
  events_.Publish("worker_restarted", serving::EventLevel::kWarning, "tiny", "restarted");
  EXPECT_GE(wakes, 1);
  EXPECT_NE(response.stream->Poll().data.find("id: 2\nevent: worker_restarted\n"),
            std::string::npos);
  // Overtaken by the ring: told how many were lost, then the ones kept.
  for (int i = 0; i < 20; ++i) events_.Publish("e", serving::EventLevel::kInfo, "", "");
  data = response.stream->Poll().data;
  EXPECT_NE(data.find("event: dropped\ndata: {\"dropped\":4"), std::string::npos);
  EXPECT_EQ(response.stream->backlog(), 0u);
  response.stream->Cancel("client gone");
  const int before = wakes;
  events_.Publish("after", serving::EventLevel::kInfo, "", "");
  EXPECT_EQ(wakes, before);  // no longer followed
}

TEST_F(AdminLiveTest, ResumesAfterLastEventIdAndReplaysRecentOnes) {
  for (int i = 0; i < 5; ++i)
    events_.Publish("e" + std::to_string(i), serving::EventLevel::kInfo, "", "");
  HttpResponse resumed = Call("GET", "/admin/events", {{"last-event-id", "3"}});
  resumed.stream->Start([] {});
  std::string data = resumed.stream->Poll().data;
  EXPECT_EQ(data.find("event: e2\n"), std::string::npos);
  EXPECT_NE(data.find("event: e3\n"), std::string::npos);
  HttpResponse replay = Call("GET", "/admin/events?replay=2");
  replay.stream->Start([] {});
  data = replay.stream->Poll().data;
  EXPECT_EQ(data.find("event: e2\n"), std::string::npos);
  EXPECT_NE(data.find("event: e3\n"), std::string::npos);
  EXPECT_NE(data.find("event: e4\n"), std::string::npos);
}

TEST_F(AdminLiveTest, RequestsHistoryAndDevices) {
  auto ticket = board_.Open({.request_id = "chatcmpl-9",
                             .model = "tiny",
                             .route = "/v1/chat/completions",
                             .tenant = "t",
                             .priority_class = "normal"});
  ticket->Produced(7);
  Json body = Json::parse(Call("GET", "/admin/requests").body);
  ASSERT_EQ(body["data"].size(), 1u);
  EXPECT_EQ(body["data"][0]["id"], "chatcmpl-9");
  EXPECT_EQ(body["data"][0]["state"], "running");
  EXPECT_EQ(body["data"][0]["tokens"], 7);
  EXPECT_EQ(body["truncated"], false);
  EXPECT_EQ(Call("GET", "/admin/requests?limit=0").status, 200);
  EXPECT_EQ(Json::parse(Call("GET", "/admin/requests?limit=0").body)["truncated"], true);

  history_.Record({.time = 1.0, .devices = {{.name = "cpu", .models = {{"tiny", 5}}}}});
  body = Json::parse(Call("GET", "/admin/history").body);
  EXPECT_EQ(body["interval_seconds"], 2.0);
  ASSERT_EQ(body["samples"].size(), 1u);
  EXPECT_EQ(body["samples"][0]["devices"][0]["models"]["tiny"], 5);

  // The device bar's owners are the governor's, by model and part.
  const OwnerId owner = pier::testing::AddOwner(*governor_, {.name = "tiny/weights"});
  MemoryResult<ExternalCharge> charge = governor_->ChargeExternal(owner, 2 * pier::testing::kMiB);
  ASSERT_TRUE(charge.ok());
  body = Json::parse(Call("GET", "/admin/models").body);
  ASSERT_EQ(body["devices"].size(), 1u);
  const Json& device = body["devices"][0];
  ASSERT_EQ(device["owners"].size(), 1u);
  EXPECT_EQ(device["owners"][0]["model"], "tiny");
  EXPECT_EQ(device["owners"][0]["part"], "weights");
  EXPECT_EQ(device["owners"][0]["committed_bytes"].get<uint64_t>(), 2 * pier::testing::kMiB);
  EXPECT_EQ(device["free_bytes"].get<uint64_t>(),
            device["budget_bytes"].get<uint64_t>() - device["committed_bytes"].get<uint64_t>());
  EXPECT_EQ(body["data"][0]["pier"]["memory"]["owners"][0]["committed_bytes"],
            device["owners"][0]["committed_bytes"]);
}

TEST_F(AdminLiveTest, DrainNeedsWorkerProcesses) {
  // Without a model manager the lifecycle routes answer 501 (the integration tests drain
  // real worker processes).
  EXPECT_EQ(Call("POST", "/admin/models/tiny/drain").status, 501);
  EXPECT_EQ(Call("POST", "/admin/models/tiny/restart").status, 404);
  EXPECT_EQ(Call("GET", "/admin/models/tiny/drain").status, 405);
}

}  // namespace
}  // namespace pier::api

// AdminRoutes: /health, /ready (with the engine-stall watchdog), /metrics (optionally keyed),
// /v1/models, /v1/models/{id}, /admin/models (and one model's entry), /tokenize and
// /detokenize, dispatched through a Router with a fake engine client, a byte-level fake
// tokenizer and a fake tensor runner (no model file, no sockets).
#include "api/admin/admin_routes.h"

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "../../memory/test_util.h"
#include "../kserve/fake_tensor_runner.h"

namespace pier::api {
namespace {

using Json = nlohmann::json;

// Token i < 256 is byte i; 256 is the control token "<s>" (BOS, added by add_special).
class ByteTokenizer final : public tokenizer::Tokenizer {
 public:
  static constexpr tokenizer::TokenId kBos = 256;

  ByteTokenizer() {
    for (int i = 0; i < 256; ++i) pieces_.push_back(std::string(1, static_cast<char>(i)));
    pieces_.push_back("<s>");
  }
  Result<std::vector<tokenizer::TokenId>> Encode(
      std::string_view text, const tokenizer::EncodeOptions& options) const override {
    if (!ValidUtf8(text)) return InvalidArgumentError("the text is not valid UTF-8");
    std::vector<tokenizer::TokenId> ids;
    if (options.add_special) ids.push_back(kBos);
    for (char c : text) ids.push_back(static_cast<unsigned char>(c));
    return ids;
  }
  std::string TokenBytes(tokenizer::TokenId id) const override { return pieces_[id]; }
  std::string_view Piece(tokenizer::TokenId id) const override { return pieces_[id]; }
  tokenizer::TokenType Type(tokenizer::TokenId id) const override {
    return id == kBos ? tokenizer::TokenType::kControl : tokenizer::TokenType::kNormal;
  }
  int32_t vocab_size() const override { return 257; }
  tokenizer::TokenId bos_id() const override { return kBos; }
  tokenizer::TokenId eos_id() const override { return -1; }
  bool add_bos() const override { return true; }
  bool add_eos() const override { return false; }
  const std::vector<tokenizer::TokenId>& end_of_generation_ids() const override { return eog_; }

 private:
  static bool ValidUtf8(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
      const unsigned char c = static_cast<unsigned char>(s[i]);
      const size_t n = c < 0x80         ? 1
                       : (c >> 5) == 6  ? 2
                       : (c >> 4) == 14 ? 3
                       : (c >> 3) == 30 ? 4
                                        : 0;
      if (n == 0 || i + n > s.size()) return false;
      for (size_t k = 1; k < n; ++k) {
        if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
      }
      i += n;
    }
    return true;
  }
  std::vector<std::string> pieces_;
  std::vector<tokenizer::TokenId> eog_;
};

// Stats are whatever the test sets; nothing is ever submitted.
class FakeClient final : public engine::EngineClient {
 public:
  Result<std::shared_ptr<engine::RequestHandle>> Submit(engine::Request) override {
    return UnavailableError("fake client");
  }
  void Abort(const std::string&) override {}
  void AbortAll(std::string) override {}
  engine::EngineStats Stats() const override { return stats; }
  engine::EngineStats stats;
};

constexpr const char* kKeys = R"(
keys:
  - key: sk-good
    tenant: t
)";

class AdminRoutesTest : public ::testing::Test {
 protected:
  void Build(AdminRoutesOptions options, const ApiKeys* keys = nullptr) {
    routes_.reset();
    registry_ = std::make_unique<serving::ModelRegistry>();
    serving::ServedModel model;
    model.id = "tiny-model";
    model.created_unix_seconds = 1700000000;
    model.max_request_tokens = 4096;
    model.client = &client_;
    model.tokenizer = &tokenizer_;
    ASSERT_TRUE(registry_->Add(model).ok());
    routes_ = std::make_unique<AdminRoutes>(options, registry_.get(), keys, &metrics_);
    router_ = Router();
    routes_->Register(router_);
  }

  HttpResponse Call(const std::string& method, const std::string& path,
                    const std::string& body = "",
                    std::vector<std::pair<std::string, std::string>> headers = {}) {
    HttpRequest request;
    request.method = method;
    request.target = request.path = path;
    request.body = body;
    request.headers = std::move(headers);
    return router_.Dispatch(request);
  }

  static Json Body(const HttpResponse& response) { return Json::parse(response.body); }

  FakeClient client_;
  ByteTokenizer tokenizer_;
  serving::ServingMetrics metrics_{"tiny-model"};
  std::unique_ptr<serving::ModelRegistry> registry_;
  std::unique_ptr<AdminRoutes> routes_;
  Router router_;
};

TEST_F(AdminRoutesTest, HealthIsAlwaysOk) {
  Build({});
  for (ServeState state : {ServeState::kLoading, ServeState::kReady, ServeState::kShuttingDown}) {
    routes_->SetState(state);
    HttpResponse r = Call("GET", "/health");
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(Body(r), Json({{"status", "ok"}}));
  }
}

TEST_F(AdminRoutesTest, ReadyOnlyWhenLoadedAndNotShuttingDown) {
  Build({});
  HttpResponse loading = Call("GET", "/ready");
  EXPECT_EQ(loading.status, 503);
  EXPECT_EQ(Body(loading)["status"], "not ready");
  EXPECT_NE(Body(loading)["reason"].get<std::string>().find("loading"), std::string::npos);

  routes_->SetState(ServeState::kReady);
  HttpResponse ready = Call("GET", "/ready");
  EXPECT_EQ(ready.status, 200);
  EXPECT_EQ(Body(ready), Json({{"status", "ready"}}));

  routes_->SetState(ServeState::kShuttingDown);
  HttpResponse closing = Call("GET", "/ready");
  EXPECT_EQ(closing.status, 503);
  EXPECT_NE(Body(closing)["reason"].get<std::string>().find("shutting down"), std::string::npos);
}

TEST_F(AdminRoutesTest, ReadyTurns503WhenTheEngineHasWorkAndNoStepEnds) {
  AdminRoutesOptions options;
  options.watchdog_timeout = std::chrono::milliseconds(200);
  Build(options);
  routes_->SetState(ServeState::kReady);
  // An old heartbeat while idle is no stall.
  client_.stats.last_step_at_us = engine::NowUs() - 10'000'000;
  EXPECT_EQ(Call("GET", "/ready").status, 200);
  // Work arrives: the stall clock starts at its first observation, not at the old heartbeat.
  client_.stats.waiting = 1;
  EXPECT_EQ(Call("GET", "/ready").status, 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  HttpResponse stalled = Call("GET", "/ready");
  EXPECT_EQ(stalled.status, 503);
  EXPECT_NE(Body(stalled)["reason"].get<std::string>().find("stalled"), std::string::npos);
  // A fresh heartbeat: ready again.
  client_.stats.last_step_at_us = engine::NowUs();
  EXPECT_EQ(Call("GET", "/ready").status, 200);
}

TEST(EngineWatchdogTest, StallNeedsPendingWorkAndASilenceLongerThanTheTimeout) {
  EngineWatchdog watchdog(std::chrono::microseconds(1000));
  engine::EngineStats stats;
  stats.last_step_at_us = 100;
  EXPECT_FALSE(watchdog.Observe(stats, 50'000).has_value());  // idle
  stats.running = 2;
  EXPECT_FALSE(watchdog.Observe(stats, 60'000).has_value());  // work first seen at 60'000
  EXPECT_FALSE(watchdog.Observe(stats, 61'000).has_value());  // exactly the timeout
  EXPECT_TRUE(watchdog.Observe(stats, 61'001).has_value());
  stats.last_step_at_us = 61'500;  // a step ended
  EXPECT_FALSE(watchdog.Observe(stats, 62'000).has_value());
  EXPECT_TRUE(watchdog.Observe(stats, 62'501).has_value());
  // Idle resets the clock: new work is judged from when it is first seen.
  stats.running = 0;
  EXPECT_FALSE(watchdog.Observe(stats, 90'000).has_value());
  stats.waiting = 1;
  EXPECT_FALSE(watchdog.Observe(stats, 95'000).has_value());
  EXPECT_FALSE(watchdog.Observe(stats, 95'900).has_value());
  std::optional<std::string> reason = watchdog.Observe(stats, 96'100);
  ASSERT_TRUE(reason.has_value());
  EXPECT_NE(reason->find("1 sequences pending"), std::string::npos) << *reason;
}

TEST_F(AdminRoutesTest, ModelsListsTheServedModel) {
  Build({});
  HttpResponse r = Call("GET", "/v1/models");
  ASSERT_EQ(r.status, 200);
  Json body = Body(r);
  EXPECT_EQ(body["object"], "list");
  ASSERT_EQ(body["data"].size(), 1u);
  EXPECT_EQ(body["data"][0], Json({{"id", "tiny-model"},
                                   {"object", "model"},
                                   {"created", 1700000000},
                                   {"owned_by", "pier"},
                                   {"max_model_len", 4096},
                                   {"pier",
                                    {{"aliases", Json::array()},
                                     {"state", "ready"},
                                     {"load", "on_start"},
                                     {"kind", "generate"}}}}));
  HttpResponse one = Call("GET", "/v1/models/tiny-model");
  ASSERT_EQ(one.status, 200);
  EXPECT_EQ(Body(one), body["data"][0]);
  EXPECT_EQ(Call("GET", "/v1/models/tiny%2Dmodel").status, 200);
}

TEST_F(AdminRoutesTest, AdminModelsShowsEachModelsEngineAndMemory) {
  Build({});
  HttpRequest request;
  request.method = "GET";
  request.target = request.path = "/admin/models";
  request.remote_address = "127.0.0.1:40000";
  HttpResponse r = router_.Dispatch(request);
  ASSERT_EQ(r.status, 200);
  Json body = Body(r);
  ASSERT_EQ(body["data"].size(), 1u);
  const Json& model = body["data"][0];
  EXPECT_EQ(model["id"], "tiny-model");
  EXPECT_EQ(model["pier"]["state"], "ready");
  EXPECT_TRUE(model["pier"]["engine"].contains("kv_blocks_used"));
  EXPECT_TRUE(model["pier"]["engine"].contains("waiting"));
  // No governor given: no owners, nothing committed.
  EXPECT_EQ(model["pier"]["memory"]["committed_bytes"], 0);
  EXPECT_TRUE(model["pier"]["memory"]["owners"].empty());
}

// A tensor model (an ONNX graph; here a fake runner): kind "tensor", its inputs and outputs
// with KServe's datatypes and shapes, how it batches, its batcher's counters, its governor
// owners and what loading it measured; the same entry alone at /admin/models/{name}; its
// batcher's figures in /metrics.
TEST_F(AdminRoutesTest, ATensorModelShowsItsTensorsBatchingAndMeasuredMemory) {
  Build({});
  serving::TensorModelInfo info;
  info.inputs = {{"x", ElementType::kFp32, {-1, 4}}, {"y", ElementType::kInt64, {-1, 4}}};
  info.outputs = {{"sum", ElementType::kFp32, {-1, 4}}};
  info.max_batch_size = 8;
  info.preferred_batch_sizes = {2, 4};
  info.opset = 17;
  info.producer = "pier-test 1.0";
  info.parameter_bytes = 4096;
  pier::testing::FakeTensorRunner runner(pier::testing::FakeTensorRunner::Kind::kAdd, info);
  runner.stats.queued_items = 3;
  runner.stats.running_items = 2;
  runner.stats.batches = 5;
  runner.stats.items = 12;
  runner.stats.requests = 7;
  runner.stats.expired = 1;
  runner.stats.cancelled = 2;
  runner.stats.batch_items = {.bounds = {1, 2, 4}, .counts = {1, 2, 2, 0}, .sum = 12};
  runner.memory = serving::TensorRunnerMemory{.weights_bytes = 8192,
                                              .workspace_peak = 1024,
                                              .overhead_bytes = 2 << 20,
                                              .resident_delta = (2 << 20) + 9216,
                                              .warmed = true};
  using pier::testing::kMiB;
  FakeDevice device(FakeDeviceOptions{.capacity_bytes = 64 * kMiB});
  auto governor = pier::testing::MakeGovernor(&device, pier::testing::BudgetOf(32 * kMiB));
  pier::testing::AddOwner(*governor, {.name = "add_mul/weights"});
  pier::testing::AddOwner(*governor, {.name = "add_mul/workspace"});
  const OwnerId overhead = pier::testing::AddOwner(*governor, {.name = "add_mul/ort_overhead"});
  MemoryResult<ExternalCharge> charge = governor->ChargeExternal(overhead, 2 * kMiB);
  ASSERT_TRUE(charge.ok());
  FakeClient tensor_client;
  tensor_client.stats.waiting = 3;
  tensor_client.stats.running = 2;
  serving::ServedModel model;
  model.id = "add_mul";
  model.aliases = {"adder"};
  model.kind = serving::ModelKind::kTensor;
  model.tensors = &runner;
  model.client = &tensor_client;
  model.instances = {&tensor_client};
  model.governor = governor.get();
  ASSERT_TRUE(registry_->Add(model).ok());

  auto admin = [&](const std::string& path, const std::string& remote = "127.0.0.1:40000") {
    HttpRequest request;
    request.method = "GET";
    request.target = request.path = path;
    request.remote_address = remote;
    return router_.Dispatch(request);
  };
  HttpResponse list = admin("/admin/models");
  ASSERT_EQ(list.status, 200);
  const Json body = Body(list);
  ASSERT_EQ(body["data"].size(), 2u);
  EXPECT_FALSE(body["data"][0]["pier"].contains("tensor")) << "the LLM has no tensors";
  const Json& entry = body["data"][1];
  const Json& pier = entry["pier"];
  EXPECT_EQ(pier["kind"], "tensor");
  EXPECT_EQ(pier["tensor"]["inputs"],
            Json::parse(R"([{"name":"x","datatype":"FP32","shape":[-1,4]},)"
                        R"({"name":"y","datatype":"INT64","shape":[-1,4]}])"));
  EXPECT_EQ(pier["tensor"]["outputs"],
            Json::parse(R"([{"name":"sum","datatype":"FP32","shape":[-1,4]}])"));
  EXPECT_EQ(pier["tensor"]["max_batch_size"], 8);
  EXPECT_EQ(pier["tensor"]["preferred_batch_sizes"], Json::parse("[2,4]"));
  EXPECT_EQ(pier["tensor"]["opset"], 17);
  EXPECT_EQ(pier["tensor"]["producer"], "pier-test 1.0");
  EXPECT_EQ(pier["tensor"]["parameter_bytes"], 4096);
  EXPECT_EQ(pier["tensor"]["platform"], "onnxruntime_onnx");
  EXPECT_EQ(pier["batcher"], Json::parse(R"({"queued_items":3,"running_items":2,"batches":5,)"
                                         R"("items":12,"requests":7,"expired":1,"cancelled":2,)"
                                         R"("window_seconds":0.002})"));
  EXPECT_EQ(pier["engine"]["waiting"], 3);
  // Its three owners with their bytes, and the figures loading measured.
  ASSERT_EQ(pier["memory"]["owners"].size(), 3u);
  EXPECT_EQ(pier["memory"]["owners"][2]["owner"], "add_mul/ort_overhead");
  EXPECT_EQ(pier["memory"]["owners"][2]["used_bytes"], 2 * kMiB);
  EXPECT_EQ(pier["memory"]["committed_bytes"], 2 * kMiB);
  EXPECT_EQ(pier["memory"]["measured"],
            Json::parse(R"({"weights_bytes":8192,"workspace_peak_bytes":1024,)"
                        R"("ort_overhead_bytes":2097152,"resident_delta_bytes":2106368,)"
                        R"("warmed":true})"));

  // One model's entry alone, by id or alias; unknown names 404; the admin gate holds.
  HttpResponse one = admin("/admin/models/add_mul");
  ASSERT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(Body(one), entry);
  EXPECT_EQ(Body(admin("/admin/models/adder"))["id"], "add_mul");
  HttpResponse unknown = admin("/admin/models/nope");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(Body(unknown)["error"]["code"], "model_not_found");
  EXPECT_EQ(admin("/admin/models/add_mul", "10.0.0.7:5000").status, 403);

  // A runner that measured nothing has no "measured" figures.
  runner.memory.reset();
  EXPECT_FALSE(Body(admin("/admin/models/add_mul"))["pier"]["memory"].contains("measured"));

  const std::string metrics = Call("GET", "/metrics").body;
  EXPECT_NE(metrics.find("pier_tensor_items_total{model=\"add_mul\"} 12"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("pier_tensor_queue_items{model=\"add_mul\"} 3"), std::string::npos);
  EXPECT_NE(metrics.find("pier_tensor_batch_items_bucket{model=\"add_mul\",le=\"2\"} 3"),
            std::string::npos);
}

TEST_F(AdminRoutesTest, AdminRoutesNeedTheAdminKeyOrLoopback) {
  auto call = [&](const std::string& remote, std::vector<std::pair<std::string, std::string>> h) {
    HttpRequest request;
    request.method = "GET";
    request.target = request.path = "/admin/models";
    request.remote_address = remote;
    request.headers = std::move(h);
    return router_.Dispatch(request);
  };
  Build({});
  EXPECT_EQ(call("127.0.0.1:5000", {}).status, 200);
  EXPECT_EQ(call("[::1]:5000", {}).status, 200);
  HttpResponse remote = call("10.0.0.7:5000", {});
  EXPECT_EQ(remote.status, 403);
  EXPECT_NE(remote.body.find("--admin-key"), std::string::npos) << remote.body;

  Build({.admin_key = "op-secret"});
  EXPECT_EQ(call("127.0.0.1:5000", {}).status, 401) << "with a key, loopback needs it too";
  EXPECT_EQ(call("10.0.0.7:5000", {{"authorization", "Bearer wrong"}}).status, 401);
  EXPECT_EQ(call("10.0.0.7:5000", {{"authorization", "Bearer op-secret"}}).status, 200);
}

TEST_F(AdminRoutesTest, UnknownModelIs404ModelNotFound) {
  Build({});
  HttpResponse r = Call("GET", "/v1/models/gpt-4");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(Body(r)["error"]["code"], "model_not_found");
  EXPECT_EQ(Body(r)["error"]["type"], "not_found_error");
  EXPECT_EQ(Call("GET", "/v1/models/").status, 404);
}

TEST_F(AdminRoutesTest, WrongMethodIs405) {
  Build({});
  HttpResponse r = Call("POST", "/health");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(Call("GET", "/tokenize").status, 405);
}

TEST_F(AdminRoutesTest, KeysGuardModelsAndTokenizeButNotHealthOrReady) {
  Result<ApiKeys> keys = ApiKeys::Parse(kKeys);
  ASSERT_TRUE(keys.ok());
  Build({}, &*keys);
  routes_->SetState(ServeState::kReady);
  EXPECT_EQ(Call("GET", "/health").status, 200);
  EXPECT_EQ(Call("GET", "/ready").status, 200);
  EXPECT_EQ(Call("GET", "/metrics").status, 200);  // no metrics key: open
  EXPECT_EQ(Call("GET", "/v1/models").status, 401);
  EXPECT_EQ(Call("GET", "/v1/models/tiny-model").status, 401);
  EXPECT_EQ(Call("POST", "/tokenize", R"({"content":"a"})").status, 401);
  EXPECT_EQ(Call("POST", "/detokenize", R"({"tokens":[97]})").status, 401);
  const std::vector<std::pair<std::string, std::string>> bad = {{"authorization", "Bearer sk-bad"}};
  EXPECT_EQ(Call("GET", "/v1/models", "", bad).status, 401);
  const std::vector<std::pair<std::string, std::string>> good = {
      {"authorization", "Bearer sk-good"}};
  EXPECT_EQ(Call("GET", "/v1/models", "", good).status, 200);
  EXPECT_EQ(Call("GET", "/v1/models/tiny-model", "", good).status, 200);
  EXPECT_EQ(Call("POST", "/tokenize", R"({"content":"a"})", good).status, 200);
  EXPECT_EQ(Call("POST", "/detokenize", R"({"tokens":[97]})", good).status, 200);
}

TEST_F(AdminRoutesTest, MetricsAreTextAndNeedTheMetricsKeyWhenSet) {
  Build({});
  HttpResponse open = Call("GET", "/metrics");
  EXPECT_EQ(open.status, 200);
  EXPECT_EQ(open.content_type.rfind("text/plain", 0), 0u) << open.content_type;
  EXPECT_NE(open.body.find("pier_"), std::string::npos);

  AdminRoutesOptions options;
  options.metrics_key = "scrape-secret";
  Build(options);
  EXPECT_EQ(Call("GET", "/metrics").status, 401);
  EXPECT_EQ(Call("GET", "/metrics", "", {{"authorization", "Bearer scrape-secre"}}).status, 401);
  EXPECT_EQ(Call("GET", "/metrics", "", {{"authorization", "scrape-secret"}}).status, 401);
  HttpResponse keyed = Call("GET", "/metrics", "", {{"authorization", "Bearer scrape-secret"}});
  EXPECT_EQ(keyed.status, 200);
  EXPECT_EQ(keyed.body.find("scrape-secret"), std::string::npos);
}

TEST_F(AdminRoutesTest, TokenizeAddsSpecialTokensUnlessAsked) {
  Build({});
  HttpResponse r = Call("POST", "/tokenize", R"({"content":"hi"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Body(r), Json({{"tokens", {256, 'h', 'i'}}}));
  HttpResponse plain = Call("POST", "/tokenize", R"({"content":"hi","add_special":false})");
  ASSERT_EQ(plain.status, 200);
  EXPECT_EQ(Body(plain)["tokens"], Json({'h', 'i'}));
  // Unknown fields are ignored, as in the OpenAI routes.
  EXPECT_EQ(Call("POST", "/tokenize", R"({"content":"","with_pieces":false})").status, 200);
}

TEST_F(AdminRoutesTest, DetokenizeRoundTripsTokenize) {
  Build({});
  const std::string text = "héllo, wörld ✓";
  HttpResponse tokens = Call("POST", "/tokenize", Json({{"content", text}}).dump());
  ASSERT_EQ(tokens.status, 200);
  HttpResponse back =
      Call("POST", "/detokenize", Json({{"tokens", Body(tokens)["tokens"]}}).dump());
  ASSERT_EQ(back.status, 200) << back.body;
  EXPECT_EQ(Body(back)["content"], "<s>" + text);  // special tokens are kept
}

void ExpectBadRequest(const HttpResponse& r, const std::string& param) {
  EXPECT_EQ(r.status, 400) << r.body;
  Json body = Json::parse(r.body);
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  if (param.empty()) {
    EXPECT_TRUE(body["error"]["param"].is_null());
  } else {
    EXPECT_EQ(body["error"]["param"], param);
  }
}

TEST_F(AdminRoutesTest, TokenizeRejectsBadBodies) {
  Build({});
  ExpectBadRequest(Call("POST", "/tokenize", R"({"content": "a")"), "");
  ExpectBadRequest(Call("POST", "/tokenize", ""), "");
  ExpectBadRequest(Call("POST", "/tokenize", R"(["a"])"), "");
  ExpectBadRequest(Call("POST", "/tokenize", R"({})"), "content");
  ExpectBadRequest(Call("POST", "/tokenize", R"({"content": 5})"), "content");
  ExpectBadRequest(Call("POST", "/tokenize", R"({"content": "a", "add_special": "yes"})"),
                   "add_special");
  ExpectBadRequest(Call("POST", "/tokenize", "{\"content\": \"\xff\xfe\"}"), "");
}

TEST_F(AdminRoutesTest, DetokenizeRejectsIdsOutsideTheVocabulary) {
  Build({});
  ExpectBadRequest(Call("POST", "/detokenize", R"({"tokens": [1, 257]})"), "tokens");
  ExpectBadRequest(Call("POST", "/detokenize", R"({"tokens": [-1]})"), "tokens");
  ExpectBadRequest(Call("POST", "/detokenize", R"({"tokens": [18446744073709551615]})"), "tokens");
  ExpectBadRequest(Call("POST", "/detokenize", R"({"tokens": [1.5]})"), "tokens");
  ExpectBadRequest(Call("POST", "/detokenize", R"({"tokens": ["a"]})"), "tokens");
  ExpectBadRequest(Call("POST", "/detokenize", R"({"tokens": 5})"), "tokens");
  ExpectBadRequest(Call("POST", "/detokenize", R"({})"), "tokens");
  HttpResponse last = Call("POST", "/detokenize", R"({"tokens": [256, 0]})");
  EXPECT_EQ(last.status, 200);
  HttpResponse empty = Call("POST", "/detokenize", R"({"tokens": []})");
  ASSERT_EQ(empty.status, 200);
  EXPECT_EQ(Body(empty)["content"], "");
}

TEST(MetricsRouteLabelTest, KeepsKnownRoutesAndFoldsTheRest) {
  EXPECT_EQ(MetricsRouteLabel("/v1/chat/completions"), "/v1/chat/completions");
  EXPECT_EQ(MetricsRouteLabel("/health"), "/health");
  EXPECT_EQ(MetricsRouteLabel("/v1/responses"), "/v1/responses");
  EXPECT_EQ(MetricsRouteLabel("/v1/classify"), "/v1/classify");
  EXPECT_EQ(MetricsRouteLabel("/v1/models/abc"), "/v1/models/{id}");
  EXPECT_EQ(MetricsRouteLabel("/admin/models/abc"), "/admin/models/{name}");
  EXPECT_EQ(MetricsRouteLabel("/admin/models/abc/load"), "/admin/models/{name}/load");
  EXPECT_EQ(MetricsRouteLabel("/wp-admin/login.php"), "other");
  EXPECT_EQ(MetricsRouteLabel("/v1/completions/x"), "other");
}

}  // namespace
}  // namespace pier::api

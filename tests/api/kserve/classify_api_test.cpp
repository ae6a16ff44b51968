// The image-facing routes of tensor models (issue #45), over fake runners (no ONNX Runtime, no
// decoding: the fake "classifier" takes image bytes as its TensorFront would show them and
// scores every item alike): POST /v1/classify in both forms, a raw image body on KServe infer,
// labels in Triton's classification strings, Server-Timing, and the fallback under load with
// X-Pier-Fallback and the QoS counter.
#include "api/kserve/classify_api.h"

#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "api/kserve/classify_request.h"
#include "api/kserve/kserve_api.h"
#include "fake_tensor_runner.h"
#include "serving/serving_metrics.h"
#include "tensor_models/batch_tensors.h"

namespace pier::api {
namespace {

using Json = nlohmann::json;
using testing::FakeTensorRunner;

// What a TensorFront shows for an image classifier: a BYTES image input and labelled scores.
serving::TensorModelInfo ClassifierInfo(bool labelled) {
  serving::TensorModelInfo info;
  info.inputs = {{"image", ElementType::kBytes, {-1}}};
  info.outputs = {{"scores", ElementType::kFp32, {-1, 3}}};
  info.max_batch_size = 4;
  info.max_element_bytes["image"] = 1 << 20;
  if (labelled) info.labels["scores"] = {"cat", "dog", "bird"};
  return info;
}

class ClassifyApiTest : public ::testing::Test {
 protected:
  ClassifyApiTest()
      : primary_(FakeTensorRunner::Kind::kScores, ClassifierInfo(true)),
        light_(FakeTensorRunner::Kind::kScores, ClassifierInfo(false)),
        metrics_("pier") {
    primary_.row_scores = {0.2f, 0.7f, 0.1f};
    light_.row_scores = {0.6f, 0.3f, 0.1f};
    Register("vision", &primary_, 1);
    Register("light", &light_, 1);
    auto route_of = [this](const std::string& id) -> std::optional<serving::FallbackRoute> {
      if (id != "vision") return std::nullopt;
      return serving::FallbackRoute{.model = fallback_target_,
                                    .when = {.load_above = 0.8, .load_below = 0.6}};
    };
    ClassifyApiOptions classify;
    classify.fallback = {route_of, &switch_, &registry_, &metrics_};
    for (auto& ms : classify.class_max_queue.max_queue_ms) ms = 5000;
    classify_ = std::make_unique<ClassifyApi>(classify, &registry_, nullptr);
    classify_->Register(router_);
    KServeApiOptions kserve;
    kserve.fallback_of = route_of;
    kserve.fallback_switch = &switch_;
    kserve.metrics = &metrics_;
    for (auto& ms : kserve.class_max_queue.max_queue_ms) ms = 5000;
    kserve_ = std::make_unique<KServeApi>(kserve, &registry_, nullptr);
    kserve_->Register(router_);
  }

  void Register(const std::string& id, FakeTensorRunner* runner, int instances) {
    serving::ServedModel model;
    model.id = id;
    model.kind = serving::ModelKind::kTensor;
    model.tensors = runner;
    model.client = &client_;
    for (int i = 0; i < instances; ++i) model.instances.push_back(&client_);
    ASSERT_TRUE(registry_.Add(model).ok());
  }

  HttpResponse Call(const std::string& target, std::string body,
                    std::vector<std::pair<std::string, std::string>> headers = {}) {
    HttpRequest request;
    request.method = "POST";
    request.target = target;
    const size_t q = target.find('?');
    request.path = target.substr(0, q);
    request.query = q == std::string::npos ? "" : target.substr(q + 1);
    request.body = std::move(body);
    request.headers = std::move(headers);
    HttpResponse response = router_.Dispatch(request);
    if (response.deferred != nullptr) {
      response.deferred->Start([] {});
      std::optional<HttpResponse> answer = response.deferred->Poll();
      EXPECT_TRUE(answer.has_value()) << "the answer is not ready";
      return answer.value_or(HttpResponse{});
    }
    return response;
  }

  static std::string Header(const HttpResponse& response, const std::string& name) {
    for (const auto& [n, v] : response.headers) {
      if (n == name) return v;
    }
    return "";
  }

  std::string fallback_target_ = "light";
  FakeTensorRunner primary_;
  FakeTensorRunner light_;
  testing::NoEngineClient client_;
  serving::ModelRegistry registry_;
  serving::FallbackSwitch switch_;
  serving::ServingMetrics metrics_;
  std::unique_ptr<ClassifyApi> classify_;
  std::unique_ptr<KServeApi> kserve_;
  Router router_;
};

TEST_F(ClassifyApiTest, ARawImageGetsTheTopClassesWithLabelsAndTimings) {
  HttpResponse response =
      Call("/v1/classify?model=vision&top_k=2", "\x89PNG...", {{"content-type", "image/png"}});
  ASSERT_EQ(response.status, 200) << response.body;
  const Json body = Json::parse(response.body);
  EXPECT_EQ(body["object"], "classification");
  EXPECT_EQ(body["model"], "vision");
  ASSERT_EQ(body["data"].size(), 1u);
  const Json& classes = body["data"][0]["classes"];
  ASSERT_EQ(classes.size(), 2u);
  EXPECT_EQ(classes[0]["label"], "dog");
  EXPECT_EQ(classes[0]["class"], 1);
  EXPECT_NEAR(classes[0]["score"].get<double>(), 0.7, 1e-6);
  EXPECT_EQ(classes[1]["label"], "cat");
  EXPECT_NEAR(body["timing"]["compute_ms"].get<double>(), 4.0, 1e-9);
  EXPECT_EQ(Header(response, "Server-Timing"),
            "decode;dur=0.000, queue;dur=0.500, compute;dur=4.000");
  // The image reached the model as one BYTES element, the body's bytes exactly.
  ASSERT_EQ(primary_.last.inputs.size(), 1u);
  EXPECT_EQ(primary_.last.inputs[0].shape, std::vector<int64_t>{1});
  EXPECT_EQ(primary_.last.inputs[0].bytes.substr(4), "\x89PNG...");
  EXPECT_EQ(primary_.last.outputs, std::vector<std::string>{"scores"});
}

TEST_F(ClassifyApiTest, JsonTakesBase64AndDataUrlsOneRowPerImage) {
  const Json request = {{"model", "vision"},
                        {"image", {"aGVsbG8=", "data:image/jpeg;base64,d29ybGQ="}},
                        {"top_k", 1}};
  HttpResponse response = Call("/v1/classify", request.dump());
  ASSERT_EQ(response.status, 200) << response.body;
  const Json body = Json::parse(response.body);
  ASSERT_EQ(body["data"].size(), 2u);
  EXPECT_EQ(body["data"][1]["index"], 1);
  EXPECT_EQ(body["data"][1]["classes"][0]["label"], "dog");
  std::string images;
  tensor_models::AppendBytesElement(images, "hello");
  tensor_models::AppendBytesElement(images, "world");
  EXPECT_EQ(primary_.last.inputs[0].bytes, images);
}

TEST_F(ClassifyApiTest, RefusalsNameTheProblem) {
  struct Case {
    std::string target, body, content_type;
    int status;
    std::string says;
  };
  const Case cases[] = {
      {"/v1/classify", R"({"model": "vision"})", "", 400, "image is required"},
      {"/v1/classify", R"({"model": "vision", "image": "!!"})", "", 400, "image is not base64"},
      {"/v1/classify", R"({"model": "vision", "image": "aGk=", "top_k": 0})", "", 400,
       "top_k must be a whole number 1..1000"},
      {"/v1/classify", R"({"model": "vision", "image": "aGk=", "colour": 1})", "", 400,
       "unknown key \\\"colour\\\""},
      {"/v1/classify", "not json", "", 400, "the body is not JSON"},
      {"/v1/classify?top_k=2", "x", "image/png", 400, "name the model"},
      {"/v1/classify?model=vision", "", "image/png", 400, "the body holds no image"},
      {"/v1/classify?model=nope", "x", "image/png", 404, "nope"},
  };
  for (const Case& c : cases) {
    std::vector<std::pair<std::string, std::string>> headers;
    if (!c.content_type.empty()) headers.emplace_back("content-type", c.content_type);
    HttpResponse response = Call(c.target, c.body, headers);
    EXPECT_EQ(response.status, c.status) << c.target << " " << c.body << ": " << response.body;
    EXPECT_NE(response.body.find(c.says), std::string::npos) << response.body;
  }
}

TEST_F(ClassifyApiTest, KServeTakesARawImageAndClassificationNamesTheLabel) {
  HttpResponse response =
      Call("/v2/models/vision/infer", "\xff\xd8\xff...", {{"content-type", "image/jpeg"}});
  ASSERT_EQ(response.status, 200) << response.body;
  const Json output = Json::parse(response.body)["outputs"][0];
  EXPECT_EQ(output["name"], "scores");
  EXPECT_EQ(output["shape"], Json({1, 3}));
  EXPECT_FALSE(Header(response, "Server-Timing").empty());

  std::string image;
  tensor_models::AppendBytesElement(image, "jpeg bytes");
  const Json header = {
      {"inputs",
       {{{"name", "image"},
         {"datatype", "BYTES"},
         {"shape", {1}},
         {"parameters", {{"binary_data_size", image.size()}}}}}},
      {"outputs", {{{"name", "scores"}, {"parameters", {{"classification", 2}}}}}}};
  const std::string text = header.dump();
  response = Call("/v2/models/vision/infer", text + image,
                  {{"inference-header-content-length", std::to_string(text.size())}});
  ASSERT_EQ(response.status, 200) << response.body;
  EXPECT_EQ(Json::parse(response.body)["outputs"][0]["data"],
            Json({"0.700000:1:dog", "0.200000:0:cat"}));
}

TEST_F(ClassifyApiTest, TheFallbackAnswersAboveTheLoadAndSaysSo) {
  // 4 items waiting and running over max_batch_size 4 x 1 instance: load 1 > 0.8.
  primary_.stats.queued_items = 3;
  primary_.stats.running_items = 1;
  HttpResponse response =
      Call("/v1/classify?model=vision&top_k=1", "x", {{"content-type", "image/png"}});
  ASSERT_EQ(response.status, 200) << response.body;
  EXPECT_EQ(Json::parse(response.body)["model"], "light");
  EXPECT_EQ(Header(response, "X-Pier-Fallback"), "vision");
  // The light model has no labels: the class alone.
  EXPECT_FALSE(Json::parse(response.body)["data"][0]["classes"][0].contains("label"));
  // KServe infer shares the switch; a client may refuse the fallback.
  response = Call("/v2/models/vision/infer", "x", {{"content-type", "image/png"}});
  EXPECT_EQ(Json::parse(response.body)["model_name"], "light");
  response = Call("/v2/models/vision/infer", "x",
                  {{"content-type", "image/png"}, {"x-pier-no-fallback", "1"}});
  EXPECT_EQ(Json::parse(response.body)["model_name"], "vision");
  // Below the release threshold the primary answers again.
  primary_.stats.queued_items = 0;
  primary_.stats.running_items = 2;  // 0.5 < 0.6
  response = Call("/v1/classify?model=vision", "x", {{"content-type", "image/png"}});
  EXPECT_EQ(Json::parse(response.body)["model"], "vision");
  EXPECT_EQ(Header(response, "X-Pier-Fallback"), "");
  const std::string text = metrics_.Render({});
  EXPECT_NE(
      text.find("pier_qos_requests_total{model=\"vision\",tenant=\"default\",class=\"normal\","
                "outcome=\"fallback_load\"} 2"),
      std::string::npos)
      << text.substr(text.find("pier_qos_requests_total"), 1500);
}

TEST_F(ClassifyApiTest, AFallbackThatTakesOtherInputsIsNotUsed) {
  serving::TensorModelInfo info = ClassifierInfo(false);
  info.inputs[0].name = "pixels";
  FakeTensorRunner different(FakeTensorRunner::Kind::kScores, info);
  Register("different", &different, 1);
  fallback_target_ = "different";
  primary_.stats.queued_items = 8;
  HttpResponse response = Call("/v1/classify?model=vision", "x", {{"content-type", "image/png"}});
  ASSERT_EQ(response.status, 200) << response.body;
  EXPECT_EQ(Json::parse(response.body)["model"], "vision");
  EXPECT_NE(metrics_.Render({}).find("outcome=\"fallback_unavailable\"} 1"), std::string::npos);
}

TEST(ClassifyRequestTest, ReadsBothForms) {
  Result<ClassifyRequest> raw = ReadRawClassifyRequest("top_k=3&model=m&output=o", "img", 10);
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  EXPECT_EQ(raw->model, "m");
  EXPECT_EQ(raw->top_k, 3);
  EXPECT_EQ(raw->output, "o");
  EXPECT_EQ(raw->images, std::vector<std::string>{"img"});
  EXPECT_FALSE(ReadRawClassifyRequest("model=m&top_k=11", "img", 10).ok());
  Result<ClassifyRequest> json =
      ReadJsonClassifyRequest(R"({"model": "m", "image": "aGk=", "priority": 1})", 10);
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  EXPECT_EQ(json->images, std::vector<std::string>{"hi"});
  EXPECT_EQ(json->top_k, kDefaultTopK);
  EXPECT_EQ(json->priority, 1u);
}

}  // namespace
}  // namespace pier::api

// KServeApi's routes for tensor models, dispatched through a Router (no sockets): a fake
// TensorRunner (fake_tensor_runner.h) registered as a kTensor ServedModel that adds its
// inputs, and one that gives them back (BYTES, FP16, BOOL, INT8): metadata, Triton's config,
// infer in JSON and binary both ways, classification, the body limit of the infer route, and
// every refusal (400 naming the input, 404, 429, 503; an LLM's message), and the client's
// disconnect raising the runner's cancelled flag.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "api/kserve/kserve_api.h"
#include "api/kserve/tensor_json.h"
#include "api/kserve/tensor_model_json.h"
#include "fake_tensor_runner.h"
#include "tensor_models/batch_tensors.h"

namespace pier::api {
namespace {

using tensor_models::AppendBytesElement;

using Json = nlohmann::json;
using testing::FakeTensorRunner;

// Enough of a tokenizer for an LLM to be registered (nothing is tokenized).
class NoTokenizer final : public tokenizer::Tokenizer {
 public:
  Result<std::vector<tokenizer::TokenId>> Encode(std::string_view,
                                                 const tokenizer::EncodeOptions&) const override {
    return std::vector<tokenizer::TokenId>{};
  }
  std::string TokenBytes(tokenizer::TokenId) const override { return ""; }
  std::string_view Piece(tokenizer::TokenId) const override { return ""; }
  tokenizer::TokenType Type(tokenizer::TokenId) const override {
    return tokenizer::TokenType::kNormal;
  }
  int32_t vocab_size() const override { return 1; }
  tokenizer::TokenId bos_id() const override { return -1; }
  tokenizer::TokenId eos_id() const override { return -1; }
  bool add_bos() const override { return false; }
  bool add_eos() const override { return false; }
  const std::vector<tokenizer::TokenId>& end_of_generation_ids() const override { return eog_; }

 private:
  std::vector<tokenizer::TokenId> eog_;
};

serving::TensorModelInfo AddInfo() {
  serving::TensorModelInfo info;
  info.inputs = {{"x", ElementType::kFp32, {-1, 4}}, {"y", ElementType::kFp32, {-1, 4}}};
  info.outputs = {{"sum", ElementType::kFp32, {-1, 4}}, {"x_copy", ElementType::kFp32, {-1, 4}}};
  info.max_batch_size = 8;
  info.preferred_batch_sizes = {4, 8};
  return info;
}

serving::TensorModelInfo IdentityInfo() {
  serving::TensorModelInfo info;
  info.inputs = {{"s", ElementType::kBytes, {-1}},
                 {"h", ElementType::kFp16, {-1, 2}},
                 {"b", ElementType::kBool, {-1, 2}},
                 {"i8", ElementType::kInt8, {-1, 2}}};
  for (const TensorSpec& in : info.inputs)
    info.outputs.push_back({in.name + "_out", in.type, in.shape});
  info.max_batch_size = 4;
  return info;
}

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

class KServeTensorApiTest : public ::testing::Test {
 protected:
  KServeTensorApiTest()
      : add_(FakeTensorRunner::Kind::kAdd, AddInfo()),
        identity_(FakeTensorRunner::Kind::kIdentity, IdentityInfo()) {
    Register("add", &add_);
    Register("ident", &identity_);
    serving::ServedModel llm;
    llm.id = "llm";
    llm.client = &client_;
    llm.tokenizer = &tokenizer_;
    EXPECT_TRUE(registry_.Add(llm).ok());
    KServeApiOptions options;
    options.max_body_bytes = 1 << 20;
    for (auto& ms : options.class_max_queue.max_queue_ms) ms = 5000;
    api_ = std::make_unique<KServeApi>(options, &registry_, nullptr);
    api_->Register(router_);
  }

  void Register(const std::string& id, FakeTensorRunner* runner) {
    serving::ServedModel model;
    model.id = id;
    model.kind = serving::ModelKind::kTensor;
    model.tensors = runner;
    model.client = &client_;
    ASSERT_TRUE(registry_.Add(model).ok());
  }

  HttpRequest Request(const std::string& method, const std::string& path, std::string body = "",
                      std::vector<std::pair<std::string, std::string>> headers = {}) {
    HttpRequest request;
    request.method = method;
    request.target = request.path = path;
    request.body = std::move(body);
    request.headers = std::move(headers);
    return request;
  }

  // The response, a deferred one polled to its answer.
  HttpResponse Call(const HttpRequest& request) {
    HttpResponse response = router_.Dispatch(request);
    if (response.deferred != nullptr) {
      response.deferred->Start([] {});
      std::optional<HttpResponse> answer = response.deferred->Poll();
      EXPECT_TRUE(answer.has_value()) << "the answer is not ready";
      if (!answer.has_value()) return HttpResponse{};
      return std::move(*answer);
    }
    return response;
  }

  HttpResponse Infer(const std::string& model, const Json& body) {
    return Call(Request("POST", "/v2/models/" + model + "/infer", body.dump()));
  }

  // A binary request: the JSON header, then the bytes.
  HttpResponse InferBinary(const std::string& model, const Json& header, const std::string& bytes) {
    const std::string text = header.dump();
    return Call(Request("POST", "/v2/models/" + model + "/infer", text + bytes,
                        {{"inference-header-content-length", std::to_string(text.size())}}));
  }

  // A binary answer: its JSON header and the bytes after it.
  static std::pair<Json, std::string> SplitBinary(const HttpResponse& response) {
    for (const auto& [name, value] : response.headers) {
      if (name != "Inference-Header-Content-Length") continue;
      const size_t n = std::stoul(value);
      return {Json::parse(response.body.substr(0, n)), response.body.substr(n)};
    }
    ADD_FAILURE() << "no Inference-Header-Content-Length";
    return {};
  }

  void ExpectError(const HttpResponse& response, int status, const std::string& want) {
    EXPECT_EQ(response.status, status) << response.body;
    EXPECT_NE(response.body.find(want), std::string::npos)
        << response.body << " (wanted: " << want << ")";
  }

  static Json AddRequest(Json x, Json y, std::vector<int64_t> shape = {1, 4}) {
    return Json{{"inputs",
                 {{{"name", "x"}, {"datatype", "FP32"}, {"shape", shape}, {"data", x}},
                  {{"name", "y"}, {"datatype", "FP32"}, {"shape", shape}, {"data", y}}}}};
  }

  FakeTensorRunner add_;
  FakeTensorRunner identity_;
  testing::NoEngineClient client_;
  NoTokenizer tokenizer_;
  serving::ModelRegistry registry_;
  std::unique_ptr<KServeApi> api_;
  Router router_;
};

TEST_F(KServeTensorApiTest, MetadataGivesTheModelsTensors) {
  HttpResponse response = Call(Request("GET", "/v2/models/add"));
  ASSERT_EQ(response.status, 200) << response.body;
  EXPECT_EQ(Json::parse(response.body), Json::parse(R"({
      "name": "add", "versions": ["1"], "platform": "onnxruntime_onnx",
      "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]},
                 {"name": "y", "datatype": "FP32", "shape": [-1, 4]}],
      "outputs": [{"name": "sum", "datatype": "FP32", "shape": [-1, 4]},
                  {"name": "x_copy", "datatype": "FP32", "shape": [-1, 4]}],
      "parameters": {"kind": "tensor", "max_batch_size": 8}})"));
  EXPECT_EQ(Call(Request("GET", "/v2/models/add/versions/1")).status, 200);
  EXPECT_EQ(Call(Request("GET", "/v2/models/add/ready")).status, 200);
}

TEST_F(KServeTensorApiTest, ConfigIsTritonsWithoutTheBatchDimension) {
  HttpResponse response = Call(Request("GET", "/v2/models/add/config"));
  ASSERT_EQ(response.status, 200) << response.body;
  EXPECT_EQ(Json::parse(response.body), Json::parse(R"({
      "name": "add", "platform": "onnxruntime_onnx", "backend": "onnxruntime",
      "max_batch_size": 8,
      "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [4]},
                {"name": "y", "data_type": "TYPE_FP32", "dims": [4]}],
      "output": [{"name": "sum", "data_type": "TYPE_FP32", "dims": [4]},
                 {"name": "x_copy", "data_type": "TYPE_FP32", "dims": [4]}],
      "dynamic_batching": {"preferred_batch_size": [4, 8],
                           "max_queue_delay_microseconds": 2000}})"));
  Json ident = Json::parse(Call(Request("GET", "/v2/models/ident/versions/1/config")).body);
  EXPECT_EQ(ident["input"][0],
            Json::parse(R"({"name": "s", "data_type": "TYPE_STRING", "dims": []})"));
  EXPECT_EQ(ident["input"][2]["data_type"], "TYPE_BOOL");
  // Another kind's config: its metadata's tensors, no batching.
  Json llm = Json::parse(Call(Request("GET", "/v2/models/llm/config")).body);
  EXPECT_EQ(llm["max_batch_size"], 0);
  EXPECT_EQ(llm["input"][0]["data_type"], "TYPE_STRING");
}

TEST_F(KServeTensorApiTest, InfersInJson) {
  HttpResponse response = Infer("add", [] {
    Json r = AddRequest({{1, 2, 3, 4}, {5, 6, 7, 8}}, {1, 1, 1, 1, 0.5, 0.5, 0.5, 0.5}, {2, 4});
    r["id"] = "q1";
    r["parameters"] = {{"priority", 1}};
    return r;
  }());
  ASSERT_EQ(response.status, 200) << response.body;
  EXPECT_EQ(response.content_type, "application/json");
  EXPECT_EQ(Json::parse(response.body), Json::parse(R"({
      "model_name": "add", "model_version": "1", "id": "q1",
      "outputs": [{"name": "sum", "datatype": "FP32", "shape": [2, 4],
                   "data": [2, 3, 4, 5, 5.5, 6.5, 7.5, 8.5]},
                  {"name": "x_copy", "datatype": "FP32", "shape": [2, 4],
                   "data": [1, 2, 3, 4, 5, 6, 7, 8]}]})"));
  EXPECT_EQ(add_.last.priority, 3);  // Triton's level 1: the highest
  EXPECT_NE(add_.last.cancelled, nullptr);
  // The class's max queue time (5 s in every class here) is the runner's deadline.
  EXPECT_GT(add_.last.deadline, std::chrono::steady_clock::now());
  EXPECT_LE(add_.last.deadline, std::chrono::steady_clock::now() + std::chrono::seconds(5));
}

TEST_F(KServeTensorApiTest, InfersInBinaryBothWaysAndOnlyTheOutputsAsked) {
  const std::string x = Bytes<float>({1, 2, 3, 4});
  const std::string y = Bytes<float>({10, 20, 30, 40});
  Json header = {
      {"inputs",
       {{{"name", "x"},
         {"datatype", "FP32"},
         {"shape", {1, 4}},
         {"parameters", {{"binary_data_size", 16}}}},
        {{"name", "y"},
         {"datatype", "FP32"},
         {"shape", {1, 4}},
         {"parameters", {{"binary_data_size", 16}}}}}},
      {"outputs",
       {{{"name", "x_copy"}, {"parameters", {{"binary_data", false}}}}, {{"name", "sum"}}}},
      {"parameters", {{"binary_data_output", true}}}};
  HttpResponse response = InferBinary("add", header, x + y);
  ASSERT_EQ(response.status, 200) << response.body;
  EXPECT_EQ(response.content_type, "application/octet-stream");
  auto [body, bytes] = SplitBinary(response);
  ASSERT_EQ(body["outputs"].size(), 2u);
  EXPECT_EQ(body["outputs"][0], Json::parse(R"({"name": "x_copy", "datatype": "FP32",
                                                 "shape": [1, 4], "data": [1, 2, 3, 4]})"));
  EXPECT_EQ(body["outputs"][1], Json::parse(R"({"name": "sum", "datatype": "FP32",
                 "shape": [1, 4], "parameters": {"binary_data_size": 16}})"));
  EXPECT_EQ(bytes, Bytes<float>({11, 22, 33, 44}));
  EXPECT_EQ(add_.last.outputs, (std::vector<std::string>{"x_copy", "sum"}));
}

TEST_F(KServeTensorApiTest, BytesFp16BoolAndInt8GoThroughBothForms) {
  Json request = {
      {"inputs",
       {{{"name", "s"}, {"datatype", "BYTES"}, {"shape", {2}}, {"data", {"héllo", ""}}},
        {{"name", "h"},
         {"datatype", "FP16"},
         {"shape", {2, 2}},
         {"data", {{0.5, -1}, {65504, 0.1}}}},
        {{"name", "b"},
         {"datatype", "BOOL"},
         {"shape", {2, 2}},
         {"data", {true, false, false, true}}},
        {{"name", "i8"}, {"datatype", "INT8"}, {"shape", {2, 2}}, {"data", {-128, 0, 1, 127}}}}}};
  HttpResponse json = Infer("ident", request);
  ASSERT_EQ(json.status, 200) << json.body;
  Json outputs = Json::parse(json.body)["outputs"];
  EXPECT_EQ(outputs[0]["data"], Json({"héllo", ""}));
  EXPECT_EQ(outputs[0]["datatype"], "BYTES");
  // FP16 as JSON numbers: the half nearest 0.1 is 0.0999755859375.
  EXPECT_EQ(outputs[1]["data"], Json({0.5, -1, 65504, 0.0999755859375}));
  EXPECT_EQ(outputs[2]["data"], Json({true, false, false, true}));
  EXPECT_EQ(outputs[3]["data"], Json({-128, 0, 1, 127}));

  request["parameters"] = {{"binary_data_output", true}};
  HttpResponse binary = Infer("ident", request);
  ASSERT_EQ(binary.status, 200) << binary.body;
  auto [header, bytes] = SplitBinary(binary);
  std::string strings;
  AppendBytesElement(strings, "héllo");
  AppendBytesElement(strings, "");
  EXPECT_EQ(header["outputs"][0]["parameters"]["binary_data_size"], strings.size());
  EXPECT_EQ(header["outputs"][1]["parameters"]["binary_data_size"], 8);
  EXPECT_EQ(bytes, strings + Bytes<uint16_t>({0x3800, 0xbc00, 0x7bff, 0x2e66}) +
                       std::string("\x01\0\0\x01\x80\0\x01\x7f", 8));
}

TEST_F(KServeTensorApiTest, ClassificationGivesTopKScoreIndexStringsPerBatchRow) {
  Json request = AddRequest({{0.1, 0.7, 0.2, 0.0}, {3, 1, 2, 3}}, {0, 0, 0, 0, 0, 0, 0, 0}, {2, 4});
  request["outputs"] = {{{"name", "sum"}, {"parameters", {{"classification", 2}}}}};
  HttpResponse response = Infer("add", request);
  ASSERT_EQ(response.status, 200) << response.body;
  Json output = Json::parse(response.body)["outputs"][0];
  EXPECT_EQ(output["datatype"], "BYTES");
  EXPECT_EQ(output["shape"], Json({2, 2}));
  // Ties keep the lower index first; scores as %f.
  EXPECT_EQ(output["data"], Json({"0.700000:1", "0.200000:2", "3.000000:0", "3.000000:3"}));
  // k larger than a row: the whole row.
  request["outputs"][0]["parameters"]["classification"] = 10;
  output = Json::parse(Infer("add", request).body)["outputs"][0];
  EXPECT_EQ(output["shape"], Json({2, 4}));
  // Binary: length-prefixed strings.
  request["outputs"][0]["parameters"] = {{"classification", 1}, {"binary_data", true}};
  response = Infer("add", request);
  ASSERT_EQ(response.status, 200);
  std::string want;
  AppendBytesElement(want, "0.700000:1");
  AppendBytesElement(want, "3.000000:0");
  EXPECT_EQ(response.body.substr(response.body.size() - want.size()), want);
  // A BYTES output cannot be classified.
  Json strings = {
      {"inputs", {{{"name", "s"}, {"datatype", "BYTES"}, {"shape", {1}}, {"data", {"a"}}}}},
      {"outputs", {{{"name", "s_out"}, {"parameters", {{"classification", 1}}}}}}};
  ExpectError(Infer("ident", strings), 400,
              "model 'ident': output 's_out' is BYTES: classification takes numbers");
}

TEST_F(KServeTensorApiTest, RefusalsNameTheInputAndWhatWasExpected) {
  // The reading's own checks.
  ExpectError(Infer("add", AddRequest({1, 2, 3}, {1, 2, 3, 4})), 400,
              "input 'x': data holds 3 values, shape [1, 4] needs 4");
  ExpectError(Infer("add", AddRequest({1, 2, 3, 1e40}, {1, 2, 3, 4})), 400,
              "input 'x': data[3] is 1e+40: out of FP32's finite range");
  // The runner's (CheckTensorRequest's) checks, as 400s.
  Json wrong_type = AddRequest({1, 2, 3, 4}, {1, 2, 3, 4});
  wrong_type["inputs"][1]["datatype"] = "INT32";
  ExpectError(Infer("add", wrong_type), 400, "input 'y': expected FP32, got INT32");
  ExpectError(Infer("add", AddRequest({1, 2, 3, 4}, {1, 2, 3, 4}, {4})), 400,
              "input 'x': expected shape [-1, 4], got [4]");
  Json unknown_output = AddRequest({1, 2, 3, 4}, {1, 2, 3, 4});
  unknown_output["outputs"] = {{{"name", "nope"}}};
  ExpectError(Infer("add", unknown_output), 400, "unknown output 'nope'");
  // A binary header that lies.
  Json header = {{"inputs",
                  {{{"name", "x"},
                    {"datatype", "FP32"},
                    {"shape", {1, 4}},
                    {"parameters", {{"binary_data_size", 64}}}}}}};
  ExpectError(InferBinary("add", header, Bytes<float>({1, 2, 3, 4})), 400,
              "input 'x': binary_data_size 64 goes past the binary data (16 bytes");
  ExpectError(Call(Request("POST", "/v2/models/add/infer", "{\"inputs\": [", {})), 400,
              "invalid JSON");
  EXPECT_EQ(add_.submitted, 0);
}

TEST_F(KServeTensorApiTest, UnknownModelsQueueRefusalsAndAnLlm) {
  ExpectError(Infer("nope", AddRequest({1, 2, 3, 4}, {1, 2, 3, 4})), 404, "nope");
  ExpectError(Call(Request("GET", "/v2/models/nope/config")), 404, "nope");
  add_.refuse = ResourceExhaustedError("model 'add': the queue is full (1024 items)");
  HttpResponse full = Infer("add", AddRequest({1, 2, 3, 4}, {1, 2, 3, 4}));
  ExpectError(full, 429, "the queue is full");
  EXPECT_EQ(full.headers, (std::vector<std::pair<std::string, std::string>>{{"Retry-After", "1"}}));
  add_.refuse = UnavailableError("model 'add' is shutting down");
  ExpectError(Infer("add", AddRequest({1, 2, 3, 4}, {1, 2, 3, 4})), 503, "shutting down");
  add_.refuse = Status::Ok();
  add_.fail = ResourceExhaustedError("model 'add': waited past its class's max queue time");
  HttpResponse late = Infer("add", AddRequest({1, 2, 3, 4}, {1, 2, 3, 4}));
  ExpectError(late, 429, "max queue time");
  EXPECT_EQ(late.headers, (std::vector<std::pair<std::string, std::string>>{{"Retry-After", "1"}}));
  ExpectError(Infer("llm", AddRequest({1, 2, 3, 4}, {1, 2, 3, 4})), 400,
              "model 'llm' is a generate model (an LLM): /infer serves embedding and tensor "
              "models; use POST /v1/completions or /v1/chat/completions for text");
  ExpectError(Call(Request("POST", "/v2/models/add/generate", "{}")), 400,
              "model 'add' is a tensor model: generate serves LLMs; use infer");
}

TEST_F(KServeTensorApiTest, AClientThatGoesAwayRaisesTheCancelledFlag) {
  add_.hold = true;
  HttpResponse response = router_.Dispatch(
      Request("POST", "/v2/models/add/infer", AddRequest({1, 2, 3, 4}, {1, 2, 3, 4}).dump()));
  ASSERT_NE(response.deferred, nullptr);
  response.deferred->Start([] {});
  EXPECT_FALSE(response.deferred->Poll().has_value());
  ASSERT_NE(add_.last.cancelled, nullptr);
  EXPECT_FALSE(add_.last.cancelled->load());
  response.deferred->Cancel("client disconnected");
  EXPECT_TRUE(add_.last.cancelled->load());
  response.deferred.reset();
  add_.Release();  // the answer finds nobody waiting: nothing happens
}

TEST_F(KServeTensorApiTest, TheInferRouteOfATensorModelTakesAFullBatch) {
  // add: 8 rows of two [4] FP32 inputs; JSON at 32 bytes a value, plus 64 KiB for the rest,
  // over a floor of 1 MiB (the server's limit): the floor.
  EXPECT_EQ(router_.BodyLimitFor(Request("POST", "/v2/models/add/infer")), size_t{1} << 20);
  EXPECT_EQ(router_.BodyLimitFor(Request("POST", "/v2/models/llm/infer")), std::nullopt);
  EXPECT_EQ(router_.BodyLimitFor(Request("GET", "/v2/models/add")), std::nullopt);
  EXPECT_EQ(router_.BodyLimitFor(Request("POST", "/v1/chat/completions")), std::nullopt);

  // A ResNet-like input: 8 x 3 x 224 x 224 FP32.
  serving::TensorModelInfo resnet;
  resnet.inputs = {{"x", ElementType::kFp32, {-1, 3, 224, 224}}};
  resnet.max_batch_size = 8;
  const int64_t values = 8 * 3 * 224 * 224;
  EXPECT_EQ(TensorInferBodyLimit(resnet, 4 << 20, /*json=*/true),
            kInferHeaderAllowance + values * kJsonBytesPerElement);
  EXPECT_EQ(TensorInferBodyLimit(resnet, 4 << 20, /*json=*/false),
            std::max<int64_t>(4 << 20, kInferHeaderAllowance + values * 4));
  // Open dimensions count as 1; the ceiling holds.
  resnet.inputs[0].shape = {-1, 3, -1, -1};
  EXPECT_EQ(TensorInferBodyLimit(resnet, 4 << 20, true), 4 << 20);
  resnet.max_batch_size = 1 << 20;
  resnet.inputs[0].shape = {-1, 3, 224, 224};
  EXPECT_EQ(TensorInferBodyLimit(resnet, 4 << 20, true), kMaxTensorBodyBytes);
}

}  // namespace
}  // namespace pier::api

// The shared reading of a KServe infer request (kserve_infer_request.h), which the HTTP route
// and the gRPC service both call: texts and token ids read, and each leniency a bad-input run
// found refused naming its field (issue #41): a string as `data`, a lone attention_mask, data
// given both ways, binary bytes no input claims, a priority that is not an integer >= 0.
#include "api/kserve/kserve_infer_request.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace pier::api {
namespace {

using Json = nlohmann::json;

// Texts in Triton's binary form: a 4-byte little-endian length, then the bytes.
std::string Prefixed(const std::vector<std::string>& texts) {
  std::string out;
  for (const std::string& t : texts) {
    const auto n = static_cast<uint32_t>(t.size());
    for (int i = 0; i < 4; ++i) out += static_cast<char>((n >> (8 * i)) & 0xff);
    out += t;
  }
  return out;
}

std::string Int64Bytes(const std::vector<int64_t>& values) {
  std::string out(values.size() * sizeof(int64_t), '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// The refusal of `request`, which must be INVALID_ARGUMENT holding `want`.
void ExpectRefused(const std::string& request, const std::string& binary, const std::string& want) {
  Result<EmbedInferRequest> read = ReadEmbedInferRequest("m", Json::parse(request), binary);
  ASSERT_FALSE(read.ok()) << request;
  EXPECT_EQ(read.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(read.status().message().find(want), std::string::npos)
      << read.status().message() << " (wanted: " << want << ")";
}

TEST(KServeInferRequestTest, ReadsTextsFromJsonOrBinaryData) {
  Result<EmbedInferRequest> read = ReadEmbedInferRequest(
      "m", Json::parse(R"({"id": "r1", "inputs": [{"name": "text", "datatype": "BYTES",
                           "shape": [2, 1], "data": [["a"], ["b"]]}],
                           "parameters": {"truncate": false, "priority": 2}})"),
      "");
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->texts, (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(read->token_ids.has_value());
  EXPECT_FALSE(read->truncate);
  EXPECT_EQ(read->priority, 2u);
  EXPECT_EQ(read->id, "r1");
  const std::string binary = Prefixed({"héllo", ""});
  read = ReadEmbedInferRequest(
      "m",
      Json{{"inputs",
            {{{"name", "text"},
              {"datatype", "BYTES"},
              {"shape", {2}},
              {"parameters", {{"binary_data_size", binary.size()}}}}}},
           {"outputs", {{{"name", "embedding"}, {"parameters", {{"binary_data", true}}}}}}},
      binary);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->texts, (std::vector<std::string>{"héllo", ""}));
  EXPECT_TRUE(read->binary_output);
  EXPECT_EQ(read->priority, 0u);
}

TEST(KServeInferRequestTest, ReadsTokenIdsWithTheMaskFirstOrSecond) {
  for (
      const char* request : {
          R"({"inputs": [{"name": "input_ids", "datatype": "INT64", "shape": [1, 3], "data": [5, 6, 0]},
                          {"name": "attention_mask", "datatype": "INT64", "shape": [1, 3], "data": [1, 1, 0]}]})",
          R"({"inputs": [{"name": "attention_mask", "datatype": "INT64", "shape": [1, 3], "data": [1, 1, 0]},
                          {"name": "input_ids", "datatype": "INT64", "shape": [1, 3], "data": [5, 6, 0]}]})"}) {
    Result<EmbedInferRequest> read = ReadEmbedInferRequest("m", Json::parse(request), "");
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    ASSERT_TRUE(read->token_ids.has_value());
    EXPECT_EQ(*read->token_ids, (std::vector<std::vector<int32_t>>{{5, 6}}));
  }
}

TEST(KServeInferRequestTest, RefusesAStringOrNumberAsData) {
  ExpectRefused(R"({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                                "data": "hello"}]})",
                "", "input 'text' needs `data`: a list of strings");
  ExpectRefused(R"({"inputs": [{"name": "ids", "datatype": "INT64", "shape": [1], "data": 7}]})",
                "", "input 'ids' needs `data`: a list of integers");
}

TEST(KServeInferRequestTest, RefusesALoneAttentionMask) {
  ExpectRefused(R"({"inputs": [{"name": "attention_mask", "datatype": "INT64", "shape": [1, 3],
                                "data": [1, 1, 1]}]})",
                "", "input 'attention_mask' came alone");
  ExpectRefused(R"({"inputs": [
      {"name": "attention_mask", "datatype": "INT64", "shape": [2], "data": [1, 1]},
      {"name": "attention_mask", "datatype": "INT64", "shape": [2], "data": [1, 1]}]})",
                "", "only 'attention_mask' is taken");
}

TEST(KServeInferRequestTest, RefusesDataGivenBothAsJsonAndBinary) {
  const std::string texts = Prefixed({"abc"});
  ExpectRefused(Json{{"inputs",
                      {{{"name", "text"},
                        {"datatype", "BYTES"},
                        {"shape", {1}},
                        {"data", {"xyz"}},
                        {"parameters", {{"binary_data_size", texts.size()}}}}}}}
                    .dump(),
                texts, "input 'text' has both `data` and binary data");
  const std::string ids = Int64Bytes({5, 6});
  ExpectRefused(R"({"inputs": [{"name": "ids", "datatype": "INT64", "shape": [2], "data": [5, 6],
                                "parameters": {"binary_data_size": 16}}]})",
                ids, "input 'ids' has both `data` and binary data");
}

TEST(KServeInferRequestTest, RefusesBinaryBytesNoInputClaims) {
  const std::string texts = Prefixed({"abc"});
  ExpectRefused(Json{{"inputs",
                      {{{"name", "text"},
                        {"datatype", "BYTES"},
                        {"shape", {1}},
                        {"parameters", {{"binary_data_size", texts.size()}}}}}}}
                    .dump(),
                texts + "tail", "binary data after the JSON header is 11 bytes");
  // JSON data, and bytes after the header nobody asked for.
  ExpectRefused(R"({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                                "data": ["a"]}]})",
                "xyz", "add up to 0");
  ExpectRefused(R"({"inputs": [{"name": "ids", "datatype": "INT64", "shape": [1],
                                "parameters": {"binary_data_size": 8}}]})",
                Int64Bytes({5, 6}), "is 16 bytes but the inputs' binary_data_size add up to 8");
}

TEST(KServeInferRequestTest, RefusesParametersOfTheWrongKindNamingThem) {
  const std::string text =
      R"("inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["a"]}])";
  for (const char* priority : {R"("abc")", "-5", "1.5", "true", "null"}) {
    ExpectRefused("{" + text + R"(, "parameters": {"priority": )" + priority + "}}", "",
                  "parameter priority must be an integer, 0 or more");
  }
  ExpectRefused("{" + text + R"(, "parameters": {"truncate": "yes"}})", "",
                "parameter truncate must be true or false");
  ExpectRefused("{" + text + R"(, "parameters": [1]})", "", "parameters must be an object");
  ExpectRefused("{" + text + R"(, "outputs": [{"name": "logits"}]})", "",
                "model 'm' has no output 'logits'");
}

}  // namespace
}  // namespace pier::api

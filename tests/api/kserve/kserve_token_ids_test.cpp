// KServe token-id inputs (kserve_token_ids.h): JSON and binary data, INT32 and INT64, one row
// or many, the attention mask dropping padding, and every malformed tensor refused naming it.
#include "api/kserve/kserve_token_ids.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace pier::api {
namespace {

using Json = nlohmann::json;

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

TEST(KServeTokenIdsTest, ReadsJsonRowsAndDropsPaddingByTheMask) {
  const Json inputs = Json::parse(R"([
    {"name": "input_ids", "datatype": "INT64", "shape": [2, 4], "data": [[101, 7, 8, 102], [101, 9, 102, 0]]},
    {"name": "attention_mask", "datatype": "INT64", "shape": [2, 4], "data": [1, 1, 1, 1, 1, 1, 1, 0]}
  ])");
  Result<std::vector<std::vector<int32_t>>> rows = ReadTokenIdInputs(inputs, "");
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EXPECT_EQ(*rows, (std::vector<std::vector<int32_t>>{{101, 7, 8, 102}, {101, 9, 102}}));
  // One sequence, shape [len], no mask.
  rows = ReadTokenIdInputs(
      Json::parse(R"([{"name": "ids", "datatype": "INT32", "shape": [3], "data": [5, 6, 7]}])"),
      "");
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EXPECT_EQ(*rows, (std::vector<std::vector<int32_t>>{{5, 6, 7}}));
}

TEST(KServeTokenIdsTest, ReadsBinaryDataInInputOrder) {
  const std::string binary =
      Bytes(std::vector<int32_t>{1, 2, 3, 4}) + Bytes(std::vector<int64_t>{1, 1, 1, 0});
  const Json inputs = Json::parse(R"([
    {"name": "input_ids", "datatype": "INT32", "shape": [2, 2], "parameters": {"binary_data_size": 16}},
    {"name": "attention_mask", "datatype": "INT64", "shape": [2, 2], "parameters": {"binary_data_size": 32}}
  ])");
  Result<std::vector<std::vector<int32_t>>> rows = ReadTokenIdInputs(inputs, binary);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EXPECT_EQ(*rows, (std::vector<std::vector<int32_t>>{{1, 2}, {3}}));
}

TEST(KServeTokenIdsTest, RefusesMalformedTensorsNamingThem) {
  auto refused = [](const std::string& json, const std::string& binary, const std::string& want) {
    Result<std::vector<std::vector<int32_t>>> rows = ReadTokenIdInputs(Json::parse(json), binary);
    ASSERT_FALSE(rows.ok()) << json;
    EXPECT_NE(rows.status().message().find(want), std::string::npos)
        << rows.status().message() << " (wanted: " << want << ")";
  };
  refused(R"([{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}])", "",
          "input 'x' has datatype 'FP32'; token ids are INT32 or INT64");
  refused(R"([{"name": "x", "datatype": "INT64", "shape": [2, 2], "data": [1, 2, 3]}])", "",
          "input 'x' has 3 values for a shape of 4");
  refused(R"([{"name": "x", "datatype": "INT64", "shape": [1, 2, 3], "data": []}])", "",
          "needs a shape [len] or [n, len]");
  refused(R"([{"name": "x", "datatype": "INT64", "shape": [0], "data": []}])", "",
          "each dimension of its shape is 1 to 1048576");
  refused(R"([{"name": "x", "datatype": "INT64", "shape": [2], "data": ["a", "b"]}])", "",
          "needs `data`: a list of integers");
  refused(R"([{"name": "x", "datatype": "INT64", "shape": [1], "data": 5}])", "",
          "input 'x' needs `data`: a list of integers");
  refused(R"([{"name": "attention_mask", "datatype": "INT64", "shape": [2], "data": [1, 1]}])", "",
          "input 'attention_mask' came alone");
  refused(R"([{"name": "x", "datatype": "INT64", "shape": [1], "data": [-3]}])", "",
          "row 0 holds token id -3");
  refused(R"([{"name": "x", "datatype": "INT64", "shape": [1], "data": [4294967296]}])", "",
          "holds token id 4294967296");
  refused(R"([{"name": "x", "datatype": "INT64", "shape": [2], "data": [1, 2]},
              {"name": "mask", "datatype": "INT64", "shape": [2], "data": [1, 1]}])",
          "", "only 'attention_mask' is taken");
  refused(R"([{"name": "x", "datatype": "INT64", "shape": [2], "data": [1, 2]},
              {"name": "attention_mask", "datatype": "INT64", "shape": [1, 2], "data": [1, 1]}])",
          "", "must have the shape of input 'x'");
  refused(R"([{"name": "x", "datatype": "INT64", "shape": [2], "data": [1, 2]},
              {"name": "attention_mask", "datatype": "INT64", "shape": [2], "data": [1, 2]}])",
          "", "holds 2; only 0 (padding) and 1 (a token)");
  refused(R"([{"name": "x", "datatype": "INT64", "shape": [2], "data": [1, 2]},
              {"name": "attention_mask", "datatype": "INT64", "shape": [2], "data": [0, 0]}])",
          "", "row 0 has no token");
  refused(
      R"([{"name": "x", "datatype": "INT32", "shape": [2], "parameters": {"binary_data_size": 4}}])",
      Bytes(std::vector<int32_t>{1, 2}), "binary_data_size must be 8 bytes");
  refused(
      R"([{"name": "x", "datatype": "INT32", "shape": [2], "parameters": {"binary_data_size": 8}}])",
      Bytes(std::vector<int32_t>{1}), "binary_data_size must be 8 bytes");
  refused(R"([])", "", "token ids are one INT32/INT64 input");
}

}  // namespace
}  // namespace pier::api

// The shared reading of a KServe infer request for a tensor model (tensor_infer_request.h) and
// the JSON <-> bytes conversion under it (tensor_json.h): every datatype from JSON and from
// binary data, nested lists, values out of their type's range, binary sizes that lie, the
// outputs' binary_data and classification, and the request's parameters.
#include "api/kserve/tensor_infer_request.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "api/kserve/tensor_json.h"
#include "tensor/float16.h"
#include "tensor_models/batch_tensors.h"

namespace pier::api {
namespace {

using tensor_models::AppendBytesElement;

using Json = nlohmann::json;

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

std::string Prefixed(const std::vector<std::string>& texts) {
  std::string out;
  for (const std::string& t : texts) AppendBytesElement(out, t);
  return out;
}

Json Input(const std::string& name, const std::string& datatype, std::vector<int64_t> shape,
           Json data) {
  return Json{{"name", name}, {"datatype", datatype}, {"shape", shape}, {"data", data}};
}

Json BinaryInput(const std::string& name, const std::string& datatype, std::vector<int64_t> shape,
                 size_t size) {
  return Json{{"name", name},
              {"datatype", datatype},
              {"shape", shape},
              {"parameters", {{"binary_data_size", size}}}};
}

Result<TensorInferRequest> Read(const Json& request, const std::string& binary = "") {
  return ReadTensorInferRequest("m", request, binary);
}

void ExpectRefused(const Json& request, const std::string& binary, const std::string& want) {
  Result<TensorInferRequest> read = Read(request, binary);
  ASSERT_FALSE(read.ok()) << request.dump();
  EXPECT_EQ(read.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(read.status().message().find(want), std::string::npos)
      << read.status().message() << " (wanted: " << want << ")";
}

struct TypeCase {
  const char* datatype;
  Json data;          // three values
  std::string bytes;  // what they are in binary form
};

std::vector<TypeCase> EveryType() {
  return {
      {"BOOL", {true, false, true}, std::string("\x01\x00\x01", 3)},
      {"UINT8", {0, 200, 255}, Bytes<uint8_t>({0, 200, 255})},
      {"UINT16", {0, 300, 65535}, Bytes<uint16_t>({0, 300, 65535})},
      {"UINT32", {0, 70000, 4294967295u}, Bytes<uint32_t>({0, 70000, 4294967295u})},
      {"UINT64",
       {0, 1, std::numeric_limits<uint64_t>::max()},
       Bytes<uint64_t>({0, 1, std::numeric_limits<uint64_t>::max()})},
      {"INT8", {-128, 0, 127}, Bytes<int8_t>({-128, 0, 127})},
      {"INT16", {-32768, 5, 32767}, Bytes<int16_t>({-32768, 5, 32767})},
      {"INT32", {-2147483648LL, 7, 2147483647}, Bytes<int32_t>({-2147483647 - 1, 7, 2147483647})},
      {"INT64",
       {std::numeric_limits<int64_t>::min(), -1, std::numeric_limits<int64_t>::max()},
       Bytes<int64_t>(
           {std::numeric_limits<int64_t>::min(), -1, std::numeric_limits<int64_t>::max()})},
      {"FP16", {1.5, -2, 65504}, Bytes<uint16_t>({0x3e00, 0xc000, 0x7bff})},
      {"BF16", {1.5, -2, 0.25}, Bytes<uint16_t>({0x3fc0, 0xc000, 0x3e80})},
      {"FP32", {1.5, -2, 0.1}, Bytes<float>({1.5f, -2.0f, 0.1f})},
      {"FP64", {1.5, -2, 0.1}, Bytes<double>({1.5, -2.0, 0.1})},
      {"BYTES", {"a", "", "héllo"}, Prefixed({"a", "", "héllo"})},
  };
}

TEST(TensorInferRequestTest, ReadsEveryDatatypeFromJsonAndFromBinaryData) {
  for (const TypeCase& c : EveryType()) {
    SCOPED_TRACE(c.datatype);
    Result<TensorInferRequest> json = Read(Json{{"inputs", {Input("x", c.datatype, {3}, c.data)}}});
    ASSERT_TRUE(json.ok()) << json.status().ToString();
    ASSERT_EQ(json->inputs.size(), 1u);
    EXPECT_EQ(json->inputs[0].name, "x");
    EXPECT_EQ(ElementTypeName(json->inputs[0].type), c.datatype);
    EXPECT_EQ(json->inputs[0].shape, (std::vector<int64_t>{3}));
    EXPECT_EQ(json->inputs[0].bytes, c.bytes);

    Result<TensorInferRequest> binary =
        Read(Json{{"inputs", {BinaryInput("x", c.datatype, {1, 3}, c.bytes.size())}}}, c.bytes);
    ASSERT_TRUE(binary.ok()) << binary.status().ToString();
    EXPECT_EQ(binary->inputs[0].bytes, c.bytes);
    EXPECT_EQ(binary->inputs[0].shape, (std::vector<int64_t>{1, 3}));

    // And back: the values written as JSON read as the same bytes again.
    HostTensor tensor = json->inputs[0];
    Result<std::string> again =
        TensorBytesFromJson("x", tensor.type, tensor.shape, TensorBytesToJson(tensor));
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(*again, c.bytes);
  }
}

TEST(TensorInferRequestTest, Fp16FromJsonRoundsToNearestEven) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: even (1) wins; 1 + 3 * 2^-11 rounds up.
  Result<TensorInferRequest> read =
      Read(Json{{"inputs", {Input("h", "FP16", {3}, {1.0 + 1.0 / 2048, 1.0 + 3.0 / 2048, 1e-8})}}});
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->inputs[0].bytes, Bytes<uint16_t>({0x3c00, 0x3c02, 0x0000}));
}

TEST(TensorInferRequestTest, NestedListsAreReadRowMajor) {
  Result<TensorInferRequest> read = Read(Json{
      {"inputs", {Input("x", "INT32", {2, 2, 2}, Json::parse("[[[1,2],[3,4]],[[5,6],[7,8]]]"))}}});
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->inputs[0].bytes, Bytes<int32_t>({1, 2, 3, 4, 5, 6, 7, 8}));
}

TEST(TensorInferRequestTest, SeveralInputsTakeTheirBinaryDataInInputOrder) {
  const std::string a = Bytes<float>({1, 2});
  const std::string b = Bytes<int64_t>({7});
  Result<TensorInferRequest> read =
      Read(Json{{"inputs",
                 {BinaryInput("a", "FP32", {1, 2}, a.size()), Input("j", "INT8", {1}, {3}),
                  BinaryInput("b", "INT64", {1}, b.size())}}},
           a + b);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ASSERT_EQ(read->inputs.size(), 3u);
  EXPECT_EQ(read->inputs[0].bytes, a);
  EXPECT_EQ(read->inputs[1].bytes, std::string("\x03", 1));
  EXPECT_EQ(read->inputs[2].bytes, b);
}

TEST(TensorInferRequestTest, ValuesOutOfTheirTypeAreRefusedNamingInputAndIndex) {
  ExpectRefused(Json{{"inputs", {Input("x", "INT8", {3}, {1, 300, 2})}}}, "",
                "input 'x': data[1] is 300: out of INT8's range [-128, 127]");
  ExpectRefused(Json{{"inputs", {Input("x", "UINT8", {2}, {1, -1})}}}, "",
                "input 'x': data[1] is -1: out of UINT8's range [0, 255]");
  ExpectRefused(Json{{"inputs", {Input("x", "INT32", {2}, {1, 1.5})}}}, "",
                "input 'x': data[1] is 1.5: INT32 takes integers only");
  ExpectRefused(Json{{"inputs", {Input("x", "INT32", {2}, {1, 3000000000LL})}}}, "",
                "data[1] is 3000000000: out of INT32's range");
  ExpectRefused(Json{{"inputs", {Input("x", "INT64", {1}, {true})}}}, "",
                "data[0] is true: INT64 takes integers");
  ExpectRefused(Json{{"inputs", {Input("x", "FP16", {2}, {1, 70000})}}}, "",
                "input 'x': data[1] is 70000: out of FP16's finite range");
  ExpectRefused(Json{{"inputs", {Input("x", "FP32", {1}, {1e39})}}}, "",
                "out of FP32's finite range");
  ExpectRefused(Json{{"inputs", {Input("x", "FP32", {1}, {"1.0"})}}}, "",
                "data[0] is \"1.0\": FP32 takes numbers");
  ExpectRefused(Json{{"inputs", {Input("x", "BOOL", {1}, {1})}}}, "",
                "data[0] is 1: BOOL takes true or false");
  ExpectRefused(Json{{"inputs", {Input("x", "BYTES", {2}, {"a", 5})}}}, "",
                "data[1] is 5: BYTES takes strings");
}

TEST(TensorInferRequestTest, DataMustMatchTheShape) {
  ExpectRefused(Json{{"inputs", {Input("x", "FP32", {2, 3}, {1, 2, 3, 4, 5})}}}, "",
                "input 'x': data holds 5 values, shape [2, 3] needs 6");
  ExpectRefused(Json{{"inputs", {Input("x", "FP32", {2}, "12")}}}, "",
                "input 'x': `data` must be a list");
  ExpectRefused(Json{{"inputs", {Input("x", "FP32", {-1}, {1})}}}, "", "input 'x': shape has -1");
  ExpectRefused(Json{{"inputs", {Input("x", "FP8", {1}, {1})}}}, "",
                "input 'x': unknown datatype 'FP8' (KServe's: BOOL, UINT8");
  ExpectRefused(Json{{"inputs", {{{"name", "x"}, {"datatype", "FP32"}, {"shape", {1}}}}}}, "",
                "input 'x': needs `data` or binary data");
  ExpectRefused(Json{{"inputs", Json::array()}}, "", "`inputs` must be a list");
}

TEST(TensorInferRequestTest, BinaryHeadersThatLieAboutSizesAreRefused) {
  const std::string four = Bytes<float>({1, 2, 3, 4});
  // A size the shape does not need.
  ExpectRefused(Json{{"inputs", {BinaryInput("x", "FP32", {1, 3}, 16)}}}, four,
                "input 'x': binary_data_size is 16 bytes, shape [1, 3] of FP32 needs 12");
  // A size past the bytes sent.
  ExpectRefused(Json{{"inputs", {BinaryInput("x", "FP32", {1, 8}, 32)}}}, four,
                "input 'x': binary_data_size 32 goes past the binary data (16 bytes");
  // Bytes no input claims (the header's length is wrong).
  ExpectRefused(Json{{"inputs", {BinaryInput("x", "FP32", {1, 3}, 12)}}}, four,
                "the binary data after the JSON header is 16 bytes but the inputs' "
                "binary_data_size add up to 12");
  // A BYTES element whose length goes past its input's data.
  std::string strings = Prefixed({"ab"});
  strings[0] = 100;
  ExpectRefused(Json{{"inputs", {BinaryInput("s", "BYTES", {1}, strings.size())}}}, strings,
                "input 's': BYTES element 0 says 100 bytes, 2 remain");
  const std::string two = Prefixed({"a", "b"});
  ExpectRefused(Json{{"inputs", {BinaryInput("s", "BYTES", {3}, two.size())}}}, two,
                "input 's': binary data holds 2 BYTES elements, shape needs 3");
  ExpectRefused(Json{{"inputs", {BinaryInput("s", "BYTES", {1}, two.size())}}}, two,
                "bytes more than the shape's 1 BYTES elements");
  // Values given twice, and a size that is not a count.
  Json both = BinaryInput("x", "FP32", {1}, 4);
  both["data"] = {1};
  ExpectRefused(Json{{"inputs", {both}}}, Bytes<float>({1}), "has both `data` and binary data");
  Json negative = BinaryInput("x", "FP32", {1}, 4);
  negative["parameters"]["binary_data_size"] = -4;
  ExpectRefused(Json{{"inputs", {negative}}}, Bytes<float>({1}),
                "binary_data_size must be an integer, 0 or more; got -4");
}

// Found while writing kserve_tensor_fuzzer (issue #44), whose invariant aborts on it: count x
// element size was computed in 64 bits and wrapped, so 2^61 + 1 INT64 elements "needed" 8
// bytes and 2^61 needed none.
TEST(TensorInferRequestTest, BinaryDataSizeOfAShapeTooLargeToHoldIsRefused) {
  const int64_t huge = (int64_t{1} << 61) + 1;
  ExpectRefused(Json{{"inputs", {BinaryInput("i", "INT64", {huge}, 8)}}}, Bytes<int64_t>({7}),
                "input 'i': shape [2305843009213693953] is too large");
  ExpectRefused(Json{{"inputs", {BinaryInput("i", "INT64", {huge - 1}, 0)}}}, "",
                "input 'i': shape [2305843009213693952] is too large");
  ExpectRefused(Json{{"inputs", {BinaryInput("x", "FP32", {int64_t{1} << 62}, 0)}}}, "",
                "input 'x': shape [4611686018427387904] is too large");
}

TEST(TensorInferRequestTest, ReadsOutputsParametersAndId) {
  Result<TensorInferRequest> read = Read(Json::parse(R"({
      "id": "r7",
      "inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}],
      "outputs": [{"name": "probs", "parameters": {"classification": 3}},
                  {"name": "raw", "parameters": {"binary_data": false}},
                  {"name": "other"}],
      "parameters": {"priority": 1, "binary_data_output": true}})"));
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->id, "r7");
  EXPECT_EQ(read->priority, 1u);
  EXPECT_TRUE(read->binary_output);
  ASSERT_EQ(read->outputs.size(), 3u);
  EXPECT_EQ(read->outputs[0].name, "probs");
  EXPECT_EQ(read->outputs[0].classification, 3);
  EXPECT_FALSE(read->outputs[0].binary.has_value());
  EXPECT_EQ(read->outputs[1].binary, std::optional<bool>(false));
  EXPECT_EQ(read->outputs[2].classification, 0);

  const Json input = Input("x", "FP32", {1}, {1});
  ExpectRefused(Json{{"inputs", {input}},
                     {"outputs", {{{"name", "p"}, {"parameters", {{"classification", 0}}}}}}},
                "", "output 'p': classification must be an integer, 1 or more");
  ExpectRefused(Json{{"inputs", {input}},
                     {"outputs", {{{"name", "p"}, {"parameters", {{"classification", "3"}}}}}}},
                "", "classification must be an integer");
  ExpectRefused(Json{{"inputs", {input}},
                     {"outputs", {{{"name", "p"}, {"parameters", {{"binary_data", 1}}}}}}},
                "", "output 'p': binary_data must be true or false; got 1");
  ExpectRefused(Json{{"inputs", {input}}, {"parameters", {{"priority", -1}}}}, "",
                "parameter priority must be an integer, 0 or more");
  ExpectRefused(Json{{"inputs", {input}}, {"outputs", {{{"parameters", Json::object()}}}}}, "",
                "outputs[0] needs a `name`");
}

}  // namespace
}  // namespace pier::api

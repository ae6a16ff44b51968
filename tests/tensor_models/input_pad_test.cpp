// Pad rules (tensor_models/input_pad.h): the pad element in each datatype, refused where the
// type cannot hold it, and rules checked against a model's inputs (axes it leaves open, not a
// batchable model's batch, known inputs, no BYTES), each refusal naming the input and the axis.
#include "tensor_models/input_pad.h"

#include <gtest/gtest.h>

#include <cstring>

namespace pier::tensor_models {
namespace {

std::string Bytes(const void* data, size_t size) {
  return std::string(static_cast<const char*>(data), size);
}

TEST(PadElementTest, EachTypeTakesTheValuesItHolds) {
  const float f = -1.5f;
  EXPECT_EQ(PadElementBytes(ElementType::kFp32, -1.5).value(), Bytes(&f, 4));
  const double d = 0.1;
  EXPECT_EQ(PadElementBytes(ElementType::kFp64, 0.1).value(), Bytes(&d, 8));
  const int64_t big = -(int64_t{1} << 40);
  EXPECT_EQ(PadElementBytes(ElementType::kInt64, -1099511627776.0).value(), Bytes(&big, 8));
  EXPECT_EQ(PadElementBytes(ElementType::kUint8, 255).value(), std::string("\xff", 1));
  EXPECT_EQ(PadElementBytes(ElementType::kBool, 1).value(), std::string("\x01", 1));
  EXPECT_EQ(PadElementBytes(ElementType::kFp16, 1).value(), std::string("\x00\x3c", 2));
  EXPECT_EQ(PadElementBytes(ElementType::kBf16, 1).value(), std::string("\x80\x3f", 2));

  EXPECT_FALSE(PadElementBytes(ElementType::kUint8, 256).ok());
  EXPECT_FALSE(PadElementBytes(ElementType::kUint8, -1).ok());
  EXPECT_FALSE(PadElementBytes(ElementType::kInt8, -129).ok());
  EXPECT_FALSE(PadElementBytes(ElementType::kInt32, 0.5).ok());
  EXPECT_FALSE(PadElementBytes(ElementType::kInt64, 9223372036854775808.0).ok());
  EXPECT_FALSE(PadElementBytes(ElementType::kBool, 2).ok());
  EXPECT_FALSE(PadElementBytes(ElementType::kFp16, 70000).ok()) << "past FP16's largest";
  EXPECT_FALSE(PadElementBytes(ElementType::kFp32, 1e300).ok());
  Result<std::string> bytes = PadElementBytes(ElementType::kBytes, 0);
  ASSERT_FALSE(bytes.ok());
  EXPECT_NE(bytes.status().message().find("BYTES input cannot be padded"), std::string::npos);
}

// Inputs x FP32 [-1, 1, -1, -1], ids INT64 [-1, -1], s BYTES [-1, -1]; batchable.
TensorModelInfo Model() {
  TensorModelInfo info;
  info.inputs = {{.name = "x", .type = ElementType::kFp32, .shape = {-1, 1, -1, -1}},
                 {.name = "ids", .type = ElementType::kInt64, .shape = {-1, -1}},
                 {.name = "s", .type = ElementType::kBytes, .shape = {-1, -1}}};
  info.outputs = {{.name = "y", .type = ElementType::kFp32, .shape = {-1, 1}}};
  info.max_batch_size = 8;
  return info;
}

TEST(ResolvePadRulesTest, GivesEachInputItsPaddedDimensionsAndElement) {
  auto pads = ResolvePadRules(
      Model(), {{"x", {.axes = {2, 3}, .value = 0}}, {"ids", {.axes = {1}, .value = 7}}});
  ASSERT_TRUE(pads.ok()) << pads.status().ToString();
  ASSERT_EQ(pads->size(), 3u);
  EXPECT_EQ((*pads)[0].padded, (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ((*pads)[0].element, std::string(4, '\0'));
  const int64_t seven = 7;
  EXPECT_EQ((*pads)[1].padded, (std::vector<bool>{false, true}));
  EXPECT_EQ((*pads)[1].element, Bytes(&seven, 8));
  EXPECT_FALSE((*pads)[2].any()) << "no rule, no padding";
  EXPECT_TRUE((*pads)[0].any());
}

TEST(ResolvePadRulesTest, RefusesAxesTheModelFixesOrThatAreNotThereNamingInputAndAxis) {
  const auto refused = [](std::map<std::string, PadRule> rules, TensorModelInfo info = Model()) {
    auto pads = ResolvePadRules(info, rules);
    EXPECT_FALSE(pads.ok());
    return pads.ok() ? std::string() : pads.status().message();
  };
  EXPECT_EQ(refused({{"x", {.axes = {1}, .value = 0}}}),
            "inputs: 'x': pad axis 1: that dimension is fixed at 1 ([-1, 1, -1, -1])");
  EXPECT_EQ(refused({{"x", {.axes = {4}, .value = 0}}}),
            "inputs: 'x': pad axis 4: the input has 4 dimensions ([-1, 1, -1, -1])");
  EXPECT_EQ(refused({{"x", {.axes = {0, 2}, .value = 0}}}),
            "inputs: 'x': pad axis 0: dimension 0 is the batch (pad axes start at 1)");
  EXPECT_EQ(refused({{"image", {.axes = {2}, .value = 0}}}),
            "inputs: 'image': pad names no input of the model");
  EXPECT_NE(refused({{"s", {.axes = {1}, .value = 0}}}).find("inputs: 's': a BYTES input cannot"),
            std::string::npos);
  EXPECT_NE(refused({{"ids", {.axes = {1}, .value = 0.5}}}).find("inputs: 'ids': pad value 0.5"),
            std::string::npos);
  // A model without a batch dimension: dimension 0 is its own, open here, so it may pad.
  TensorModelInfo unbatched = Model();
  unbatched.max_batch_size = 0;
  EXPECT_TRUE(ResolvePadRules(unbatched, {{"ids", {.axes = {0}, .value = 0}}}).ok());
}

}  // namespace
}  // namespace pier::tensor_models

// CheckTensorRequest: each refusal with the message a client reads, and good requests pass.
#include "tensor_models/tensor_request.h"

#include <gtest/gtest.h>

#include "tensor_test_util.h"

namespace pier::tensor_models {
namespace {

using testing::Fp32;
using testing::Strings;

// Inputs a [-1, 4] FP32 and s [-1, 2] BYTES, outputs y [-1] FP32 and z [-1, 2] BYTES.
TensorModelInfo Model() {
  TensorModelInfo info;
  info.inputs = {{.name = "a", .type = ElementType::kFp32, .shape = {-1, 4}},
                 {.name = "s", .type = ElementType::kBytes, .shape = {-1, 2}}};
  info.outputs = {{.name = "y", .type = ElementType::kFp32, .shape = {-1}},
                  {.name = "z", .type = ElementType::kBytes, .shape = {-1, 2}}};
  info.max_batch_size = 8;
  return info;
}

TensorRequest Good(int64_t batch) {
  TensorRequest r;
  r.inputs.push_back(Fp32("a", {batch, 4}, std::vector<float>(4 * batch)));
  r.inputs.push_back(
      Strings("s", {batch, 2}, std::vector<std::string>(2 * batch, std::string("text"))));
  return r;
}

std::string Refusal(const TensorModelInfo& info, const TensorRequest& r) {
  Status s = CheckTensorRequest("m", info, r);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  return s.message();
}

TEST(CheckTensorRequestTest, GoodRequestsPass) {
  for (int64_t batch : {1, 3, 8}) {
    EXPECT_TRUE(CheckTensorRequest("m", Model(), Good(batch)).ok()) << batch;
  }
  TensorRequest reordered = Good(2);
  std::swap(reordered.inputs[0], reordered.inputs[1]);
  reordered.outputs = {"z", "y"};
  EXPECT_TRUE(CheckTensorRequest("m", Model(), reordered).ok());
}

TEST(CheckTensorRequestTest, InputsNamedOnceAndKnown) {
  TensorRequest r = Good(1);
  r.inputs[1].name = "q";
  EXPECT_EQ(Refusal(Model(), r), "model 'm': unknown input 'q' (the model takes 'a', 's')");
  r = Good(1);
  r.inputs[1] = r.inputs[0];
  EXPECT_EQ(Refusal(Model(), r), "model 'm': input 'a' is given twice");
  r = Good(1);
  r.inputs.pop_back();
  EXPECT_EQ(Refusal(Model(), r), "model 'm': input 's' is missing");
}

TEST(CheckTensorRequestTest, TypeAndShape) {
  TensorRequest r = Good(2);
  r.inputs[0].type = ElementType::kInt64;
  EXPECT_EQ(Refusal(Model(), r), "model 'm': input 'a': expected FP32, got INT64");
  r = Good(2);
  r.inputs[0] = Fp32("a", {2, 5}, std::vector<float>(10));
  EXPECT_EQ(Refusal(Model(), r), "model 'm': input 'a': expected shape [-1, 4], got [2, 5]");
  r.inputs[0] = Fp32("a", {8}, std::vector<float>(8));
  EXPECT_EQ(Refusal(Model(), r), "model 'm': input 'a': expected shape [-1, 4], got [8]");
  r.inputs[0] = Fp32("a", {2, -4}, {});
  EXPECT_EQ(Refusal(Model(), r), "model 'm': input 'a': expected shape [-1, 4], got [2, -4]");
}

TEST(CheckTensorRequestTest, Batch) {
  TensorRequest r = Good(9);
  EXPECT_EQ(Refusal(Model(), r),
            "model 'm': input 'a': batch 9 is above the model's max_batch_size 8");
  r = Good(0);
  EXPECT_EQ(Refusal(Model(), r),
            "model 'm': input 'a': batch 0: the first dimension (the batch) must be at least 1");
  r = Good(2);
  r.inputs[1] = Strings("s", {3, 2}, std::vector<std::string>(6));
  EXPECT_EQ(Refusal(Model(), r),
            "model 'm': input 's': batch 3, but input 'a' has batch 2: every input has the same "
            "first dimension");
}

TEST(CheckTensorRequestTest, DataLength) {
  TensorRequest r = Good(2);
  r.inputs[0].bytes.resize(20);
  EXPECT_EQ(Refusal(Model(), r),
            "model 'm': input 'a': data holds 20 bytes, shape [2, 4] of FP32 needs 32");
  r = Good(2);
  r.inputs[1] = Strings("s", {2, 2}, {"a", "b", "c"});
  EXPECT_EQ(Refusal(Model(), r),
            "model 'm': input 's': data holds 3 BYTES elements, shape [2, 2] needs 4");
  r.inputs[1] = Strings("s", {2, 2}, {"a", "b", "c", "d", "e"});
  EXPECT_EQ(Refusal(Model(), r),
            "model 'm': input 's': data holds 5 bytes past the 4 BYTES elements shape [2, 2] "
            "needs");
  r.inputs[1].bytes = Strings("s", {2, 2}, {"a", "b", "c", "dd"}).bytes;
  r.inputs[1].bytes.pop_back();
  EXPECT_EQ(Refusal(Model(), r),
            "model 'm': input 's': BYTES element 3 is cut short: its length says 2 bytes, 1 "
            "remain");
}

TEST(CheckTensorRequestTest, OutputsKnownAndNotRepeated) {
  TensorRequest r = Good(1);
  r.outputs = {"y", "w"};
  EXPECT_EQ(Refusal(Model(), r), "model 'm': unknown output 'w' (the model gives 'y', 'z')");
  r.outputs = {"z", "z"};
  EXPECT_EQ(Refusal(Model(), r), "model 'm': output 'z' is asked twice");
}

TEST(CheckTensorRequestTest, NoBatchDimensionTakesShapesAsDeclared) {
  TensorModelInfo info;
  info.inputs = {{.name = "x", .type = ElementType::kFp32, .shape = {2, -1}}};
  info.outputs = {{.name = "y", .type = ElementType::kFp32, .shape = {2}}};
  info.max_batch_size = 0;
  TensorRequest r;
  r.inputs.push_back(Fp32("x", {2, 3}, std::vector<float>(6)));
  EXPECT_TRUE(CheckTensorRequest("m", info, r).ok());
  // The first dimension is fixed, not a batch: 12 rows are not "above max_batch_size".
  r.inputs[0] = Fp32("x", {12, 3}, std::vector<float>(36));
  EXPECT_EQ(Refusal(info, r), "model 'm': input 'x': expected shape [2, -1], got [12, 3]");
  r.inputs[0] = Fp32("x", {2, 0}, {});
  EXPECT_TRUE(CheckTensorRequest("m", info, r).ok());
}

}  // namespace
}  // namespace pier::tensor_models

// A tensor model's types across the worker protocol: what goes in comes out, and what a
// confused peer could send is refused naming the tensor.
#include "ipc/tensor_convert.h"

#include <gtest/gtest.h>

namespace pier::ipc {
namespace {

TEST(TensorConvertTest, TensorsRequestsResultsAndStatsRoundTrip) {
  HostTensor in{"x", ElementType::kInt16, {2, 3}, std::string(12, '\x7')};
  proto::Tensor wire;
  ToProto(in, &wire);
  Result<HostTensor> out = FromProto(wire);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->name, "x");
  EXPECT_EQ(out->type, ElementType::kInt16);
  EXPECT_EQ(out->shape, in.shape);
  EXPECT_EQ(out->bytes, in.bytes);

  tensor_models::TensorModelInfo info;
  info.inputs = {{"a", ElementType::kFp32, {-1, 4}}};
  info.outputs = {{"s", ElementType::kBytes, {-1}}};
  info.max_batch_size = 8;
  info.preferred_batch_sizes = {2, 4};
  info.opset = 17;
  info.producer = "test 1";
  proto::TensorModel model;
  ToProto(info, &model);
  Result<tensor_models::TensorModelInfo> back = FromProto(model);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->inputs[0].shape, info.inputs[0].shape);
  EXPECT_EQ(back->outputs[0].type, ElementType::kBytes);
  EXPECT_EQ(back->preferred_batch_sizes, info.preferred_batch_sizes);
  EXPECT_EQ(back->producer, "test 1");

  tensor_models::TensorResult result;
  result.outputs = {in};
  result.batch_size = 3;
  result.queue_seconds = 0.25;
  proto::TensorResult wire_result;
  ToProto(result, 9, &wire_result);
  EXPECT_EQ(wire_result.id(), 9u);
  tensor_models::TensorResult got = FromProto(wire_result);
  ASSERT_TRUE(got.status.ok());
  EXPECT_EQ(got.outputs[0].bytes, in.bytes);
  EXPECT_EQ(got.batch_size, 3);
  EXPECT_DOUBLE_EQ(got.queue_seconds, 0.25);

  tensor_models::TensorResult refused;
  refused.status = ResourceExhaustedError("queue full");
  ToProto(refused, 10, &wire_result);
  got = FromProto(wire_result);
  EXPECT_EQ(got.status.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(got.status.message(), "queue full");

  tensor_models::TensorRunnerStats stats;
  stats.items = 5;
  stats.batch_items.bounds = {1, 2};
  stats.batch_items.counts = {1, 2, 0};
  proto::TensorStats wire_stats;
  ToProto(stats, &wire_stats);
  tensor_models::TensorRunnerStats stats_back = FromProto(wire_stats);
  EXPECT_EQ(stats_back.items, 5);
  EXPECT_EQ(stats_back.batch_items.counts, stats.batch_items.counts);
}

TEST(TensorConvertTest, WhatAPeerGetsWrongIsRefusedNamingTheTensor) {
  proto::Tensor wire;
  wire.set_name("x");
  wire.set_datatype("FLOAT");
  wire.add_shape(2);
  EXPECT_NE(FromProto(wire).status().message().find("tensor 'x': unknown datatype"),
            std::string::npos);
  wire.set_datatype("FP32");
  wire.set_data(std::string(7, '\0'));
  EXPECT_NE(FromProto(wire).status().message().find("7 bytes for shape [2]"), std::string::npos);
  wire.clear_shape();
  wire.add_shape(-3);
  EXPECT_FALSE(FromProto(wire).ok());

  // BYTES data must be whole length-prefixed elements, as many as the shape holds.
  wire.clear_shape();
  wire.add_shape(2);
  wire.set_datatype("BYTES");
  wire.set_data(
      std::string("\x01\x00\x00\x00"
                  "a",
                  5));  // one element where two belong
  EXPECT_FALSE(FromProto(wire).ok());
  wire.set_data(
      std::string("\x01\x00\x00\x00"
                  "a"
                  "\x09\x00\x00\x00"
                  "b",
                  10));  // cut short
  EXPECT_FALSE(FromProto(wire).ok());
  wire.set_data(
      std::string("\x01\x00\x00\x00"
                  "a"
                  "\x00\x00\x00\x00",
                  9));
  EXPECT_TRUE(FromProto(wire).ok());
  // A shape whose bytes pass 2^64 is no tensor, whatever the data.
  wire.set_datatype("INT64");
  wire.clear_shape();
  wire.add_shape(int64_t{1} << 61);
  wire.add_shape(2);
  wire.set_data("");
  EXPECT_FALSE(FromProto(wire).ok());

  proto::TensorModel preferred;
  preferred.add_inputs()->set_datatype("FP32");
  preferred.add_outputs()->set_datatype("FP32");
  preferred.set_max_batch_size(4);
  preferred.add_preferred_batch_sizes(8);
  EXPECT_NE(FromProto(preferred).status().message().find("preferred batch size 8"),
            std::string::npos);

  proto::TensorResult result;
  result.set_code(200);
  EXPECT_EQ(FromProto(result).status.code(), StatusCode::kInternal);
  // A histogram whose counts do not fit its bounds reads as empty, never out of range.
  proto::TensorStats stats;
  stats.mutable_batch_items()->add_bounds(1);
  stats.mutable_batch_items()->add_counts(5);
  EXPECT_EQ(FromProto(stats).batch_items.counts, (std::vector<uint64_t>{0, 0}));
  // A model without inputs is no model.
  EXPECT_FALSE(FromProto(proto::TensorModel{}).ok());
}

}  // namespace
}  // namespace pier::ipc

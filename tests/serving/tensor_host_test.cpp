#include "serving/tensor_host.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <thread>

#include "device/cpu/cpu_device.h"
#include "serving/model_loader.h"
#include "tensor_models/tensor_test_util.h"

namespace pier::serving {
namespace {

using tensor_models::testing::Floats;
using tensor_models::testing::Fp32;
using tensor_models::testing::TinyOnnxModel;

class TensorHostTest : public ::testing::Test {
 protected:
  void SetUp() override { Budget(uint64_t{4} << 30); }
  void Budget(uint64_t bytes) {
    governor_.reset();
    device_ = std::move(CpuDevice::Create()).value();
    GovernorOptions options;
    options.budget = BudgetSpec::Bytes(bytes);
    governor_ = std::move(MemoryGovernor::Create(device_.get(), options)).value();
  }
  TensorHostOptions Options(const std::string& file, const std::string& id) {
    TensorHostOptions o;
    o.path = TinyOnnxModel(file);
    o.id = id;
    o.max_queue_delay = std::chrono::milliseconds(2);
    return o;
  }
  // Submits and waits for the answer.
  TensorResult Infer(TensorRunner& runner, TensorRequest request) {
    return tensor_models::testing::SubmitAndWait(runner, std::move(request));
  }
  std::vector<std::string> OwnerNames() const {
    std::vector<std::string> names;
    for (const auto& o : governor_->Stats().owners) names.push_back(o.name);
    return names;
  }

  std::unique_ptr<CpuDevice> device_;
  std::unique_ptr<MemoryGovernor> governor_;
};

TEST_F(TensorHostTest, ServesRequestsThroughItsBatcherUnderThreeOwners) {
  TensorHostOptions options = Options("add_mul.onnx", "addmul");
  options.preferred_batch_sizes = {2, 4};
  auto host = TensorHost::Open(options, governor_.get());
  ASSERT_TRUE(host.ok()) << host.status().ToString() << " (run scripts/bootstrap)";
  EXPECT_EQ(OwnerNames(), (std::vector<std::string>{"addmul/weights", "addmul/workspace",
                                                    "addmul/ort_overhead"}));
  EXPECT_TRUE((*host)->memory().warmed);
  EXPECT_EQ((*host)->info().preferred_batch_sizes, (std::vector<int64_t>{2, 4}));
  TensorRequest request;
  request.inputs = {Fp32("a", {1, 4}, {1, 2, 3, 4}), Fp32("b", {1, 4}, {10, 20, 30, 40})};
  request.outputs = {"product"};
  TensorResult result = Infer(**host, std::move(request));
  ASSERT_TRUE(result.status.ok()) << result.status.ToString();
  ASSERT_EQ(result.outputs.size(), 1u);
  EXPECT_EQ(result.outputs[0].name, "product");
  EXPECT_EQ(Floats(result.outputs[0]), (std::vector<float>{10, 40, 90, 160}));
  // Its face to the rest of the server refuses generation, naming the model's kind.
  auto generated = (*host)->client().Submit(engine::Request{});
  ASSERT_FALSE(generated.ok());
  EXPECT_NE(generated.status().message().find("tensor (ONNX) model"), std::string::npos);
  host->reset();
  EXPECT_TRUE(OwnerNames().empty()) << "owners go with the model";
  EXPECT_EQ(governor_->Stats().allocated_bytes, 0u);
}

TEST_F(TensorHostTest, AModelThatDoesNotFitIsRefusedWithItsBreakdownAndHoldsNothing) {
  Budget(uint64_t{96} << 20);
  auto host = TensorHost::Open(Options("big_constant.onnx", "big"), governor_.get());
  ASSERT_FALSE(host.ok());
  EXPECT_EQ(host.status().code(), StatusCode::kResourceExhausted);
  // The governor's refusal, naming the owner that asked (its working memory at warm-up, or
  // what ONNX Runtime held beside the allocator).
  EXPECT_NE(host.status().message().find("does not fit"), std::string::npos)
      << host.status().message();
  EXPECT_NE(host.status().message().find("owner 'big/"), std::string::npos)
      << host.status().message();
  EXPECT_TRUE(OwnerNames().empty());
  EXPECT_EQ(governor_->Stats().allocated_bytes, 0u);
}

TEST_F(TensorHostTest, AnOutputThatDoesNotFollowTheBatchFailsWarmUpUnlessUnbatched) {
  auto host = TensorHost::Open(Options("no_batch_scaling.onnx", "nbs"), governor_.get());
  ASSERT_FALSE(host.ok());
  EXPECT_EQ(host.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(host.status().message().find("does not follow the batch"), std::string::npos)
      << host.status().message();
  EXPECT_NE(host.status().message().find("max_batch_size: 0"), std::string::npos);
  TensorHostOptions unbatched = Options("no_batch_scaling.onnx", "nbs");
  unbatched.max_batch_size = 0;
  auto served = TensorHost::Open(unbatched, governor_.get());
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  EXPECT_EQ((*served)->info().max_batch_size, 0);
}

// spatial.onnx (x FP32 [batch, 1, H, W] -> y = mean of x over H and W [batch, 1], z = x) with
// `pad: {axes: [2, 3], value: 0}`: requests of 2x2 and 3x1 share one run at 3x2, zeros padded.
// The padding changes the mean (it averages over the padded area: 6 elements, not 4 or 3),
// which is why padding is opt-in: only a graph's owner knows where padding does no harm.
TEST_F(TensorHostTest, APadRuleBatchesDifferentSizesAtTheLargestWithThePadValue) {
  TensorHostOptions options = Options("spatial.onnx", "spatial");
  options.preferred_batch_sizes = {2};                 // the two go together at once
  options.max_queue_delay = std::chrono::seconds(10);  // and never alone by the window
  options.inputs["x"].pad = tensor_models::PadRule{.axes = {2, 3}, .value = 0};
  auto host = TensorHost::Open(options, governor_.get());
  ASSERT_TRUE(host.ok()) << host.status().ToString() << " (run scripts/bootstrap)";
  TensorRequest a, b;
  a.inputs = {Fp32("x", {1, 1, 2, 2}, {1, 2, 3, 4})};
  b.inputs = {Fp32("x", {1, 1, 3, 1}, {5, 6, 7})};
  std::promise<TensorResult> pa, pb;
  ASSERT_TRUE(
      (*host)->Submit(std::move(a), [&](TensorResult r) { pa.set_value(std::move(r)); }).ok());
  ASSERT_TRUE(
      (*host)->Submit(std::move(b), [&](TensorResult r) { pb.set_value(std::move(r)); }).ok());
  const TensorResult ra = pa.get_future().get(), rb = pb.get_future().get();
  ASSERT_TRUE(ra.status.ok()) << ra.status.ToString();
  ASSERT_TRUE(rb.status.ok()) << rb.status.ToString();
  EXPECT_EQ(ra.batch_size, 2);
  EXPECT_EQ(rb.batch_size, 2);
  ASSERT_EQ(ra.outputs.size(), 2u);
  ASSERT_EQ(rb.outputs.size(), 2u);
  // y: the mean over the padded 3x2 area (alone, 2.5 and 6).
  EXPECT_EQ(ra.outputs[0].shape, (std::vector<int64_t>{1, 1}));
  EXPECT_FLOAT_EQ(Floats(ra.outputs[0])[0], 10.0f / 6);
  EXPECT_FLOAT_EQ(Floats(rb.outputs[0])[0], 18.0f / 6);
  // z at the batch's padded size, each request's own row with zeros where it was padded.
  EXPECT_EQ(ra.outputs[1].shape, (std::vector<int64_t>{1, 1, 3, 2}));
  EXPECT_EQ(Floats(ra.outputs[1]), (std::vector<float>{1, 2, 3, 4, 0, 0}));
  EXPECT_EQ(rb.outputs[1].shape, (std::vector<int64_t>{1, 1, 3, 2}));
  EXPECT_EQ(Floats(rb.outputs[1]), (std::vector<float>{5, 0, 6, 0, 7, 0}));
}

// inputs: {x: {warmup: [...]}}: open dimensions are warmed at the size given, so the working
// memory measured (and set aside) is that of the inputs served; a size of another rank
// refuses the load.
TEST_F(TensorHostTest, AWarmUpSizeMeasuresTheWorkingMemoryAtThatSize) {
  auto small = TensorHost::Open(Options("spatial.onnx", "small"), governor_.get());
  ASSERT_TRUE(small.ok()) << small.status().ToString() << " (run scripts/bootstrap)";
  TensorHostOptions options = Options("spatial.onnx", "large");
  options.inputs["x"].warmup = {-1, -1, 512, 512};
  auto large = TensorHost::Open(options, governor_.get());
  ASSERT_TRUE(large.ok()) << large.status().ToString();
  ASSERT_TRUE((*small)->Memory().has_value() && (*large)->Memory().has_value());
  EXPECT_TRUE((*large)->Memory()->warmed);
  // 512 x 512 floats in and out: at least a megabyte more than at 1 x 1.
  EXPECT_GT((*large)->Memory()->workspace_peak, (*small)->Memory()->workspace_peak + (1u << 20))
      << (*small)->Memory()->workspace_peak;
  options.id = "wrong";
  options.inputs["x"].warmup = {-1, 512, 512};
  auto wrong = TensorHost::Open(options, governor_.get());
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().message(),
            "inputs.x.warmup: [-1, 512, 512] has 3 dimensions; input 'x' is [-1, 1, -1, -1]");
}

TEST_F(TensorHostTest, APadRuleOnAnAxisTheGraphFixesRefusesTheLoad) {
  TensorHostOptions options = Options("spatial.onnx", "spatial");
  options.inputs["x"].pad = tensor_models::PadRule{.axes = {1, 3}, .value = 0};
  auto host = TensorHost::Open(options, governor_.get());
  ASSERT_FALSE(host.ok());
  EXPECT_EQ(host.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(host.status().message(),
            "inputs: 'x': pad axis 1: that dimension is fixed at 1 ([-1, 1, -1, -1])");
  // A `shape` that fixes a dimension the graph leaves open fixes it for the pad rule too.
  options.inputs["x"] = {.shape = {-1, 1, 8, -1},
                         .pad = tensor_models::PadRule{.axes = {2}, .value = 0},
                         .warmup = {}};
  host = TensorHost::Open(options, governor_.get());
  ASSERT_FALSE(host.ok());
  EXPECT_NE(host.status().message().find("pad axis 2: that dimension is fixed at 8"),
            std::string::npos)
      << host.status().message();
  EXPECT_TRUE(OwnerNames().empty()) << "a refused load holds nothing";
}

TEST_F(TensorHostTest, ARequestNobodyWaitsForStopsItsRun) {
  TensorHostOptions options = Options("slow.onnx", "slow");
  options.max_batch_size = 1;  // warm-up runs the slow graph once, not at batch 8 too
  auto host = TensorHost::Open(options, governor_.get());
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  TensorRequest request;
  request.inputs = {Fp32("x", {1, 256}, std::vector<float>(256, 0.01f))};
  request.cancelled = cancelled;
  std::promise<TensorResult> promise;
  ASSERT_TRUE(
      (*host)
          ->Submit(std::move(request), [&](TensorResult r) { promise.set_value(std::move(r)); })
          .ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto start = std::chrono::steady_clock::now();
  cancelled->store(true);
  TensorResult result = promise.get_future().get();
  EXPECT_FALSE(result.status.ok());
  EXPECT_NE(result.status.message().find("cancelled"), std::string::npos)
      << result.status.ToString();
  // A whole run takes about a second at batch 1; the stop lands within the batcher's poll.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(800));
}

// instances: 2 through the loader: two sessions under their own owners, and a request goes to
// the instance that is not busy (the first runs a second-long batch meanwhile).
TEST(TensorInstancesTest, ABusyInstanceIsPassedOverAndEachHasItsOwners) {
  DeviceSetOptions device_options;
  device_options.cpu_capacity = uint64_t{8} << 30;
  device_options.cpu_budget = BudgetSpec::Bytes(uint64_t{4} << 30);
  auto devices = std::move(DeviceSet::Create(device_options)).value();
  ModelLoadOptions load;
  load.path = TinyOnnxModel("slow.onnx");
  load.id = "slow";
  load.instances = 2;
  load.settings.threads = 1;
  load.settings.max_batch_size = 1;
  load.settings.max_queue_delay_ms = 0;
  Result<ModelRef> model = OpenModel(load, *devices);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::vector<std::string> owners;
  for (const auto& o : devices->cpu_governor().Stats().owners) owners.push_back(o.name);
  EXPECT_NE(std::find(owners.begin(), owners.end(), "slow/weights"), owners.end());
  EXPECT_NE(std::find(owners.begin(), owners.end(), "slow#2/weights"), owners.end());
  ASSERT_EQ((*model)->instances.size(), 2u);

  auto request = [] {
    TensorRequest r;
    r.inputs = {Fp32("x", {1, 256}, std::vector<float>(256, 0.01f))};
    return r;
  };
  std::promise<TensorResult> first, second;
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(
      (*model)
          ->tensors->Submit(request(), [&](TensorResult r) { first.set_value(std::move(r)); })
          .ok());
  // Wait until the first instance is running it, then send the second.
  for (int i = 0; i < 200 && (*model)->tensors->Stats().running_items == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(
      (*model)
          ->tensors->Submit(request(), [&](TensorResult r) { second.set_value(std::move(r)); })
          .ok());
  TensorResult a = first.get_future().get();
  TensorResult b = second.get_future().get();
  ASSERT_TRUE(a.status.ok()) << a.status.ToString();
  ASSERT_TRUE(b.status.ok()) << b.status.ToString();
  EXPECT_EQ(a.outputs[0].bytes, b.outputs[0].bytes);
  const TensorRunnerStats total = (*model)->tensors->Stats();
  EXPECT_EQ(total.requests, 2);
  EXPECT_EQ(total.batches, 2);
  // One each: the second went to the instance that was free.
  EXPECT_EQ((*model)->instances[0]->Stats().requests_finished, 1);
  EXPECT_EQ((*model)->instances[1]->Stats().requests_finished, 1);
  // Side by side, not one after the other: well under two runs' time (a run is about 1 s).
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double run = total.compute_seconds.sum / 2;
  EXPECT_LT(seconds, 1.8 * run) << "run " << run << " s";
}

}  // namespace
}  // namespace pier::serving

// A tensor (ONNX) model in a `pier worker` process (serving/tensor_worker.h) driven through
// WorkerClient: results cross the process boundary, the grant grows to what the worker
// measured, a worker that dies fails only the requests it held and is restarted, a request
// nobody waits for is cancelled in the worker, and a model that does not fit is refused.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <thread>

#include "serving/model_loader.h"
#include "serving/worker_client.h"
#include "tensor_models/tensor_test_util.h"

namespace pier::serving {
namespace {

using tensor_models::testing::Floats;
using tensor_models::testing::Fp32;
using tensor_models::testing::TinyOnnxModel;

std::unique_ptr<DeviceSet> Devices(uint64_t budget) {
  DeviceSetOptions options;
  options.cpu_capacity = uint64_t{8} << 30;
  options.cpu_budget = BudgetSpec::Bytes(budget);
  return std::move(DeviceSet::Create(options)).value();
}

WorkerOptions Options(const std::string& file, DeviceSet& devices, uint64_t load_budget) {
  WorkerOptions options;
  options.load.path = TinyOnnxModel(file);
  options.load.id = "t";
  options.load.settings.threads = 1;
  options.load.settings.max_batch_size = 1;
  options.load.settings.max_queue_delay_ms = 1;
  options.budget_bytes = *TensorHost::EstimateBytes(TensorOptionsOf(options.load, "t"));
  options.load_budget_bytes = load_budget;
  options.device_governor = &devices.cpu_governor();
  options.binary = PIER_BINARY_PATH;
  options.restart_backoff = std::chrono::milliseconds(10);
  return options;
}

// Submits and returns a future of the result.
std::future<TensorResult> Send(WorkerClient& worker, TensorRequest request) {
  auto promise = std::make_shared<std::promise<TensorResult>>();
  std::future<TensorResult> future = promise->get_future();
  Status queued = worker.SubmitTensor(
      std::move(request), [promise](TensorResult r) { promise->set_value(std::move(r)); });
  if (!queued.ok()) {
    TensorResult refused;
    refused.status = queued;
    promise->set_value(std::move(refused));
  }
  return future;
}

TensorRequest AddMul(float x) {
  TensorRequest request;
  request.inputs = {Fp32("a", {1, 4}, {x, x, x, x}), Fp32("b", {1, 4}, {1, 2, 3, 4})};
  return request;
}

TEST(TensorWorkerTest, ServesAcrossTheProcessBoundaryAndHealsAfterACrash) {
  auto devices = Devices(uint64_t{2} << 30);
  auto worker = WorkerClient::Start(Options("add_mul.onnx", *devices, uint64_t{1} << 30));
  ASSERT_TRUE(worker.ok()) << worker.status().ToString() << " (run scripts/bootstrap)";
  ASSERT_NE((*worker)->tensor_info(), nullptr);
  EXPECT_EQ((*worker)->tensor_info()->inputs[0].name, "a");
  TensorResult first = Send(**worker, AddMul(10)).get();
  ASSERT_TRUE(first.status.ok()) << first.status.ToString();
  EXPECT_EQ(first.outputs[0].name, "sum");
  EXPECT_EQ(Floats(first.outputs[0]), (std::vector<float>{11, 12, 13, 14}));
  EXPECT_EQ(Floats(first.outputs[1]), (std::vector<float>{10, 20, 30, 40}));
  // The grant grew to what the worker measured (ONNX Runtime's own memory included).
  const WorkerHealth health = (*worker)->Health();
  EXPECT_GE(health.granted_bytes, health.committed_bytes);
  // An LLM's request is refused by name, not sent to a worker that cannot read it.
  EXPECT_FALSE((*worker)->Submit(engine::Request{}).ok());

  ASSERT_GT(health.pid, 0);
  ::kill(static_cast<pid_t>(health.pid), SIGKILL);
  // Requests sent while it restarts wait for the new worker.
  TensorResult after = Send(**worker, AddMul(1)).get();
  ASSERT_TRUE(after.status.ok()) << after.status.ToString();
  EXPECT_EQ(Floats(after.outputs[0]), (std::vector<float>{2, 3, 4, 5}));
  EXPECT_GE((*worker)->Health().restarts, 1);
}

TEST(TensorWorkerTest, ARequestTwoDeadWorkersHeldFailsNamingTheInstance) {
  auto devices = Devices(uint64_t{2} << 30);
  auto worker = WorkerClient::Start(Options("slow.onnx", *devices, uint64_t{1} << 30));
  ASSERT_TRUE(worker.ok()) << worker.status().ToString();
  TensorRequest request;
  request.inputs = {Fp32("x", {1, 256}, std::vector<float>(256, 0.01f))};
  std::future<TensorResult> held = Send(**worker, request);
  // The first worker that dies holding it is forgiven (the request goes to its successor);
  // the second is not.
  for (int death = 0; death < 2; ++death) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const int64_t restarts = (*worker)->Health().restarts;
    ::kill(static_cast<pid_t>((*worker)->Health().pid), SIGKILL);
    for (int i = 0; i < 300 && (*worker)->Health().restarts == restarts; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  TensorResult failed = held.get();
  EXPECT_EQ(failed.status.code(), StatusCode::kUnavailable);
  EXPECT_NE(failed.status.message().find("model t instance 1 ended"), std::string::npos)
      << failed.status.ToString();
  // Cancelled while it runs in the new worker: it stops within the batcher's poll and the
  // heartbeat, not after the run's second.
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  request.cancelled = cancelled;
  std::future<TensorResult> dropped = Send(**worker, request);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto start = std::chrono::steady_clock::now();
  cancelled->store(true);
  TensorResult result = dropped.get();
  EXPECT_FALSE(result.status.ok());
  EXPECT_NE(result.status.message().find("cancelled"), std::string::npos)
      << result.status.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(900));
}

TEST(TensorWorkerTest, AModelThatDoesNotFitOnceMeasuredIsRefusedWithItsBreakdown) {
  auto devices = Devices(uint64_t{160} << 20);
  const uint64_t before = devices->cpu_governor().Stats().committed_bytes;
  // It may load under a larger budget of its own, but its grant cannot grow to what it holds.
  auto worker = WorkerClient::Start(Options("big_constant.onnx", *devices, uint64_t{2} << 30));
  ASSERT_FALSE(worker.ok());
  EXPECT_EQ(worker.status().code(), StatusCode::kResourceExhausted) << worker.status().ToString();
  EXPECT_NE(worker.status().message().find("does not fit"), std::string::npos)
      << worker.status().message();
  EXPECT_NE(worker.status().message().find("ONNX Runtime's own"), std::string::npos)
      << worker.status().message();
  EXPECT_EQ(devices->cpu_governor().Stats().committed_bytes, before);
}

}  // namespace
}  // namespace pier::serving

// TensorBatcher over a fake executor (sum = a + b over FP32, echo = s over BYTES): requests
// concatenated and sliced back, batches closed by preferred sizes, the maximum and the window,
// shape groups (and pad rules that join them), classes, deadlines, cancellation (queued and
// running), failed runs, models without a batch dimension, shutdown and the figures.
//
// Timing: the executor can hold a run until the test releases it (a "gate"), so that what
// queues behind it is known when the next batch forms; windows are either 0, tens of ms (only
// lower bounds are asserted), or 10 s where a batch must go by size (a wrong rule then shows as
// a timeout, not a flake).
#include "tensor_models/tensor_batcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "tensor_test_util.h"

namespace pier::tensor_models {
namespace {

using namespace std::chrono_literals;
using testing::Floats;
using testing::Fp32;
using testing::Strings;
using testing::StringsOf;
using Clock = std::chrono::steady_clock;

constexpr auto kLong = 10s;  // a window no test waits out

// Inputs a, b [-1, -1] FP32 and s [-1, 2] BYTES; outputs sum [-1, -1] (a + b) and echo [-1, 2]
// (s).
TensorModelInfo AddModel(int64_t max_batch_size, std::vector<int64_t> preferred = {}) {
  TensorModelInfo info;
  info.inputs = {{.name = "a", .type = ElementType::kFp32, .shape = {-1, -1}},
                 {.name = "b", .type = ElementType::kFp32, .shape = {-1, -1}},
                 {.name = "s", .type = ElementType::kBytes, .shape = {-1, 2}}};
  info.outputs = {{.name = "sum", .type = ElementType::kFp32, .shape = {-1, -1}},
                  {.name = "echo", .type = ElementType::kBytes, .shape = {-1, 2}}};
  info.max_batch_size = max_batch_size;
  info.preferred_batch_sizes = std::move(preferred);
  return info;
}

// A request of `batch` rows of `width`: a = id * 1000 + element index, b = 0.5, s = "id.k".
TensorRequest Request(int id, int64_t batch, int64_t width = 4, int priority = 0) {
  std::vector<float> a(batch * width), b(batch * width, 0.5f);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(id * 1000 + i);
  std::vector<std::string> s;
  for (int64_t k = 0; k < 2 * batch; ++k) s.push_back(std::to_string(id) + "." + std::to_string(k));
  TensorRequest r;
  r.inputs.push_back(Fp32("a", {batch, width}, a));
  r.inputs.push_back(Fp32("b", {batch, width}, b));
  r.inputs.push_back(Strings("s", {batch, 2}, s));
  r.priority = priority;
  return r;
}

// Checks that `result` is request `id`'s own answer (all outputs, in the model's order).
void ExpectAnswer(const TensorResult& result, int id, int64_t batch, int64_t width = 4) {
  ASSERT_TRUE(result.status.ok()) << result.status.ToString();
  ASSERT_EQ(result.outputs.size(), 2u);
  const HostTensor& sum = result.outputs[0];
  EXPECT_EQ(sum.name, "sum");
  EXPECT_EQ(sum.shape, (std::vector<int64_t>{batch, width}));
  std::vector<float> want(batch * width);
  for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<float>(id * 1000 + i) + 0.5f;
  EXPECT_EQ(Floats(sum), want) << "request " << id;
  const HostTensor& echo = result.outputs[1];
  EXPECT_EQ(echo.name, "echo");
  EXPECT_EQ(echo.shape, (std::vector<int64_t>{batch, 2}));
  std::vector<std::string> s;
  for (int64_t k = 0; k < 2 * batch; ++k) s.push_back(std::to_string(id) + "." + std::to_string(k));
  EXPECT_EQ(StringsOf(echo), s) << "request " << id;
}

// Runs the add model; can hold runs at a gate, block until StopRun, or fail.
class FakeExecutor : public BatchExecutor {
 public:
  struct RunRecord {
    std::vector<std::vector<int64_t>> shapes;  // per input
    std::vector<float> a;                      // input a's values
    const char* a_data = nullptr;              // where input a's bytes were
    const char* sum_data = nullptr;            // where output sum's bytes were
  };

  Result<std::vector<HostTensor>> Run(std::vector<HostTensor> inputs) override {
    std::unique_lock lock(mu_);
    RunRecord record;
    for (const HostTensor& t : inputs) record.shapes.push_back(t.shape);
    record.a = Floats(inputs[0]);
    record.a_data = inputs[0].bytes.data();
    in_run_ = true;
    ++entered_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return !hold_ || stop_; });
    in_run_ = false;
    if (stop_) {
      stop_ = false;
      runs_.push_back(record);
      return UnavailableError("stopped");
    }
    if (!fail_.ok()) {
      runs_.push_back(record);
      return fail_;
    }
    HostTensor sum = inputs[0];
    sum.name = "sum";
    std::vector<float> a = Floats(inputs[0]), b = Floats(inputs[1]);
    for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
    std::memcpy(sum.bytes.data(), a.data(), sum.bytes.size());
    if (wrong_batch_) sum.shape[0] += 1;
    HostTensor echo = std::move(inputs[2]);
    echo.name = "echo";
    record.sum_data = sum.bytes.data();
    runs_.push_back(record);
    std::vector<HostTensor> outputs;
    outputs.push_back(std::move(sum));
    outputs.push_back(std::move(echo));
    return outputs;
  }

  void StopRun() override {
    std::lock_guard lock(mu_);
    ++stop_calls_;
    if (in_run_) stop_ = true;
    cv_.notify_all();
  }

  // Runs from now on wait at the gate until Release (or StopRun).
  void Hold() {
    std::lock_guard lock(mu_);
    hold_ = true;
  }
  void Release() {
    std::lock_guard lock(mu_);
    hold_ = false;
    cv_.notify_all();
  }
  // Waits until `n` runs have started.
  bool WaitEntered(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 5s, [&] { return entered_ >= n; });
  }
  void Fail(Status status) {
    std::lock_guard lock(mu_);
    fail_ = std::move(status);
  }
  void GiveWrongBatch() {
    std::lock_guard lock(mu_);
    wrong_batch_ = true;
  }
  std::vector<RunRecord> runs() {
    std::lock_guard lock(mu_);
    return runs_;
  }
  int stop_calls() {
    std::lock_guard lock(mu_);
    return stop_calls_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool hold_ = false, stop_ = false, in_run_ = false, wrong_batch_ = false;
  int entered_ = 0, stop_calls_ = 0;
  Status fail_ = Status::Ok();
  std::vector<RunRecord> runs_;
};

// Collects the results of requests by id.
class Results {
 public:
  std::function<void(TensorResult)> For(int id) {
    return [this, id](TensorResult r) {
      std::lock_guard lock(mu_);
      EXPECT_EQ(results_.count(id), 0u) << "request " << id << " answered twice";
      results_[id] = std::move(r);
      cv_.notify_all();
    };
  }
  // The result of request `id`, waiting up to 5 s for it.
  std::optional<TensorResult> Wait(int id) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, 5s, [&] { return results_.count(id) > 0; })) return std::nullopt;
    return results_[id];
  }
  bool Has(int id) {
    std::lock_guard lock(mu_);
    return results_.count(id) > 0;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, TensorResult> results_;
};

std::shared_ptr<std::atomic<bool>> Flag() { return std::make_shared<std::atomic<bool>>(false); }

TEST(TensorBatcherTest, ConcatenatesRequestsOfBatchOneAndThreeAndSlicesTheirOutputs) {
  FakeExecutor executor;
  Results results;
  TensorBatcher batcher("m", AddModel(8, {4}), executor, {.max_queue_delay = kLong});
  ASSERT_TRUE(batcher.Submit(Request(1, 1), results.For(1)).ok());
  ASSERT_TRUE(batcher.Submit(Request(2, 3), results.For(2)).ok());
  auto r1 = results.Wait(1), r2 = results.Wait(2);  // preferred size 4: no window waited
  ASSERT_TRUE(r1 && r2);
  ExpectAnswer(*r1, 1, 1);
  ExpectAnswer(*r2, 2, 3);
  EXPECT_EQ(r1->batch_size, 4);
  EXPECT_EQ(r2->batch_size, 4);
  const auto runs = executor.runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].shapes, (std::vector<std::vector<int64_t>>{{4, 4}, {4, 4}, {4, 2}}));
}

TEST(TensorBatcherTest, ABatchOfOneRequestPassesItsTensorsThroughWithoutCopying) {
  FakeExecutor executor;
  Results results;
  TensorBatcher batcher("m", AddModel(8), executor, {.max_queue_delay = 0us});
  TensorRequest request = Request(1, 4, 16);
  const char* a_data = request.inputs[0].bytes.data();
  std::atomic<const char*> sum_data = nullptr;  // where the answer's sum is, as it arrives
  auto done = results.For(1);
  ASSERT_TRUE(batcher
                  .Submit(std::move(request),
                          [&](TensorResult r) {
                            if (!r.outputs.empty()) sum_data = r.outputs[0].bytes.data();
                            done(std::move(r));
                          })
                  .ok());
  auto r = results.Wait(1);
  ASSERT_TRUE(r);
  ExpectAnswer(*r, 1, 4, 16);
  const auto runs = executor.runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].a_data, a_data);
  EXPECT_EQ(sum_data.load(), runs[0].sum_data);
}

TEST(TensorBatcherTest, GivesTheOutputsAskedForInTheOrderAsked) {
  FakeExecutor executor;
  Results results;
  TensorBatcher batcher("m", AddModel(8, {2}), executor, {.max_queue_delay = kLong});
  TensorRequest first = Request(1, 1);
  first.outputs = {"echo", "sum"};
  TensorRequest second = Request(2, 1);
  second.outputs = {"echo"};
  ASSERT_TRUE(batcher.Submit(std::move(first), results.For(1)).ok());
  ASSERT_TRUE(batcher.Submit(std::move(second), results.For(2)).ok());
  auto r1 = results.Wait(1), r2 = results.Wait(2);
  ASSERT_TRUE(r1 && r2);
  ASSERT_EQ(r1->outputs.size(), 2u);
  EXPECT_EQ(r1->outputs[0].name, "echo");
  EXPECT_EQ(StringsOf(r1->outputs[0]), (std::vector<std::string>{"1.0", "1.1"}));
  EXPECT_EQ(r1->outputs[1].name, "sum");
  ASSERT_EQ(r2->outputs.size(), 1u);
  EXPECT_EQ(StringsOf(r2->outputs[0]), (std::vector<std::string>{"2.0", "2.1"}));
  // Alone in its batch (2 items: the preferred size), the same.
  TensorRequest third = Request(3, 2);
  third.outputs = {"echo"};
  ASSERT_TRUE(batcher.Submit(std::move(third), results.For(3)).ok());
  auto r3 = results.Wait(3);
  ASSERT_TRUE(r3);
  ASSERT_EQ(r3->outputs.size(), 1u);
  EXPECT_EQ(r3->outputs[0].name, "echo");
  EXPECT_EQ(StringsOf(r3->outputs[0]), (std::vector<std::string>{"3.0", "3.1", "3.2", "3.3"}));
}

TEST(TensorBatcherTest, APreferredSizeTakesThatManyAndTheRestWaits) {
  FakeExecutor executor;
  Results results;
  TensorBatcher batcher("m", AddModel(8, {2, 4}), executor, {.max_queue_delay = kLong});
  executor.Hold();
  ASSERT_TRUE(batcher.Submit(Request(0, 8), results.For(0)).ok());  // the maximum: goes at once
  ASSERT_TRUE(executor.WaitEntered(1));
  for (int id = 1; id <= 5; ++id) ASSERT_TRUE(batcher.Submit(Request(id, 1), results.For(id)).ok());
  executor.Release();
  for (int id = 0; id <= 4; ++id) ASSERT_TRUE(results.Wait(id)) << id;
  // 5 waited: 4 went (the largest preferred size reached), the fifth waits for company.
  ASSERT_EQ(executor.runs().size(), 2u);
  EXPECT_EQ(executor.runs()[1].shapes[0], (std::vector<int64_t>{4, 4}));
  EXPECT_FALSE(results.Has(5));
  ASSERT_TRUE(batcher.Submit(Request(6, 1), results.For(6)).ok());
  auto r5 = results.Wait(5), r6 = results.Wait(6);
  ASSERT_TRUE(r5 && r6);
  ExpectAnswer(*r5, 5, 1);
  ExpectAnswer(*r6, 6, 1);
  EXPECT_EQ(r6->batch_size, 2);
}

TEST(TensorBatcherTest, WhenNoPreferredSizeCanBeMadeUpWhatFitsGoes) {
  FakeExecutor executor;
  Results results;
  TensorBatcher batcher("m", AddModel(8, {4}), executor, {.max_queue_delay = kLong});
  executor.Hold();
  ASSERT_TRUE(batcher.Submit(Request(0, 8), results.For(0)).ok());
  ASSERT_TRUE(executor.WaitEntered(1));
  // 3 + 3 reaches 4 but cannot make it up: both go (6 fits in 8) rather than 3 alone.
  ASSERT_TRUE(batcher.Submit(Request(1, 3), results.For(1)).ok());
  ASSERT_TRUE(batcher.Submit(Request(2, 3), results.For(2)).ok());
  executor.Release();
  auto r1 = results.Wait(1), r2 = results.Wait(2);
  ASSERT_TRUE(r1 && r2);
  ExpectAnswer(*r1, 1, 3);
  ExpectAnswer(*r2, 2, 3);
  EXPECT_EQ(r1->batch_size, 6);
}

TEST(TensorBatcherTest, TheWindowClosesALoneRequestAndHalves) {
  FakeExecutor executor;
  Results results;
  TensorBatcher batcher("m", AddModel(8, {4}), executor, {.max_queue_delay = 40ms});
  const Clock::time_point start = Clock::now();
  ASSERT_TRUE(batcher.Submit(Request(1, 1), results.For(1)).ok());
  auto r = results.Wait(1);
  ASSERT_TRUE(r);
  EXPECT_GE(Clock::now() - start, 40ms);
  ExpectAnswer(*r, 1, 1);
  EXPECT_EQ(r->batch_size, 1);
  // Closed by its window with nothing else waiting: the next lone request waits half as long.
  EXPECT_DOUBLE_EQ(batcher.Stats().window_seconds, 0.020);
  // A batch that fills before its window ends (at once, 20 ms early) doubles it again.
  ASSERT_TRUE(batcher.Submit(Request(2, 4), results.For(2)).ok());
  ASSERT_TRUE(results.Wait(2));
  EXPECT_DOUBLE_EQ(batcher.Stats().window_seconds, 0.040);
}

TEST(TensorBatcherTest, AFixedWindowStaysPut) {
  FakeExecutor executor;
  Results results;
  TensorBatcher batcher("m", AddModel(8), executor,
                        {.max_queue_delay = 5ms, .adaptive_window = false});
  ASSERT_TRUE(batcher.Submit(Request(1, 1), results.For(1)).ok());
  ASSERT_TRUE(results.Wait(1));
  EXPECT_DOUBLE_EQ(batcher.Stats().window_seconds, 0.005);
}

TEST(TensorBatcherTest, ShapeGroupsNeverMix) {
  FakeExecutor executor;
  Results results;
  TensorBatcher batcher("m", AddModel(8), executor, {.max_queue_delay = 0us});
  executor.Hold();
  ASSERT_TRUE(batcher.Submit(Request(0, 1, 4), results.For(0)).ok());
  ASSERT_TRUE(executor.WaitEntered(1));
  ASSERT_TRUE(batcher.Submit(Request(1, 1, 2), results.For(1)).ok());
  ASSERT_TRUE(batcher.Submit(Request(2, 2, 3), results.For(2)).ok());
  ASSERT_TRUE(batcher.Submit(Request(3, 3, 2), results.For(3)).ok());
  ASSERT_TRUE(batcher.Submit(Request(4, 1, 3), results.For(4)).ok());
  executor.Release();
  for (int id = 0; id <= 4; ++id) ASSERT_TRUE(results.Wait(id)) << id;
  ExpectAnswer(*results.Wait(1), 1, 1, 2);
  ExpectAnswer(*results.Wait(2), 2, 2, 3);
  ExpectAnswer(*results.Wait(3), 3, 3, 2);
  ExpectAnswer(*results.Wait(4), 4, 1, 3);
  const auto runs = executor.runs();
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[1].shapes[0], (std::vector<int64_t>{4, 2}));  // 1 and 3: the oldest's group
  EXPECT_EQ(runs[2].shapes[0], (std::vector<int64_t>{3, 3}));  // 2 and 4
}

// Pad rules (input_pad.h) for the add model: `a` padded with 7 and `b` with 0 along their widths
// (dimension 1), or `a` alone.
std::vector<InputPad> WidthPads(bool b_too = true) {
  std::map<std::string, PadRule> rules = {{"a", {.axes = {1}, .value = 7}}};
  if (b_too) rules["b"] = {.axes = {1}, .value = 0};
  return std::move(ResolvePadRules(AddModel(8), rules)).value();
}

// Runs request 0 (width 4) alone at a gate, queues requests 1 (width 5) and 2 (width 9) behind
// it, then opens the gate; returns the executor's runs once all three are answered.
std::vector<FakeExecutor::RunRecord> WidthsFiveAndNine(std::vector<InputPad> pads,
                                                       Results& results) {
  FakeExecutor executor;
  TensorBatcher batcher("m", AddModel(8), executor,
                        {.max_queue_delay = 0us, .pads = std::move(pads)});
  executor.Hold();
  EXPECT_TRUE(batcher.Submit(Request(0, 1, 4), results.For(0)).ok());
  EXPECT_TRUE(executor.WaitEntered(1));
  EXPECT_TRUE(batcher.Submit(Request(1, 1, 5), results.For(1)).ok());
  EXPECT_TRUE(batcher.Submit(Request(2, 1, 9), results.For(2)).ok());
  executor.Release();
  for (int id = 0; id <= 2; ++id) EXPECT_TRUE(results.Wait(id)) << id;
  return executor.runs();
}

TEST(TensorBatcherTest, RequestsDifferingOnlyAlongPaddedAxesShareOnePaddedRun) {
  Results results;
  const auto runs = WidthsFiveAndNine(WidthPads(), results);
  ASSERT_EQ(runs.size(), 2u);
  // Widths 5 and 9 ran as one batch of width 9: request 1's row padded with a's 7 (and b's 0).
  EXPECT_EQ(runs[1].shapes, (std::vector<std::vector<int64_t>>{{2, 9}, {2, 9}, {2, 2}}));
  std::vector<float> a = {1000, 1001, 1002, 1003, 1004, 7, 7, 7, 7};
  for (int i = 0; i < 9; ++i) a.push_back(static_cast<float>(2000 + i));
  EXPECT_EQ(runs[1].a, a);
  // Each answer is its own row, at the batch's padded width: request 1's sum is its a + b over
  // its 5 elements, then 7 + 0 where both were padded.
  auto r1 = results.Wait(1);
  ASSERT_TRUE(r1 && r1->status.ok());
  EXPECT_EQ(r1->batch_size, 2);
  EXPECT_EQ(r1->outputs[0].shape, (std::vector<int64_t>{1, 9}));
  EXPECT_EQ(Floats(r1->outputs[0]),
            (std::vector<float>{1000.5, 1001.5, 1002.5, 1003.5, 1004.5, 7, 7, 7, 7}));
  EXPECT_EQ(StringsOf(r1->outputs[1]), (std::vector<std::string>{"1.0", "1.1"}));
  ExpectAnswer(*results.Wait(2), 2, 1, 9);  // the widest: as if alone
  ExpectAnswer(*results.Wait(0), 0, 1, 4);  // alone: unpadded
}

TEST(TensorBatcherTest, WithoutAPadRuleDifferentWidthsDoNotShareARun) {
  Results results;
  const auto runs = WidthsFiveAndNine({}, results);
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[1].shapes[0], (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(runs[2].shapes[0], (std::vector<int64_t>{1, 9}));
  ExpectAnswer(*results.Wait(1), 1, 1, 5);
  ExpectAnswer(*results.Wait(2), 2, 1, 9);
}

TEST(TensorBatcherTest, RequestsDifferingAlongAnAxisNotPaddedStillSplit) {
  Results results;
  // `a` pads its width, `b` does not: widths 5 and 9 differ in b's, so they never share.
  const auto runs = WidthsFiveAndNine(WidthPads(/*b_too=*/false), results);
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[1].shapes[1], (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(runs[2].shapes[1], (std::vector<int64_t>{1, 9}));
  ExpectAnswer(*results.Wait(1), 1, 1, 5);
  ExpectAnswer(*results.Wait(2), 2, 1, 9);
}

TEST(TensorBatcherTest, ALoneRequestWithAPadRuleIsPassedThroughUncopiedAndUnpadded) {
  FakeExecutor executor;
  Results results;
  TensorBatcher batcher("m", AddModel(8), executor, {.max_queue_delay = 0us, .pads = WidthPads()});
  TensorRequest request = Request(1, 2, 5);
  const char* a_data = request.inputs[0].bytes.data();
  ASSERT_TRUE(batcher.Submit(std::move(request), results.For(1)).ok());
  auto r = results.Wait(1);
  ASSERT_TRUE(r);
  ExpectAnswer(*r, 1, 2, 5);
  ASSERT_EQ(executor.runs().size(), 1u);
  EXPECT_EQ(executor.runs()[0].a_data, a_data);
}

TEST(TensorBatcherTest, HigherClassesFillBatchesFirstAndPickTheGroup) {
  FakeExecutor executor;
  Results results;
  TensorBatcher batcher("m", AddModel(2), executor, {.max_queue_delay = 0us, .aging = 0ms});
  executor.Hold();
  ASSERT_TRUE(batcher.Submit(Request(0, 2), results.For(0)).ok());
  ASSERT_TRUE(executor.WaitEntered(1));
  ASSERT_TRUE(batcher.Submit(Request(1, 1, 4, 0), results.For(1)).ok());
  ASSERT_TRUE(batcher.Submit(Request(2, 1, 4, 0), results.For(2)).ok());
  ASSERT_TRUE(batcher.Submit(Request(3, 1, 4, 3), results.For(3)).ok());
  ASSERT_TRUE(batcher.Submit(Request(4, 1, 2, 0), results.For(4)).ok());  // another shape
  ASSERT_TRUE(batcher.Submit(Request(5, 1, 2, 2), results.For(5)).ok());
  executor.Release();
  for (int id = 0; id <= 5; ++id) ASSERT_TRUE(results.Wait(id)) << id;
  const auto runs = executor.runs();
  ASSERT_EQ(runs.size(), 4u);
  // Class 3's request picks its group and comes first, then the oldest of class 0.
  EXPECT_EQ(runs[1].a[0], 3000);
  EXPECT_EQ(runs[1].a[4], 1000);
  // Then the group holding class 2 (though its class-0 request is younger than 2).
  EXPECT_EQ(runs[2].a[0], 5000);
  EXPECT_EQ(runs[2].a[2], 4000);
  EXPECT_EQ(runs[3].a[0], 2000);
}

TEST(TensorBatcherTest, AgingLiftsARequestThatWaited) {
  FakeExecutor executor;
  Results results;
  TensorBatcher batcher("m", AddModel(1), executor, {.max_queue_delay = 0us, .aging = 1ms});
  executor.Hold();
  ASSERT_TRUE(batcher.Submit(Request(0, 1), results.For(0)).ok());
  ASSERT_TRUE(executor.WaitEntered(1));
  ASSERT_TRUE(batcher.Submit(Request(1, 1, 4, 0), results.For(1)).ok());
  std::this_thread::sleep_for(20ms);  // class 0 + 20 by now
  ASSERT_TRUE(batcher.Submit(Request(2, 1, 4, 3), results.For(2)).ok());
  executor.Release();
  ASSERT_TRUE(results.Wait(1) && results.Wait(2));
  const auto runs = executor.runs();
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[1].a[0], 1000);
  EXPECT_EQ(runs[2].a[0], 2000);
}

TEST(TensorBatcherTest, ARequestPastItsDeadlineFailsWithoutRunning) {
  FakeExecutor executor;
  Results results;
  // Behind a running batch: the watcher refuses it while the batch still runs.
  {
    TensorBatcher batcher("m", AddModel(8), executor, {.max_queue_delay = 0us});
    executor.Hold();
    ASSERT_TRUE(batcher.Submit(Request(0, 8), results.For(0)).ok());
    ASSERT_TRUE(executor.WaitEntered(1));
    TensorRequest late = Request(1, 1);
    late.deadline = Clock::now() + 5ms;
    ASSERT_TRUE(batcher.Submit(std::move(late), results.For(1)).ok());
    auto r = results.Wait(1);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status.code(), StatusCode::kResourceExhausted) << r->status.ToString();
    EXPECT_FALSE(results.Has(0));  // the batch ahead of it still runs
    executor.Release();
    ASSERT_TRUE(results.Wait(0));
    EXPECT_EQ(batcher.Stats().expired, 1);
  }
  // Waiting in a window longer than its deadline: refused when the deadline passes.
  TensorBatcher batcher("m", AddModel(8), executor,
                        {.max_queue_delay = kLong, .adaptive_window = false});
  TensorRequest late = Request(2, 1);
  late.deadline = Clock::now() + 10ms;
  ASSERT_TRUE(batcher.Submit(std::move(late), results.For(2)).ok());
  auto r = results.Wait(2);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(executor.runs().size(), 1u);
}

TEST(TensorBatcherTest, ARequestCancelledBeforeItStartsIsDropped) {
  FakeExecutor executor;
  Results results;
  TensorBatcher batcher("m", AddModel(8), executor, {.max_queue_delay = 0us});
  executor.Hold();
  ASSERT_TRUE(batcher.Submit(Request(0, 8), results.For(0)).ok());
  ASSERT_TRUE(executor.WaitEntered(1));
  auto flag = Flag();
  TensorRequest gone = Request(1, 1);
  gone.cancelled = flag;
  ASSERT_TRUE(batcher.Submit(std::move(gone), results.For(1)).ok());
  flag->store(true);
  auto r = results.Wait(1);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status.code(), StatusCode::kUnavailable);
  EXPECT_EQ(r->status.message().rfind("cancelled", 0), 0u) << r->status.message();
  executor.Release();
  ASSERT_TRUE(results.Wait(0));
  EXPECT_EQ(executor.runs().size(), 1u);
  EXPECT_EQ(executor.stop_calls(), 0);
  EXPECT_EQ(batcher.Stats().cancelled, 1);
}

TEST(TensorBatcherTest, StopsARunningBatchOnceEveryRequestInItIsCancelled) {
  FakeExecutor executor;
  Results results;
  TensorBatcher batcher("m", AddModel(8, {2}), executor, {.max_queue_delay = kLong});
  executor.Hold();  // the run lasts until StopRun
  auto flag1 = Flag(), flag2 = Flag();
  TensorRequest r1 = Request(1, 1), r2 = Request(2, 1);
  r1.cancelled = flag1;
  r2.cancelled = flag2;
  ASSERT_TRUE(batcher.Submit(std::move(r1), results.For(1)).ok());
  ASSERT_TRUE(batcher.Submit(std::move(r2), results.For(2)).ok());
  ASSERT_TRUE(executor.WaitEntered(1));
  flag1->store(true);
  std::this_thread::sleep_for(30ms);  // three polls: someone still waits for request 2
  EXPECT_EQ(executor.stop_calls(), 0);
  EXPECT_FALSE(results.Has(1));
  flag2->store(true);
  auto a1 = results.Wait(1), a2 = results.Wait(2);
  ASSERT_TRUE(a1 && a2);
  EXPECT_GE(executor.stop_calls(), 1);
  EXPECT_EQ(a1->status.code(), StatusCode::kUnavailable);
  EXPECT_EQ(a1->status.message().rfind("cancelled", 0), 0u) << a1->status.message();
  EXPECT_EQ(a2->status.code(), StatusCode::kUnavailable);
  EXPECT_EQ(batcher.Stats().cancelled, 2);
}

TEST(TensorBatcherTest, AFailedRunFailsEveryRequestInIt) {
  FakeExecutor executor;
  Results results;
  TensorBatcher batcher("m", AddModel(8, {2}), executor, {.max_queue_delay = kLong});
  executor.Fail(InternalError("the graph broke"));
  ASSERT_TRUE(batcher.Submit(Request(1, 1), results.For(1)).ok());
  ASSERT_TRUE(batcher.Submit(Request(2, 1), results.For(2)).ok());
  for (int id : {1, 2}) {
    auto r = results.Wait(id);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status.ToString(), "INTERNAL: the graph broke");
    EXPECT_TRUE(r->outputs.empty());
  }
  EXPECT_EQ(batcher.Stats().batches, 1);
}

TEST(TensorBatcherTest, OutputsThatDoNotMatchTheBatchAreInternal) {
  FakeExecutor executor;
  Results results;
  TensorBatcher batcher("m", AddModel(8, {2}), executor, {.max_queue_delay = kLong});
  executor.GiveWrongBatch();
  ASSERT_TRUE(batcher.Submit(Request(1, 1), results.For(1)).ok());
  ASSERT_TRUE(batcher.Submit(Request(2, 1), results.For(2)).ok());
  auto r = results.Wait(1);
  ASSERT_TRUE(r && results.Wait(2));
  EXPECT_EQ(r->status.ToString(),
            "INTERNAL: model 'm': the run's output 'sum': shape [3, 4] for a batch of 2");
}

TEST(TensorBatcherTest, WithoutABatchDimensionEachRequestRunsAloneAsItCame) {
  FakeExecutor executor;
  Results results;
  TensorBatcher batcher("m", AddModel(0), executor, {.max_queue_delay = kLong});
  executor.Hold();
  ASSERT_TRUE(batcher.Submit(Request(0, 1), results.For(0)).ok());  // no window waited
  ASSERT_TRUE(executor.WaitEntered(1));
  ASSERT_TRUE(batcher.Submit(Request(1, 2), results.For(1)).ok());
  ASSERT_TRUE(batcher.Submit(Request(2, 2), results.For(2)).ok());
  executor.Release();
  for (int id = 0; id <= 2; ++id) ASSERT_TRUE(results.Wait(id)) << id;
  ExpectAnswer(*results.Wait(1), 1, 2);
  ExpectAnswer(*results.Wait(2), 2, 2);
  EXPECT_EQ(results.Wait(2)->batch_size, 1);
  const auto runs = executor.runs();
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[1].shapes[0], (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(runs[2].shapes[0], (std::vector<int64_t>{2, 4}));
}

TEST(TensorBatcherTest, SubmitValidatesAndBoundsTheQueue) {
  FakeExecutor executor;
  Results results;
  TensorBatcher batcher("m", AddModel(8), executor,
                        {.max_queue_delay = kLong, .max_queued_items = 4});
  TensorRequest bad = Request(1, 1);
  bad.inputs[0].type = ElementType::kInt32;
  EXPECT_EQ(batcher.Submit(std::move(bad), results.For(1)).ToString(),
            "INVALID_ARGUMENT: model 'm': input 'a': expected FP32, got INT32");
  EXPECT_TRUE(batcher.Submit(Request(2, 3), results.For(2)).ok());
  EXPECT_EQ(batcher.Submit(Request(3, 2), results.For(3)).code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(batcher.Submit(Request(4, 1), results.For(4)).ok());
  EXPECT_EQ(batcher.Stats().queued_items, 4);
  batcher.CancelQueued("model 'm' is being unloaded");
  for (int id : {2, 4}) {
    auto r = results.Wait(id);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status.ToString(), "UNAVAILABLE: model 'm' is being unloaded");
  }
  EXPECT_FALSE(results.Has(1));
  EXPECT_FALSE(results.Has(3));
  EXPECT_EQ(batcher.Stats().queued_items, 0);
}

TEST(TensorBatcherTest, DestructionFailsWhatIsQueued) {
  FakeExecutor executor;
  Results results;
  auto batcher = std::make_unique<TensorBatcher>("m", AddModel(8), executor,
                                                 TensorBatcherOptions{.max_queue_delay = kLong});
  ASSERT_TRUE(batcher->Submit(Request(1, 1), results.For(1)).ok());
  ASSERT_TRUE(batcher->Submit(Request(2, 2), results.For(2)).ok());
  batcher.reset();
  for (int id : {1, 2}) {
    ASSERT_TRUE(results.Has(id));
    EXPECT_EQ(results.Wait(id)->status.ToString(), "UNAVAILABLE: model 'm' is shutting down");
  }
  EXPECT_TRUE(executor.runs().empty());
}

TEST(TensorBatcherTest, StatsCountBatchesItemsAndTimes) {
  FakeExecutor executor;
  Results results;
  TensorBatcher batcher("m", AddModel(8, {4}), executor, {.max_queue_delay = kLong});
  ASSERT_TRUE(batcher.Submit(Request(1, 1), results.For(1)).ok());
  ASSERT_TRUE(batcher.Submit(Request(2, 3), results.For(2)).ok());
  ASSERT_TRUE(results.Wait(1) && results.Wait(2));
  ASSERT_TRUE(batcher.Submit(Request(3, 8), results.For(3)).ok());
  ASSERT_TRUE(results.Wait(3));
  const TensorRunnerStats stats = batcher.Stats();
  EXPECT_EQ(stats.batches, 2);
  EXPECT_EQ(stats.requests, 3);
  EXPECT_EQ(stats.items, 12);
  EXPECT_EQ(stats.queued_items, 0);
  EXPECT_EQ(stats.running_items, 0);
  EXPECT_EQ(stats.expired, 0);
  EXPECT_EQ(stats.cancelled, 0);
  // Batch items: bounds 1, 2, 4, 8, ...: one batch of 4, one of 8.
  ASSERT_EQ(stats.batch_items.counts.size(), stats.batch_items.bounds.size() + 1);
  EXPECT_EQ(stats.batch_items.counts[2], 1u);
  EXPECT_EQ(stats.batch_items.counts[3], 1u);
  EXPECT_DOUBLE_EQ(stats.batch_items.sum, 12);
  uint64_t queued = 0, computed = 0;
  for (uint64_t c : stats.queue_seconds.counts) queued += c;
  for (uint64_t c : stats.compute_seconds.counts) computed += c;
  EXPECT_EQ(queued, 3u);
  EXPECT_EQ(computed, 2u);
  EXPECT_GE(results.Wait(3)->compute_seconds, 0);
}

}  // namespace
}  // namespace pier::tensor_models

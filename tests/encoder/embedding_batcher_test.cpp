// EmbeddingBatcher over all-MiniLM-L6-v2 (Q8_0): concurrent requests are batched together
// and get bitwise the vectors the model gives each text alone; deadlines, validation, queue
// limits and shutdown fail requests with the right codes.
#include "encoder/embedding_batcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "common/thread_pool.h"
#include "device/cpu/cpu_device.h"
#include "memory/memory_governor.h"
#include "synthetic_text.h"

namespace pier::encoder {
namespace {

class EmbeddingBatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = std::string(PIER_MODELS_DIR) + "/all-MiniLM-L6-v2.Q8_0.gguf";
    ASSERT_TRUE(std::filesystem::exists(path)) << path << " is missing: run scripts/bootstrap";
    file_ = std::move(model::GgufFile::Open(path)).value();
    device_ = std::move(CpuDevice::Create()).value();
    governor_ = std::move(MemoryGovernor::Create(device_.get())).value();
    auto weights = governor_->AddOwner({.name = "w"});
    auto workspace = governor_->AddOwner({.name = "ws"});
    auto model = BertModel::Create(*file_, {.governor = governor_.get(),
                                            .weights_owner = *weights,
                                            .workspace_owner = *workspace,
                                            .pool = &pool_,
                                            .max_batch_tokens = 512});
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(model).value();
  }

  static std::vector<int32_t> Text(int32_t seed, int length) {
    return testing::SyntheticText(seed, length);
  }

  ThreadPool pool_{2};
  std::unique_ptr<model::GgufFile> file_;
  std::unique_ptr<CpuDevice> device_;
  std::unique_ptr<MemoryGovernor> governor_;
  std::unique_ptr<BertModel> model_;
};

TEST_F(EmbeddingBatcherTest, BatchesConcurrentRequestsWithoutChangingTheirVectors) {
  constexpr int kRequests = 40;
  std::vector<std::vector<int32_t>> texts;
  for (int i = 0; i < kRequests; ++i) texts.push_back(Text(i, 4 + (i * 7) % 40));
  // Each text alone, straight from the model, normalized.
  const int64_t d = model_->info().embedding_length;
  std::vector<std::vector<float>> alone;
  for (const auto& t : texts) {
    std::vector<float> v(d);
    const EncoderInput input{.ids = t};
    ASSERT_TRUE(model_->Embed({&input, 1}, v.data()).ok());
    NormalizeL2(v.data(), d);
    alone.push_back(v);
  }
  EmbeddingBatcher batcher(*model_, {.max_queue_delay = std::chrono::milliseconds(20)});
  std::vector<std::promise<EmbedResult>> promises(kRequests);
  std::vector<std::thread> clients;
  for (int i = 0; i < kRequests; ++i) {
    clients.emplace_back([&, i] {
      EmbedRequest request{.texts = {texts[i]}, .priority = i % 3};
      Status st = batcher.Submit(std::move(request),
                                 [&, i](EmbedResult r) { promises[i].set_value(std::move(r)); });
      if (!st.ok()) promises[i].set_value({.status = st});
    });
  }
  for (auto& c : clients) c.join();
  for (int i = 0; i < kRequests; ++i) {
    EmbedResult r = promises[i].get_future().get();
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    ASSERT_EQ(r.vectors.size(), static_cast<size_t>(d));
    EXPECT_EQ(std::memcmp(r.vectors.data(), alone[i].data(), d * sizeof(float)), 0)
        << "request " << i << " differs from its text embedded alone";
    EXPECT_EQ(r.prompt_tokens, static_cast<int64_t>(texts[i].size()));
  }
  const BatcherStats stats = batcher.Stats();
  EXPECT_EQ(stats.texts, kRequests);
  EXPECT_LT(stats.batches, kRequests) << "40 concurrent requests should share batches";
  EXPECT_GT(stats.tokens, 0);
}

TEST_F(EmbeddingBatcherTest, ManyTextsInOneRequestKeepTheirOrder) {
  EmbeddingBatcher batcher(*model_, {.max_batch_texts = 4});
  EmbedRequest request;
  for (int i = 0; i < 10; ++i) request.texts.push_back(Text(i, 6 + i));
  const auto copy = request.texts;
  std::promise<EmbedResult> promise;
  ASSERT_TRUE(
      batcher.Submit(std::move(request), [&](EmbedResult r) { promise.set_value(std::move(r)); })
          .ok());
  EmbedResult r = promise.get_future().get();
  ASSERT_TRUE(r.status.ok());
  const int64_t d = model_->info().embedding_length;
  for (size_t i = 0; i < copy.size(); ++i) {
    std::vector<float> v(d);
    const EncoderInput input{.ids = copy[i]};
    ASSERT_TRUE(model_->Embed({&input, 1}, v.data()).ok());
    NormalizeL2(v.data(), d);
    EXPECT_EQ(std::memcmp(v.data(), r.vectors.data() + i * d, d * sizeof(float)), 0) << i;
  }
  EXPECT_GE(batcher.Stats().batches, 3) << "10 texts, at most 4 per batch";
}

TEST_F(EmbeddingBatcherTest, RefusesBadRequestsAndExpiresLateOnes) {
  EmbeddingBatcher batcher(*model_, {.max_queued_texts = 8});
  auto ignore = [](EmbedResult) {};
  EXPECT_EQ(batcher.Submit({}, ignore).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(batcher.Submit({.texts = {{}}}, ignore).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(batcher.Submit({.texts = {{101, 99999, 102}}}, ignore).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(batcher.Submit({.texts = {std::vector<int32_t>(600, 1000)}}, ignore).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      batcher.Submit({.texts = std::vector<std::vector<int32_t>>(9, Text(1, 5))}, ignore).code(),
      StatusCode::kInvalidArgument)
      << "more texts than the queue can ever hold is the request's fault, not a wait";
  std::promise<EmbedResult> promise;
  EmbedRequest late{.texts = {Text(3, 8)}};
  late.deadline = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  ASSERT_TRUE(
      batcher.Submit(std::move(late), [&](EmbedResult r) { promise.set_value(std::move(r)); })
          .ok());
  EXPECT_EQ(promise.get_future().get().status.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(batcher.Stats().expired, 1);
}

TEST_F(EmbeddingBatcherTest, LoneRequestsShrinkTheWindow) {
  EmbeddingBatcher batcher(*model_, {.max_queue_delay = std::chrono::milliseconds(10)});
  for (int i = 0; i < 6; ++i) {
    std::promise<EmbedResult> promise;
    ASSERT_TRUE(batcher
                    .Submit({.texts = {Text(i, 8)}},
                            [&](EmbedResult r) { promise.set_value(std::move(r)); })
                    .ok());
    ASSERT_TRUE(promise.get_future().get().status.ok());
  }
  EXPECT_LT(batcher.Stats().window_seconds, 0.001) << "six lone requests halve 10 ms six times";

  EmbeddingBatcher fixed(
      *model_, {.max_queue_delay = std::chrono::milliseconds(2), .adaptive_window = false});
  for (int i = 0; i < 3; ++i) {
    std::promise<EmbedResult> promise;
    ASSERT_TRUE(fixed
                    .Submit({.texts = {Text(i, 8)}},
                            [&](EmbedResult r) { promise.set_value(std::move(r)); })
                    .ok());
    ASSERT_TRUE(promise.get_future().get().status.ok());
  }
  EXPECT_DOUBLE_EQ(fixed.Stats().window_seconds, 0.002) << "a fixed window stays";
}

TEST_F(EmbeddingBatcherTest, AFullQueueIsRetryableAndCancelFailsWhatWaits) {
  EmbeddingBatcher batcher(
      *model_,
      {.max_queue_delay = std::chrono::seconds(5), .max_batch_texts = 64, .max_queued_texts = 8});
  std::vector<std::promise<EmbedResult>> promises(2);
  for (int i = 0; i < 2; ++i) {
    EmbedRequest request{.texts = std::vector<std::vector<int32_t>>(4, Text(i, 6))};
    ASSERT_TRUE(batcher
                    .Submit(std::move(request),
                            [&, i](EmbedResult r) { promises[i].set_value(std::move(r)); })
                    .ok());
  }
  EXPECT_EQ(batcher.Submit({.texts = {Text(9, 6)}}, [](EmbedResult) {}).code(),
            StatusCode::kResourceExhausted);
  batcher.CancelQueued("model m is being unloaded");
  for (auto& p : promises) {
    const EmbedResult r = p.get_future().get();
    EXPECT_EQ(r.status.code(), StatusCode::kUnavailable);
    EXPECT_NE(r.status.message().find("unloaded"), std::string::npos);
  }
  EXPECT_EQ(batcher.Stats().queued_texts, 0) << "cancelled texts leave the queue";
}

// Two texts per batch and a higher class always waiting: the low one still runs, raised one
// class per `aging` it waits.
TEST_F(EmbeddingBatcherTest, AgingKeepsALowClassFromStarving) {
  EmbeddingBatcher batcher(*model_, {.max_queue_delay = std::chrono::milliseconds(1),
                                     .max_batch_texts = 2,
                                     .aging = std::chrono::milliseconds(50)});
  std::atomic<bool> low_done{false};
  std::atomic<bool> stop{false};
  std::thread flood([&] {
    while (!stop.load()) {
      for (int i = 0; i < 4; ++i) {
        (void)batcher.Submit({.texts = {Text(i, 8)}, .priority = 3}, [](EmbedResult) {});
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(batcher
                  .Submit({.texts = {Text(99, 8)}, .priority = 0},
                          [&](EmbedResult r) {
                            EXPECT_TRUE(r.status.ok());
                            low_done.store(true);
                          })
                  .ok());
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!low_done.load() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stop.store(true);
  flood.join();
  EXPECT_TRUE(low_done.load()) << "the low-priority text never ran";
}

// More waits than a batch holds: eight short texts queued before four long ones go in a batch
// of their own; a short anchor does not pull long texts in (so the shorts are not held behind
// them).
TEST_F(EmbeddingBatcherTest, ShortTextsAreNotHeldBehindLongOnes) {
  EmbeddingBatcher batcher(*model_, {.max_queue_delay = std::chrono::milliseconds(50)});
  EmbedRequest request;
  for (int i = 0; i < 8; ++i) request.texts.push_back(Text(i, 8));
  for (int i = 0; i < 4; ++i) request.texts.push_back(Text(100 + i, 200));
  std::promise<EmbedResult> promise;
  ASSERT_TRUE(
      batcher.Submit(std::move(request), [&](EmbedResult r) { promise.set_value(std::move(r)); })
          .ok());
  ASSERT_TRUE(promise.get_future().get().status.ok());
  const BatcherStats stats = batcher.Stats();
  // Bucket 1 of tokens per batch holds batches of 17..64 tokens: the shorts' 8 x 8.
  ASSERT_GE(stats.batch_tokens.counts.size(), 2u);
  EXPECT_EQ(stats.batch_tokens.counts[1], 1u) << "the eight short texts ran alone";
  EXPECT_EQ(stats.batches, 3) << "then the long ones, two per 512-token batch";
}

// With the drain rate measured, a request whose predicted wait passes its deadline is refused
// at Submit; the same request with an empty queue is taken.
TEST_F(EmbeddingBatcherTest, APredictedWaitPastTheDeadlineIsRefusedAtOnce) {
  EmbeddingBatcher batcher(
      *model_, {.max_queue_delay = std::chrono::milliseconds(1), .adaptive_window = false});
  auto run = [&](EmbedRequest request) {
    std::promise<EmbedResult> promise;
    Status st =
        batcher.Submit(std::move(request), [&](EmbedResult r) { promise.set_value(std::move(r)); });
    if (!st.ok()) return st;
    return promise.get_future().get().status;
  };
  ASSERT_TRUE(run({.texts = {Text(1, 64), Text(2, 64)}}).ok()) << "measures the drain rate";
  const auto soon = [] {
    return std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  };
  ASSERT_TRUE(run({.texts = {Text(3, 16)}, .deadline = soon()}).ok()) << "an empty queue: taken";
  // 4000 texts of 250 tokens queued ahead: seconds of work at any CPU's rate.
  EmbedRequest big;
  big.texts.assign(4000, Text(4, 250));
  std::promise<EmbedResult> big_done;
  ASSERT_TRUE(
      batcher.Submit(std::move(big), [&](EmbedResult r) { big_done.set_value(std::move(r)); })
          .ok());
  const Status refused =
      batcher.Submit({.texts = {Text(5, 16)}, .deadline = soon()}, [](EmbedResult) {});
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("predicted wait"), std::string::npos) << refused.ToString();
  EXPECT_EQ(batcher.Stats().predicted_refusals, 1);
  batcher.CancelQueued("test over");
  big_done.get_future().get();
}

}  // namespace
}  // namespace pier::encoder

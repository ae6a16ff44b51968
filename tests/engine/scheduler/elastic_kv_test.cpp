// The engine on an elastic KV arena (LeasedKvStore on a fake device): the lease grows when
// sequences wait for blocks, a shrink during decoding preempts and later completes every
// request with unchanged tokens, and the governor reclaims an idle engine's chunks for a
// higher-priority owner.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "device/fake_device.h"
#include "engine/leased_kv_store.h"
#include "engine/scheduler/engine.h"
#include "engine/scheduler/fake_model.h"
#include "memory/lease.h"
#include "memory/memory_governor.h"

namespace pier::engine {
namespace {

using testing::FakeLayout;
using testing::FakeRunner;
using testing::TokensOf;
using testing::VectorKvStore;

constexpr int64_t kVocab = 40;
constexpr int64_t kBlockSize = 4;
constexpr int64_t kBlocksPerChunk = 4;

std::vector<int32_t> Prompt(int64_t n, uint32_t seed) {
  return testing::RandomPrompt(n, seed, kVocab);
}

Request Greedy(std::string id, std::vector<int32_t> prompt, int32_t max_tokens) {
  return testing::GreedyRequest(std::move(id), std::move(prompt), max_tokens);
}

// The same request on a plain, large KV store.
std::vector<int32_t> RunAlone(const Request& r) {
  VectorKvStore kv(FakeLayout(kBlockSize), 256);
  FakeRunner runner(&kv, kVocab, 4096);
  EngineOptions options;
  options.start_thread = false;
  auto engine = *Engine::Create(options, &runner, &kv);
  auto h = *engine->Submit(r);
  while (engine->RunStep()) {
  }
  return TokensOf(h->Drain());
}

class ElasticKvTest : public ::testing::Test {
 protected:
  ElasticKvTest() : device_(FakeDeviceOptions{}) {
    GovernorOptions options;
    options.budget = BudgetSpec::Bytes(8 * kChunkBytes);
    governor_ = std::move(MemoryGovernor::Create(&device_, options)).value();
    owner_ = *governor_->AddOwner({.name = "model/kv", .priority = 0});
  }

  std::unique_ptr<LeasedKvStore> MakeStore(size_t initial, size_t max) {
    LeasedKvOptions options;
    options.name = "model/kv";
    options.blocks_per_chunk = kBlocksPerChunk;
    options.min_chunks = 1;
    options.initial_chunks = initial;
    options.max_chunks = max;
    auto store = LeasedKvStore::Create(FakeLayout(kBlockSize), options, *governor_, owner_);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return std::move(store).value();
  }

  // The fake device maps virtual memory in 64 KiB granules: one chunk each.
  static constexpr uint64_t kChunkBytes = 64 * 1024;
  FakeDevice device_;
  std::unique_ptr<MemoryGovernor> governor_;
  OwnerId owner_;
};

TEST_F(ElasticKvTest, GrowsTheLeaseWhenSequencesWaitForBlocks) {
  auto kv = MakeStore(1, 8);
  FakeRunner runner(kv.get(), kVocab, 4096);
  EngineOptions options;
  options.start_thread = false;
  auto engine = *Engine::Create(options, &runner, kv.get());
  EXPECT_EQ(engine->Stats().kv_blocks_total, kBlocksPerChunk);
  EXPECT_EQ(engine->Stats().max_request_tokens, 8 * kBlocksPerChunk * kBlockSize);
  std::vector<Request> requests;
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (int i = 0; i < 4; ++i) {
    requests.push_back(Greedy("g" + std::to_string(i), Prompt(10, i), 20));
    handles.push_back(*engine->Submit(requests.back()));
  }
  while (engine->RunStep()) {
  }
  const EngineStats stats = engine->Stats();
  EXPECT_GT(stats.kv_grows, 0);
  EXPECT_GT(kv->lease().chunks(), 1u);
  EXPECT_EQ(governor_->StatsFor(owner_)->lease_bytes, kv->lease().chunks() * kChunkBytes);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(TokensOf(handles[i]->Drain()), RunAlone(requests[i])) << "request " << i;
  }
  EXPECT_EQ(stats.kv_blocks_used, 0);
  EXPECT_TRUE(engine->CheckConsistency().ok());
  EXPECT_TRUE(governor_->CheckInvariants().ok());
}

TEST_F(ElasticKvTest, ShrinkDuringDecodingPreemptsAndLaterCompletesEveryRequest) {
  auto kv = MakeStore(8, 8);  // 32 blocks: four 30-token requests (8 blocks each) all fit
  FakeRunner runner(kv.get(), kVocab, 4096);
  EngineOptions options;
  options.start_thread = false;
  auto engine = *Engine::Create(options, &runner, kv.get());
  std::vector<Request> requests;
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (int i = 0; i < 4; ++i) {
    requests.push_back(Greedy("s" + std::to_string(i), Prompt(10, 30 + i), 20));
    handles.push_back(*engine->Submit(requests.back()));
  }
  for (int i = 0; i < 12; ++i) ASSERT_TRUE(engine->RunStep());
  EXPECT_EQ(engine->Stats().running, 4);
  EXPECT_EQ(engine->Stats().preemptions, 0);

  engine->ShrinkKv(4);
  ASSERT_TRUE(engine->RunStep());
  EXPECT_EQ(kv->lease().chunks(), 4u);
  EXPECT_EQ(engine->Stats().kv_blocks_total, 4 * kBlocksPerChunk);
  EXPECT_GT(engine->Stats().preemptions, 0);
  EXPECT_EQ(engine->Stats().kv_shrinks, 1);
  EXPECT_EQ(governor_->StatsFor(owner_)->lease_bytes, 4 * kChunkBytes);

  while (engine->RunStep()) {
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    std::vector<Event> events = handles[i]->Drain();
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events.back().finish, FinishReason::kLength);
    EXPECT_EQ(TokensOf(events), RunAlone(requests[i])) << "request " << i;
  }
  EXPECT_EQ(engine->Stats().kv_blocks_used, 0);
  EXPECT_TRUE(engine->CheckConsistency().ok());
}

TEST_F(ElasticKvTest, GovernorReclaimsAnIdleEnginesChunksForAHigherPriorityOwner) {
  auto kv = MakeStore(6, 8);
  FakeRunner runner(kv.get(), kVocab, 4096);
  auto engine = *Engine::Create(EngineOptions{}, &runner, kv.get());  // engine thread

  OwnerId other = *governor_->AddOwner({.name = "other/kv", .priority = 10});
  LeaseOptions lo;
  lo.name = "other/kv";
  lo.chunk_bytes = kChunkBytes;
  lo.max_chunks = 8;
  lo.initial_chunks = 1;
  auto other_lease = std::move(governor_->CreateLease(other, lo)).value();
  // 6 + 1 + 3 chunks exceed the 8-chunk budget: the engine must give 2 back.
  MemoryStatus grown =
      other_lease->Grow(3, GrowOptions{.wait = true, .timeout = std::chrono::milliseconds(3000)});
  ASSERT_TRUE(grown.ok()) << grown.status().ToString();
  EXPECT_EQ(kv->lease().chunks(), 4u);
  EXPECT_EQ(governor_->Stats().deadline_misses, 0u);

  // The engine still serves requests in what it kept.
  Request r = Greedy("after", Prompt(8, 5), 6);
  auto h = *engine->Submit(r);
  EXPECT_EQ(TokensOf(h->WaitAll()), RunAlone(r));
  EXPECT_EQ(engine->Stats().kv_shrinks, 1);
}

}  // namespace
}  // namespace pier::engine

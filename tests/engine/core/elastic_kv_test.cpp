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
#include "engine/core/engine.h"
#include "engine/kv/leased_kv_store.h"
#include "engine/core/fake_model.h"
#include "engine/core/run_alone.h"
#include "memory/lease.h"
#include "memory/memory_governor.h"

namespace pier::engine {
namespace {

using testing::FakeLayout;
using testing::FakeRunner;
using testing::TokensOf;

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
  return testing::RunAloneOnFakeModel(r, kBlockSize, kVocab);
}

class ElasticKvTest : public ::testing::Test {
 public:
  ElasticKvTest() : device_(FakeDeviceOptions{}) {
    GovernorOptions options;
    options.budget = BudgetSpec::Bytes(8 * kChunkBytes);
    governor_ = std::move(MemoryGovernor::Create(&device_, options)).value();
    owner_ = *governor_->AddOwner({.name = "model/kv", .priority = 0});
  }

  std::unique_ptr<LeasedKvStore> MakeStore(size_t initial, size_t max) {
    return MakeStoreFor(owner_, "model/kv", initial, max);
  }
  std::unique_ptr<LeasedKvStore> MakeStoreFor(OwnerId owner, const std::string& name,
                                              size_t initial, size_t max) {
    LeasedKvOptions options;
    options.name = name;
    options.blocks_per_chunk = kBlocksPerChunk;
    options.min_chunks = 1;
    options.initial_chunks = initial;
    options.max_chunks = max;
    auto store = LeasedKvStore::Create(FakeLayout(kBlockSize), options, *governor_, owner);
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

// Two engines on one governor, stepped in turn: `busy` first fills the budget with requests
// of class `busy_class`, then `needy` (owner priority `needy_priority`, busy's is 0) gets a
// request of class `needy_class` that needs more blocks than its one chunk. Returns whether
// busy gave chunks back while its requests ran; every request completes with its tokens alone.
bool ReclaimedWhileBusy(ElasticKvTest* t, MemoryGovernor& governor, OwnerId busy_owner,
                        Priority busy_class, int needy_priority, Priority needy_class) {
  auto busy_kv = t->MakeStoreFor(busy_owner, "busy/kv", 1, 7);
  OwnerId needy_owner = *governor.AddOwner({.name = "needy/kv", .priority = needy_priority});
  auto needy_kv = t->MakeStoreFor(needy_owner, "needy/kv", 1, 8);
  FakeRunner busy_runner(busy_kv.get(), kVocab, 4096);
  FakeRunner needy_runner(needy_kv.get(), kVocab, 4096);
  EngineOptions options;
  options.start_thread = false;
  auto busy = *Engine::Create(options, &busy_runner, busy_kv.get());
  auto needy = *Engine::Create(options, &needy_runner, needy_kv.get());
  std::vector<Request> busy_requests;
  std::vector<std::shared_ptr<RequestHandle>> busy_handles;
  for (int i = 0; i < 3; ++i) {
    busy_requests.push_back(Greedy("b" + std::to_string(i), Prompt(20, 50 + i), 60));
    busy_requests.back().priority = busy_class;
    busy_handles.push_back(*busy->Submit(busy_requests.back()));
  }
  for (int i = 0; i < 40; ++i) EXPECT_TRUE(busy->RunStep());
  EXPECT_EQ(busy_kv->lease().chunks(), 7u) << "busy grew into the whole budget";
  Request needy_request = Greedy("n", Prompt(30, 60), 20);
  needy_request.priority = needy_class;
  auto needy_handle = *needy->Submit(needy_request);
  bool reclaimed = false;
  for (int i = 0; i < 4000; ++i) {
    const bool busy_ran = busy->RunStep();
    if (busy_ran) reclaimed = reclaimed || busy->Stats().kv_shrinks > 0;
    if (!needy->RunStep() && !busy_ran) break;
  }
  for (size_t i = 0; i < busy_requests.size(); ++i) {
    EXPECT_EQ(TokensOf(busy_handles[i]->Drain()), RunAlone(busy_requests[i])) << "request " << i;
  }
  EXPECT_EQ(TokensOf(needy_handle->Drain()), RunAlone(needy_request));
  EXPECT_TRUE(governor.CheckInvariants().ok());
  return reclaimed;
}

// Reclaim follows request classes before model priorities: critical work of a weaker model
// takes KV from a stronger model running low-class work, and normal work of a stronger model
// does not take it from a weaker model running critical work (it waits until that is done).
TEST_F(ElasticKvTest, ReclaimNeverPreemptsAHigherRequestClassThanItMakesRoomFor) {
  EXPECT_TRUE(
      ReclaimedWhileBusy(this, *governor_, owner_, Priority::kLow, -5, Priority::kCritical));
}

TEST_F(ElasticKvTest, NormalWorkOfAStrongerModelDoesNotPreemptCriticalWork) {
  EXPECT_FALSE(
      ReclaimedWhileBusy(this, *governor_, owner_, Priority::kCritical, 10, Priority::kNormal));
}

TEST_F(ElasticKvTest, AmongEqualClassesTheHigherModelPriorityReclaims) {
  EXPECT_TRUE(
      ReclaimedWhileBusy(this, *governor_, owner_, Priority::kNormal, 10, Priority::kNormal));
}

}  // namespace
}  // namespace pier::engine

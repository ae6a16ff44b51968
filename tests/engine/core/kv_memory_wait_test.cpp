// The engine on an elastic KV arena under a budget other owners hold (issue #41): a request
// that needs more KV than the budget could ever give is refused at Submit, naming the tokens
// and bytes; one that could fit later waits without spinning (woken by memory given back),
// lets smaller requests pass it, and shows as waiting for memory in the stats and the
// governor's pressure figures; an idle lease gives its chunks back after kv_idle_release.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <utility>
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

using namespace std::chrono_literals;
using testing::FakeLayout;
using testing::FakeRunner;
using testing::TokensOf;

constexpr int64_t kVocab = 40;
constexpr int64_t kBlockSize = 4;
constexpr int64_t kBlocksPerChunk = 4;       // 16 tokens a chunk
constexpr uint64_t kChunkBytes = 64 * 1024;  // the fake device's VM granule

Request Greedy(std::string id, int64_t prompt, int32_t max_tokens, uint32_t seed) {
  return testing::GreedyRequest(std::move(id), testing::RandomPrompt(prompt, seed, kVocab),
                                max_tokens);
}

std::vector<int32_t> RunAlone(const Request& r) {
  return testing::RunAloneOnFakeModel(r, kBlockSize, kVocab);
}

// Reads a request's events until its last (at most 5 s apart): its tokens and how it ended.
std::pair<std::vector<int32_t>, std::optional<FinishReason>> ReadAll(RequestHandle& handle) {
  std::vector<int32_t> tokens;
  while (std::optional<Event> e = handle.Next(5s)) {
    if (e->token >= 0) tokens.push_back(e->token);
    if (e->finish.has_value()) return {tokens, e->finish};
  }
  return {tokens, std::nullopt};
}

class KvMemoryWaitTest : public ::testing::Test {
 public:
  KvMemoryWaitTest() : device_(FakeDeviceOptions{}) {
    GovernorOptions options;
    options.budget = BudgetSpec::Bytes(8 * kChunkBytes);
    governor_ = std::move(MemoryGovernor::Create(&device_, options)).value();
    owner_ = *governor_->AddOwner({.name = "model/kv"});
    other_ = *governor_->AddOwner({.name = "other/kv"});
  }

  std::unique_ptr<LeasedKvStore> MakeStore(OwnerId owner, const std::string& name, size_t initial,
                                           size_t min, size_t max) {
    LeasedKvOptions options;
    options.name = name;
    options.blocks_per_chunk = kBlocksPerChunk;
    options.min_chunks = min;
    options.initial_chunks = initial;
    options.max_chunks = max;
    auto store = LeasedKvStore::Create(FakeLayout(kBlockSize), options, *governor_, owner);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return std::move(store).value();
  }

  FakeDevice device_;
  std::unique_ptr<MemoryGovernor> governor_;
  OwnerId owner_;
  OwnerId other_;
};

TEST_F(KvMemoryWaitTest, RefusesAtSubmitWhatTheBudgetCanNeverHold) {
  // The other model keeps 3 chunks whatever happens (its minimum): this one can reach 5
  // chunks (80 tokens) of its 8.
  auto theirs = MakeStore(other_, "other/kv", 6, 3, 8);
  auto kv = MakeStore(owner_, "model/kv", 1, 1, 8);
  FakeRunner runner(kv.get(), kVocab, 4096);
  EngineOptions options;
  options.start_thread = false;
  auto engine = *Engine::Create(options, &runner, kv.get());
  EXPECT_EQ(engine->Stats().max_request_tokens, 8 * 16);
  EXPECT_EQ(engine->Stats().kv_ceiling_tokens, 5 * 16);
  EXPECT_GT(engine->Stats().kv_bytes_per_token, 0);

  Result<std::shared_ptr<RequestHandle>> refused = engine->Submit(Greedy("big", 70, 20, 1));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("90 tokens"), std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find("at most 80 tokens"), std::string::npos)
      << refused.status().message();
  const int64_t per_token = engine->Stats().kv_bytes_per_token;
  EXPECT_NE(refused.status().message().find("(" + std::to_string(90 * per_token) + " B)"),
            std::string::npos)
      << refused.status().message();
  // Nothing was queued, and what fits under the ceiling is taken.
  EXPECT_EQ(engine->Stats().waiting, 0);
  // (It needs no reclaim: the other lease is busy and has no one to shrink it.)
  Request fits = Greedy("fits", 20, 10, 2);
  auto handle = *engine->Submit(fits);
  while (engine->RunStep()) {
  }
  EXPECT_EQ(TokensOf(handle->Drain()), RunAlone(fits));

  // The ceiling follows the other owners: once theirs is gone, the whole arena.
  theirs.reset();
  EXPECT_EQ(engine->Stats().kv_ceiling_tokens, 8 * 16);
  EXPECT_TRUE(engine->CheckConsistency().ok());
}

TEST_F(KvMemoryWaitTest, WaitsForMemoryWithoutSpinningAndLetsSmallerRequestsPass) {
  // The other model's lease is busy with critical work: it yields nothing to normal requests
  // now, but could give back all but its one-chunk minimum later.
  auto theirs = MakeStore(other_, "other/kv", 6, 1, 8);
  theirs->lease().SetUrgency(2);
  auto kv = MakeStore(owner_, "model/kv", 1, 1, 8);  // at most 2 chunks now (32 tokens)
  FakeRunner runner(kv.get(), kVocab, 4096);
  auto engine = *Engine::Create(EngineOptions{}, &runner, kv.get());

  const Request big = Greedy("big", 40, 8, 3);  // 12 blocks: 3 chunks
  auto big_handle = *engine->Submit(big);
  std::this_thread::sleep_for(300ms);
  EngineStats stats = engine->Stats();
  const uint64_t failures = governor_->Stats().failure_count;
  // Before the fix the engine stepped (and asked the governor) tens of thousands of times here.
  EXPECT_LT(stats.steps, 20);
  EXPECT_LT(failures, 10u);
  EXPECT_EQ(stats.kv_waiting_for_memory, 1);
  EXPECT_GT(stats.kv_waiting_since_us, 0);
  EXPECT_GE(governor_->Stats().waiting_allocations, 1u);  // the pressure index sees it

  // A small request is not held behind it.
  const Request small = Greedy("small", 6, 4, 4);
  auto small_handle = *engine->Submit(small);
  const auto [small_tokens, small_end] = ReadAll(*small_handle);
  EXPECT_EQ(small_end, FinishReason::kLength);
  EXPECT_EQ(small_tokens, RunAlone(small));
  EXPECT_TRUE(big_handle->Drain().empty());  // still waiting

  // The other model gives memory back: the waiting request starts at once and finishes with
  // the tokens it would have produced alone.
  ASSERT_TRUE(theirs->lease().Shrink(4).ok());
  const auto [tokens, end] = ReadAll(*big_handle);
  EXPECT_EQ(end, FinishReason::kLength);
  EXPECT_EQ(tokens, RunAlone(big));
  stats = engine->Stats();
  EXPECT_EQ(stats.kv_waiting_for_memory, 0);
  EXPECT_EQ(governor_->Stats().waiting_allocations, 0u);
}

TEST_F(KvMemoryWaitTest, AnIdleLeaseGivesItsChunksBackAfterKvIdleRelease) {
  auto kv = MakeStore(owner_, "model/kv", 1, 1, 8);
  FakeRunner runner(kv.get(), kVocab, 4096);
  EngineOptions options;
  options.kv_idle_release = 150ms;
  auto engine = *Engine::Create(options, &runner, kv.get());
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (int i = 0; i < 4; ++i)
    handles.push_back(*engine->Submit(Greedy("r" + std::to_string(i), 20, 10, i)));
  for (auto& h : handles) h->WaitAll();
  EXPECT_GT(kv->lease().chunks(), 1u);  // the burst grew it
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (kv->lease().chunks() > 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(kv->lease().chunks(), 1u);
  EXPECT_EQ(governor_->StatsFor(owner_)->lease_bytes, kChunkBytes);
  EXPECT_GE(engine->Stats().kv_idle_releases, 1);
  // It serves again afterwards, growing as before.
  const Request again = Greedy("again", 30, 10, 9);
  auto h = *engine->Submit(again);
  EXPECT_EQ(ReadAll(*h).first, RunAlone(again));
}

TEST_F(KvMemoryWaitTest, ZeroKvIdleReleaseKeepsTheLease) {
  auto kv = MakeStore(owner_, "model/kv", 1, 1, 8);
  FakeRunner runner(kv.get(), kVocab, 4096);
  EngineOptions options;
  options.kv_idle_release = 0ms;
  auto engine = *Engine::Create(options, &runner, kv.get());
  auto h = *engine->Submit(Greedy("r", 40, 10, 1));
  h->WaitAll();
  const size_t grown = kv->lease().chunks();
  EXPECT_GT(grown, 1u);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(kv->lease().chunks(), grown);
}

}  // namespace
}  // namespace pier::engine

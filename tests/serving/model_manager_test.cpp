// ModelManager on the default GGUF: on_start and on_demand loads, unloads that drain and
// return every byte, evictions of idle on_demand models to make room, idle unloads, and
// reloads (changed, removed, added, broken). Every wait is a polling loop with a deadline.
#include "serving/model_manager.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "memory/byte_size.h"

namespace pier::serving {
namespace {

using std::chrono::milliseconds;

bool WaitUntil(const std::function<bool()>& done, milliseconds timeout = milliseconds(30'000)) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

ModelSpec Spec(const std::string& id, LoadPolicy policy = LoadPolicy::kOnStart) {
  ModelSpec spec;
  spec.load.path = PIER_DEFAULT_MODEL_PATH;
  spec.load.id = id;
  spec.load.settings.ctx = 512;
  spec.load.settings.threads = 1;
  spec.load.settings.max_seqs = 4;
  spec.load.settings.max_batched_tokens = 128;
  spec.policy = policy;
  return spec;
}

// An 8 GiB CPU device with a budget of `budget` bytes.
DeviceSetOptions DeviceOptions(uint64_t budget) {
  DeviceSetOptions options;
  options.cpu_capacity = uint64_t{8} << 30;
  options.cpu_budget = BudgetSpec::Bytes(budget);
  return options;
}

std::unique_ptr<DeviceSet> Devices(uint64_t budget) {
  auto devices = DeviceSet::Create(DeviceOptions(budget));
  EXPECT_TRUE(devices.ok()) << devices.status().ToString();
  return std::move(devices).value();
}

// Runs an operation and waits for its answer.
Status Await(const std::function<void(ModelManager::Done)>& operation) {
  std::promise<Status> answer;
  operation([&answer](Status status) { answer.set_value(std::move(status)); });
  std::future<Status> future = answer.get_future();
  if (future.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    return InternalError("no answer within 60 s");
  }
  return future.get();
}

// A request that runs until aborted or max_tokens.
std::shared_ptr<engine::RequestHandle> Submit(const ServedModel& model, const std::string& id,
                                              int32_t max_tokens) {
  engine::Request request;
  request.id = id;
  request.prompt_tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  request.max_tokens = max_tokens;
  request.ignore_eos = true;
  auto handle = model.client->Submit(std::move(request));
  EXPECT_TRUE(handle.ok()) << handle.status().ToString();
  return handle.ok() ? *handle : nullptr;
}

uint64_t Committed(DeviceSet& devices) { return devices.cpu_governor().Stats().committed_bytes; }

TEST(ModelManagerTest, LoadsOnStartModelsAndOnDemandOnesWhenAsked) {
  auto devices = Devices(uint64_t{2} << 30);
  ModelRegistry registry;
  // Counted on the loader thread, which reports a load just after the model turns ready.
  std::atomic<int> loaded{0};
  ModelManagerOptions options;
  options.on_loaded = [&](const std::string&, double seconds) {
    EXPECT_GT(seconds, 0);
    ++loaded;
  };
  ModelManager manager(options, devices.get(), &registry);
  ASSERT_TRUE(manager.Start({Spec("a"), Spec("b", LoadPolicy::kOnDemand)}).ok());
  EXPECT_EQ(registry.Lookup("a")->state, ModelState::kReady);
  EXPECT_EQ(registry.Lookup("b")->state, ModelState::kUnloaded);
  EXPECT_EQ(loaded, 1);
  const uint64_t one = Committed(*devices);

  // The front end's path: a request asks, the manager loads.
  EXPECT_TRUE(registry.RequestLoad("b"));
  ASSERT_TRUE(WaitUntil([&] { return registry.Lookup("b")->state == ModelState::kReady; }));
  EXPECT_GT(Committed(*devices), one);
  EXPECT_EQ(registry.Lookup("b")->loads, 1);
  EXPECT_TRUE(WaitUntil([&] { return loaded.load() == 2; })) << loaded.load();
  // Loading a ready model is a no-op; an unknown one is NOT_FOUND.
  EXPECT_TRUE(Await([&](auto done) { manager.Load("b", done); }).ok());
  EXPECT_EQ(registry.Lookup("b")->loads, 1);
  EXPECT_EQ(Await([&](auto done) { manager.Load("nobody", done); }).code(), StatusCode::kNotFound);
  ASSERT_NE(manager.SpecOf("b"), nullptr);
  EXPECT_EQ(manager.SpecOf("b")->policy, LoadPolicy::kOnDemand);
}

TEST(ModelManagerTest, UnloadReturnsEveryByteAndALoadAfterItMeasuresTheSame) {
  auto devices = Devices(uint64_t{2} << 30);
  ModelRegistry registry;
  ModelManager manager({}, devices.get(), &registry);
  ASSERT_TRUE(manager.Start({Spec("a"), Spec("b", LoadPolicy::kOnDemand)}).ok());
  const uint64_t baseline = Committed(*devices);
  ASSERT_TRUE(Await([&](auto done) { manager.Load("b", done); }).ok());
  const uint64_t loaded = Committed(*devices);
  ASSERT_GT(loaded, baseline);
  {
    // A request runs on b and finishes: its stream's hold on the model ends with it.
    ModelRef b = *registry.Resolve("b");
    auto handle = Submit(*b, "r1", 4);
    ASSERT_NE(handle, nullptr);
    const std::vector<engine::Event> events = handle->WaitAll();
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events.back().finish, engine::FinishReason::kLength);
  }
  ASSERT_TRUE(Await([&](auto done) { manager.Unload("b", done); }).ok());
  Result<ModelEntry> b = registry.Lookup("b");
  EXPECT_EQ(b->state, ModelState::kUnloaded);
  EXPECT_EQ(b->unloads, 1);
  EXPECT_EQ(Committed(*devices), baseline) << "every byte of b goes back";
  for (const OwnerStats& owner : devices->cpu_governor().Stats().owners) {
    EXPECT_FALSE(owner.name.starts_with("b/") || owner.name.starts_with("b#")) << owner.name;
  }
  // Unloading again is a no-op; a request now gets the state.
  EXPECT_TRUE(Await([&](auto done) { manager.Unload("b", done); }).ok());
  EXPECT_EQ(registry.Resolve("b").status().code(), StatusCode::kUnavailable);
  ASSERT_TRUE(Await([&](auto done) { manager.Load("b", done); }).ok());
  EXPECT_EQ(Committed(*devices), loaded);
}

TEST(ModelManagerTest, UnloadLetsRequestsFinishWithinTheGraceThenAbortsWithAReason) {
  auto devices = Devices(uint64_t{2} << 30);
  ModelRegistry registry;
  ModelManagerOptions options;
  options.drain_grace = milliseconds(0);
  ModelManager manager(options, devices.get(), &registry);
  ASSERT_TRUE(manager.Start({Spec("a")}).ok());
  std::shared_ptr<engine::RequestHandle> handle;
  {
    ModelRef a = *registry.Resolve("a");
    handle = Submit(*a, "long", 400);
    ASSERT_NE(handle, nullptr);
    ASSERT_TRUE(handle->Next(milliseconds(30'000)).has_value());  // it is running
  }
  ASSERT_TRUE(Await([&](auto done) { manager.Unload("a", done); }).ok());
  const std::vector<engine::Event> events = handle->WaitAll();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().finish, engine::FinishReason::kAbort);
  EXPECT_NE(events.back().error.find("model a is being unloaded"), std::string::npos)
      << events.back().error;
  EXPECT_EQ(registry.Lookup("a")->state, ModelState::kUnloaded);
}

TEST(ModelManagerTest, UnloadWaitsForRequestsInFlightDuringTheGrace) {
  auto devices = Devices(uint64_t{2} << 30);
  ModelRegistry registry;
  ModelManagerOptions options;
  options.drain_grace = milliseconds(60'000);
  ModelManager manager(options, devices.get(), &registry);
  ASSERT_TRUE(manager.Start({Spec("a")}).ok());
  ModelRef a = *registry.Resolve("a");
  auto handle = Submit(*a, "short", 24);
  ASSERT_NE(handle, nullptr);
  std::promise<Status> unloaded;
  manager.Unload("a", [&](Status s) { unloaded.set_value(s); });
  ASSERT_TRUE(WaitUntil([&] { return registry.Lookup("a")->state == ModelState::kDraining; }));
  EXPECT_EQ(registry.Resolve("a").status().message(), "model a is draining: unload requested");
  const std::vector<engine::Event> events = handle->WaitAll();
  EXPECT_EQ(events.back().finish, engine::FinishReason::kLength) << "finished, not aborted";
  // Still draining while this test holds the model (as a stream would).
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(registry.Lookup("a")->state, ModelState::kDraining);
  a.reset();
  std::future<Status> done = unloaded.get_future();
  ASSERT_EQ(done.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_TRUE(done.get().ok());
  EXPECT_EQ(registry.Lookup("a")->state, ModelState::kUnloaded);
}

TEST(ModelManagerTest, ALoadThatDoesNotFitEvictsTheIdleOnDemandModelOnly) {
  // Room for one model and a half (the guarantee is what a load commits: tested below).
  const uint64_t one = *GuaranteedBytes(Spec("m").load);
  auto devices = Devices(one * 3 / 2);
  ModelRegistry registry;
  std::vector<std::string> unloads;
  ModelManagerOptions options;
  options.on_unloaded = [&](const std::string& id, ModelRegistry::UnloadKind kind) {
    if (kind == ModelRegistry::UnloadKind::kEvicted) unloads.push_back(id);
  };
  ModelManager manager(options, devices.get(), &registry);
  ASSERT_TRUE(manager
                  .Start({Spec("busy", LoadPolicy::kOnDemand), Spec("idle", LoadPolicy::kOnDemand),
                          Spec("new", LoadPolicy::kOnDemand)})
                  .ok());
  // While `busy` has work it is never evicted: `idle` cannot load beside it.
  ASSERT_TRUE(Await([&](auto done) { manager.Load("busy", done); }).ok());
  ModelRef busy = *registry.Resolve("busy");
  auto handle = Submit(*busy, "work", 400);
  ASSERT_NE(handle, nullptr);
  const Status refused = Await([&](auto done) { manager.Load("idle", done); });
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused.ToString();
  Result<ModelEntry> idle = registry.Lookup("idle");
  EXPECT_EQ(idle->state, ModelState::kUnloaded) << "did not fit: unloaded, not failed";
  EXPECT_FALSE(idle->reason.empty());
  EXPECT_EQ(idle->load_failures, 1);
  EXPECT_EQ(registry.Lookup("busy")->state, ModelState::kReady);
  busy->client->Abort("work");
  handle->WaitAll();
  busy.reset();

  // Now idle: loading `new` evicts `busy` (the only idle on_demand model).
  ASSERT_TRUE(Await([&](auto done) { manager.Load("new", done); }).ok());
  EXPECT_EQ(registry.Lookup("new")->state, ModelState::kReady);
  Result<ModelEntry> evicted = registry.Lookup("busy");
  EXPECT_EQ(evicted->state, ModelState::kUnloaded);
  EXPECT_EQ(evicted->evictions, 1);
  EXPECT_EQ(unloads, std::vector<std::string>{"busy"});
  EXPECT_LE(Committed(*devices), one * 3 / 2);
}

TEST(ModelManagerTest, OnStartModelsThatDoNotFitTogetherStopTheStartBeforeAnyLoads) {
  const Result<uint64_t> one = GuaranteedBytes(Spec("m").load);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  auto devices = Devices(*one * 3 / 2);
  ModelRegistry registry;
  ModelManager manager({}, devices.get(), &registry);
  const Status status = manager.Start({Spec("a"), Spec("b"), Spec("lazy", LoadPolicy::kOnDemand)});
  ASSERT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(
      status.message().find("the on_start models need " + FormatBytes(2 * *one) + " together (a " +
                            FormatBytes(*one) + ", b " + FormatBytes(*one) + ")"),
      std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find(FormatBytes(*one / 2) + " too much"), std::string::npos)
      << status.message();
  EXPECT_EQ(Committed(*devices), 0u) << "nothing loaded";
  EXPECT_EQ(registry.Lookup("a")->state, ModelState::kUnloaded);
}

TEST(ModelManagerTest, TheGuaranteeIsWhatALoadCommits) {
  auto devices = Devices(uint64_t{2} << 30);
  ModelRegistry registry;
  ModelManager manager({}, devices.get(), &registry);
  ModelSpec spec = Spec("m");
  spec.load.instances = 2;
  ASSERT_TRUE(manager.Start({spec}).ok());
  EXPECT_EQ(Committed(*devices), *GuaranteedBytes(spec.load));
}

// --memory-reserve: part of the budget no model gets; a reserve that leaves nothing is refused.
TEST(ModelManagerTest, TheReserveIsKeptOutOfTheBudget) {
  DeviceSetOptions options = DeviceOptions(uint64_t{1} << 30);
  options.cpu_reserve_bytes = uint64_t{256} << 20;
  auto devices = DeviceSet::Create(options);
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  const GovernorStats stats = (*devices)->cpu_governor().Stats();
  EXPECT_EQ(stats.budget_bytes, uint64_t{768} << 20);
  EXPECT_EQ(stats.reserve_bytes, uint64_t{256} << 20);
  options.cpu_reserve_bytes = uint64_t{1} << 30;
  auto none_left = DeviceSet::Create(options);
  ASSERT_FALSE(none_left.ok());
  EXPECT_NE(none_left.status().message().find("leaves nothing of the 1.0 GiB budget"),
            std::string::npos)
      << none_left.status().message();
}

// kv_max sizes the KV cache (here in bytes) apart from ctx, which then limits one request.
TEST(ModelManagerTest, KvMaxSizesTheCacheAndCtxLimitsOneRequest) {
  auto devices = Devices(uint64_t{2} << 30);
  ModelRegistry registry;
  ModelManager manager({}, devices.get(), &registry);
  ModelSpec spec = Spec("m");
  spec.load.settings.kv_policy = engine::KvPolicy::kStatic;
  spec.load.settings.ctx = 256;
  spec.load.settings.kv_max = engine::KvSize::Bytes(uint64_t{24} << 20);
  ASSERT_TRUE(manager.Start({spec}).ok());
  ModelRef m = *registry.Resolve("m");
  EXPECT_EQ(m->max_request_tokens, 256);
  const engine::EngineStats stats = m->client->Stats();
  const uint64_t cache_bytes = m->governor->StatsFor(*m->governor->FindOwner("m/kv"))->block_bytes;
  EXPECT_LE(cache_bytes, uint64_t{24} << 20) << "a maximum in bytes is never exceeded";
  EXPECT_GT(cache_bytes, uint64_t{23} << 20);
  EXPECT_GT(stats.kv_blocks_total * stats.kv_block_size, 1024) << "24 MiB hold far more than ctx";
  EXPECT_EQ(Committed(*devices), *GuaranteedBytes(spec.load));
}

// --swap-space: the engine preempts by swap into the device set's pinned pool.
TEST(ModelManagerTest, SwapSpaceComesFromTheDeviceSetsPinnedPool) {
  DeviceSetOptions device_options = DeviceOptions(uint64_t{1} << 30);
  device_options.swap_space_bytes = uint64_t{16} << 20;
  auto devices = std::move(DeviceSet::Create(device_options)).value();
  ModelRegistry registry;
  ModelManager manager({}, devices.get(), &registry);
  ModelSpec spec = Spec("m");
  spec.load.settings.kv_policy = engine::KvPolicy::kStatic;
  spec.load.settings.ctx = 128;  // 8 blocks: four 68-token requests cannot all stay
  spec.load.settings.swap_space = uint64_t{16} << 20;
  ASSERT_TRUE(manager.Start({spec}).ok());
  EXPECT_GT(devices->swap_pool().Stats().pool.allocated_bytes, (uint64_t{15} << 20));
  ModelRef m = *registry.Resolve("m");
  std::vector<std::shared_ptr<engine::RequestHandle>> handles;
  for (int i = 0; i < 4; ++i) handles.push_back(Submit(*m, "r" + std::to_string(i), 60));
  for (auto& handle : handles) {
    ASSERT_NE(handle, nullptr);
    EXPECT_EQ(handle->WaitAll().back().finish, engine::FinishReason::kLength);
  }
  EXPECT_GT(m->client->Stats().swap_outs, 0);
  m.reset();
  ASSERT_TRUE(Await([&](auto done) { manager.Unload("m", done); }).ok());
  EXPECT_EQ(devices->swap_pool().Stats().pool.allocated_bytes, 0u) << "swap space back too";
}

TEST(ModelManagerTest, OnStartModelsAreNeverEvicted) {
  const uint64_t one = *GuaranteedBytes(Spec("m").load);
  auto devices = Devices(one * 3 / 2);
  ModelRegistry registry;
  ModelManager manager({}, devices.get(), &registry);
  ASSERT_TRUE(manager.Start({Spec("resident"), Spec("other", LoadPolicy::kOnDemand)}).ok());
  const Status status = Await([&](auto done) { manager.Load("other", done); });
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("model other"), std::string::npos) << status.message();
  EXPECT_EQ(registry.Lookup("resident")->state, ModelState::kReady);
  EXPECT_EQ(registry.Lookup("resident")->evictions, 0);
}

TEST(ModelManagerTest, AnIdleOnDemandModelIsUnloadedAfterItsIdleTime) {
  auto devices = Devices(uint64_t{2} << 30);
  ModelRegistry registry;
  ModelManager manager({}, devices.get(), &registry);
  ModelSpec lazy = Spec("lazy", LoadPolicy::kOnDemand);
  lazy.idle_unload_after = milliseconds(300);
  ASSERT_TRUE(manager.Start({Spec("a"), lazy}).ok());
  const uint64_t baseline = Committed(*devices);
  ASSERT_TRUE(Await([&](auto done) { manager.Load("lazy", done); }).ok());
  const auto loaded_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitUntil([&] { return registry.Lookup("lazy")->state == ModelState::kUnloaded; }));
  EXPECT_GE(std::chrono::steady_clock::now() - loaded_at, milliseconds(300));
  EXPECT_EQ(registry.Lookup("lazy")->idle_unloads, 1);
  EXPECT_EQ(Committed(*devices), baseline);
  EXPECT_EQ(registry.Lookup("a")->state, ModelState::kReady) << "on_start models stay";
}

TEST(ModelManagerTest, ReloadAppliesTheDifferenceAndABrokenVersionKeepsTheOldOne) {
  auto devices = Devices(uint64_t{3} << 30);
  ModelRegistry registry;
  ModelManager manager({}, devices.get(), &registry);
  ASSERT_TRUE(manager.Start({Spec("keep"), Spec("change"), Spec("drop"), Spec("broken")}).ok());
  const ModelRef change_before = *registry.Resolve("change");
  const ModelRef broken_before = *registry.Resolve("broken");

  ModelSpec changed = Spec("change");
  changed.load.settings.ctx = 256;
  changed.load.aliases = {"changed-alias"};
  ModelSpec broken = Spec("broken");
  broken.load.path = "/nonexistent/model.gguf";
  std::promise<Result<ReloadReport>> answer;
  manager.Reload({Spec("keep"), changed, broken, Spec("added")},
                 [&](Result<ReloadReport> r) { answer.set_value(std::move(r)); });
  std::future<Result<ReloadReport>> future = answer.get_future();
  ASSERT_EQ(future.wait_for(std::chrono::seconds(120)), std::future_status::ready);
  Result<ReloadReport> report = future.get();
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->unchanged, std::vector<std::string>{"keep"});
  EXPECT_EQ(report->reloaded, std::vector<std::string>{"change"});
  EXPECT_EQ(report->removed, std::vector<std::string>{"drop"});
  EXPECT_EQ(report->added, std::vector<std::string>{"added"});
  ASSERT_EQ(report->failed.size(), 1u);
  EXPECT_EQ(report->failed[0].first, "broken");

  // The new version serves under the id and its new alias; the old one drains away.
  ModelRef change_after = *registry.Resolve("changed-alias");
  EXPECT_NE(change_after, change_before);
  EXPECT_EQ(change_after->max_request_tokens, 256);
  EXPECT_EQ(*registry.Resolve("broken"), broken_before) << "the old version keeps serving";
  EXPECT_EQ(registry.Lookup("added")->state, ModelState::kReady);
  ASSERT_TRUE(WaitUntil([&] { return !registry.Lookup("drop").ok(); })) << "forgotten";
  EXPECT_EQ(manager.SpecOf("drop"), nullptr);
}

}  // namespace
}  // namespace pier::serving

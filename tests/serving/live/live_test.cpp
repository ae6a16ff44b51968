// The console's live state (serving/live/): the event log's bounded ring and followers, the
// request board, the memory history, and the watcher that turns registry, worker and governor
// changes into events. No model file, no sockets.
#include <gtest/gtest.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "../../memory/test_util.h"
#include "serving/live/event_log.h"
#include "serving/live/event_watcher.h"
#include "serving/live/memory_history.h"
#include "serving/live/request_board.h"
#include "serving/model_registry.h"

namespace pier::serving {
namespace {

using Json = nlohmann::json;

std::vector<std::string> Types(const EventRead& read) {
  std::vector<std::string> types;
  for (const auto& event : read.events) types.push_back(event->type);
  return types;
}

TEST(EventLogTest, EventsAreNumberedAndRenderedOnce) {
  EventLog log(8);
  EXPECT_EQ(log.last_seq(), 0u);
  EXPECT_EQ(
      log.Publish("model_loaded", EventLevel::kInfo, "m", "m loaded", {{"load_seconds", 1.5}}), 1u);
  EXPECT_EQ(log.Publish("worker_down", EventLevel::kWarning, "m", "down"), 2u);
  const EventRead read = log.ReadAfter(0, 100);
  ASSERT_EQ(read.events.size(), 2u);
  EXPECT_EQ(read.dropped, 0u);
  EXPECT_EQ(read.next, 2u);
  const Json first = Json::parse(read.events[0]->json);
  EXPECT_EQ(first["seq"], 1);
  EXPECT_EQ(first["type"], "model_loaded");
  EXPECT_EQ(first["level"], "info");
  EXPECT_EQ(first["model"], "m");
  EXPECT_EQ(first["message"], "m loaded");
  EXPECT_EQ(first["load_seconds"], 1.5);
  EXPECT_GT(first["time"].get<double>(), 1.7e9);
  EXPECT_EQ(Json::parse(read.events[1]->json)["level"], "warning");
  // Only what follows the cursor; a cursor past the end reads nothing and stays at the end.
  EXPECT_EQ(Types(log.ReadAfter(1, 100)), std::vector<std::string>{"worker_down"});
  EXPECT_TRUE(log.ReadAfter(2, 100).events.empty());
  EXPECT_EQ(log.ReadAfter(99, 100).next, 2u);  // a server restarted under the reader
  EXPECT_EQ(log.ReadAfter(0, 1).events.size(), 1u);
  EXPECT_EQ(log.ReadAfter(0, 1).next, 1u);
}

TEST(EventLogTest, NamesThatAreNotUtf8AreReplacedNotThrown) {
  EventLog log;
  log.Publish("model_load_failed", EventLevel::kError, "bad\xff", "file \xfe\xff missing");
  const Json event = Json::parse(log.ReadAfter(0, 1).events[0]->json);
  EXPECT_EQ(event["level"], "error");
}

TEST(EventLogTest, ASlowReaderLosesTheOldestAndIsToldHowMany) {
  EventLog log(4);
  for (int i = 0; i < 10; ++i) log.Publish("e" + std::to_string(i), EventLevel::kInfo, "", "");
  const EventRead read = log.ReadAfter(0, 100);
  EXPECT_EQ(read.dropped, 6u);
  EXPECT_EQ(Types(read), (std::vector<std::string>{"e6", "e7", "e8", "e9"}));
  EXPECT_EQ(log.ReadAfter(7, 100).dropped, 0u);
  EXPECT_EQ(log.ReadAfter(3, 100).dropped, 3u);
}

TEST(EventLogTest, FollowersAreWokenByEventsAndPulsesUntilTheyLeave) {
  EventLog log;
  std::atomic<int> wakes{0};
  const uint64_t id = log.Follow([&] { ++wakes; });
  log.Publish("a", EventLevel::kInfo, "", "");
  log.Pulse();
  EXPECT_EQ(wakes.load(), 2);
  log.Unfollow(id);
  log.Publish("b", EventLevel::kInfo, "", "");
  EXPECT_EQ(wakes.load(), 2);
}

TEST(EventLogTest, ManyProducersNeverGrowTheRing) {
  EventLog log(64);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&log] {
      for (int i = 0; i < 5000; ++i)
        log.Publish("request_refused", EventLevel::kWarning, "m", "429");
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(log.last_seq(), 20000u);
  const EventRead read = log.ReadAfter(0, 1000);
  EXPECT_EQ(read.events.size(), 64u);
  EXPECT_EQ(read.dropped, 20000u - 64u);
  for (size_t i = 1; i < read.events.size(); ++i) {
    EXPECT_EQ(read.events[i]->seq, read.events[i - 1]->seq + 1);
  }
}

TEST(RequestBoardTest, ShowsRequestsFromOpenToCloseOldestFirst) {
  RequestBoard board;
  auto first = board.Open({.request_id = "chatcmpl-1",
                           .model = "m",
                           .route = "/v1/chat/completions",
                           .tenant = "team-a",
                           .priority_class = "interactive"});
  auto second = board.Open({.request_id = "",
                            .model = "e",
                            .route = "/v1/embeddings",
                            .tenant = "",
                            .priority_class = "batch"});
  first->Produced(3);
  first->Produced(2);
  second->SetStage("embed");
  size_t total = 0;
  std::vector<LiveRequestRow> rows = board.Snapshot(10, &total);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(total, 2u);
  EXPECT_EQ(rows[0].info.request_id, "chatcmpl-1");
  EXPECT_EQ(rows[0].info.tenant, "team-a");
  EXPECT_EQ(rows[0].info.priority_class, "interactive");
  EXPECT_TRUE(rows[0].running);
  EXPECT_EQ(rows[0].tokens, 5);
  EXPECT_GE(rows[0].age_seconds, 0.0);
  EXPECT_FALSE(rows[1].running);  // nothing produced yet: queued
  EXPECT_EQ(rows[1].stage, "embed");
  // Truncated to the oldest.
  rows = board.Snapshot(1, &total);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(total, 2u);
  EXPECT_EQ(rows[0].info.model, "m");
  first.reset();
  EXPECT_EQ(board.size(), 1u);
  second.reset();
  EXPECT_EQ(board.size(), 0u);
}

TEST(MemoryHistoryTest, KeepsTheLatestSamples) {
  MemoryHistory history(3);
  for (int i = 0; i < 5; ++i) history.Record({.time = static_cast<double>(i), .devices = {}});
  const std::vector<MemorySample> samples = history.Samples();
  ASSERT_EQ(samples.size(), 3u);
  EXPECT_EQ(samples.front().time, 2.0);
  EXPECT_EQ(samples.back().time, 4.0);
}

void AddOwner(GovernorStats& g, const char* name, uint64_t committed) {
  OwnerStats owner;
  owner.name = name;
  owner.committed_bytes = committed;
  g.owners.push_back(owner);
}

TEST(MemoryHistoryTest, ADeviceSampleSumsOwnersByModel) {
  GovernorStats g;
  g.device = "cpu";
  g.capacity_bytes = 1000;
  g.budget_bytes = 900;
  g.committed_bytes = 600;
  g.reserved_bytes = 500;
  g.waiting_allocations = 2;
  AddOwner(g, "chat/weights", 300);
  AddOwner(g, "chat/kv", 100);
  AddOwner(g, "chat#2/kv", 50);
  AddOwner(g, "embed/weights", 150);
  const DeviceSample d = SampleDevice(g);
  EXPECT_EQ(d.name, "cpu");
  EXPECT_EQ(d.models.at("chat"), 450u);
  EXPECT_EQ(d.models.at("embed"), 150u);
  EXPECT_DOUBLE_EQ(d.pressure_index, 0.5 * 2);
  // Lent: chunks above each lease's minimum (a lease below its minimum lends nothing).
  LeaseStats above;
  above.chunk_bytes = 1 << 20;
  above.chunks = 5;
  above.min_chunks = 2;
  LeaseStats below = above;
  below.chunks = 1;
  g.leases = {above, below};
  EXPECT_EQ(LentBytes(above), 3u << 20);
  EXPECT_EQ(LentBytes(below), 0u);
  EXPECT_EQ(LentBytes(g), 3u << 20);
}

class EventWatcherTest : public ::testing::Test {
 protected:
  EventWatcherTest() : watcher_({}, &registry_, &log_, &history_) {}

  std::vector<std::string> NewTypes() {
    const EventRead read = log_.ReadAfter(cursor_, 1000);
    cursor_ = read.next;
    return Types(read);
  }

  ModelRegistry registry_;
  EventLog log_;
  MemoryHistory history_;
  EventWatcher watcher_;
  uint64_t cursor_ = 0;
};

TEST_F(EventWatcherTest, TheFirstTickLearnsThenChangesBecomeEvents) {
  ASSERT_TRUE(registry_.Declare("m", {}, LoadPolicy::kOnStart).ok());
  ASSERT_TRUE(registry_.SetState("m", ModelState::kLoading).ok());
  watcher_.Tick();
  EXPECT_TRUE(NewTypes().empty());  // what was there at the start is not news

  ASSERT_TRUE(registry_.MarkLoadFailed("m", ModelState::kFailed, "no such file").ok());
  watcher_.Tick();
  EXPECT_EQ(NewTypes(), std::vector<std::string>{"model_load_failed"});
  const Json failed = Json::parse(log_.ReadAfter(cursor_ - 1, 1).events[0]->json);
  EXPECT_EQ(failed["level"], "error");
  EXPECT_EQ(failed["reason"], "no such file");
  EXPECT_NE(failed["message"].get<std::string>().find("no such file"), std::string::npos);

  ASSERT_TRUE(registry_.SetState("m", ModelState::kLoading).ok());
  watcher_.Tick();
  EXPECT_EQ(NewTypes(), std::vector<std::string>{"model_loading"});
  ASSERT_TRUE(registry_.MarkLoadFailed("m", ModelState::kUnloaded, "does not fit").ok());
  watcher_.Tick();
  EXPECT_EQ(Json::parse(log_.ReadAfter(cursor_, 1).events.at(0)->json)["level"], "warning");
  EXPECT_EQ(NewTypes(), std::vector<std::string>{"model_load_failed"});

  ASSERT_TRUE(registry_.Declare("n", {}, LoadPolicy::kOnDemand).ok());
  watcher_.Tick();
  EXPECT_EQ(NewTypes(), std::vector<std::string>{"model_added"});
  ASSERT_TRUE(registry_.Remove("n").ok());
  watcher_.Tick();
  EXPECT_EQ(NewTypes(), std::vector<std::string>{"model_removed"});
  watcher_.Tick();
  EXPECT_TRUE(NewTypes().empty());  // nothing changed, nothing said
}

TEST_F(EventWatcherTest, RecordsAMemorySampleEachInterval) {
  auto start = std::chrono::steady_clock::now();
  watcher_.Tick(start);
  watcher_.Tick(start + std::chrono::milliseconds(500));
  EXPECT_EQ(history_.Samples().size(), 1u);
  watcher_.Tick(start + std::chrono::milliseconds(2100));
  EXPECT_EQ(history_.Samples().size(), 2u);
}

TEST(EventWatcherGovernorTest, RefusalsUnderContentionAreSummedAtMostEveryFiveSeconds) {
  FakeDevice device(FakeDeviceOptions{.capacity_bytes = 64 * pier::testing::kMiB});
  auto governor =
      pier::testing::MakeGovernor(&device, pier::testing::BudgetOf(8 * pier::testing::kMiB));
  const OwnerId owner = pier::testing::AddOwner(*governor, {.name = "m/kv"});
  ModelRegistry registry;
  EventLog log;
  EventWatcher watcher(
      {.governors = [&] { return std::vector<const MemoryGovernor*>{governor.get()}; }}, &registry,
      &log, nullptr);
  auto refuse = [&] { EXPECT_FALSE(governor->Allocate(owner, 16 * pier::testing::kMiB).ok()); };
  auto refusals = [&] {
    std::vector<Json> found;
    for (const auto& e : log.ReadAfter(0, 100).events) {
      if (e->type == "allocation_refused") found.push_back(Json::parse(e->json));
    }
    return found;
  };
  const auto t0 = std::chrono::steady_clock::now();
  refuse();  // before the first tick: not news
  watcher.Tick(t0);
  EXPECT_TRUE(refusals().empty());
  refuse();
  refuse();
  watcher.Tick(t0 + std::chrono::milliseconds(250));
  ASSERT_EQ(refusals().size(), 1u);
  EXPECT_EQ(refusals()[0]["refused"], 2);
  EXPECT_EQ(refusals()[0]["device"], governor->Stats().device);
  refuse();
  watcher.Tick(t0 + std::chrono::milliseconds(500));
  refuse();
  watcher.Tick(t0 + std::chrono::milliseconds(750));
  EXPECT_EQ(refusals().size(), 1u);  // within 5 s of the last: held back, counted
  watcher.Tick(t0 + std::chrono::milliseconds(5300));
  ASSERT_EQ(refusals().size(), 2u);
  EXPECT_EQ(refusals()[1]["refused"], 2);
  watcher.Tick(t0 + std::chrono::seconds(11));
  EXPECT_EQ(refusals().size(), 2u);  // nothing new, nothing said
}

}  // namespace
}  // namespace pier::serving

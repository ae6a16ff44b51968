// InstancePoolClient: least outstanding work (per KV block) first, aborts to every instance,
// stats summed with the stalest busy heartbeat.
#include "serving/instance_pool_client.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pier::serving {
namespace {

// An instance whose stats the test sets; records what it was sent.
class ScriptedClient final : public engine::EngineClient {
 public:
  Result<std::shared_ptr<engine::RequestHandle>> Submit(engine::Request request) override {
    submitted.push_back(request.id);
    return UnavailableError("scripted");
  }
  void Abort(const std::string& id) override { aborted.push_back(id); }
  void AbortAll(std::string reason) override { aborted.push_back("*" + reason); }
  engine::EngineStats Stats() const override { return stats; }
  bool Serving() const override { return serving; }

  engine::EngineStats stats;
  bool serving = true;
  std::vector<std::string> submitted, aborted;
};

engine::Request Named(const std::string& id) {
  engine::Request r;
  r.id = id;
  return r;
}

TEST(InstancePoolClientTest, SubmitsToTheLeastLoadedPerKvBlock) {
  ScriptedClient a, b;
  a.stats.kv_blocks_max = b.stats.kv_blocks_max = 64;
  a.stats.running = 3;
  b.stats.waiting = 1;
  InstancePoolClient pool({&a, &b});
  EXPECT_EQ(pool.PickInstance(), 1u);
  (void)pool.Submit(Named("r1"));
  EXPECT_EQ(b.submitted, (std::vector<std::string>{"r1"}));
  // Twice the KV: twice the work for the same load.
  b.stats.kv_blocks_max = 128;
  b.stats.waiting = 5;  // 5/128 < 3/64
  EXPECT_EQ(pool.PickInstance(), 1u);
  b.stats.waiting = 7;  // 7/128 > 3/64
  EXPECT_EQ(pool.PickInstance(), 0u);
  // Ties: the first.
  a.stats = b.stats = engine::EngineStats{};
  EXPECT_EQ(pool.PickInstance(), 0u);
}

TEST(InstancePoolClientTest, AnInstanceThatDoesNotServeNowGetsNothingWhileAnotherDoes) {
  ScriptedClient a, b, c;
  a.stats.kv_blocks_max = b.stats.kv_blocks_max = c.stats.kv_blocks_max = 64;
  a.serving = false;  // a worker restarting: idle, but it cannot run anything now
  b.stats.running = 10;
  c.stats.running = 20;
  InstancePoolClient pool({&a, &b, &c});
  EXPECT_EQ(pool.PickInstance(), 1u);  // the least loaded of those serving
  b.serving = false;
  EXPECT_EQ(pool.PickInstance(), 2u);
  c.serving = false;
  EXPECT_EQ(pool.PickInstance(), 0u);  // none serves: the least loaded (it queues there)
}

TEST(InstancePoolClientTest, AbortsEverywhereAndSumsStats) {
  ScriptedClient a, b;
  InstancePoolClient pool({&a, &b});
  pool.Abort("x");
  EXPECT_EQ(a.aborted, (std::vector<std::string>{"x"}));
  EXPECT_EQ(b.aborted, (std::vector<std::string>{"x"}));

  a.stats.running = 2;
  a.stats.requests_finished = 5;
  a.stats.max_request_tokens = 4096;
  a.stats.last_step_at_us = 1'000;  // busy, and no step since 1 ms
  b.stats.requests_finished = 7;
  b.stats.max_request_tokens = 2048;
  b.stats.last_step_at_us = 9'000;  // idle, stepped recently
  const engine::EngineStats sum = pool.Stats();
  EXPECT_EQ(sum.running, 2);
  EXPECT_EQ(sum.requests_finished, 12);
  EXPECT_EQ(sum.max_request_tokens, 2048);
  EXPECT_EQ(sum.last_step_at_us, 1'000) << "the stalled busy instance's heartbeat";
  a.stats.running = 0;
  EXPECT_EQ(pool.Stats().last_step_at_us, 9'000) << "nothing busy: the latest heartbeat";
}

}  // namespace
}  // namespace pier::serving

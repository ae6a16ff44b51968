// The engine's QoS on the fake model runner (issue #16): a request still waiting when its queue
// deadline passes ends with queue_expired (or, with the delay action, waits behind the rest);
// nothing that has started expires; tenants share generated tokens by weight; the stats carry
// the queue per class, the drain rate and the tenants; a critical request arriving stops a step
// that reads no critical prompt between layers, and the redone step changes no token.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/engine.h"
#include "engine/core/fake_model.h"

namespace pier::engine {
namespace {

using testing::FakeLayout;
using testing::FakeRunner;
using testing::GreedyRequest;
using testing::RandomPrompt;
using testing::VectorKvStore;

constexpr int64_t kVocab = 40;

struct QosRig {
  explicit QosRig(SchedulerOptions scheduler, int64_t n_blocks = 256,
                  AdaptiveBatching adaptive = {})
      : kv(FakeLayout(4), n_blocks), runner(&kv, kVocab, 4096) {
    EngineOptions options;
    options.scheduler = scheduler;
    options.adaptive = adaptive;
    options.start_thread = false;
    options.end_of_generation_ids = {kVocab - 1};
    auto e = Engine::Create(options, &runner, &kv);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    engine = std::move(e).value();
  }
  std::shared_ptr<RequestHandle> Submit(Request r) {
    auto h = engine->Submit(std::move(r));
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    return h.ok() ? *h : nullptr;
  }
  VectorKvStore kv;
  FakeRunner runner;
  std::unique_ptr<Engine> engine;
};

std::optional<Event> Last(const std::vector<Event>& events) {
  for (const Event& e : events) {
    if (e.finish.has_value()) return e;
  }
  return std::nullopt;
}

TEST(EngineQosTest, ARequestStillWaitingAtItsDeadlineExpiresAndOnlyThatOne) {
  QosRig rig({.max_batched_tokens = 64, .max_seqs = 1, .aging_steps = 0});
  auto busy = rig.Submit(GreedyRequest("busy", RandomPrompt(8, 1, kVocab), 400));
  rig.engine->RunStep();  // busy holds the only slot for 400 steps
  Request soon = GreedyRequest("soon", RandomPrompt(8, 2, kVocab), 4);
  soon.deadline_us = NowUs() + 30'000;
  Request later = GreedyRequest("later", RandomPrompt(8, 3, kVocab), 4);
  later.deadline_us = NowUs() + 60'000'000;
  Request none = GreedyRequest("none", RandomPrompt(8, 4, kVocab), 4);
  auto hs = rig.Submit(soon);
  auto hl = rig.Submit(later);
  auto hn = rig.Submit(none);
  rig.engine->RunStep();
  EXPECT_FALSE(Last(hs->Drain()).has_value()) << "expired before its deadline";
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  rig.engine->RunStep();
  const std::optional<Event> expired = Last(hs->Drain());
  ASSERT_TRUE(expired.has_value());
  EXPECT_EQ(expired->finish, FinishReason::kAbort);
  EXPECT_TRUE(expired->queue_expired);
  EXPECT_NE(expired->error.find("queue deadline passed"), std::string::npos) << expired->error;
  EXPECT_EQ(expired->usage.completion_tokens, 0);
  EXPECT_EQ(rig.engine->Stats().queue_expired, 1);
  // The others wait on and finish.
  for (int i = 0; i < 2000 && rig.engine->RunStep(); ++i) {
  }
  for (auto* h : {&busy, &hl, &hn}) {
    const std::optional<Event> last = Last((*h)->Drain());
    ASSERT_TRUE(last.has_value());
    EXPECT_EQ(last->finish, FinishReason::kLength);
    EXPECT_FALSE(last->queue_expired);
  }
  EXPECT_EQ(rig.engine->Stats().queue_expired, 1);
  EXPECT_TRUE(rig.engine->CheckConsistency().ok());
}

TEST(EngineQosTest, ARequestThatHasStartedNeverExpires) {
  QosRig rig({.max_batched_tokens = 64, .max_seqs = 2, .aging_steps = 0});
  Request r = GreedyRequest("r", RandomPrompt(8, 5, kVocab), 30);
  r.deadline_us = NowUs() + 20'000;
  auto h = rig.Submit(r);
  rig.engine->RunStep();  // admitted before its deadline
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  for (int i = 0; i < 200 && rig.engine->RunStep(); ++i) {
  }
  const std::optional<Event> last = Last(h->Drain());
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->finish, FinishReason::kLength);
  EXPECT_EQ(last->usage.completion_tokens, 30);
}

TEST(EngineQosTest, TheDelayActionKeepsAnOverdueRequestBehindTheRest) {
  QosRig rig({.max_batched_tokens = 64, .max_seqs = 1, .aging_steps = 0});
  auto busy = rig.Submit(GreedyRequest("busy", RandomPrompt(8, 6, kVocab), 20));
  rig.engine->RunStep();
  Request overdue = GreedyRequest("overdue", RandomPrompt(8, 7, kVocab), 3);
  overdue.priority = Priority::kHigh;
  overdue.deadline_us = NowUs() + 10'000;
  overdue.on_deadline = Request::DeadlineAction::kDelay;
  auto ho = rig.Submit(overdue);
  Request low = GreedyRequest("low", RandomPrompt(8, 8, kVocab), 3);
  low.priority = Priority::kLow;
  auto hl = rig.Submit(low);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  for (int i = 0; i < 500 && rig.engine->RunStep(); ++i) {
  }
  const std::optional<Event> o = Last(ho->Drain());
  const std::optional<Event> l = Last(hl->Drain());
  ASSERT_TRUE(o.has_value() && l.has_value());
  EXPECT_EQ(o->finish, FinishReason::kLength) << "the delay action never refuses";
  // Without its deadline the high request would have gone first. The fake runner's steps take
  // less than a microsecond, so low may finish in the same microsecond overdue is scheduled.
  EXPECT_LE(l->times.finished_us, o->times.scheduled_us);
  EXPECT_EQ(rig.engine->Stats().queue_delayed, 1);
}

TEST(EngineQosTest, TenantsShareGeneratedTokensByWeight) {
  // Tenant a submits ten times as many requests as b, all before b's.
  for (double weight_a : {1.0, 2.0}) {
    SCOPED_TRACE(weight_a);
    QosRig rig({.max_batched_tokens = 64, .max_seqs = 6, .aging_steps = 0}, 2048);
    std::map<std::string, std::vector<std::shared_ptr<RequestHandle>>> handles;
    for (int i = 0; i < 300; ++i) {
      Request r = GreedyRequest("a" + std::to_string(i), RandomPrompt(8, 100 + i, kVocab), 24);
      r.tenant = "a";
      r.tenant_weight = weight_a;
      handles["a"].push_back(rig.Submit(r));
    }
    for (int i = 0; i < 30; ++i) {
      Request r = GreedyRequest("b" + std::to_string(i), RandomPrompt(8, 900 + i, kVocab), 24);
      r.tenant = "b";
      handles["b"].push_back(rig.Submit(r));
    }
    // Generated tokens per tenant while b is still backlogged.
    std::map<std::string, int64_t> generated;
    for (int step = 0; step < 5000; ++step) {
      rig.engine->RunStep();
      for (auto& [tenant, hs] : handles) {
        for (auto& h : hs) {
          for (const Event& e : h->Drain()) generated[tenant] += e.token >= 0 ? 1 : 0;
        }
      }
      const EngineStats stats = rig.engine->Stats();
      int64_t b_live = 0;
      for (const TenantShare& t : stats.tenants) {
        if (t.tenant == "b") b_live = t.live_sequences;
      }
      if (b_live < 6) break;  // b no longer fills its share of the slots
    }
    const double ratio = static_cast<double>(generated["a"]) / static_cast<double>(generated["b"]);
    EXPECT_GT(generated["b"], 300);
    EXPECT_NEAR(ratio, weight_a, 0.1 * weight_a)
        << "a " << generated["a"] << ", b " << generated["b"];
  }
}

TEST(EngineQosTest, ATenantsTokensOnOneModelCountAgainstItsShareOnAnotherOfTheDevice) {
  // Two models' engines. On model A only tenant a works, with a long backlog; on model B a
  // and b have the same backlog, a's queued first. With the device's shared ledger, a's tokens
  // on A count against it on B, so b gets most of B (over the device, a and b get about the
  // same); with a ledger per engine, B splits its tokens evenly.
  for (bool shared : {false, true}) {
    SCOPED_TRACE(shared ? "shared ledger" : "a ledger per engine");
    const std::shared_ptr<FairShareLedger> ledger =
        shared ? std::make_shared<FairShareLedger>() : nullptr;
    const SchedulerOptions options{
        .max_batched_tokens = 64, .max_seqs = 4, .aging_steps = 0, .fair_share_ledger = ledger};
    QosRig model_a(options, 2048), model_b(options, 2048);
    std::vector<std::shared_ptr<RequestHandle>> on_a;
    std::map<std::string, std::vector<std::shared_ptr<RequestHandle>>> on_b;
    for (int i = 0; i < 100; ++i) {
      Request r = GreedyRequest("A" + std::to_string(i), RandomPrompt(8, 300 + i, kVocab), 24);
      r.tenant = "a";
      on_a.push_back(model_a.Submit(r));
    }
    for (const char* tenant : {"a", "b"}) {
      for (int i = 0; i < 100; ++i) {
        Request r = GreedyRequest(std::string(tenant) + std::to_string(i),
                                  RandomPrompt(8, 700 + i, kVocab), 24);
        r.tenant = tenant;
        on_b[tenant].push_back(model_b.Submit(r));
      }
    }
    std::map<std::string, int64_t> generated_on_b;
    for (int step = 0; step < 2000 && generated_on_b["a"] + generated_on_b["b"] < 1200; ++step) {
      model_a.engine->RunStep();
      model_b.engine->RunStep();
      for (auto& h : on_a) h->Drain();
      for (auto& [tenant, hs] : on_b) {
        for (auto& h : hs) {
          for (const Event& e : h->Drain()) generated_on_b[tenant] += e.token >= 0 ? 1 : 0;
        }
      }
    }
    const double b_share = static_cast<double>(generated_on_b["b"]) /
                           static_cast<double>(generated_on_b["a"] + generated_on_b["b"]);
    if (shared) {
      EXPECT_GT(b_share, 0.8) << "a " << generated_on_b["a"] << ", b " << generated_on_b["b"];
    } else {
      EXPECT_NEAR(b_share, 0.5, 0.1)
          << "a " << generated_on_b["a"] << ", b " << generated_on_b["b"];
    }
  }
}

TEST(EngineQosTest, StatsCarryTheQueueByClassTheDrainRateAndTheTenants) {
  QosRig rig({.max_batched_tokens = 64, .max_seqs = 2, .aging_steps = 0, .reserved_share = 0.5});
  rig.runner.set_step_delay(std::chrono::milliseconds(40));
  for (int i = 0; i < 6; ++i) {
    Request r = GreedyRequest("r" + std::to_string(i), RandomPrompt(8, 200 + i, kVocab), 3);
    r.priority = i < 2 ? Priority::kCritical : Priority::kLow;
    r.tenant = i % 2 == 0 ? "even" : "odd";
    rig.Submit(r);
  }
  EngineStats before = rig.engine->Stats();
  EXPECT_EQ(before.waiting_by_class[0], 2);
  EXPECT_EQ(before.waiting_by_class[3], 4);
  rig.engine->RunStep();
  EngineStats after = rig.engine->Stats();
  EXPECT_EQ(after.running_critical, 2);
  EXPECT_EQ(after.waiting_by_class[0], 0);
  EXPECT_EQ(after.waiting_by_class[3], 4);
  EXPECT_EQ(after.reserved_seqs, 1);
  EXPECT_EQ(after.max_seqs, 2);
  // One share per tenant and class: critical's first.
  ASSERT_EQ(after.tenants.size(), 4u);
  EXPECT_EQ(after.tenants[0].tenant, "even");
  EXPECT_EQ(after.tenants[0].priority, Priority::kCritical);
  EXPECT_EQ(after.tenants[0].live_sequences, 1);
  EXPECT_EQ(after.tenants[0].tokens, 8);
  EXPECT_EQ(after.tenants[2].tenant, "even");
  EXPECT_EQ(after.tenants[2].priority, Priority::kLow);
  EXPECT_EQ(after.tenants[2].live_sequences, 2);
  EXPECT_EQ(after.tenants[2].waiting, 2);
  EXPECT_EQ(after.tenants[2].tokens, 0);
  EXPECT_EQ(after.admissions_per_s, 0) << "measured over too short a time";
  for (int i = 0; i < 100 && rig.engine->RunStep(); ++i) {
  }
  EngineStats done = rig.engine->Stats();
  EXPECT_EQ(done.admissions, 6);
  // 6 admissions over the backlogged steps (40 ms each; one low request at a time beside the
  // reserve, 3 steps each): about 6 per 13 steps, at most 2 per step.
  EXPECT_GT(done.admissions_per_s, 6 / (0.04 * 26)) << done.admissions_per_s;
  EXPECT_LT(done.admissions_per_s, 2 / 0.04) << done.admissions_per_s;
  // Idle time does not dilute the figure.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  rig.engine->RunStep();
  EXPECT_EQ(rig.engine->Stats().admissions_per_s, done.admissions_per_s);
}

Request Critical(Request r) {
  r.priority = Priority::kCritical;
  return r;
}

// Each request's tokens when it runs alone (the fake model's tokens depend only on the K/V of
// its own prefix as stored).
std::vector<int32_t> AloneTokens(const Request& r) {
  QosRig rig({.max_batched_tokens = 64, .max_seqs = 4, .aging_steps = 0});
  auto h = rig.Submit(r);
  for (int i = 0; i < 1000 && rig.engine->RunStep(); ++i) {
  }
  return testing::TokensOf(h->Drain());
}

TEST(EngineQosTest, ACriticalRequestStopsAStepOfOtherPromptsAndEverythingIsRedoneExactly) {
  for (bool qos : {true, false}) {
    SCOPED_TRACE(qos ? "qos" : "no qos");
    QosRig rig({.max_batched_tokens = 64,
                .max_seqs = 4,
                .prefill_chunk_while_decoding = 16,
                .aging_steps = 0,
                .qos = qos});
    const Request decoding = GreedyRequest("d", RandomPrompt(8, 11, kVocab), 30);
    const Request normal = GreedyRequest("n", RandomPrompt(100, 12, kVocab), 10);
    const Request critical = Critical(GreedyRequest("c", RandomPrompt(20, 13, kVocab), 10));
    const Request second = Critical(GreedyRequest("c2", RandomPrompt(12, 14, kVocab), 5));
    std::map<std::string, std::shared_ptr<RequestHandle>> handles;
    handles["d"] = rig.Submit(decoding);
    rig.engine->RunStep();  // d's prompt; it decodes from now on
    handles["n"] = rig.Submit(normal);
    // Sequence ids follow submission: d 1, n 2, c 3. The critical request arrives while a
    // step reads n's prompt; a second one while the step reads the first's prompt (which
    // must run to its end).
    size_t stopped_after = 0;
    rig.runner.set_mid_step([&](const Batch& batch) {
      for (const SequenceSpan& span : batch.sequences) {
        if (span.tokens.size() <= 1) continue;
        if (span.sequence_id == 2 && !handles.contains("c")) {
          handles["c"] = rig.Submit(critical);
          stopped_after = rig.runner.steps().size();
        } else if (span.sequence_id == 3 && !handles.contains("c2")) {
          handles["c2"] = rig.Submit(second);
        }
      }
    });
    for (int i = 0; i < 1000 && rig.engine->RunStep(); ++i) {
    }
    ASSERT_TRUE(handles.contains("c") && handles.contains("c2"));
    EXPECT_EQ(rig.runner.steps_stopped(), qos ? 1 : 0);
    EXPECT_EQ(rig.engine->Stats().steps_stopped_early, qos ? 1 : 0);
    if (qos) {
      // The step after the stop reads the critical prompt whole and no other prompt.
      ASSERT_GT(rig.runner.steps().size(), stopped_after);
      const testing::StepRecord& next = rig.runner.steps()[stopped_after];
      bool critical_whole = false;
      for (const auto& [id, n_tokens, first] : next.spans) {
        if (id == 3) critical_whole = n_tokens == 20;
        if (id != 3) {
          EXPECT_EQ(n_tokens, 1) << "sequence " << id << " read its prompt";
        }
      }
      EXPECT_TRUE(critical_whole);
    }
    // The stopped step left nothing behind: every request's tokens are its tokens alone.
    for (const Request* r : std::vector<const Request*>{&decoding, &normal, &critical, &second}) {
      EXPECT_EQ(testing::TokensOf(handles[r->id]->Drain()), AloneTokens(*r)) << r->id;
    }
    EXPECT_EQ(rig.engine->Stats().kv_blocks_used, 0);
    EXPECT_TRUE(rig.engine->CheckConsistency().ok());
  }
}

TEST(EngineQosTest, ADecodeStepStopsForACriticalRequestAndNoTokenChanges) {
  QosRig rig({.max_batched_tokens = 64, .max_seqs = 4, .aging_steps = 0});
  const Request decoding = GreedyRequest("d", RandomPrompt(8, 21, kVocab), 10);
  auto d = rig.Submit(decoding);
  rig.engine->RunStep();  // d's prompt; then decode-only steps
  const Request critical = Critical(GreedyRequest("c", RandomPrompt(20, 22, kVocab), 4));
  std::shared_ptr<RequestHandle> c;
  rig.runner.set_mid_step([&](const Batch&) {
    if (c == nullptr) c = rig.Submit(critical);
  });
  for (int i = 0; i < 100 && rig.engine->RunStep(); ++i) {
  }
  EXPECT_EQ(rig.runner.steps_stopped(), 1);
  EXPECT_EQ(testing::TokensOf(c->Drain()), AloneTokens(critical));
  EXPECT_EQ(testing::TokensOf(d->Drain()), AloneTokens(decoding));
}

// An engine of one slot whose critical stream (12 tokens) has read its prompt.
struct OneCriticalSlot {
  OneCriticalSlot() {
    handle = rig.Submit(stream);
    rig.engine->RunStep();
  }
  QosRig rig{{.max_batched_tokens = 64, .max_seqs = 1, .aging_steps = 0}};
  const Request stream = Critical(GreedyRequest("c1", RandomPrompt(8, 31, kVocab), 12));
  std::shared_ptr<RequestHandle> handle;
};

TEST(EngineQosTest, NoStepStopsWhileACriticalRequestAlreadyWaits) {
  // A second critical request waits for the slot. A flood of further critical requests must
  // not stop the running stream's steps: none could start.
  OneCriticalSlot slot;
  QosRig& rig = slot.rig;
  const Request waiting = Critical(GreedyRequest("c2", RandomPrompt(8, 32, kVocab), 2));
  auto h2 = rig.Submit(waiting);
  rig.engine->RunStep();  // c2 taken; it waits for the slot
  int flood = 0;
  rig.runner.set_mid_step([&](const Batch&) {
    if (flood < 5) {
      rig.Submit(
          Critical(GreedyRequest("f" + std::to_string(flood++), RandomPrompt(8, 40, kVocab), 1)));
    }
  });
  for (int i = 0; i < 200 && rig.engine->RunStep(); ++i) {
  }
  EXPECT_EQ(flood, 5);
  EXPECT_EQ(rig.runner.steps_stopped(), 0);
  EXPECT_EQ(testing::TokensOf(slot.handle->Drain()), AloneTokens(slot.stream));
  EXPECT_EQ(testing::TokensOf(h2->Drain()), AloneTokens(waiting));
}

TEST(EngineQosTest, NoStepStopsWhenEverySlotHoldsACriticalStream) {
  // A critical newcomer could not start next step (the same class is never preempted), so
  // stopping the stream's steps would only waste them.
  OneCriticalSlot slot;
  QosRig& rig = slot.rig;
  const Request late = Critical(GreedyRequest("c2", RandomPrompt(8, 52, kVocab), 2));
  std::shared_ptr<RequestHandle> h2;
  rig.runner.set_mid_step([&](const Batch&) {
    if (h2 == nullptr) h2 = rig.Submit(late);
  });
  for (int i = 0; i < 100 && rig.engine->RunStep(); ++i) {
  }
  ASSERT_NE(h2, nullptr);
  EXPECT_EQ(rig.runner.steps_stopped(), 0);
  EXPECT_EQ(testing::TokensOf(h2->Drain()), AloneTokens(late));
}

TEST(EngineQosTest, AdaptiveBatchingLeansToThroughputWithADeepQueueUnlessUrgentWorkIsLive) {
  QosRig rig({.max_batched_tokens = 256,
              .max_seqs = 4,
              .prefill_chunk_while_decoding = 16,
              .aging_steps = 0},
             1024, {.enabled = true, .min_batched_tokens = 64, .max_prefill_chunk = 128});
  // Alone, a prompt gets the whole budget.
  rig.Submit(GreedyRequest("first", RandomPrompt(8, 300, kVocab), 200));
  rig.engine->RunStep();
  EXPECT_EQ(rig.engine->Stats().step_token_budget, 256);
  // A stream decodes and nothing waits: latency-leaning.
  rig.engine->RunStep();
  EXPECT_EQ(rig.engine->Stats().step_token_budget, 64);
  EXPECT_EQ(rig.engine->Stats().step_prefill_chunk, 16);
  // A queue as deep as max_seqs of normal requests: throughput-leaning.
  for (int i = 0; i < 7; ++i) {
    rig.Submit(GreedyRequest("q" + std::to_string(i), RandomPrompt(300, 301 + i, kVocab), 200));
  }
  rig.engine->RunStep();  // takes them in (3 admitted: 4 waiting of 4 slots)
  rig.engine->RunStep();
  EXPECT_EQ(rig.engine->Stats().step_token_budget, 256);
  EXPECT_EQ(rig.engine->Stats().step_prefill_chunk, 128);
  // A critical request waiting or running keeps it latency-leaning.
  const Request c = Critical(GreedyRequest("c", RandomPrompt(8, 400, kVocab), 50));
  rig.Submit(c);
  rig.engine->RunStep();
  rig.engine->RunStep();
  EXPECT_EQ(rig.engine->Stats().step_token_budget, 64);
  EXPECT_EQ(rig.engine->Stats().step_prefill_chunk, 16);
}

}  // namespace
}  // namespace pier::engine

#include "serving/request_policy.h"

#include <gtest/gtest.h>

namespace pier::serving {
namespace {

using engine::Priority;

TEST(RequestPolicyTest, ClampAndHeaderValues) {
  EXPECT_EQ(ClampPriority(Priority::kCritical, Priority::kHigh), Priority::kHigh);
  EXPECT_EQ(ClampPriority(Priority::kLow, Priority::kHigh), Priority::kLow);
  EXPECT_EQ(ClampPriority(Priority::kNormal, Priority::kNormal), Priority::kNormal);
  EXPECT_EQ(ClampPriority(Priority::kCritical, Priority::kCritical), Priority::kCritical);
  EXPECT_EQ(ParsePriorityValue("high"), Priority::kHigh);
  EXPECT_EQ(ParsePriorityValue("1"), Priority::kHigh);
  EXPECT_EQ(ParsePriorityValue("3"), Priority::kLow);
  EXPECT_FALSE(ParsePriorityValue("4").has_value());
  EXPECT_FALSE(ParsePriorityValue("").has_value());
  EXPECT_FALSE(ParsePriorityValue("HIGH").has_value());
}

TEST(RequestPolicyTest, BodyWinsOverHeaderAndTheCeilingApplies) {
  Result<RequestClass> both = ResolveRequestClass(Priority::kLow, std::string_view("critical"),
                                                  "team", Priority::kCritical);
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(both->priority, Priority::kLow);
  EXPECT_EQ(both->tenant, "team");

  Result<RequestClass> header =
      ResolveRequestClass(std::nullopt, std::string_view("0"), "t", Priority::kHigh);
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->priority, Priority::kHigh);  // asked for critical, the key allows high

  Result<RequestClass> neither =
      ResolveRequestClass(std::nullopt, std::nullopt, "t", Priority::kLow);
  ASSERT_TRUE(neither.ok());
  EXPECT_EQ(neither->priority, Priority::kLow);  // normal, lowered to the ceiling

  // A bad header is an error only when the body does not decide.
  EXPECT_FALSE(
      ResolveRequestClass(std::nullopt, std::string_view("urgent"), "t", Priority::kCritical).ok());
  EXPECT_TRUE(
      ResolveRequestClass(Priority::kHigh, std::string_view("urgent"), "t", Priority::kCritical)
          .ok());
}

TEST(ClassQueueLimits, ParsesClassesAndRefusesTheRest) {
  auto limits = ParseClassQueueLimits("normal=10000,low=30000,critical=0");
  ASSERT_TRUE(limits.ok()) << limits.status().ToString();
  EXPECT_EQ(limits->max_queue_ms[static_cast<size_t>(engine::Priority::kNormal)], 10000);
  EXPECT_EQ(limits->max_queue_ms[static_cast<size_t>(engine::Priority::kLow)], 30000);
  EXPECT_EQ(limits->max_queue_ms[static_cast<size_t>(engine::Priority::kHigh)], 0);
  EXPECT_TRUE(ParseClassQueueLimits("").ok());
  for (const char* bad : {"normal", "urgent=5", "normal=-1", "normal=5x", "low=3600001"}) {
    EXPECT_EQ(ParseClassQueueLimits(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
  const auto now = std::chrono::steady_clock::now();
  EXPECT_EQ(QueueDeadline(*limits, engine::Priority::kNormal, now),
            now + std::chrono::milliseconds(10000));
  EXPECT_EQ(QueueDeadline(*limits, engine::Priority::kHigh, now),
            std::chrono::steady_clock::time_point::max());
}

TEST(ClassQueueLimits, DeadlineActionsParseAndBadOnesAreNamed) {
  ClassQueueLimits limits;
  ASSERT_TRUE(ParseClassDeadlineActions("low=delay,normal=reject", &limits).ok());
  EXPECT_TRUE(limits.delay[static_cast<size_t>(engine::Priority::kLow)]);
  EXPECT_FALSE(limits.delay[static_cast<size_t>(engine::Priority::kNormal)]);
  EXPECT_NE(ParseClassDeadlineActions("low=drop", &limits).message().find("'low=drop'"),
            std::string::npos);
  EXPECT_FALSE(ParseClassDeadlineActions("low", &limits).ok());
  EXPECT_NE(ParseClassMilliseconds("class_ttft_ms", "x=1")
                .status()
                .message()
                .find("class_ttft_ms: 'x=1' names no class"),
            std::string::npos);
}

TEST(RequestDeadline, AClientMayShortenItsClassesLimitButNeverLengthenIt) {
  ClassQueueLimits limits;
  limits.max_queue_ms[static_cast<size_t>(engine::Priority::kNormal)] = 10'000;
  const auto now = std::chrono::steady_clock::now();
  using std::chrono::milliseconds;
  EXPECT_EQ(RequestQueueDeadline(limits, engine::Priority::kNormal, 2'000, now),
            now + milliseconds(2'000));
  EXPECT_EQ(RequestQueueDeadline(limits, engine::Priority::kNormal, 50'000, now),
            now + milliseconds(10'000));
  EXPECT_EQ(RequestQueueDeadline(limits, engine::Priority::kNormal, std::nullopt, now),
            now + milliseconds(10'000));
  // A class without a limit takes the client's; neither: none.
  EXPECT_EQ(RequestQueueDeadline(limits, engine::Priority::kLow, 700, now),
            now + milliseconds(700));
  EXPECT_FALSE(RequestQueueDeadline(limits, engine::Priority::kLow, std::nullopt, now));
}

TEST(RequestDeadline, TheClientsDeadlineIsAWholePositiveNumberOfMilliseconds) {
  EXPECT_EQ(*ResolveClientDeadlineMs(250, std::string_view("900")), 250);  // the body wins
  EXPECT_EQ(*ResolveClientDeadlineMs(std::nullopt, std::string_view("900")), 900);
  EXPECT_FALSE(ResolveClientDeadlineMs(std::nullopt, std::nullopt)->has_value());
  for (const char* bad : {"0", "-5", "1.5", "soon", "", "3600001"}) {
    Result<std::optional<int64_t>> r = ResolveClientDeadlineMs(std::nullopt, std::string_view(bad));
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("X-Request-Deadline-Ms"), std::string::npos);
  }
  EXPECT_NE(ResolveClientDeadlineMs(0, std::nullopt).status().message().find("deadline_ms"),
            std::string::npos);
}

TEST(PredictedWait, WorkAheadBeyondTheFreeSlotsOverTheDrainRate) {
  engine::EngineStats s;
  s.max_seqs = 8;
  s.reserved_seqs = 1;
  s.running = 7;
  // Nothing measured and a free slot: no wait. Full for normal (the reserve is critical's).
  EXPECT_EQ(PredictQueueWaitMs(s, engine::Priority::kCritical), 0.0);
  EXPECT_FALSE(PredictQueueWaitMs(s, engine::Priority::kNormal).has_value());
  s.admissions_per_s = 4;
  EXPECT_DOUBLE_EQ(*PredictQueueWaitMs(s, engine::Priority::kNormal), 250.0);
  // Work waiting at or above its class is ahead of it; lower classes are not.
  s.waiting_by_class = {1, 2, 3, 40};
  EXPECT_DOUBLE_EQ(*PredictQueueWaitMs(s, engine::Priority::kNormal), 7 * 250.0);
  EXPECT_DOUBLE_EQ(*PredictQueueWaitMs(s, engine::Priority::kCritical), 250.0);
  EXPECT_DOUBLE_EQ(*PredictQueueWaitMs(s, engine::Priority::kLow), 47 * 250.0);
  // Fair share: of the 40 low sequences an abuser has 38 waiting, a small tenant 2. The small
  // tenant's next request waits behind its own 2 and 3 of the abuser's (the round it joins),
  // not behind all 40; the abuser's behind the whole class.
  using engine::Priority;
  s.tenants = {{.tenant = "abuser", .priority = Priority::kLow, .weight = 1, .waiting = 38},
               {.tenant = "small", .priority = Priority::kLow, .weight = 1, .waiting = 2},
               // Another class's backlog is not this class's share.
               {.tenant = "small", .priority = Priority::kNormal, .weight = 1, .waiting = 30}};
  EXPECT_DOUBLE_EQ(*PredictQueueWaitMs(s, engine::Priority::kLow, "small"), (6 + 5 + 1) * 250.0);
  EXPECT_DOUBLE_EQ(*PredictQueueWaitMs(s, engine::Priority::kLow, "abuser"), 47 * 250.0);
  // A new tenant with nothing waiting: one of each other tenant's ahead of it.
  EXPECT_DOUBLE_EQ(*PredictQueueWaitMs(s, engine::Priority::kLow, "new"), (6 + 2 + 1) * 250.0);
  // Submissions not yet taken by the engine (in the class's count, in no tenant's) are ahead.
  s.waiting_by_class[3] = 45;
  EXPECT_DOUBLE_EQ(*PredictQueueWaitMs(s, engine::Priority::kLow, "new"), (6 + 7 + 1) * 250.0);
}

}  // namespace
}  // namespace pier::serving

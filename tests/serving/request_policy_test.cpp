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

}  // namespace
}  // namespace pier::serving

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

}  // namespace
}  // namespace pier::serving

#include "common/status.h"

#include <gtest/gtest.h>

namespace pier {
namespace {

Result<int> ParsePositive(int x) {
  if (x <= 0) return InvalidArgumentError("expected a positive number, got " + std::to_string(x));
  return x;
}

Result<int> Doubled(int x) {
  PIER_ASSIGN_OR_RETURN(int v, ParsePositive(x));
  return v * 2;
}

TEST(StatusTest, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, CarriesCodeAndMessageWithContext) {
  Status s = DataLossError("truncated").WithContext("model.gguf");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.ToString(), "DATA_LOSS: model.gguf: truncated");
}

TEST(ResultTest, PropagatesErrorsAndValues) {
  EXPECT_EQ(*Doubled(4), 8);
  Result<int> r = Doubled(-1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("-1"), std::string::npos);
}

TEST(ResultDeathTest, ValueOfErrorAborts) {
  Result<int> r = InvalidArgumentError("nope");
  EXPECT_DEATH((void)r.value(), "nope");
}

}  // namespace
}  // namespace pier

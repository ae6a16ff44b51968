// The one Status -> HTTP map every route reads (api/status_map.h).
#include "api/status_map.h"

#include <gtest/gtest.h>

namespace pier::api {
namespace {

TEST(StatusMapTest, EachCodeHasItsHttpStatus) {
  EXPECT_EQ(HttpStatusOf(Status::Ok()), 200);
  EXPECT_EQ(HttpStatusOf(InvalidArgumentError("x")), 400);
  EXPECT_EQ(HttpStatusOf(Status(StatusCode::kUnsupported, "x")), 400);
  EXPECT_EQ(HttpStatusOf(NotFoundError("x")), 404);
  EXPECT_EQ(HttpStatusOf(Status(StatusCode::kFailedPrecondition, "x")), 409);
  EXPECT_EQ(HttpStatusOf(ResourceExhaustedError("x")), 429);
  EXPECT_EQ(HttpStatusOf(Status(StatusCode::kUnavailable, "x")), 503);
  EXPECT_EQ(HttpStatusOf(Status(StatusCode::kDataLoss, "x")), 500);
  EXPECT_EQ(HttpStatusOf(Status(StatusCode::kIoError, "x")), 500);
  EXPECT_EQ(HttpStatusOf(Status(StatusCode::kInternal, "x")), 500);
}

}  // namespace
}  // namespace pier::api

#include "common/ascii.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pier {
namespace {

using Items = std::vector<std::string>;

TEST(SplitListTest, KeepsItemsAsWrittenIncludingEmptyOnes) {
  EXPECT_EQ(SplitList("a,b,c,even"), (Items{"a", "b", "c", "even"}));
  EXPECT_EQ(SplitList("a,,b"), (Items{"a", "", "b"}));
  EXPECT_EQ(SplitList(""), (Items{""}));
  EXPECT_EQ(SplitList("x,"), (Items{"x", ""}));
  EXPECT_EQ(SplitList("k=v;w", ';'), (Items{"k=v", "w"}));
}

}  // namespace
}  // namespace pier

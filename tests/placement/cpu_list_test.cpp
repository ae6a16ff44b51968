#include "placement/cpu_list.h"

#include <gtest/gtest.h>

namespace pier::placement {
namespace {

TEST(CpuListTest, ParsesNumbersAndRanges) {
  Result<std::vector<int>> cpus = ParseCpuList("8, 0-3,2,10-11");
  ASSERT_TRUE(cpus.ok()) << cpus.status().ToString();
  EXPECT_EQ(*cpus, (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(*ParseCpuList("5"), std::vector<int>{5});
}

TEST(CpuListTest, RefusesWhatIsNotAList) {
  for (const char* bad : {"", " ", "a", "1-", "-1", "3-1", "1,,2", "1.5", "0-5000", "1 2"}) {
    Result<std::vector<int>> cpus = ParseCpuList(bad);
    ASSERT_FALSE(cpus.ok()) << bad;
    EXPECT_NE(cpus.status().message().find("CPU list \"" + std::string(bad) + "\""),
              std::string::npos)
        << cpus.status().message();
  }
}

TEST(CpuListTest, FormatsRunsAsRanges) {
  EXPECT_EQ(FormatCpuList({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(FormatCpuList({3, 1, 2, 1}), "1-3");
  EXPECT_EQ(FormatCpuList({}), "");
  for (const char* text : {"0", "0-31", "1,3,5", "0-3,16-19"}) {
    EXPECT_EQ(FormatCpuList(*ParseCpuList(text)), text);
  }
}

}  // namespace
}  // namespace pier::placement

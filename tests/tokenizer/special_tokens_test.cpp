#include "tokenizer/special_tokens.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace pier::tokenizer {
namespace {

// Renders fragments as "text" for ordinary runs and "#id" for special tokens.
std::vector<std::string> Render(const std::vector<TextFragment>& fragments) {
  std::vector<std::string> out;
  for (const TextFragment& f : fragments) {
    out.push_back(f.token >= 0 ? "#" + std::to_string(f.token) : std::string(f.text));
  }
  return out;
}

TEST(SpecialTokenMatcherTest, PlainTextIsOneFragment) {
  SpecialTokenMatcher matcher({{"<|im_start|>", 1}});
  EXPECT_EQ(Render(matcher.Split("hello world")), (std::vector<std::string>{"hello world"}));
}

TEST(SpecialTokenMatcherTest, EmptyTextGivesNoFragments) {
  SpecialTokenMatcher matcher({{"<|im_start|>", 1}});
  EXPECT_TRUE(matcher.Split("").empty());
}

TEST(SpecialTokenMatcherTest, CutsAroundTokensAndNeverEmitsEmptyRuns) {
  SpecialTokenMatcher matcher({{"<|im_start|>", 1}, {"<|im_end|>", 2}});
  EXPECT_EQ(Render(matcher.Split("<|im_start|>user\nhi<|im_end|><|im_end|>x")),
            (std::vector<std::string>{"#1", "user\nhi", "#2", "#2", "x"}));
}

TEST(SpecialTokenMatcherTest, FragmentsPointIntoTheInput) {
  const std::string text = "a<s>b";
  SpecialTokenMatcher matcher({{"<s>", 7}});
  const auto fragments = matcher.Split(text);
  ASSERT_EQ(fragments.size(), 3u);
  EXPECT_EQ(fragments[1].text.data(), text.data() + 1);
  EXPECT_EQ(fragments[1].text, "<s>");
  EXPECT_EQ(fragments[1].token, 7);
}

TEST(SpecialTokenMatcherTest, PrefersTheLongestTokenAtAPosition) {
  SpecialTokenMatcher matcher({{"<a>", 1}, {"<a><b>", 2}, {"<b>", 3}});
  EXPECT_EQ(Render(matcher.Split("<a><b><a>")), (std::vector<std::string>{"#2", "#1"}));
}

TEST(SpecialTokenMatcherTest, LeftmostMatchWinsOverALongerLaterOne) {
  SpecialTokenMatcher matcher({{"ab", 1}, {"bcdef", 2}});
  EXPECT_EQ(Render(matcher.Split("abcdef")), (std::vector<std::string>{"#1", "cdef"}));
}

TEST(SpecialTokenMatcherTest, PartialTokenAtEndStaysText) {
  SpecialTokenMatcher matcher({{"<|im_end|>", 2}});
  EXPECT_EQ(Render(matcher.Split("x<|im_en")), (std::vector<std::string>{"x<|im_en"}));
}

TEST(SpecialTokenMatcherTest, IgnoresEmptyTokenTexts) {
  SpecialTokenMatcher matcher({{"", 5}});
  EXPECT_TRUE(matcher.empty());
  EXPECT_EQ(Render(matcher.Split("abc")), (std::vector<std::string>{"abc"}));
}

TEST(SpecialTokenMatcherTest, DuplicateTextsResolveToTheLowestId) {
  SpecialTokenMatcher matcher({{"<x>", 9}, {"<x>", 4}});
  EXPECT_EQ(Render(matcher.Split("<x>")), (std::vector<std::string>{"#4"}));
}

TEST(SpecialTokenMatcherTest, MatchesMultibyteTokens) {
  SpecialTokenMatcher matcher({{"<｜end▁of▁sentence｜>", 3}});
  EXPECT_EQ(Render(matcher.Split("完<｜end▁of▁sentence｜>了")),
            (std::vector<std::string>{"完", "#3", "了"}));
}

}  // namespace
}  // namespace pier::tokenizer

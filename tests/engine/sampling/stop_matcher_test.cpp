#include "engine/sampling/stop_matcher.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pier::sampling {
namespace {

StopMatcher Make(std::vector<std::string> stops, std::vector<int32_t> eog = {}) {
  auto m = StopMatcher::Create(std::move(stops), std::move(eog));
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::move(m).value();
}

// Feeds pieces until a stop; returns everything emitted (plus Flush() when none matched).
struct FeedOutcome {
  std::string emitted;
  std::optional<size_t> stop_index;
};
FeedOutcome FeedAll(StopMatcher& m, const std::vector<std::string>& pieces) {
  FeedOutcome run;
  for (const std::string& p : pieces) {
    StopResult r = m.Feed(p);
    run.emitted += r.emit;
    if (r.stop_index) {
      run.stop_index = r.stop_index;
      return run;
    }
  }
  run.emitted += m.Flush();
  return run;
}

TEST(StopMatcherTest, WithoutStopStringsEverythingIsEmittedAtOnce) {
  StopMatcher m = Make({});
  EXPECT_EQ(m.Feed("Hello").emit, "Hello");
  EXPECT_EQ(m.Feed(", world").emit, ", world");
  EXPECT_EQ(m.held_bytes(), 0u);
}

TEST(StopMatcherTest, HoldsBackAPossibleStartOfAStopString) {
  StopMatcher m = Make({"\n\nUser:"});
  StopResult r = m.Feed("Sure.\n");
  EXPECT_EQ(r.emit, "Sure.");
  EXPECT_FALSE(r.stop_index.has_value());
  EXPECT_EQ(m.held_bytes(), 1u);
  r = m.Feed("\nUs");
  EXPECT_EQ(r.emit, "");
  EXPECT_EQ(m.held_bytes(), 4u);
  r = m.Feed("ually");  // "\n\nUsually" cannot be the stop string: released
  EXPECT_EQ(r.emit, "\n\nUsually");
  EXPECT_EQ(m.held_bytes(), 0u);
}

TEST(StopMatcherTest, MatchesAcrossPieceBoundariesAndEmitsOnlyTheTextBefore) {
  StopMatcher m = Make({"<end>"});
  const FeedOutcome run = FeedAll(m, {"The answer", " is 4<", "e", "nd", "> and more", "text"});
  EXPECT_EQ(run.emitted, "The answer is 4");
  ASSERT_TRUE(run.stop_index.has_value());
  EXPECT_EQ(*run.stop_index, 0u);
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.Feed("later").emit, "");
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopMatcherTest, MatchInsideOnePieceDropsTheRestOfThePiece) {
  StopMatcher m = Make({"STOP"});
  const FeedOutcome run = FeedAll(m, {"abc", "deSTOPfgh"});
  EXPECT_EQ(run.emitted, "abcde");
  EXPECT_TRUE(run.stop_index.has_value());
}

TEST(StopMatcherTest, EveryChunkingOfTheTextGivesTheSameResult) {
  const std::string text = "one two thr three fo four five";
  const std::vector<std::string> stops = {"four", "three f", "xyz"};
  // The stop that completes first is "three f" (ends at byte 19; "four" ends at 26).
  for (size_t a = 1; a < text.size(); ++a) {
    for (size_t b = a; b < text.size(); ++b) {
      StopMatcher m = Make(stops);
      const FeedOutcome run =
          FeedAll(m, {text.substr(0, a), text.substr(a, b - a), text.substr(b)});
      EXPECT_EQ(run.emitted, "one two thr ") << "split at " << a << "," << b;
      ASSERT_TRUE(run.stop_index.has_value());
      EXPECT_EQ(*run.stop_index, 1u);
    }
  }
}

TEST(StopMatcherTest, EarliestStartWinsWhenSeveralCompleteInOnePiece) {
  StopMatcher m = Make({"cd", "bcd"});
  const FeedOutcome run = FeedAll(m, {"ab", "cde"});
  EXPECT_EQ(run.emitted, "a");
  EXPECT_EQ(*run.stop_index, 1u);
}

TEST(StopMatcherTest, OverlappingPrefixesAreHeldUntilSettled) {
  // "aab": after "aa" both "a" and "aa" could start it; the longest possible start is held.
  StopMatcher m = Make({"aab"});
  EXPECT_EQ(m.Feed("xaa").emit, "x");
  EXPECT_EQ(m.Feed("a").emit, "a");  // "aaa": only the last two can still start "aab"
  const StopResult r = m.Feed("b!");
  EXPECT_EQ(r.emit, "");
  EXPECT_TRUE(r.stop_index.has_value());
}

TEST(StopMatcherTest, FlushReleasesAnUnfinishedPartialMatch) {
  StopMatcher m = Make({"###"});
  EXPECT_EQ(m.Feed("done ##").emit, "done ");
  EXPECT_EQ(m.Flush(), "##");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcherTest, MultiByteUtf8TextIsNeverSplitInsideACharacter) {
  StopMatcher m = Make({"é!"});  // 0xC3 0xA9 '!'
  StopResult r = m.Feed("café");
  EXPECT_EQ(r.emit, "caf");  // "é" may start the stop string: held whole
  r = m.Feed("?");
  EXPECT_EQ(r.emit, "é?");
}

TEST(StopMatcherTest, KnowsTheEndOfGenerationTokens) {
  StopMatcher m = Make({}, {2, 0, 2});
  EXPECT_TRUE(m.IsEndOfGeneration(0));
  EXPECT_TRUE(m.IsEndOfGeneration(2));
  EXPECT_FALSE(m.IsEndOfGeneration(1));
}

TEST(StopMatcherTest, RejectsEmptyStopStrings) {
  auto m = StopMatcher::Create({"ok", ""}, {});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.status().message(), "stop strings must not be empty (stop[1] is empty)");
}

}  // namespace
}  // namespace pier::sampling

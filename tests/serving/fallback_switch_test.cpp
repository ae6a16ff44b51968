// FallbackSwitch: engages above the load threshold (or the predicted-wait one), releases only
// below the lower threshold (hysteresis), and diverts only classes at or below max_class.
#include "serving/fallback_switch.h"

#include <gtest/gtest.h>

namespace pier::serving {
namespace {

using engine::Priority;

engine::EngineStats Load(int64_t running, int64_t waiting, int64_t max_seqs = 10) {
  engine::EngineStats s;
  s.max_seqs = max_seqs;
  s.running = running;
  s.waiting = waiting;
  s.waiting_by_class[static_cast<size_t>(Priority::kNormal)] = waiting;
  return s;
}

TEST(FallbackSwitchTest, EngagesAboveTheLoadAndReleasesOnlyBelowTheLowerThreshold) {
  FallbackSwitch f;
  const FallbackPolicy policy{.load_above = 0.8, .load_below = 0.5};
  EXPECT_FALSE(f.Divert("m", policy, Load(8, 0), Priority::kNormal));  // 0.8 is not above
  EXPECT_EQ(f.Divert("m", policy, Load(8, 1), Priority::kNormal), "load");
  // Between the thresholds it stays engaged (no flapping)...
  EXPECT_EQ(f.Divert("m", policy, Load(7, 0), Priority::kNormal), "load");
  EXPECT_EQ(f.Divert("m", policy, Load(5, 0), Priority::kNormal), "load");
  EXPECT_TRUE(f.Snapshot().at("m"));
  // ...and releases below the lower one.
  EXPECT_FALSE(f.Divert("m", policy, Load(4, 0), Priority::kNormal));
  EXPECT_FALSE(f.Divert("m", policy, Load(7, 0), Priority::kNormal));
  EXPECT_FALSE(f.Snapshot().at("m"));
  // Each primary has its own switch.
  EXPECT_FALSE(f.Divert("other", policy, Load(1, 0), Priority::kNormal));
}

TEST(FallbackSwitchTest, OnlyClassesAtOrBelowTheMaxClassAreDiverted) {
  FallbackSwitch f;
  const FallbackPolicy policy{.load_above = 0.8, .load_below = 0.5, .max_class = Priority::kNormal};
  EXPECT_EQ(f.Divert("m", policy, Load(10, 5), Priority::kLow), "load");
  EXPECT_EQ(f.Divert("m", policy, Load(10, 5), Priority::kNormal), "load");
  EXPECT_FALSE(f.Divert("m", policy, Load(10, 5), Priority::kHigh));
  EXPECT_FALSE(f.Divert("m", policy, Load(10, 5), Priority::kCritical));
}

TEST(FallbackSwitchTest, APredictedWaitEngagesItToo) {
  FallbackSwitch f;
  const FallbackPolicy policy{.load_above = 50, .load_below = 40, .queue_ms_above = 1000};
  engine::EngineStats s = Load(10, 4);
  s.admissions_per_s = 10;  // 5 to admit at 10/s: 500 ms
  EXPECT_FALSE(f.Divert("m", policy, s, Priority::kNormal));
  s = Load(10, 19);
  s.admissions_per_s = 10;  // 2 s
  EXPECT_EQ(f.Divert("m", policy, s, Priority::kNormal), "queue");
  s = Load(10, 6);
  s.admissions_per_s = 10;  // 700 ms: above half the threshold, still engaged
  EXPECT_EQ(f.Divert("m", policy, s, Priority::kNormal), "queue");
  s = Load(10, 2);
  s.admissions_per_s = 10;  // 300 ms
  EXPECT_FALSE(f.Divert("m", policy, s, Priority::kNormal));
}

}  // namespace
}  // namespace pier::serving

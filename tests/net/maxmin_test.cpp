// Max-min sharing: closed-form shares (equations in each test's comment).
#include "sim/net/maxmin.h"

#include <gtest/gtest.h>

namespace foresight {
namespace {

// One action alone (the solver's shortcut): its tightest link decides; a link it crosses twice
// counts twice, r <= C / (w1 + w2); its bound caps it.
TEST(MaxMin, ALoneActionTakesItsTightestShare) {
  MaxMinSystem s;
  const int fast = s.add_resource(100);
  const int slow = s.add_resource(60);
  const int a = s.add_action({{fast, 1.0}, {slow, 1.0}, {slow, 1.0}});
  std::vector<int> changed;
  s.solve(&changed);
  EXPECT_DOUBLE_EQ(s.rate(a), 30);
  EXPECT_EQ(changed, std::vector<int>{a});
  s.remove_action(a);
  const int b = s.add_action({{fast, 1.0}}, 40);
  s.solve();
  EXPECT_DOUBLE_EQ(s.rate(b), 40);
}

TEST(MaxMin, OneFlowGetsTheLink) {
  MaxMinSystem s;
  const int l = s.add_resource(25e9);
  const int a = s.add_action({{l, 1.0}});
  s.solve();
  EXPECT_DOUBLE_EQ(s.rate(a), 25e9);
}

// r_a + r_b <= C and max-min: r_a = r_b = C/2.
TEST(MaxMin, TwoFlowsShareALinkEqually) {
  MaxMinSystem s;
  const int l = s.add_resource(100);
  const int a = s.add_action({{l, 1.0}});
  const int b = s.add_action({{l, 1.0}});
  s.solve();
  EXPECT_DOUBLE_EQ(s.rate(a), 50);
  EXPECT_DOUBLE_EQ(s.rate(b), 50);
  // When one leaves, the other takes the whole link.
  std::vector<int> changed;
  s.remove_action(a);
  s.solve(&changed);
  EXPECT_DOUBLE_EQ(s.rate(b), 100);
  EXPECT_EQ(changed, std::vector<int>{b});
}

// A on links 1 (C1=10) and 2 (C2=100), B and C on link 2 only: link 1 fixes A at 10, then
// B and C split the rest of link 2: (100 - 10) / 2 = 45.
TEST(MaxMin, BottleneckThenRedistribution) {
  MaxMinSystem s;
  const int l1 = s.add_resource(10), l2 = s.add_resource(100);
  const int a = s.add_action({{l1, 1.0}, {l2, 1.0}});
  const int b = s.add_action({{l2, 1.0}});
  const int c = s.add_action({{l2, 1.0}});
  s.solve();
  EXPECT_DOUBLE_EQ(s.rate(a), 10);
  EXPECT_DOUBLE_EQ(s.rate(b), 45);
  EXPECT_DOUBLE_EQ(s.rate(c), 45);
  EXPECT_NEAR(s.load(l2), 100, 1e-9);
}

// Weights: a bundle with 3 flows on a link uses 3 r; with a single flow beside it:
// 3 r_a + r_b = C, equal levels -> r = C/4.
TEST(MaxMin, WeightsCountFlowsInABundle) {
  MaxMinSystem s;
  const int l = s.add_resource(100);
  const int a = s.add_action({{l, 3.0}});
  const int b = s.add_action({{l, 1.0}});
  s.solve();
  EXPECT_DOUBLE_EQ(s.rate(a), 25);
  EXPECT_DOUBLE_EQ(s.rate(b), 25);
}

TEST(MaxMin, BoundsCapRates) {
  MaxMinSystem s;
  const int l = s.add_resource(100);
  const int a = s.add_action({{l, 1.0}}, 10.0);
  const int b = s.add_action({{l, 1.0}});
  s.solve();
  EXPECT_DOUBLE_EQ(s.rate(a), 10);
  EXPECT_DOUBLE_EQ(s.rate(b), 90);
}

TEST(MaxMin, IndependentComponentsAreLeftAlone) {
  MaxMinSystem s;
  const int l1 = s.add_resource(10), l2 = s.add_resource(20);
  const int a = s.add_action({{l1, 1.0}});
  s.solve();
  std::vector<int> changed;
  const int b = s.add_action({{l2, 1.0}});
  s.solve(&changed);
  EXPECT_EQ(changed, std::vector<int>{b});  // a's component was not touched
  EXPECT_DOUBLE_EQ(s.rate(a), 10);
  EXPECT_DOUBLE_EQ(s.rate(b), 20);
}

}  // namespace
}  // namespace foresight

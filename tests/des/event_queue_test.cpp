// The event queue pops in exact (time, seq) order, like a binary heap on that pair would.
#include "sim/des/event_queue.h"

#include <gtest/gtest.h>

#include <queue>
#include <random>
#include <tuple>
#include <vector>

namespace foresight {
namespace {

struct Ev {
  double time;
  std::uint64_t seq;
};

TEST(EventQueue, EqualTimesComeOutInInsertionOrder) {
  EventQueue<Ev> q;
  q.push({2.0, 0});
  q.push({1.0, 1});
  q.push({2.0, 2});
  q.push({1.0, 3});
  std::vector<std::uint64_t> order;
  while (!q.empty()) {
    order.push_back(q.top().seq);
    q.pop();
  }
  EXPECT_EQ(order, (std::vector<std::uint64_t>{1, 3, 0, 2}));
}

TEST(EventQueue, ZeroAndNegativeZeroAreTheSameTime) {
  EventQueue<Ev> q;
  q.push({0.0, 0});
  q.push({-0.0, 1});
  EXPECT_EQ(q.top().seq, 0u);
  q.pop();
  EXPECT_EQ(q.top().seq, 1u);
}

// A simulation's pattern: pop the earliest, push a few at or after it (some at the same time),
// checked against std::priority_queue ordered by (time, seq).
TEST(EventQueue, MatchesAHeapOnAMonotoneRandomWorkload) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> delay(0.0, 1e-3);
  std::uniform_int_distribution<int> fan(0, 3);
  auto later = [](const Ev& a, const Ev& b) { return std::tie(a.time, a.seq) > std::tie(b.time, b.seq); };
  std::priority_queue<Ev, std::vector<Ev>, decltype(later)> ref(later);
  EventQueue<Ev> q;
  std::uint64_t seq = 0;
  for (int i = 0; i < 64; ++i) {
    const Ev e{delay(rng), seq++};
    q.push(e);
    ref.push(e);
  }
  std::size_t popped = 0;
  while (!ref.empty()) {
    ASSERT_EQ(q.size(), ref.size());
    const Ev want = ref.top();
    const Ev got = q.top();
    ASSERT_EQ(got.seq, want.seq) << "pop " << popped;
    ASSERT_EQ(got.time, want.time);
    ref.pop();
    q.pop();
    ++popped;
    if (popped > 20000) continue;  // drain
    for (int k = fan(rng); k > 0; --k) {
      // A quarter of the new events land exactly at the current time (zero-duration ops).
      const Ev e{(k == 1 && rng() % 4 == 0) ? want.time : want.time + delay(rng), seq++};
      q.push(e);
      ref.push(e);
    }
  }
  EXPECT_TRUE(q.empty());
  EXPECT_GT(popped, 20000u);
}

}  // namespace
}  // namespace foresight

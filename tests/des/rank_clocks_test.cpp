// One clock for the ranks of a measured step: a simulated step (one clock) with each rank's times
// moved by its own offset, as `foresight run` gathers them, is put back on one clock.
#include "sim/des/rank_clocks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "tests/des/simulated_tiny.h"
#include "tests/test_util.h"

namespace foresight {
namespace {

using testing::Simulated;

// Each rank's clock started `skew(rank)` later than the true one: its times read that much less.
double skew(int rank) { return 1e-4 * ((rank * 7) % 5) - 1.5e-4; }

std::vector<OpRecord> skewed(const std::vector<OpRecord>& ops) {
  std::vector<OpRecord> out = ops;
  for (OpRecord& o : out) {
    o.start_s -= skew(o.rank);
    o.end_s -= skew(o.rank);
  }
  return out;
}

const Op& op_of(const Workload& w, const OpRecord& o) { return w.stages[o.stage].graph()[o.op]; }

TEST(RankClocks, CollectivesRecoverEachRanksOffsetWithinAStage) {
  const Simulated s = testing::simulate_tiny(2, 1, 2, true);  // one stage: tensor- and data-parallel groups
  std::vector<OpRecord> ops = skewed(s.r.ops);
  const std::vector<RankClock> clocks = align_rank_clocks(s.w, ops);
  ASSERT_EQ(clocks.size(), 4u);
  EXPECT_EQ(clocks[0].by, "reference");
  for (const RankClock& c : clocks) {
    if (c.rank == 0) continue;
    EXPECT_EQ(c.by, "collectives") << c.rank;
    EXPECT_GT(c.pairs, 0) << c.rank;
    // Against rank 0's clock: rank r's times gain skew(r) - skew(0).
    EXPECT_NEAR(c.offset_s, skew(c.rank) - skew(0), 1e-12) << c.rank;
    EXPECT_NEAR(c.spread_s, 0.0, 1e-12) << c.rank;
  }
  // The shifted step is the true one moved as a whole, and starts at 0 or later.
  double move = std::numeric_limits<double>::quiet_NaN();
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const double d = ops[i].start_s - s.r.ops[i].start_s;
    if (std::isnan(move)) move = d;
    EXPECT_NEAR(d, move, 1e-12) << i;
    EXPECT_GE(ops[i].start_s, 0.0) << i;
  }
}

TEST(RankClocks, PipelineStagesJoinThroughTheirTransfers) {
  const Simulated s = testing::simulate_tiny(2, 2, 1, true);
  std::vector<OpRecord> ops = skewed(s.r.ops);
  const std::vector<RankClock> clocks = align_rank_clocks(s.w, ops);
  ASSERT_EQ(clocks.size(), 4u);
  int transfers = 0;
  for (const RankClock& c : clocks) transfers += c.by == "pipeline transfers";
  EXPECT_EQ(transfers, 1);  // one stage-1 rank; its TP partner follows through their collectives
  // With one clock: every receive, either way, ends no earlier than its send started.
  std::map<std::pair<int, int>, const OpRecord*> at;
  for (const OpRecord& o : ops) at[{o.rank, o.op}] = &o;
  int pairs = 0;
  for (const OpRecord& o : ops) {
    const Op& op = op_of(s.w, o);
    if (op.kind != OpKind::kSend) continue;
    const auto recv = at.find({s.w.counterpart(o.rank, op.peer_stage), op.match});
    ASSERT_NE(recv, at.end());
    EXPECT_GE(recv->second->end_s - o.start_s, -1e-12) << o.rank << " " << o.op;
    ++pairs;
  }
  EXPECT_GT(pairs, 0);
  // The offset across the stages is the middle of the two directions' bounds: the true one is
  // within the reported spread of it.
  for (const RankClock& c : clocks)
    if (c.by == "pipeline transfers") {
      EXPECT_GT(c.spread_s, 0);
      EXPECT_LE(std::abs(c.offset_s - (skew(c.rank) - skew(0))), c.spread_s + 1e-12) << c.rank;
    }
  // Within each stage the collectives' members end together.
  for (const OpRecord& o : ops) {
    const Op& op = op_of(s.w, o);
    if (op.kind != OpKind::kCollective || op.group != GroupKind::kTp) continue;
    for (int m : s.w.group_members(o.rank, GroupKind::kTp))
      EXPECT_NEAR(at.at({m, o.op})->end_s, o.end_s, 1e-12) << o.rank << " " << o.op;
  }
}

TEST(RankClocks, ARankJoinedToNoOtherKeepsItsClock) {
  const Simulated s = testing::simulate_tiny(1, 1, 2, true);
  std::vector<OpRecord> ops;
  for (const OpRecord& o : s.r.ops)  // rank 1 without its collectives: nothing joins it to rank 0
    if (o.rank == 0 || op_of(s.w, o).kind != OpKind::kCollective) ops.push_back(o);
  const std::vector<OpRecord> before = ops;
  const std::vector<RankClock> clocks = align_rank_clocks(s.w, ops);
  ASSERT_EQ(clocks.size(), 2u);
  EXPECT_EQ(clocks[1].by, "none");
  EXPECT_EQ(clocks[1].offset_s, 0.0);
  for (std::size_t i = 0; i < ops.size(); ++i) EXPECT_EQ(ops[i].start_s, before[i].start_s);
  std::vector<OpRecord> none;
  EXPECT_TRUE(align_rank_clocks(s.w, none).empty());
}

}  // namespace
}  // namespace foresight

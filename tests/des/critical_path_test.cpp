// The critical path of a simulated step: an unbroken chain from the step's start to its last end,
// through the pipeline's sends, and a trace that marks it.
#include "sim/des/critical_path.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <vector>

#include "sim/des/trace.h"
#include "sim/spec/json_reader.h"
#include "tests/des/simulated_tiny.h"
#include "tests/test_util.h"

namespace foresight {
namespace {

using testing::Simulated;

// Each op on the path starts no earlier than the one before it ends; the path ends with the step's
// last op; its compute, communication and waiting add up to that end; with two pipeline stages it
// crosses both, through a receive whose send is on the path just before it.
void expect_chain(const Simulated& s, int stages) {
  const CriticalPath p = critical_path(s.w, s.r);
  ASSERT_FALSE(p.ops.empty());
  double last = 0;
  for (const OpRecord& o : s.r.ops) last = std::max(last, o.end_s);
  EXPECT_DOUBLE_EQ(p.end_s, last);
  EXPECT_DOUBLE_EQ(s.r.ops[p.ops.back()].end_s, last);
  const double eps = 1e-9 * last;
  std::set<int> path_stages;
  bool recv_after_send = false;
  for (std::size_t k = 0; k < p.ops.size(); ++k) {
    const OpRecord& o = s.r.ops[p.ops[k]];
    path_stages.insert(o.stage);
    if (k == 0) continue;
    const OpRecord& prev = s.r.ops[p.ops[k - 1]];
    EXPECT_GE(o.start_s, prev.end_s - eps) << k;
    const Op& op = s.w.stages[o.stage].graph()[o.op];
    const Op& prev_op = s.w.stages[prev.stage].graph()[prev.op];
    if (op.kind == OpKind::kRecv && prev_op.kind == OpKind::kSend && prev.stage != o.stage)
      recv_after_send = true;
  }
  EXPECT_NEAR(p.compute_s + p.communication_s + p.waiting_s, last, 1e-9 * last);
  EXPECT_GT(p.compute_s, 0.5 * last);
  EXPECT_EQ(static_cast<int>(path_stages.size()), stages);
  if (stages > 1) {
    EXPECT_TRUE(recv_after_send);
  }
}

TEST(CriticalPath, UnbrokenChainThroughThePipeline) {
  expect_chain(testing::simulate_tiny(1, 2, 1, true), 2);
  expect_chain(testing::simulate_tiny(2, 2, 2, false), 2);  // symmetric: one rank per stage simulated
  expect_chain(testing::simulate_tiny(2, 1, 2, true), 1);
  // Records in any order (not the order ops ended): the same path.
  Simulated s = testing::simulate_tiny(1, 2, 1, true);
  auto keys = [](const Simulated& x, const CriticalPath& p) {
    std::vector<std::tuple<int, int, int>> k;
    for (std::size_t i : p.ops) k.emplace_back(x.r.ops[i].rank, x.r.ops[i].stage, x.r.ops[i].op);
    return k;
  };
  const auto in_order = keys(s, critical_path(s.w, s.r));
  Simulated reversed = testing::simulate_tiny(1, 2, 1, true);
  std::reverse(reversed.r.ops.begin(), reversed.r.ops.end());
  EXPECT_EQ(keys(reversed, critical_path(reversed.w, reversed.r)), in_order);
  // Without op records there is no path.
  s.r.ops.clear();
  EXPECT_TRUE(critical_path(s.w, s.r).ops.empty());
}

// The trace marks the path's ops and links them with flow arrows; its metadata sums the path up.
TEST(CriticalPath, TraceMarksItsOpsAndArrows) {
  const Simulated s = testing::simulate_tiny(1, 2, 1, true);
  const CriticalPath p = critical_path(s.w, s.r);
  const std::string path = testing::test_temp_path("critical.json").string();
  ASSERT_TRUE(write_chrome_trace(path, s.w, s.r, "predicted").ok());
  auto doc = read_json_file(path);
  ASSERT_TRUE(doc.ok()) << doc.error().message();
  std::size_t marked = 0, starts = 0, finishes = 0;
  for (const auto& e : (*doc)["traceEvents"]) {
    if (e["ph"] == "X" && e["args"].value("critical", 0) == 1) ++marked;
    if (e["ph"] == "s") ++starts;
    if (e["ph"] == "f") ++finishes;
  }
  EXPECT_EQ(marked, p.ops.size());
  EXPECT_EQ(starts, p.ops.size() - 1);
  EXPECT_EQ(finishes, p.ops.size() - 1);
  const auto& meta = (*doc)["metadata"]["critical_path"];
  EXPECT_EQ(meta["ops"], p.ops.size());
  EXPECT_NEAR(meta["compute_s"].get<double>(), p.compute_s, 1e-12);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace foresight

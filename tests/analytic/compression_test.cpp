// Gradient compression: ratios by hand per scheme, its effect on the data-parallel reduction in
// the analytic model and the simulator, the plan checks, and the convergence penalty.
#include "sim/analytic/compression.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "sim/analytic/analytic_model.h"
#include "sim/analytic/economics.h"
#include "sim/des/simulator.h"
#include "tests/test_util.h"

namespace foresight {
namespace {

Plan with(GradCompression c, double topk = 0.01, int rank = 4) {
  Plan p = testing::make_plan(1, 1, 256, 1, 512);
  p.zero_stage = 1;
  p.recompute = Recompute::kFull;
  p.grad_compression = c;
  p.compression_topk = topk;
  p.compression_rank = rank;
  return p;
}

TEST(Compression, RatiosByHand) {
  ModelSpec m;
  m.hidden = 4096;
  const double P = 1e9, g = 4;  // fp32 gradients
  // int8: one byte per element and a 4-byte scale per block of 256 elements.
  const CompressionCost i8 = compression_cost(with(GradCompression::kInt8), m, P, g, 64);
  EXPECT_DOUBLE_EQ(i8.ratio, 4 / (1 + 4.0 / 256));
  EXPECT_FALSE(i8.gather);
  EXPECT_DOUBLE_EQ(i8.wire_bytes, P * (1 + 4.0 / 256));
  // top-k 1%: a value and a 4-byte index per kept element, all-gathered from 64 ranks.
  const CompressionCost tk = compression_cost(with(GradCompression::kTopK, 0.01), m, P, g, 64);
  EXPECT_DOUBLE_EQ(tk.ratio, 4 / (0.01 * 8));
  EXPECT_TRUE(tk.gather);
  EXPECT_DOUBLE_EQ(tk.wire_bytes, 64 * 0.01 * P * 8);
  // PowerSGD rank 4 on h = 4096: 2 r / h of the dense bytes, and 4 r FLOPs per element.
  const CompressionCost ps = compression_cost(with(GradCompression::kPowerSgd, 0.01, 4), m, P, g, 64);
  EXPECT_DOUBLE_EQ(ps.ratio, 4096.0 / 8);
  EXPECT_DOUBLE_EQ(ps.kernel_flops, 16 * P);
  // Four stages at 0.1%: 8-bit values and log2(1000) + log2(e) bits of entropy-coded index each:
  // 32 / (0.001 * 19.41) = 1,648:1 -- the articles' 1000:1 at 0.1% sparsity.
  const CompressionCost fs = compression_cost(with(GradCompression::kFourStage, 0.001), m, P, g, 64);
  const double bits = 8 + std::log2(1000.0) + std::log2(std::exp(1.0));
  EXPECT_NEAR(fs.ratio, 32 / (0.001 * bits), 1e-6);
  EXPECT_GT(fs.ratio, 1000);
  // None: the dense all-reduce.
  const CompressionCost none = compression_cost(with(GradCompression::kNone), m, P, g, 64);
  EXPECT_DOUBLE_EQ(none.wire_bytes, P * g);
  EXPECT_DOUBLE_EQ(none.kernel_bytes, 0);
}

// A data-parallel job on the 100 GbE two-tier preset: int8 cuts the DP time, the cut is the
// smaller all-reduce minus the kernels, and the simulator runs the same compressed graph.
TEST(Compression, ShrinksTheDataParallelReduction) {
  const ModelSpec m = testing::preset_model("llama3-8b");
  const ClusterSpec c = testing::preset_cluster("two-tier-ib-eth", 256);
  const AnalyticModel am(m, c);
  const Prediction dense = am.evaluate(with(GradCompression::kNone));
  const Prediction i8 = am.evaluate(with(GradCompression::kInt8));
  EXPECT_LT(i8.time.dp_comm, 0.8 * dense.time.dp_comm);
  EXPECT_DOUBLE_EQ(i8.time.compute, dense.time.compute);
  auto w = lower(m, c, with(GradCompression::kInt8));
  ASSERT_TRUE(w.ok()) << w.error().message();
  const OpGraph& g = w->stages[0].graph();
  int compress = 0, decompress = 0;
  double wire = 0;
  for (auto v : boost::make_iterator_range(boost::vertices(g))) {
    const std::string name = g[v].name;
    if (name == "grad_compress") ++compress;
    if (name == "grad_decompress") ++decompress;
    if (name == "grad_reduce") wire = g[v].bytes;
  }
  EXPECT_EQ(compress, 1);
  EXPECT_EQ(decompress, 1);
  EXPECT_NEAR(wire, layer_params_per_device(m, false, 1, 1) * m.layers, 0.2 * wire);  // ~1 byte per parameter
  auto sd = simulate(m, c, with(GradCompression::kNone), "plan", {});
  auto si = simulate(m, c, with(GradCompression::kInt8), "plan", {});
  ASSERT_TRUE(sd.ok() && si.ok());
  EXPECT_LT(si->prediction.step_time_s, sd->prediction.step_time_s);
  // With per-layer overlap, the decompression waits for the step's end: no stall mid-backward.
  Plan o = with(GradCompression::kTopK);
  o.overlap_grad_reduce = true;
  auto so = simulate(m, c, o, "plan", {});
  ASSERT_TRUE(so.ok()) << so.error().message();
}

TEST(Compression, PlanChecksAndJson) {
  const ModelSpec m = testing::preset_model("llama3-8b");
  Plan p = with(GradCompression::kTopK, 0.05);
  p.compression_penalty = 0.03;
  auto back = plan_from_json(plan_to_json(p), "x.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, p);
  p.zero_stage = 3;
  Status s = validate_plan(p, m, 0, "plan.json");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("plan.json: /grad_compression: needs zero_stage 0, 1 or 2"),
            std::string::npos);
  nlohmann::json j = plan_to_json(with(GradCompression::kNone));
  j["grad_compression"] = "zip";
  auto bad = plan_from_json(j, "x.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("is not one of: none, int8, topk, powersgd, four-stage"),
            std::string::npos);
}

// A scheme that converges 3% slower needs 3% more steps to the same token budget.
TEST(Compression, PenaltyLengthensTimeToTrain) {
  const ModelSpec m = testing::preset_model("llama3-8b");
  const ClusterSpec c = testing::preset_cluster("two-tier-ib-eth", 256);
  Plan p = with(GradCompression::kFourStage, 0.001);
  const Prediction pred = AnalyticModel(m, c).evaluate(p);
  CostOptions o;
  o.tokens = 1e12;
  const Economics base = economics(pred, c, p, m.seq_len, o);
  p.compression_penalty = 0.03;
  const Economics slow = economics(pred, c, p, m.seq_len, o);
  EXPECT_NEAR(slow.steps / base.steps, 1.03, 1e-4);
  EXPECT_NEAR(slow.time_to_train_s / base.time_to_train_s, 1.03, 1e-4);
}

}  // namespace
}  // namespace foresight

// Data loading: the bytes and seconds of one step's input by hand, the stall with and without
// prefetch in the analytic model and the simulator, and the plan's "data" object.
#include "sim/analytic/data_loading.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "sim/analytic/analytic_model.h"
#include "sim/des/simulator.h"
#include "tests/test_util.h"

namespace foresight {
namespace {

TEST(DataLoading, BytesAndSecondsByHand) {
  const ModelSpec m = testing::preset_model("llama3-8b");  // 128,256 entries: 4-byte token ids
  ClusterSpec c = testing::preset_cluster("dgx-h100-ndr", 64);
  c.storage_bandwidth = 10e9;
  Plan p = testing::make_plan(1, 1, 64, 1, 512);
  EXPECT_DOUBLE_EQ(sample_bytes(m, p), 8192.0 * 4);
  p.data.sample_bytes = 2e6;
  p.data.compression = "lz4";
  p.data.compression_ratio = 2;
  p.data.decompress_rate = 1e9;
  p.data.loader_cores = 4;
  p.data.cached_fraction = 0.25;
  const DataLoadCost d = data_load_cost(m, c, p);
  EXPECT_DOUBLE_EQ(d.raw_bytes, 512 * 2e6);
  EXPECT_DOUBLE_EQ(d.read_bytes, 512 * 2e6 / 2 * 0.75);
  EXPECT_EQ(d.loader_nodes, 8);
  EXPECT_DOUBLE_EQ(d.storage_s, 512 * 2e6 / 2 * 0.75 / 10e9);
  EXPECT_DOUBLE_EQ(d.cpu_s, 512 * 2e6 / 8 / (4 * 1e9));         // each node decodes its share on 4 cores
  EXPECT_DOUBLE_EQ(d.seconds, std::max(d.storage_s, d.cpu_s));  // prefetch: the stages overlap
  EXPECT_DOUBLE_EQ(input_stall(d, p, 1.0), 0.0);
  EXPECT_DOUBLE_EQ(input_stall(d, p, 0.01), d.seconds - 0.01);
  p.data.prefetch = 0;
  const DataLoadCost sync = data_load_cost(m, c, p);
  EXPECT_DOUBLE_EQ(sync.seconds, sync.storage_s + sync.cpu_s);
  EXPECT_DOUBLE_EQ(input_stall(sync, p, 1.0), sync.seconds);
  // Only the nodes of the first pipeline stage load: with pp 4 that is a quarter of them.
  Plan q = testing::make_plan(1, 4, 16, 1, 512);
  EXPECT_EQ(data_load_cost(m, c, q).loader_nodes, 2);
}

// A slow filer and large samples: loading in the loop adds its whole time, prefetch hides all but
// what exceeds the step, and the simulator, delivering micro-batches on its loader stream, agrees.
TEST(DataLoading, StallInBothExecutors) {
  const ModelSpec m = testing::preset_model("llama3-8b");
  ClusterSpec c = testing::preset_cluster("dgx-h100-ndr", 64);
  c.storage_bandwidth = 5e9;
  Plan p = testing::make_plan(1, 1, 64, 1, 256);
  p.zero_stage = 1;
  p.recompute = Recompute::kFull;
  const Prediction none = AnalyticModel(m, c).evaluate(p);
  EXPECT_LT(none.time.data, 1e-3);   // token ids: a few MB per step
  for (double mb : {10.0, 200.0}) {  // loader slower than the step only at 200 MB per sample
    for (int prefetch : {0, 2}) {
      Plan q = p;
      q.data.sample_bytes = mb * 1e6;
      q.data.prefetch = prefetch;
      const double load = data_load_cost(m, c, q).seconds;
      const Prediction a = AnalyticModel(m, c).evaluate(q);
      const double expect = prefetch == 0 ? load : std::max(0.0, load - none.step_time_s);
      EXPECT_NEAR(a.time.data, expect, 1e-9) << mb << " MB, prefetch " << prefetch;
      EXPECT_NEAR(a.step_time_s, none.step_time_s + expect, 1e-9);
      auto d = simulate(m, c, q, "plan", {});
      ASSERT_TRUE(d.ok()) << d.error().message();
      if (prefetch > 0 && expect > 0) {
        // Loader-bound: the simulated step starts with an empty buffer, so it also waits for the
        // last micro-batch's pass and the step's tail, which a steady state overlaps with the next
        // step's loading (the analytic max(load, step)).
        EXPECT_GE(d->prediction.step_time_s, a.step_time_s * 0.999);
        EXPECT_LT(d->prediction.step_time_s, a.step_time_s * 1.15) << mb << " MB";
      } else {
        EXPECT_NEAR(d->prediction.step_time_s, a.step_time_s, 0.02 * a.step_time_s)
            << mb << " MB, prefetch " << prefetch;
      }
      if (expect > 0.1 * a.step_time_s) {
        EXPECT_GT(d->prediction.time.data, 0.5 * expect);
      }
    }
  }
}

TEST(DataLoading, PlanJsonAndErrors) {
  Plan p = testing::make_plan(1, 1, 8, 1, 64);
  auto lz4 = plan_from_json(
      nlohmann::json{{"global_batch", 64},
                     {"data", {{"compression", "lz4"}, {"sample_bytes", "150KB"}, {"prefetch", 0}}}},
      "plan.json");
  ASSERT_TRUE(lz4.ok()) << lz4.error().message();
  EXPECT_DOUBLE_EQ(lz4->data.compression_ratio, 2.084);
  EXPECT_DOUBLE_EQ(lz4->data.decompress_rate, 1.82e9);
  EXPECT_DOUBLE_EQ(lz4->data.sample_bytes, 150e3);
  EXPECT_EQ(lz4->data.prefetch, 0);
  auto back = plan_from_json(plan_to_json(*lz4), "x.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->data, lz4->data);
  auto bad =
      plan_from_json(nlohmann::json{{"global_batch", 64}, {"data", {{"compression", "zip"}}}}, "plan.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("/data/compression"), std::string::npos) << bad.error().message();
  bad =
      plan_from_json(nlohmann::json{{"global_batch", 64}, {"data", {{"compression_ratio", 3}}}}, "plan.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("decompress_rate"), std::string::npos) << bad.error().message();
  bad =
      plan_from_json(nlohmann::json{{"global_batch", 64}, {"data", {{"cached_fraction", 1.5}}}}, "plan.json");
  ASSERT_FALSE(bad.ok());
  (void)p;
}

}  // namespace
}  // namespace foresight

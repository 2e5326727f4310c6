// A device with cache levels (calibrated CPU profiles): a plan whose working set per device
// (weights, gradients, activations, buffers) fits a level runs at the smallest such level's rates,
// a larger one at the memory rates, in both executors alike; the optimizer finds its state in a
// level only when the whole state fits there.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "sim/analytic/analytic_model.h"
#include "sim/spec/hardware.h"
#include "tests/engines.h"
#include "tests/test_util.h"

namespace foresight {
namespace {

ClusterSpec cpu_with_cache(double cache_bytes) {
  ClusterSpec c = testing::preset_cluster("cpu-local", 2);
  DeviceSpec& d = c.node.devices[0].device;
  d.caches = {CacheLevel{cache_bytes, std::min(1.0, 1.25 * d.gemm_efficiency), 2 * d.memory_bandwidth, 0, 0}};
  return c;
}

TEST(CacheLevel, TheModelStateDecidesTheRates) {
  const ModelSpec tiny = testing::preset_model("tiny");
  const Plan p = testing::make_plan(1, 1, 2, 1, 8);
  const ClusterSpec small_cache = cpu_with_cache(1e3), large_cache = cpu_with_cache(1e9);
  const DeviceSpec& base = small_cache.node.devices[0].device;
  // The tiny model's state does not fit 1 kB: memory rates; it fits 1 GB: cache rates.
  const DeviceSpec cold = cluster_for_plan(tiny, small_cache, p).node.devices[0].device;
  const DeviceSpec warm = cluster_for_plan(tiny, large_cache, p).node.devices[0].device;
  EXPECT_EQ(cold.gemm_efficiency, base.gemm_efficiency);
  EXPECT_EQ(cold.memory_bandwidth, base.memory_bandwidth);
  EXPECT_EQ(warm.gemm_efficiency, base.caches[0].gemm_efficiency);
  EXPECT_EQ(warm.memory_bandwidth, base.caches[0].memory_bandwidth);
  EXPECT_TRUE(cold.caches.empty());  // resolved: no cache level left
  EXPECT_TRUE(warm.caches.empty());
  EXPECT_FALSE(has_per_plan_rates(cluster_for_plan(tiny, large_cache, p)));
  // The analytic model resolves per plan: faster with the cache, and the simulator agrees.
  const Prediction a_cold = AnalyticModel(tiny, small_cache).evaluate(p);
  const Prediction a_warm = AnalyticModel(tiny, large_cache).evaluate(p);
  EXPECT_LT(a_warm.time.compute, 0.9 * a_cold.time.compute);
  testing::expect_engines_agree(tiny, small_cache, p, 0.05, "memory rates");
  testing::expect_engines_agree(tiny, large_cache, p, 0.05, "cache rates");
}

// Two or three levels: the kernels take the smallest level that holds the working set; the
// optimizer reads its state from the smallest level that holds the whole state (one with AdamW's
// rate first), else from memory at its own rate, whatever level the kernels run in.
// The tiny model's serial plan on the CPU preset, with its working set and whole state per device.
struct TinyOnCpu {
  ModelSpec model = testing::preset_model("tiny");
  Plan plan = testing::make_plan(1, 1, 2, 1, 8);
  ClusterSpec cluster = testing::preset_cluster("cpu-local", 2);
  double working = 0, state = 0;
  TinyOnCpu() {
    const MemoryBreakdown mem = AnalyticModel(model, cluster).memory(plan);
    working = mem.weights + mem.gradients + mem.activations + mem.buffers;
    state = mem.total - mem.reserved;
  }
};

TEST(CacheLevel, TheSmallestLevelHoldingTheWorkingSetSetsTheKernelRates) {
  const TinyOnCpu t;
  const ModelSpec& tiny = t.model;
  const Plan& p = t.plan;
  const ClusterSpec& c = t.cluster;
  const DeviceSpec base = c.node.devices[0].device;
  const double working = t.working, state = t.state;
  ASSERT_GT(working, 0);
  ASSERT_LT(working, 0.9 * state);  // the optimizer's state is the difference
  auto with = [&](std::vector<CacheLevel> levels, double optimizer_efficiency = 0.5) {
    ClusterSpec out = c;
    out.node.devices[0].device.caches = std::move(levels);
    out.node.devices[0].device.optimizer_efficiency = optimizer_efficiency;
    out.node.fabric.cold_bandwidth = out.node.fabric.bandwidth / 4;
    return out;
  };
  const CacheLevel too_small{0.5 * working, 0.99, 9e10, 0, 0}, inner{working, 0.95, 6e10, 3e10, 1e10, 1e-10},
      outer{state, 0.9, 4e10, 2e10, 5e9, 0, 3e10};
  {  // the working set fits the middle level, the state the outer one
    const ClusterSpec r = cluster_for_plan(tiny, with({too_small, inner, outer}), p);
    const DeviceSpec& d = r.node.devices[0].device;
    EXPECT_EQ(d.gemm_efficiency, inner.gemm_efficiency);
    EXPECT_EQ(d.memory_bandwidth, inner.memory_bandwidth);
    EXPECT_EQ(d.gemm_weight_fwd_bandwidth, inner.gemm_weight_fwd_bandwidth);
    EXPECT_EQ(d.gemm_weight_bwd_bandwidth, inner.gemm_weight_bwd_bandwidth);
    EXPECT_EQ(d.activation_element_s, inner.activation_element_s);
    // AdamW's own rate in the level (without one, the level's streaming rate: TheModelStateDecidesTheRates).
    EXPECT_NEAR(d.optimizer_efficiency * d.memory_bandwidth, outer.optimizer_bandwidth,
                1e-6 * outer.optimizer_bandwidth);
    EXPECT_EQ(r.node.fabric.cold_bandwidth, 0);
    EXPECT_TRUE(d.caches.empty());
  }
  {  // the state passes the outer level: the optimizer and the gradient reduction from memory
    CacheLevel almost = outer;
    almost.bytes = 0.99 * state;
    const ClusterSpec r = cluster_for_plan(tiny, with({inner, almost}), p);
    const DeviceSpec& d = r.node.devices[0].device;
    EXPECT_EQ(d.gemm_efficiency, inner.gemm_efficiency);
    EXPECT_NEAR(d.optimizer_efficiency * d.memory_bandwidth, 0.5 * base.memory_bandwidth,
                1e-6 * base.memory_bandwidth);
    EXPECT_EQ(r.node.fabric.cold_bandwidth, c.node.fabric.bandwidth / 4);
  }
  {  // two levels hold the state: the smaller one without AdamW's rate is passed over for the one
     // with it; without a rate anywhere, the smallest holding it at its streaming rate
    CacheLevel holds_no_rate = outer;
    holds_no_rate.optimizer_bandwidth = 0;
    CacheLevel larger = outer;
    larger.bytes = 2 * state;
    larger.optimizer_bandwidth = 2e10;
    const DeviceSpec d =
        cluster_for_plan(tiny, with({inner, holds_no_rate, larger}), p).node.devices[0].device;
    EXPECT_NEAR(d.optimizer_efficiency * d.memory_bandwidth, larger.optimizer_bandwidth,
                1e-6 * larger.optimizer_bandwidth);
    larger.optimizer_bandwidth = 0;
    const DeviceSpec e =
        cluster_for_plan(tiny, with({inner, holds_no_rate, larger}), p).node.devices[0].device;
    EXPECT_NEAR(e.optimizer_efficiency * e.memory_bandwidth, holds_no_rate.memory_bandwidth,
                1e-6 * holds_no_rate.memory_bandwidth);
  }
  {  // no level holds the working set: the memory rates
    const ClusterSpec r = cluster_for_plan(tiny, with({too_small}), p);
    const DeviceSpec& d = r.node.devices[0].device;
    EXPECT_EQ(d.gemm_efficiency, base.gemm_efficiency);
    EXPECT_EQ(d.memory_bandwidth, base.memory_bandwidth);
    EXPECT_EQ(d.optimizer_efficiency, 0.5);
  }
  // The analytic model and the simulator price the resolved levels alike.
  testing::expect_engines_agree(tiny, with({too_small, inner, outer}), p, 0.05, "three levels");
  EXPECT_LT(AnalyticModel(tiny, with({too_small, inner, outer})).evaluate(p).time.compute,
            AnalyticModel(tiny, with({too_small})).evaluate(p).time.compute);
}

TEST(CacheLevel, ProfileJsonRoundTripsAndChecksTheSize) {
  DeviceSpec d = cpu_with_cache(8 << 20).node.devices[0].device;
  const nlohmann::json j = device_to_json(d);
  ASSERT_TRUE(j.contains("cache"));
  auto back = device_from_json(j, "dev.json", "");
  ASSERT_TRUE(back.ok()) << back.error().message();
  ASSERT_EQ(back->caches.size(), 1u);
  EXPECT_NEAR(back->caches[0].bytes, d.caches[0].bytes, 1e-6 * d.caches[0].bytes);
  EXPECT_NEAR(back->caches[0].memory_bandwidth, d.caches[0].memory_bandwidth,
              1e-6 * d.caches[0].memory_bandwidth);
  EXPECT_DOUBLE_EQ(back->caches[0].gemm_efficiency, d.caches[0].gemm_efficiency);
  nlohmann::json bad = j;
  bad["cache"]["size"] = "0B";
  auto refused = device_from_json(bad, "dev.json", "");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message().find("dev.json: /cache/size"), std::string::npos)
      << refused.error().message();
  // Two levels: an array, smallest first.
  DeviceSpec two = d;
  two.caches.insert(two.caches.begin(), CacheLevel{1 << 20, 0.95, 60e9, 30e9, 10e9, 0.2e-9, 25e9});
  const nlohmann::json j2 = device_to_json(two);
  ASSERT_TRUE(j2["cache"].is_array());
  auto back2 = device_from_json(j2, "dev.json", "");
  ASSERT_TRUE(back2.ok()) << back2.error().message();
  ASSERT_EQ(back2->caches.size(), 2u);
  EXPECT_NEAR(back2->caches[0].bytes, 1 << 20, 1);
  EXPECT_NEAR(back2->caches[0].gemm_weight_bwd_bandwidth, 10e9, 1e3);
  EXPECT_NEAR(back2->caches[0].activation_element_s, 0.2e-9, 1e-18);
  EXPECT_NEAR(back2->caches[0].optimizer_bandwidth, 25e9, 1e3);
  EXPECT_NEAR(back2->caches[1].bytes, 8 << 20, 1);
  EXPECT_EQ(back2->caches[0].span, 0);  // none given: measured over its whole size
  // The span measured, where smaller than the level; larger is refused.
  two.caches[0].span = 512 << 10;
  auto back3 = device_from_json(device_to_json(two), "dev.json", "");
  ASSERT_TRUE(back3.ok()) << back3.error().message();
  EXPECT_NEAR(back3->caches[0].span, 512 << 10, 1);
  nlohmann::json wide = device_to_json(two);
  wide["cache"][0]["span"] = "2MiB";
  auto refused3 = device_from_json(wide, "dev.json", "");
  ASSERT_FALSE(refused3.ok());
  EXPECT_NE(
      refused3.error().message().find("dev.json: /cache/0/span: must be between 0 and the level's size"),
      std::string::npos)
      << refused3.error().message();
  nlohmann::json unordered = j2;
  std::swap(unordered["cache"][0], unordered["cache"][1]);
  auto refused2 = device_from_json(unordered, "dev.json", "");
  ASSERT_FALSE(refused2.ok());
  EXPECT_NE(refused2.error().message().find("dev.json: /cache/1/size: must be larger than the level before"),
            std::string::npos)
      << refused2.error().message();
  // Without a cache object, none (every preset).
  EXPECT_FALSE(has_per_plan_rates(testing::preset_cluster("dgx-h100-ndr", 8)));
}

// A working set past the span a level was measured over (a calibrated L2's: half the L2) runs at
// rates blended toward the next level's, as times per unit of work, in proportion to how far it
// reaches from the span to the level's size; past the last level's span, toward the memory rates.
TEST(CacheLevel, PastTheMeasuredSpanTheRatesBlendTowardTheNextLevel) {
  const TinyOnCpu t;
  const double working = t.working, memory_bandwidth = t.cluster.node.devices[0].device.memory_bandwidth;
  const CacheLevel inner{2 * working, 0.95, 6e10, 3e10, 0, 1e-10, 0, 0.5 * working},
      outer{4 * working, 0.8, 3e10, 1e10, 5e9, 2e-10};
  auto resolved = [&](std::vector<CacheLevel> levels) {
    ClusterSpec out = t.cluster;
    out.node.devices[0].device.caches = std::move(levels);
    return cluster_for_plan(t.model, out, t.plan).node.devices[0].device;
  };
  const double f = 1.0 / 3;  // (working - span) / (size - span)
  const DeviceSpec d = resolved({inner, outer});
  EXPECT_NEAR(1 / d.gemm_efficiency, (1 - f) / 0.95 + f / 0.8, 1e-12);
  EXPECT_NEAR(1 / d.memory_bandwidth, (1 - f) / 6e10 + f / 3e10, 1e-24);
  EXPECT_NEAR(1 / d.gemm_weight_fwd_bandwidth, (1 - f) / 3e10 + f / 1e10, 1e-24);
  EXPECT_NEAR(1 / d.gemm_weight_bwd_bandwidth, f / 5e9, 1e-24);  // the inner level has no such pass
  EXPECT_NEAR(d.activation_element_s, (1 - f) * 1e-10 + f * 2e-10, 1e-22);
  // The last level: toward the device's memory rates.
  const DeviceSpec last = resolved({inner});
  EXPECT_NEAR(1 / last.gemm_efficiency, (1 - f) / 0.95 + f / t.cluster.node.devices[0].device.gemm_efficiency,
              1e-12);
  EXPECT_NEAR(1 / last.memory_bandwidth, (1 - f) / 6e10 + f / memory_bandwidth, 1e-3 / memory_bandwidth);
  // Within the span: the level's own rates.
  CacheLevel measured_over_all = inner;
  measured_over_all.span = working;
  EXPECT_EQ(resolved({measured_over_all, outer}).gemm_efficiency, 0.95);
  // Both engines price the blend alike, and `run` says what the prediction took.
  ClusterSpec both = t.cluster;
  both.node.devices[0].device.caches = {inner, outer};
  testing::expect_engines_agree(t.model, both, t.plan, 0.05, "blended levels");
  const std::string said = cache_levels_taken(t.model, both, t.plan);
  EXPECT_NE(said.find("cache level's rates, 33% of the way to the "), std::string::npos) << said;
  EXPECT_NE(said.find("the optimizer in the "), std::string::npos)
      << said;  // the outer level holds the state
  ClusterSpec none = t.cluster;
  none.node.devices[0].device.caches = {CacheLevel{0.5 * working, 0.95, 6e10}};
  const std::string memory = cache_levels_taken(t.model, none, t.plan);
  EXPECT_NE(memory.find("the memory rates (past the "), std::string::npos) << memory;
  EXPECT_NE(memory.find("the optimizer from memory"), std::string::npos) << memory;
  EXPECT_EQ(cache_levels_taken(t.model, t.cluster, t.plan), "");  // no cache level: nothing to say
}

// The optimizer's state out of the cache runs at optimizer_efficiency x the streaming rate (a
// calibrated CPU's AdamW); a plan whose data fits the cache finds that state there too.
TEST(CacheLevel, TheOptimizerRunsAtItsOwnRate) {
  const ModelSpec tiny = testing::preset_model("tiny");
  const Plan p = testing::make_plan(1, 1, 2, 1, 8);
  ClusterSpec slow = cpu_with_cache(1e3), base = slow;
  slow.node.devices[0].device.optimizer_efficiency = 0.5;
  const Prediction a = AnalyticModel(tiny, base).evaluate(p), b = AnalyticModel(tiny, slow).evaluate(p);
  ASSERT_GT(a.time.optimizer, 0);
  EXPECT_NEAR(b.time.optimizer, 2 * a.time.optimizer, 1e-9 * a.time.optimizer);
  EXPECT_NEAR(b.time.total - a.time.total, a.time.optimizer, 1e-9 * a.time.total);
  testing::expect_engines_agree(tiny, slow, p, 0.05, "optimizer at half the streaming rate");
  ClusterSpec warm = cpu_with_cache(1e9);
  warm.node.devices[0].device.optimizer_efficiency = 0.5;
  EXPECT_EQ(cluster_for_plan(tiny, warm, p).node.devices[0].device.optimizer_efficiency,
            1.0);  // the level's own rate
  // In the profile: efficiency.optimizer, written only where it is not 1 (every preset's is 1).
  const DeviceSpec& d = slow.node.devices[0].device;
  nlohmann::json j = device_to_json(d);
  EXPECT_EQ(j["efficiency"]["optimizer"], 0.5);
  auto back = device_from_json(j, "dev.json", "");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->optimizer_efficiency, 0.5);
  EXPECT_FALSE(device_to_json(base.node.devices[0].device)["efficiency"].contains("optimizer"));
  j["efficiency"]["optimizer"] = 0;
  auto refused = device_from_json(j, "dev.json", "");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message().find("dev.json: /efficiency/optimizer"), std::string::npos)
      << refused.error().message();
}

// ZeRO-1 reduces the gradients with a reduce-scatter: where the fabric has the reduce-scatter's own
// rates (a calibrated MPI's), both engines take them, and its own cold bandwidth after the backward.
TEST(CacheLevel, TheZeroReduceScatterTakesItsOwnRates) {
  const ModelSpec small = testing::preset_model("small");
  const ClusterSpec hot = testing::preset_cluster("cpu-local", 2);
  ClusterSpec own = hot, own_cold = hot;
  own.node.fabric.reduce_scatter.bandwidth = hot.node.fabric.bandwidth / 2;
  own_cold.node.fabric.reduce_scatter = own.node.fabric.reduce_scatter;
  own_cold.node.fabric.reduce_scatter.cold_bandwidth = hot.node.fabric.bandwidth / 8;
  Plan z1 = testing::make_plan(1, 1, 2, 1, 8);
  z1.precision = Precision::kFp32;
  z1.zero_stage = 1;
  const double a_hot = AnalyticModel(small, hot).evaluate(z1).time.dp_comm,
               a_own = AnalyticModel(small, own).evaluate(z1).time.dp_comm,
               a_cold = AnalyticModel(small, own_cold).evaluate(z1).time.dp_comm;
  ASSERT_GT(a_hot, 0);
  EXPECT_GT(a_own, 1.3 * a_hot);   // the reduce-scatter's half of the bandwidth term x2
  EXPECT_GT(a_cold, 2.5 * a_own);  // and x4 again, cold
  const double d_hot = testing::simulated(small, hot, z1).prediction.step_time_s;
  for (const ClusterSpec* c : {&own, &own_cold}) {
    const SimResult d = testing::expect_engines_agree(small, *c, z1, 0.05);
    const double analytic_extra = AnalyticModel(small, *c).evaluate(z1).step_time_s -
                                  AnalyticModel(small, hot).evaluate(z1).step_time_s;
    EXPECT_NEAR(d.prediction.step_time_s - d_hot, analytic_extra, 0.05 * analytic_extra);
  }
}

// A fabric with a cold bandwidth (a calibrated CPU's shared memory): the gradient reduction after
// the whole backward runs at it, in both executors; reductions during the backward (overlapped
// buckets) and the tensor-parallel collectives do not.
TEST(CacheLevel, TheGradientReductionAfterTheBackwardIsCold) {
  const ModelSpec small = testing::preset_model("small");
  const ClusterSpec hot = testing::preset_cluster("cpu-local", 2);
  ClusterSpec cold = hot;
  cold.node.fabric.cold_bandwidth = hot.node.fabric.bandwidth / 4;
  Plan dp = testing::make_plan(1, 1, 2, 1, 8);
  dp.precision = Precision::kFp32;
  const Prediction a_hot = AnalyticModel(small, hot).evaluate(dp),
                   a_cold = AnalyticModel(small, cold).evaluate(dp);
  ASSERT_GT(a_hot.time.dp_comm, 0);
  EXPECT_GT(a_cold.time.dp_comm, 3 * a_hot.time.dp_comm);  // the bandwidth term x4, the latency alike
  const SimResult d_hot = testing::simulated(small, hot, dp),
                  d_cold = testing::expect_engines_agree(small, cold, dp, 0.05);
  const double analytic_extra = a_cold.step_time_s - a_hot.step_time_s;
  EXPECT_NEAR(d_cold.prediction.step_time_s - d_hot.prediction.step_time_s, analytic_extra,
              0.05 * analytic_extra);
  // Overlapped with the backward, or tensor-parallel: no change.
  Plan overlapped = dp;
  overlapped.overlap_grad_reduce = true;
  EXPECT_EQ(AnalyticModel(small, cold).evaluate(overlapped).step_time_s,
            AnalyticModel(small, hot).evaluate(overlapped).step_time_s);
  EXPECT_EQ(testing::simulated(small, cold, overlapped).prediction.step_time_s,
            testing::simulated(small, hot, overlapped).prediction.step_time_s);
  Plan tp = testing::make_plan(2, 1, 1, 1, 8);
  tp.precision = Precision::kFp32;
  EXPECT_EQ(testing::simulated(small, cold, tp).prediction.step_time_s,
            testing::simulated(small, hot, tp).prediction.step_time_s);
  // In the profile: fabric.cold_bandwidth, written only where there is one.
  auto back = node_from_json(node_to_json(cold.node), "node.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_NEAR(back->fabric.cold_bandwidth, cold.node.fabric.cold_bandwidth,
              1e-6 * cold.node.fabric.cold_bandwidth);
  EXPECT_FALSE(node_to_json(hot.node)["fabric"].contains("cold_bandwidth"));
  // A plan whose data fits the cache level finds its gradients there: the hot rate.
  const ModelSpec tiny = testing::preset_model("tiny");
  const Plan tiny_dp = testing::make_plan(1, 1, 2, 1, 8);
  for (double cache : {1e3, 1e9}) {
    ClusterSpec c = cpu_with_cache(cache);
    c.node.fabric.cold_bandwidth = c.node.fabric.bandwidth / 4;
    EXPECT_EQ(cluster_for_plan(tiny, c, tiny_dp).node.fabric.cold_bandwidth,
              cache > 1e6 ? 0 : c.node.fabric.cold_bandwidth)
        << cache;
    const ClusterSpec no_cold = cpu_with_cache(cache);
    const double with = testing::simulated(tiny, c, tiny_dp).prediction.step_time_s,
                 without = testing::simulated(tiny, no_cold, tiny_dp).prediction.step_time_s;
    if (cache > 1e6)
      EXPECT_EQ(with, without);
    else
      EXPECT_GT(with, without);
  }
}

// A machine running at another speed than its profile's (`run --speed-adjust`): device_at_speed
// scales every rate and divides every fixed time, so a serial step (no network) of a calibrated
// CPU-like device, cache levels and all, takes exactly 1/factor as long in both engines.
TEST(CacheLevel, DeviceAtSpeedScalesASerialStep) {
  const ModelSpec tiny = testing::preset_model("tiny");
  const Plan p = testing::make_plan(1, 1, 1, 1, 8);
  ClusterSpec base = testing::preset_cluster("cpu-local", 1);
  DeviceSpec& d = base.node.devices[0].device;
  // The terms a CPU calibration fits, each set, and two cache levels (the working set between them).
  d.gemm_setup_s = 0.3e-6;
  d.attention_setup_s = 0.5e-6;
  d.attention_score_s = 6e-9;
  d.attention_head_s = 1.5e-6;
  d.activation_element_s = 0.1e-9;
  d.gemm_weight_fwd_bandwidth = 40e9;
  d.gemm_weight_bwd_bandwidth = 8e9;
  d.optimizer_efficiency = 1.4;
  const TinyOnCpu t;
  d.caches = {
      CacheLevel{t.working / 2, 0.8, 3 * d.memory_bandwidth, 80e9, 16e9, 0.12e-9, 100e9, t.working / 4},
      CacheLevel{4 * t.state, 0.7, 2 * d.memory_bandwidth, 60e9, 12e9, 0.11e-9, 90e9, 0}};
  ClusterSpec fast = base;
  fast.node.devices[0].device = device_at_speed(d, 2.0);
  const DeviceSpec& f = fast.node.devices[0].device;
  EXPECT_DOUBLE_EQ(f.peak(DType::kFp32), 2 * d.peak(DType::kFp32));
  EXPECT_DOUBLE_EQ(f.caches[1].memory_bandwidth, 2 * d.caches[1].memory_bandwidth);
  EXPECT_DOUBLE_EQ(f.caches[0].activation_element_s, d.caches[0].activation_element_s / 2);
  EXPECT_DOUBLE_EQ(f.kernel_overhead_s, d.kernel_overhead_s / 2);
  EXPECT_EQ(f.gemm_efficiency, d.gemm_efficiency);  // efficiencies and capacities stay
  EXPECT_EQ(f.memory_bytes, d.memory_bytes);
  const double slow_a = AnalyticModel(tiny, base).evaluate(p).step_time_s;
  const double fast_a = AnalyticModel(tiny, fast).evaluate(p).step_time_s;
  EXPECT_NEAR(fast_a, slow_a / 2, 1e-9 * slow_a);
  const double slow_d = testing::simulated(tiny, base, p).prediction.step_time_s;
  const double fast_d = testing::simulated(tiny, fast, p).prediction.step_time_s;
  EXPECT_NEAR(fast_d, slow_d / 2, 1e-9 * slow_d);
}

}  // namespace
}  // namespace foresight

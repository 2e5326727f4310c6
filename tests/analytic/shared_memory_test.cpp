// A device whose node's devices share one memory (DeviceSpec::shared_memory: a calibrated CPU's
// cores): its memory rates were measured with `shared_by` devices running at once, and again with
// one alone. A plan running fewer of the node's devices takes rates blended toward the alone
// rates, as times per unit of work; one running shared_by or more keeps the shared rates. Both
// engines price kernels on that view, and the profile's JSON carries the rates with checks.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "sim/analytic/analytic_model.h"
#include "sim/spec/hardware.h"
#include "tests/engines.h"
#include "tests/test_util.h"

namespace foresight {
namespace {

// The CPU preset with `devices` cores, its memory rates measured by `shared_by` of them at once,
// and alone rates twice as fast (the optimizer's 3x).
ClusterSpec shared_cpu(int shared_by, int devices = 2) {
  ClusterSpec c = testing::preset_cluster("cpu-local", devices);
  DeviceSpec& d = c.node.devices[0].device;
  d.gemm_weight_fwd_bandwidth = 2e10;
  d.activation_element_s = 2e-10;
  d.shared_memory.shared_by = shared_by;
  CacheLevel& a = d.shared_memory.alone;
  a.gemm_efficiency = std::min(1.0, 1.2 * d.gemm_efficiency);
  a.memory_bandwidth = 2 * d.memory_bandwidth;
  a.gemm_weight_fwd_bandwidth = 4e10;
  a.activation_element_s = 1e-10;
  a.optimizer_bandwidth = 3 * d.optimizer_efficiency * d.memory_bandwidth;
  return c;
}

DeviceSpec resolved(const ClusterSpec& c, const Plan& p) {
  return cluster_for_plan(testing::preset_model("tiny"), c, p).node.devices[0].device;
}

TEST(SharedMemory, OneDeviceRunsAtTheAloneRates) {
  const ClusterSpec c = shared_cpu(2);
  const DeviceSpec& base = c.node.devices[0].device;
  const DeviceSpec one = resolved(c, testing::make_plan(1, 1, 1, 1, 8));
  EXPECT_DOUBLE_EQ(one.memory_bandwidth, base.shared_memory.alone.memory_bandwidth);
  EXPECT_DOUBLE_EQ(one.gemm_efficiency, base.shared_memory.alone.gemm_efficiency);
  EXPECT_DOUBLE_EQ(one.gemm_weight_fwd_bandwidth, 4e10);
  EXPECT_DOUBLE_EQ(one.gemm_weight_bwd_bandwidth, 0);  // neither measured one
  EXPECT_DOUBLE_EQ(one.activation_element_s, 1e-10);
  EXPECT_NEAR(one.optimizer_efficiency * one.memory_bandwidth, base.shared_memory.alone.optimizer_bandwidth,
              1e-6 * base.shared_memory.alone.optimizer_bandwidth);
  EXPECT_EQ(one.shared_memory.shared_by, 0);  // resolved
  EXPECT_FALSE(has_per_plan_rates(
      cluster_for_plan(testing::preset_model("tiny"), c, testing::make_plan(1, 1, 1, 1, 8))));
  // Two devices, as many as measured the shared rates: those stand.
  const DeviceSpec two = resolved(c, testing::make_plan(1, 1, 2, 1, 8));
  EXPECT_DOUBLE_EQ(two.memory_bandwidth, base.memory_bandwidth);
  EXPECT_DOUBLE_EQ(two.gemm_efficiency, base.gemm_efficiency);
  EXPECT_DOUBLE_EQ(two.optimizer_efficiency, base.optimizer_efficiency);
  EXPECT_DOUBLE_EQ(two.activation_element_s, 2e-10);
}

TEST(SharedMemory, BetweenOneAndSharedByTheRatesBlend) {
  // Measured with 4 at once: 2 running are a third of the way toward alone, 3 two thirds shared...
  const ClusterSpec c = shared_cpu(4, 8);
  const DeviceSpec& base = c.node.devices[0].device;
  const DeviceSpec two = resolved(c, testing::make_plan(1, 1, 2, 1, 8));
  const double f = 2.0 / 3;  // (4 - 2) / (4 - 1) of the way toward alone
  EXPECT_NEAR(1 / two.memory_bandwidth, (1 - f) / base.memory_bandwidth + f / (2 * base.memory_bandwidth),
              1e-9 / base.memory_bandwidth);
  EXPECT_NEAR(1 / two.gemm_weight_fwd_bandwidth, (1 - f) / 2e10 + f / 4e10, 1e-22);
  EXPECT_NEAR(two.activation_element_s, (1 - f) * 2e-10 + f * 1e-10, 1e-22);
  // ... and 8, more than measured, keep the shared rates (no extrapolation).
  const DeviceSpec eight = resolved(c, testing::make_plan(1, 1, 8, 1, 8));
  EXPECT_DOUBLE_EQ(eight.memory_bandwidth, base.memory_bandwidth);
}

TEST(SharedMemory, BothEnginesPriceTheSerialPlanFaster) {
  const ModelSpec tiny = testing::preset_model("tiny");
  const Plan serial = testing::make_plan(1, 1, 1, 1, 8);
  ClusterSpec plain = shared_cpu(2, 1);
  plain.node.devices[0].device.shared_memory = {};
  const ClusterSpec shared = shared_cpu(2, 1);
  const Prediction a_plain = AnalyticModel(tiny, plain).evaluate(serial);
  const Prediction a_shared = AnalyticModel(tiny, shared).evaluate(serial);
  EXPECT_LT(a_shared.step_time_s, a_plain.step_time_s);
  EXPECT_LT(a_shared.time.optimizer, 0.5 * a_plain.time.optimizer);
  testing::expect_engines_agree(tiny, shared, serial, 0.05, "alone rates");
  // A plan on two devices is priced as without the alone rates.
  const Plan dp2 = testing::make_plan(1, 1, 2, 1, 8);
  ClusterSpec plain2 = shared_cpu(2, 2);
  plain2.node.devices[0].device.shared_memory = {};
  const ClusterSpec shared2 = shared_cpu(2, 2);
  EXPECT_DOUBLE_EQ(AnalyticModel(tiny, shared2).evaluate(dp2).step_time_s,
                   AnalyticModel(tiny, plain2).evaluate(dp2).step_time_s);
  EXPECT_LT(AnalyticModel(tiny, shared2).evaluate(serial).step_time_s,
            AnalyticModel(tiny, plain2).evaluate(serial).step_time_s);
  // What run --predict prints says so.
  const std::string said = cache_levels_taken(tiny, shared, serial);
  EXPECT_NE(
      said.find(
          "1 of the node's devices running, its memory rates those measured with one alone (the profile's: 2 "
          "sharing the memory)"),
      std::string::npos)
      << said;
  EXPECT_EQ(cache_levels_taken(tiny, shared2, dp2), "");
  // With a cache level that holds the whole step, the memory rates are not taken: not said.
  ClusterSpec cached = shared;
  cached.node.devices[0].device.caches = {CacheLevel{1e9, 0.9, 1e11}};
  const std::string in_cache = cache_levels_taken(tiny, cached, serial);
  EXPECT_EQ(in_cache.find("sharing the memory"), std::string::npos) << in_cache;
  EXPECT_NE(in_cache.find("the optimizer in the"), std::string::npos) << in_cache;
}

TEST(SharedMemory, ProfileJsonRoundTripsAndChecksItsFields) {
  const DeviceSpec d = shared_cpu(2).node.devices[0].device;
  const nlohmann::json j = device_to_json(d);
  ASSERT_TRUE(j.contains("shared_memory")) << j.dump();
  auto back = device_from_json(j, "dev.json", "");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->shared_memory.shared_by, 2);
  EXPECT_NEAR(back->shared_memory.alone.memory_bandwidth, d.shared_memory.alone.memory_bandwidth,
              1e-9 * d.shared_memory.alone.memory_bandwidth);
  EXPECT_NEAR(back->shared_memory.alone.optimizer_bandwidth, d.shared_memory.alone.optimizer_bandwidth,
              1e-9 * d.shared_memory.alone.optimizer_bandwidth);
  EXPECT_NEAR(back->shared_memory.alone.gemm_weight_fwd_bandwidth, 4e10, 1e-3);
  EXPECT_NEAR(back->shared_memory.alone.activation_element_s, 1e-10, 1e-22);
  // Without it, none (every preset).
  EXPECT_FALSE(device_to_json(testing::preset_cluster("cpu-local", 2).node.devices[0].device)
                   .contains("shared_memory"));
  const auto refused = [](nlohmann::json bad) {
    auto r = device_from_json(bad, "dev.json", "");
    return r.ok() ? std::string() : r.error().message();
  };
  nlohmann::json one = j;
  one["shared_memory"]["shared_by"] = 1;
  EXPECT_NE(refused(one).find("dev.json: /shared_memory/shared_by"), std::string::npos) << refused(one);
  nlohmann::json no_alone = j;
  no_alone["shared_memory"].erase("alone");
  EXPECT_NE(refused(no_alone).find("dev.json: /shared_memory/alone: is required"), std::string::npos)
      << refused(no_alone);
  nlohmann::json unknown = j;
  unknown["shared_memory"]["alone"]["span"] = "1MiB";
  EXPECT_NE(refused(unknown).find("dev.json: /shared_memory/alone/span: unknown field"), std::string::npos)
      << refused(unknown);
  nlohmann::json zero = j;
  zero["shared_memory"]["alone"]["memory_bandwidth"] = "0GB/s";
  EXPECT_NE(refused(zero).find("dev.json: /shared_memory/alone/memory_bandwidth"), std::string::npos)
      << refused(zero);
}

TEST(SharedMemory, AtTheMachinesSpeedTheAloneRatesScaleToo) {
  const DeviceSpec d = shared_cpu(2).node.devices[0].device;
  const DeviceSpec fast = device_at_speed(d, 1.1);
  EXPECT_DOUBLE_EQ(fast.shared_memory.alone.memory_bandwidth, 1.1 * d.shared_memory.alone.memory_bandwidth);
  EXPECT_DOUBLE_EQ(fast.shared_memory.alone.optimizer_bandwidth,
                   1.1 * d.shared_memory.alone.optimizer_bandwidth);
  EXPECT_DOUBLE_EQ(fast.shared_memory.alone.activation_element_s,
                   d.shared_memory.alone.activation_element_s / 1.1);
}

}  // namespace
}  // namespace foresight

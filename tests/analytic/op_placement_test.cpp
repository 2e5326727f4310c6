// Op placement across device classes: each layer's attention core on a partner accelerator of
// the node (Plan::attention_device), with the Q/K/V and output transfers over PCIe by hand; the
// "auto" placer moves it only where that is faster; both executors run the same placement.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "sim/analytic/analytic_model.h"
#include "sim/analytic/economics.h"
#include "sim/analytic/layer_ops.h"
#include "sim/des/simulator.h"
#include "sim/workload/workload.h"
#include "tests/engines.h"
#include "tests/test_util.h"

namespace foresight {
namespace {

ClusterSpec hetero(int gpus) { return testing::preset_cluster("hetero-node", gpus); }

Plan plan(int dp) {
  Plan p = testing::make_plan(1, 1, dp, 1, 16);
  p.seq_len = 2048;
  p.recompute = Recompute::kFull;
  p.zero_stage = 1;
  return p;
}

TEST(OpPlacement, AttentionOnThePartnerByHand) {
  const ModelSpec m = testing::preset_model("llama3-8b");
  const ClusterSpec c = hetero(4);
  const DeviceSpec& gpu = c.node.devices[0].device;
  Plan p = plan(4);
  const LayerShape s = plan_layer_shape(m, p);
  const LayerKernels own = layer_kernels(m, gpu, p, s, false);
  p.attention_device = "ascend-910b";
  const Partner partner = attention_partner(p, c.node);
  ASSERT_NE(partner.device, nullptr);
  EXPECT_EQ(partner.device->name, "ascend-910b");
  EXPECT_DOUBLE_EQ(partner.link_rate, c.node.host_link.bandwidth * c.node.host_link.efficiency);
  const LayerKernels there = layer_kernels(m, gpu, p, s, false, partner);
  ASSERT_TRUE(there.attention_on_partner);
  EXPECT_EQ(there.partner_kind, DeviceKind::kNpu);
  const double tokens = 2048, e = 2;
  const double qkv = tokens * (m.q_dim() + 2.0 * m.kv_dim()) * e, out = tokens * m.v_dim() * e;
  EXPECT_NEAR(there.partner_in_s, qkv / partner.link_rate, 1e-15);
  EXPECT_NEAR(there.partner_out_s, out / partner.link_rate, 1e-15);
  EXPECT_NEAR(there.partner_grad_out_s, qkv / partner.link_rate, 1e-15);
  // Only the attention core moves; on the slower NPU and behind PCIe the layer is slower.
  for (int i = 0; i < there.count; ++i)
    EXPECT_EQ(there.fwd[i].on_partner, i >= there.attention_first && i <= there.attention_last) << i;
  const KernelCost& a = there.fwd[there.attention_first];
  const DeviceSpec& npu = *partner.device;
  EXPECT_NEAR(a.fwd_s,
              0.5 * a.flops / (npu.peak(DType::kBf16) * npu.attention_efficiency) + npu.kernel_overhead_s,
              1e-12);
  EXPECT_NEAR(there.fwd_seconds() - own.fwd_seconds(),
              a.fwd_s - own.fwd[own.attention_first].fwd_s + there.partner_in_s + there.partner_out_s, 1e-12);
  // The optimising placer counts the transfers and keeps it on the GPU ...
  p.attention_device = "auto";
  EXPECT_FALSE(layer_kernels(m, gpu, p, s, false, attention_partner(p, c.node)).attention_on_partner);
  // ... unless the partner is much faster and close by.
  DeviceSpec fast = npu;
  fast.peak_flops[static_cast<int>(DType::kBf16)] *= 100;
  fast.memory_bandwidth *= 100;
  fast.kernel_overhead_s = 0;
  Partner near{&fast, 1e15, true};
  Plan unfused = p;
  unfused.flash_attention = false;
  EXPECT_TRUE(layer_kernels(m, gpu, unfused, s, false, near).attention_on_partner);
}

TEST(OpPlacement, BothExecutorsRunIt) {
  const ModelSpec m = testing::preset_model("llama3-8b");
  const ClusterSpec c = hetero(4);
  Plan p = plan(4);
  const Prediction base = AnalyticModel(m, c).evaluate(p);
  p.attention_device = "ascend-910b";
  const Prediction a = AnalyticModel(m, c).evaluate(p);
  EXPECT_GT(a.step_time_s, base.step_time_s);
  testing::expect_engines_agree(m, c, p, 0.03);
  auto w = lower(m, c, p);
  ASSERT_TRUE(w.ok());
  const OpGraph& g = w->stages[0].graph();
  int on_partner = 0, transfers = 0;
  for (auto v : boost::make_iterator_range(boost::vertices(g))) {
    if (g[v].stream != StreamId::kPartner) continue;
    if (g[v].kind == OpKind::kCopy)
      ++transfers;
    else {
      ++on_partner;
      EXPECT_EQ(g[v].device, DeviceKind::kNpu);
    }
  }
  const int mbs = 4;                          // 16 sequences over dp 4
  EXPECT_EQ(on_partner, m.layers * mbs * 3);  // forward, recompute, backward
  EXPECT_EQ(transfers, m.layers * mbs * 6);
}

TEST(OpPlacement, PlanChecks) {
  const ModelSpec m = testing::preset_model("llama3-8b");
  const ClusterSpec c = hetero(4);
  Plan p = plan(4);
  p.attention_device = "h100-sxm5-80gb";
  auto s = validate_plan_on(p, m, c, "plan.json");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("/attention_device: \"h100-sxm5-80gb\" is not another accelerator"),
            std::string::npos)
      << s.error().message();
  p.attention_device = "tpu-v9";
  EXPECT_FALSE(validate_plan_on(p, m, c, "plan.json").ok());
  p.attention_device = "ascend-910b";
  EXPECT_TRUE(validate_plan_on(p, m, c, "plan.json").ok());
  p.cp = 2;
  p.dp = 2;
  EXPECT_FALSE(validate_plan_on(p, m, c, "plan.json").ok());
  ClusterSpec few = c;
  few.node.devices[1].count = 2;  // 2 NPUs for 4 GPUs
  Plan q = plan(4);
  q.attention_device = "ascend-910b";
  s = validate_plan_on(q, m, few, "plan.json");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("one partner each"), std::string::npos) << s.error().message();
  auto back = plan_from_json(plan_to_json(q), "x.json");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->attention_device, "ascend-910b");
}

// The partners are held for the whole step, so the bill pays for them, used or not ("auto" may
// leave them idle), at their own price; an override prices the stages' devices only.
TEST(OpPlacement, TheBillPaysForThePartners) {
  const ModelSpec m = testing::preset_model("llama3-8b");
  ClusterSpec c = hetero(4);
  c.node.devices[0].device.price_per_hour_usd = 2.0;
  c.node.devices[1].device.price_per_hour_usd = 0.5;
  Plan p = plan(4);
  const Prediction alone = AnalyticModel(m, c).evaluate(p);
  const Economics own = economics(alone, c, p, p.seq_len, CostOptions{});
  EXPECT_EQ(own.partner_devices, 0);
  EXPECT_NEAR(own.cost_per_step_usd, 4 * 2.0 * alone.step_time_s / 3600, 1e-15);
  for (const char* where : {"ascend-910b", "auto"}) {
    p.attention_device = where;
    const Prediction pred = AnalyticModel(m, c).evaluate(p);
    const Economics e = economics(pred, c, p, p.seq_len, CostOptions{});
    EXPECT_EQ(e.partner_devices, 4) << where;
    EXPECT_NEAR(e.cost_per_step_usd, 4 * (2.0 + 0.5) * pred.step_time_s / 3600, 1e-15) << where;
    // Power per rank: the partner's idle draw at least.
    EXPECT_GT(e.device_power_w, own.device_power_w + c.node.devices[1].device.power_idle_w - 1e-9) << where;
    CostOptions o;
    o.price_per_device_hour = 1.0;
    EXPECT_NEAR(economics(pred, c, p, p.seq_len, o).cost_per_step_usd,
                4 * (1.0 + 0.5) * pred.step_time_s / 3600, 1e-15);
  }
}

}  // namespace
}  // namespace foresight

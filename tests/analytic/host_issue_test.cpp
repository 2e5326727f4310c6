// The host issuing the kernels (DeviceSpec::host_op_s, issue_from_host): a pass waits for the host
// only where the host's time exceeds the device's; a dropless MoE layer's synchronisation makes its
// forward lose the host's lead; Transformer Engine's per-expert GEMMs cost the host once per
// expert; CUDA graphs cost it nothing but for dropless experts; token drop with padding needs no
// synchronisation; both engines price the same waits.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "sim/analytic/analytic_model.h"
#include "sim/analytic/layer_ops.h"
#include "sim/spec/plan.h"
#include "tests/engines.h"
#include "tests/kernel_util.h"
#include "tests/test_util.h"

namespace foresight {
namespace {

// A Qwen3-30B-A3B-like layer stack (128 experts of width 768, top 8, hidden 2048), small enough to
// simulate: 16 experts per rank at 8-way expert parallelism on one B200 node.
struct MoeCase {
  ModelSpec m = [] {
    ModelSpec m = testing::preset_model("mixtral-8x7b");
    m.layers = 4;
    m.hidden = 2048;
    m.heads = 32;
    m.kv_heads = 4;
    m.head_dim = 128;
    m.moe.experts = 128;
    m.moe.top_k = 8;
    m.moe.expert_ffn_hidden = 768;
    m.seq_len = 4096;
    return m;
  }();
  ClusterSpec c = testing::preset_cluster("dgx-b200-ndr", 8);
  Plan p = [] {
    Plan p = testing::make_plan(1, 1, 8, 1, 64);
    p.ep = 8;
    p.precision = Precision::kFp8;
    return p;
  }();
  DeviceSpec d() const { return c.node.accelerator(); }
  LayerShape s() const { return plan_layer_shape(m, p); }
};

double sum(const LayerKernels& k, double KernelCost::*f) {
  double t = 0;
  for (int i = 0; i < k.count; ++i) t += k.fwd[i].*f;
  return t;
}

// Without a synchronisation (a dense layer) the host runs ahead: a pass costs the larger of the
// device's and the host's time, the excess spread over the ops by their host time.
TEST(HostIssue, AHostBoundPassTakesTheHostsTime) {
  const ModelSpec m = testing::preset_model("small");
  DeviceSpec d = testing::preset_cluster("dgx-h100-ndr", 8).node.accelerator();
  const Plan p = testing::make_plan(1, 1, 1, 1, 1);
  const LayerShape s = plan_layer_shape(m, p);
  d.host_op_s = 0;
  const LayerKernels free_host = layer_kernels(m, d, p, s, false);
  EXPECT_EQ(sum(free_host, &KernelCost::host_fwd_s), 0);
  d.host_op_s = 1e-3;  // far slower than any of the small model's kernels
  LayerKernels k = layer_kernels(m, d, p, s, false);
  const double host_fwd = sum(k, &KernelCost::host_fwd_s), host_bwd = sum(k, &KernelCost::host_bwd_s);
  ASSERT_GT(host_fwd, free_host.fwd_seconds());
  EXPECT_NEAR(host_fwd, (k.count + (m.rope ? 1 : 0)) * 1e-3, 1e-12);  // an op per kernel, RoPE's too
  EXPECT_EQ(k.host_sync_at, -1);
  issue_from_host(k, 0);
  EXPECT_NEAR(k.fwd_seconds(), host_fwd, 1e-12);
  EXPECT_NEAR(k.bwd_seconds(), host_bwd, 1e-12);
  EXPECT_NEAR(k.bwd_weight_seconds(), free_host.bwd_weight_seconds(),
              1e-15);  // the waits are the data part's
  // A fast host changes nothing.
  d.host_op_s = 1e-9;
  LayerKernels fast = layer_kernels(m, d, p, s, false);
  issue_from_host(fast, 0);
  EXPECT_NEAR(fast.fwd_seconds(), free_host.fwd_seconds(), 1e-15);
  EXPECT_NEAR(fast.bwd_seconds(), free_host.bwd_seconds(), 1e-15);
}

// The synchronised forward by hand: three ops after the synchronisation point, an all-to-all
// before the first. Host 10, 1, 1 and device 2, 8, 1 (seconds): the all-to-all (3) runs while the
// host issues the first op, which then waits 7; the second is issued at 11 and the device is free
// at 12; the third is issued at 12, the device free at 20. Waits 7, 0, 0.
TEST(HostIssue, TheSynchronisedForwardByHand) {
  LayerKernels k;
  k.count = 3;
  const double host[] = {1, 10, 1}, dev[] = {1, 2, 8};
  for (int i = 0; i < 3; ++i) {
    k.fwd[i].fwd_s = dev[i];
    k.fwd[i].host_fwd_s = host[i];
  }
  k.host_sync_at = 0;  // the cycle: op 1, op 2, then op 0
  k.moe_dispatch_after = 0;
  k.moe_combine_after = 5;  // past the end: no combine in this list
  issue_from_host(k, 3);
  EXPECT_DOUBLE_EQ(k.fwd[1].fwd_s, 2 + 7);  // issued at 10, the device free at 3
  EXPECT_DOUBLE_EQ(k.fwd[2].fwd_s, 8);      // issued at 11, the device busy until 12
  EXPECT_DOUBLE_EQ(k.fwd[0].fwd_s, 1);      // issued at 12, the device busy until 20
  // Without the synchronisation the host's 12 hide under the device's 11 + 2 all-to-alls.
  LayerKernels free_run;
  free_run.count = 3;
  for (int i = 0; i < 3; ++i) {
    free_run.fwd[i].fwd_s = dev[i];
    free_run.fwd[i].host_fwd_s = host[i];
  }
  issue_from_host(free_run, 3);
  EXPECT_DOUBLE_EQ(free_run.fwd_seconds(), 11);
}

// A dropless MoE layer synchronises before its all-to-all: its forward waits for the host where a
// free-running host would not; Transformer Engine's per-expert GEMMs cost the host once per expert.
TEST(HostIssue, PerExpertGemmsAndTheDispatchSynchronisation) {
  MoeCase c;
  DeviceSpec d = c.d();
  d.host_op_s = 40e-6;
  const LayerShape s = c.s();
  const LayerKernels grouped = layer_kernels(c.m, d, c.p, s, true);
  c.p.expert_gemm = ExpertGemm::kPerExpert;
  const LayerKernels each = layer_kernels(c.m, d, c.p, s, true);
  const double local = 16;  // 128 experts over 8 ranks
  // fp8: a GEMM and a quantisation per expert forward, two GEMMs and a quantisation backward.
  EXPECT_NEAR(testing::find_kernel(each, KernelName::kMlpUp).host_fwd_s, local * 2 * d.host_op_s, 1e-15);
  EXPECT_NEAR(testing::find_kernel(each, KernelName::kMlpUp).host_bwd_s, local * 3 * d.host_op_s, 1e-15);
  EXPECT_NEAR(testing::find_kernel(grouped, KernelName::kMlpUp).host_fwd_s, 2 * d.host_op_s, 1e-15);
  // The device's work is the same either way, but for each further launch's start and tail: a
  // GEMM and a quantisation per expert forward, two GEMMs and a quantisation backward.
  const KernelCost& up_each = testing::find_kernel(each, KernelName::kMlpUp);
  const KernelCost& up_grouped = testing::find_kernel(grouped, KernelName::kMlpUp);
  EXPECT_DOUBLE_EQ(up_each.flops, up_grouped.flops);
  EXPECT_NEAR(up_each.fwd_s - up_grouped.fwd_s, (local - 1) * 2 * d.kernel_overhead_s, 1e-15);
  EXPECT_NEAR(up_each.bwd_s - up_grouped.bwd_s, (local - 1) * 3 * d.kernel_overhead_s, 1e-15);
  ASSERT_GE(each.host_sync_at, 0);
  EXPECT_EQ(each.host_sync_at, each.moe_dispatch_after);
  // The synchronised forward is longer than the free-running one: after the synchronisation the
  // device waits for the host's first op, and the host waits for the device's last.
  LayerKernels synced = each, free_run = each;
  free_run.host_sync_at = -1;
  const double a2a = 100e-6;
  issue_from_host(synced, a2a);
  issue_from_host(free_run, a2a);
  const double host_fwd = sum(each, &KernelCost::host_fwd_s);
  EXPECT_GE(free_run.fwd_seconds() + 2 * a2a, host_fwd - 1e-12);
  EXPECT_GT(synced.fwd_seconds(), free_run.fwd_seconds());
  EXPECT_DOUBLE_EQ(synced.bwd_seconds(), free_run.bwd_seconds());  // no synchronisation backward
  // Without expert parallelism the per-expert GEMMs' row counts still need the host.
  c.p.ep = 1;
  EXPECT_GE(layer_kernels(c.m, d, c.p, plan_layer_shape(c.m, c.p), true).host_sync_at, 0);
  c.p.expert_gemm = ExpertGemm::kGrouped;
  EXPECT_EQ(layer_kernels(c.m, d, c.p, plan_layer_shape(c.m, c.p), true).host_sync_at, -1);
}

// CUDA graphs replay the kernels without the host, except a dropless MoE layer's experts, whose
// shapes change every step: the graph holds the attention, the router and the dispatcher's
// preprocessing; the experts and the combine run eager.
TEST(HostIssue, CudaGraphsLeaveDroplessExpertsToTheHost) {
  MoeCase c;
  DeviceSpec d = c.d();
  d.host_op_s = 40e-6;
  c.p.cuda_graphs = true;
  c.p.expert_gemm = ExpertGemm::kPerExpert;
  const LayerKernels k = layer_kernels(c.m, d, c.p, c.s(), true);
  for (KernelName graphed : {KernelName::kNorm1, KernelName::kQkv, KernelName::kAttention, KernelName::kProj,
                             KernelName::kRouter, KernelName::kPermute}) {
    EXPECT_EQ(testing::find_kernel(k, graphed).host_fwd_s, 0) << kernel_name(graphed);
    EXPECT_EQ(testing::find_kernel(k, graphed).host_bwd_s, 0) << kernel_name(graphed);
  }
  const KernelCost& up = testing::find_kernel(k, KernelName::kMlpUp);
  EXPECT_NEAR(up.host_fwd_s, 16 * 2 * d.host_op_s, 1e-15);  // 16 experts, a GEMM and a cast each
  EXPECT_GT(testing::find_kernel(k, KernelName::kUnpermute).host_fwd_s, 0);
  // Eager launches too: the experts' GEMM costs the same as without graphs.
  c.p.cuda_graphs = false;
  EXPECT_DOUBLE_EQ(testing::find_kernel(layer_kernels(c.m, d, c.p, c.s(), true), KernelName::kMlpUp).fwd_s,
                   up.fwd_s);
  // A dense layer in a graph costs the host nothing.
  c.p.cuda_graphs = true;
  const LayerKernels dense = layer_kernels(c.m, d, c.p, c.s(), false);
  EXPECT_EQ(sum(dense, &KernelCost::host_fwd_s), 0);
  EXPECT_EQ(sum(dense, &KernelCost::host_bwd_s), 0);
}

// Both engines time the kernels with the host's waits (issued_layer_kernels), so they agree on a
// host-bound MoE plan, and the wait shows in the step.
TEST(HostIssue, EnginesAgreeOnAHostBoundMoePlan) {
  MoeCase c;
  c.p.expert_gemm = ExpertGemm::kPerExpert;
  for (auto& g : c.c.node.devices) g.device.host_op_s = 0;
  const Prediction free_host = AnalyticModel(c.m, c.c).evaluate(c.p);
  for (auto& g : c.c.node.devices) g.device.host_op_s = 45e-6;
  const SimResult sim = testing::expect_engines_agree(c.m, c.c, c.p, 0.03, "host-bound MoE");
  const Prediction host = AnalyticModel(c.m, c.c).evaluate(c.p);
  EXPECT_GT(host.step_time_s, free_host.step_time_s * 1.2);
  EXPECT_GT(sim.prediction.step_time_s, free_host.step_time_s * 1.2);
  // The waits show as their own part of compute, the same in both engines, none without them.
  EXPECT_EQ(free_host.time.host_wait, 0);
  EXPECT_GT(host.time.host_wait, 0.1 * host.time.compute);
  EXPECT_LE(host.time.host_wait, host.time.compute);
  EXPECT_NEAR(sim.prediction.time.host_wait, host.time.host_wait, 0.03 * host.time.host_wait);
  EXPECT_NEAR(host.step_time_s - free_host.step_time_s, host.time.host_wait, 0.05 * host.time.host_wait);
}

// Token drop with padding (Plan::moe_capacity_factor): the counts are the capacity, known to the
// host, so no synchronisation, and a CUDA graph keeps the experts; the experts compute, and the
// all-to-alls move, capacity_factor times the routed rows.
TEST(HostIssue, DropAndPadNeedsNoSynchronisation) {
  MoeCase c;
  DeviceSpec d = c.d();
  d.host_op_s = 40e-6;
  c.p.expert_gemm = ExpertGemm::kPerExpert;
  const LayerKernels dropless = layer_kernels(c.m, d, c.p, c.s(), true);
  ASSERT_GE(dropless.host_sync_at, 0);
  c.p.moe_capacity_factor = 1.0;
  const LayerKernels padded = layer_kernels(c.m, d, c.p, c.s(), true);
  EXPECT_EQ(padded.host_sync_at, -1);
  // At capacity factor 1 (an even share each, as force-balanced routing gives) the work is the same.
  EXPECT_DOUBLE_EQ(padded.ep_bytes, dropless.ep_bytes);
  EXPECT_DOUBLE_EQ(testing::find_kernel(padded, KernelName::kMlpUp).fwd_s,
                   testing::find_kernel(dropless, KernelName::kMlpUp).fwd_s);
  // Twice the capacity: twice the rows through the experts and the all-to-alls.
  c.p.moe_capacity_factor = 2.0;
  const LayerKernels twice = layer_kernels(c.m, d, c.p, c.s(), true);
  EXPECT_DOUBLE_EQ(twice.ep_bytes, 2 * dropless.ep_bytes);
  for (KernelName experts : {KernelName::kMlpUp, KernelName::kMlpDown}) {
    const KernelCost& a = testing::find_kernel(twice, experts);
    const KernelCost& b = testing::find_kernel(dropless, experts);
    EXPECT_DOUBLE_EQ(a.flops, 2 * b.flops) << kernel_name(experts);
    EXPECT_GT(a.fwd_s, b.fwd_s) << kernel_name(experts);
  }
  // In a CUDA graph the whole padded layer costs the host nothing.
  c.p.moe_capacity_factor = 1.0;
  c.p.cuda_graphs = true;
  const LayerKernels graphed = layer_kernels(c.m, d, c.p, c.s(), true);
  EXPECT_EQ(sum(graphed, &KernelCost::host_fwd_s), 0);
  EXPECT_EQ(sum(graphed, &KernelCost::host_bwd_s), 0);
  // The engines agree on it.
  for (auto& g : c.c.node.devices) g.device.host_op_s = 45e-6;
  c.p.cuda_graphs = false;
  testing::expect_engines_agree(c.m, c.c, c.p, 0.03, "drop-and-pad MoE");
  // The plan file carries it; a negative factor names the field.
  const nlohmann::json j = plan_to_json(c.p);
  EXPECT_EQ(j.at("moe_capacity_factor"), 1.0);
  auto back = plan_from_json(j, "plan.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->moe_capacity_factor, 1.0);
  EXPECT_FALSE(plan_to_json(testing::make_plan(1, 1, 8, 1, 8)).contains("moe_capacity_factor"));
  nlohmann::json bad = j;
  bad["moe_capacity_factor"] = -1;
  auto err = plan_from_json(bad, "plan.json");
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.error().message().find("moe_capacity_factor"), std::string::npos) << err.error().message();
}

// The plan's expert_gemm reads and writes by name; a bad value names the field.
TEST(HostIssue, ExpertGemmInThePlanJson) {
  Plan p = testing::make_plan(1, 1, 8, 1, 8);
  p.expert_gemm = ExpertGemm::kPerExpert;
  const nlohmann::json j = plan_to_json(p);
  EXPECT_EQ(j.at("expert_gemm"), "per_expert");
  auto back = plan_from_json(j, "plan.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->expert_gemm, ExpertGemm::kPerExpert);
  EXPECT_FALSE(plan_to_json(testing::make_plan(1, 1, 8, 1, 8)).contains("expert_gemm"));
  nlohmann::json bad = j;
  bad["expert_gemm"] = "each";
  auto err = plan_from_json(bad, "plan.json");
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.error().message().find("expert_gemm"), std::string::npos) << err.error().message();
  EXPECT_NE(err.error().message().find("per_expert"), std::string::npos) << err.error().message();
}

// The device profile's efficiency.host_op: a duration, written back, a bad unit named.
TEST(HostIssue, HostOpInTheDeviceJson) {
  auto d = load_device("b200");
  ASSERT_TRUE(d.ok());
  EXPECT_GT(d->host_op_s, 0);
  nlohmann::json j = device_to_json(*d);
  j["efficiency"]["host_op"] = "12us";
  auto back = device_from_json(j, "dev.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_DOUBLE_EQ(back->host_op_s, 12e-6);
  j["efficiency"]["host_op"] = "12 furlongs";
  auto bad = device_from_json(j, "dev.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("host_op"), std::string::npos) << bad.error().message();
}

}  // namespace
}  // namespace foresight

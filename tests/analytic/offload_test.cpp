// Offload of parameters, activations and the embedding table to host memory: where the bytes go
// (device and host, by hand), what the host link costs when compute cannot hide it, the host
// memory check, the plan checks, and the simulator running the same copies.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "sim/analytic/analytic_model.h"
#include "sim/analytic/layer_cost.h"
#include "sim/des/simulator.h"
#include "sim/workload/workload.h"
#include "tests/test_util.h"

namespace foresight {
namespace {

// Llama 3 8B on one DGX H100 node, data-parallel, full recompute.
Plan base_plan() {
  Plan p = testing::make_plan(1, 1, 8, 1, 32);
  p.recompute = Recompute::kFull;
  p.offload_optimizer = true;
  return p;
}

TEST(Offload, ActivationsLeaveTwoLayersOnTheDevice) {
  const ModelSpec m = testing::preset_model("llama3-8b");
  const ClusterSpec c = testing::preset_cluster("dgx-h100-ndr", 8);
  const AnalyticModel am(m, c);
  Plan p = testing::make_plan(1, 1, 8, 1, 32);
  p.schedule = Schedule::kGpipe;  // all 4 micro-batches in flight
  p.recompute = Recompute::kNone;
  const MemoryBreakdown kept = am.memory(p);
  p.offload_activations = true;
  const MemoryBreakdown off = am.memory(p);
  const double layer = layer_activation_bytes(m, plan_layer_shape(m, p), Recompute::kNone, true, false);
  const double embed_out = 4.0 * 8192 * m.hidden * 2;  // the embedding output of 4 micro-batches stays
  EXPECT_NEAR(off.activations, 2 * layer + embed_out, 1e-6 * off.activations);
  EXPECT_NEAR(kept.activations, 4 * 32 * layer + embed_out, 1e-6 * kept.activations);
  EXPECT_NEAR(off.host, 4 * 32 * layer, 1e-6 * off.host);
  EXPECT_DOUBLE_EQ(off.weights, kept.weights);
  EXPECT_GT(off.host_capacity, 0);
}

TEST(Offload, ParametersStreamThroughATwoLayerWindow) {
  const ModelSpec m = testing::preset_model("llama3-8b");
  const ClusterSpec c = testing::preset_cluster("dgx-h100-ndr", 8);
  const AnalyticModel am(m, c);
  Plan p = base_plan();
  const MemoryBreakdown kept = am.memory(p);
  p.offload_params = true;
  const MemoryBreakdown off = am.memory(p);
  const double layer = layer_params_per_device(m, false, 1, 1);
  const double tables =
      2.0 * m.vocab * m.hidden + m.hidden;  // input embedding, (untied) LM head and final RMSNorm stay
  EXPECT_NEAR(off.weights, 2 * (tables + 2 * layer), 1e-9 * off.weights);
  EXPECT_NEAR(off.gradients, 4 * (tables + 2 * layer), 1e-9 * off.gradients);
  EXPECT_NEAR(kept.weights, 2 * (tables + m.layers * layer), 1e-9 * kept.weights);
  // Host: the optimizer's 16 bytes per parameter (fp32 gradients included), plus the layers' bf16
  // weights.
  EXPECT_NEAR(off.host - kept.host, 2 * m.layers * layer, 1e-9 * off.host);
  EXPECT_NEAR(kept.host, 16 * (tables + m.layers * layer), 1e-9 * kept.host);
}

TEST(Offload, EmbeddingTableLeavesTheFirstStage) {
  const ModelSpec m = testing::preset_model("llama3-8b");  // untied embeddings
  const ClusterSpec c = testing::preset_cluster("dgx-h100-ndr", 8);
  const AnalyticModel am(m, c);
  Plan p = testing::make_plan(1, 1, 8, 1, 32);
  p.recompute = Recompute::kFull;
  const MemoryBreakdown kept = am.memory(p);
  p.offload_embeddings = true;
  const MemoryBreakdown off = am.memory(p);
  const double table = 1.0 * m.vocab * m.hidden;
  EXPECT_NEAR(kept.weights - off.weights, 2 * table, 1e-9 * kept.weights);
  EXPECT_NEAR(kept.gradients - off.gradients, 4 * table, 1e-9 * kept.gradients);
  EXPECT_NEAR(kept.optimizer - off.optimizer, 12 * table, 1e-9 * kept.optimizer);
  EXPECT_NEAR(off.host, 18 * table, 1e-9 * off.host);
  // Its update moves to the host, beside the device's own optimizer step.
  const Prediction tk = am.evaluate(testing::make_plan(1, 1, 8, 1, 32));
  const Prediction to = am.evaluate(p);
  EXPECT_LT(to.time.optimizer, tk.time.optimizer);
}

TEST(Offload, HostMemoryIsChecked) {
  const ModelSpec m = testing::preset_model("llama3-8b");
  ClusterSpec c = testing::preset_cluster("dgx-h100-ndr", 8);
  Plan p = base_plan();
  p.offload_params = true;
  EXPECT_TRUE(AnalyticModel(m, c).memory(p).fits());
  c.node.host_memory_bytes = 8 * 64e9;  // 64 GB per GPU: less than 8B parameters x 18 bytes
  const MemoryBreakdown mem = AnalyticModel(m, c).memory(p);
  EXPECT_FALSE(mem.fits());
  EXPECT_LE(mem.total, mem.capacity);
  const std::string why = describe_memory(mem);
  EXPECT_NE(why.find("host memory"), std::string::npos) << why;
  auto r = predict(m, c, p, "plan.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("host memory"), std::string::npos) << r.error().message();
}

// A slow host link (PCIe at 1/40 of its rate): the copies cannot hide behind compute, the
// analytic model exposes them, and the simulator, running the same copies on the copy engines,
// agrees. With the real link they hide.
TEST(Offload, SlowHostLinkExposesTheCopiesInBothExecutors) {
  const ModelSpec m = testing::preset_model("llama3-8b");
  ClusterSpec c = testing::preset_cluster("dgx-h100-ndr", 8);
  Plan p = base_plan();
  p.global_batch = 16;
  const double plain = AnalyticModel(m, c).evaluate(p).step_time_s;
  for (bool params : {false, true}) {
    Plan q = p;
    q.offload_params = params;
    q.offload_activations = !params;
    const Prediction fast = AnalyticModel(m, c).evaluate(q);
    EXPECT_LT(fast.step_time_s, plain * 1.01) << "params " << params;
    ClusterSpec slow = c;
    slow.node.host_link.bandwidth /= 40;
    const Prediction a = AnalyticModel(m, slow).evaluate(q);
    EXPECT_GT(a.step_time_s, plain * 1.2) << "params " << params;
    EXPECT_GT(a.time.offload, 0.15 * a.step_time_s);
    auto d = simulate(m, slow, q, "plan", {});
    ASSERT_TRUE(d.ok()) << d.error().message();
    EXPECT_NEAR(d->prediction.step_time_s, a.step_time_s, 0.1 * a.step_time_s) << "params " << params;
    EXPECT_GT(d->prediction.time.offload, 0.5 * a.time.offload);
    auto dfast = simulate(m, c, q, "plan", {});
    ASSERT_TRUE(dfast.ok());
    EXPECT_NEAR(dfast->prediction.step_time_s, fast.step_time_s, 0.03 * fast.step_time_s);
  }
}

TEST(Offload, LoweringMovesEachLayerBothWays) {
  const ModelSpec m = testing::preset_model("llama3-8b");
  const ClusterSpec c = testing::preset_cluster("dgx-h100-ndr", 8);
  Plan p = base_plan();
  p.global_batch = 16;  // 2 micro-batches per rank
  p.offload_params = p.offload_activations = p.offload_embeddings = true;
  auto w = lower(m, c, p);
  ASSERT_TRUE(w.ok()) << w.error().message();
  const OpGraph& g = w->stages[0].graph();
  int to_host = 0, to_device = 0, params_in = 0, grads_out = 0, rows = 0, host_update = 0;
  for (auto v : boost::make_iterator_range(boost::vertices(g))) {
    const std::string name = g[v].name;
    if (name == "act_to_host") {
      ++to_host;
      EXPECT_EQ(g[v].stream, StreamId::kCopy);
    }
    if (name == "act_to_device") {
      ++to_device;
      EXPECT_EQ(g[v].stream, StreamId::kCopyIn);
      // It waits for the same activations' trip to the host.
      bool after_out = false;
      for (auto e : boost::make_iterator_range(boost::in_edges(v, g)))
        after_out |= std::string(g[boost::source(e, g)].name) == "act_to_host";
      EXPECT_TRUE(after_out);
    }
    if (name == "param_to_device") ++params_in;
    if (name == "grad_to_host" && g[v].phase == Phase::kBackward) ++grads_out;
    if (name == "embedding_rows_to_device") ++rows;
    if (name == "host_embedding_optimizer") ++host_update;
  }
  EXPECT_EQ(to_host, 2 * m.layers);
  EXPECT_EQ(to_device, 2 * m.layers);
  EXPECT_EQ(params_in, 2 * 2 * m.layers);  // forward and backward
  EXPECT_EQ(grads_out, 2 * m.layers);
  EXPECT_EQ(rows, 2);
  EXPECT_EQ(host_update, 1);
}

TEST(Offload, PlanChecksAndJson) {
  const ModelSpec m = testing::preset_model("llama3-8b");
  Plan p = base_plan();
  p.offload_params = p.offload_activations = p.offload_embeddings = true;
  auto back = plan_from_json(plan_to_json(p), "x.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, p);
  EXPECT_EQ(offload_string(p), "optimizer+params+activations+embeddings");
  EXPECT_TRUE(validate_plan(p, m, 8, "plan.json").ok());

  Plan q = p;
  q.offload_optimizer = false;
  auto s = validate_plan(q, m, 8, "plan.json");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("/offload_params: needs offload_optimizer"), std::string::npos)
      << s.error().message();
  q = p;
  q.pp = 2;
  q.dp = 4;
  q.schedule = Schedule::kZeroBubble;
  s = validate_plan(q, m, 8, "plan.json");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("zero-bubble"), std::string::npos) << s.error().message();
  ModelSpec tied = m;
  tied.tied_embeddings = true;
  q = base_plan();
  q.offload_embeddings = true;
  s = validate_plan(q, tied, 8, "plan.json");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("/offload_embeddings"), std::string::npos) << s.error().message();
  auto bad = plan_from_json(nlohmann::json{{"global_batch", 8}, {"offload_params", "yes"}}, "plan.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("offload_params"), std::string::npos);
}

}  // namespace
}  // namespace foresight

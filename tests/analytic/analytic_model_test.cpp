// The analytic model end to end: consistency checks that follow from first principles.
#include "sim/analytic/analytic_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "sim/analytic/collective.h"
#include "sim/analytic/layer_cost.h"
#include "sim/spec/json_reader.h"
#include "sim/spec/presets.h"
#include "tests/engines.h"
#include "tests/test_util.h"

namespace foresight {
namespace {

ModelSpec model(const std::string& name) { return testing::preset_model(name); }

ClusterSpec cluster(const std::string& name, int gpus) { return testing::preset_cluster(name, gpus); }

Plan plan(int tp, int pp, int dp, int mb, long long gb) { return testing::make_plan(tp, pp, dp, mb, gb); }

// Megatron's usual layout: sequence parallelism and the distributed optimizer (ZeRO-1).
Plan sp_plan(int tp, int pp, int dp, int mb, long long gb) {
  Plan p = plan(tp, pp, dp, mb, gb);
  p.sequence_parallel = true;
  p.zero_stage = 1;
  return p;
}

TEST(AnalyticModel, BreakdownAddsUpAndUtilisationIsBounded) {
  const ModelSpec m = model("llama3-70b");
  const ClusterSpec c = cluster("dgx-h100-ndr", 64);
  Plan p = sp_plan(8, 2, 4, 1, 256);
  auto r = predict(m, c, p, "plan");
  ASSERT_TRUE(r.ok()) << r.error().message();
  const TimeBreakdown& t = r->time;
  const double sum = t.compute + t.tp_comm + t.cp_comm + t.ep_comm + t.pp_comm + t.bubble + t.dp_comm +
                     t.optimizer + t.offload;
  EXPECT_NEAR(sum, t.total, 1e-9 * t.total);
  EXPECT_GT(r->mfu, 0.2);
  EXPECT_LT(r->mfu, c.node.accelerator().gemm_efficiency);  // nothing beats the GEMM efficiency
  EXPECT_NEAR(r->tokens_per_s * r->step_time_s, 256.0 * 8192, 1e-6 * 256 * 8192);
}

TEST(AnalyticModel, ZeroStagesShardStateByDp) {
  const ModelSpec m = model("llama3-8b");
  const ClusterSpec c = cluster("dgx-h100-ndr", 8);
  AnalyticModel am(m, c);
  Plan p = plan(1, 1, 8, 1, 64);
  const MemoryBreakdown z0 = am.memory(p);
  p.zero_stage = 1;
  const MemoryBreakdown z1 = am.memory(p);
  p.zero_stage = 2;
  const MemoryBreakdown z2 = am.memory(p);
  p.zero_stage = 3;
  const MemoryBreakdown z3 = am.memory(p);
  const double n = m.total_params();                // the final norm (h parameters) is within 1e-6
  EXPECT_NEAR(z0.weights / (2 * n), 1.0, 1e-6);     // bf16 weights
  EXPECT_NEAR(z0.gradients / (4 * n), 1.0, 1e-6);   // fp32 gradients (main_grad)
  EXPECT_NEAR(z0.optimizer / (12 * n), 1.0, 1e-6);  // fp32 master + Adam m, v
  EXPECT_NEAR(z1.optimizer / (12 * n / 8), 1.0, 1e-6);
  EXPECT_EQ(z1.gradients, z0.gradients);
  EXPECT_NEAR(z2.gradients / (4 * n / 8), 1.0, 1e-6);
  EXPECT_LT(z3.weights, z2.weights / 4);  // sharded, plus two gathered layers
  EXPECT_EQ(z0.activations, z3.activations);
}

// ZeRO-3 under tensor parallelism: a layer's gathers and reductions run beside everything its pass
// waits for, its exposed TP collectives too (another communicator, on NVLink, while the gathers
// cross nodes). Llama 3 8B at tp 8 over 8 nodes, one rank a node in each data-parallel group: the
// gathers take about a layer's kernels, so the TP all-reduces' time decides what hides. The
// closed form was 21.7% slower than the simulator when it hid them behind the kernels alone.
TEST(AnalyticModel, FullyShardedGathersHideBehindExposedTensorParallelism) {
  const ModelSpec m = model("llama3-8b");
  const ClusterSpec c = cluster("dgx-h100-ndr", 64);
  for (bool sp : {false, true}) {
    Plan p = plan(8, 1, 8, 1, 8);
    p.zero_stage = 3;
    p.sequence_parallel = sp;
    p.recompute = Recompute::kFull;
    p.precision = Precision::kFp8;
    const Prediction a = AnalyticModel(m, c).evaluate(p);
    EXPECT_GT(a.time.tp_comm, a.time.dp_comm);  // the TP collectives are exposed here
    testing::expect_engines_agree(m, c, p, 0.05, sp ? "sequence parallel" : "all-reduce");
  }
}

// ZeRO-3 across pipeline stages runs as FSDP2 under PyTorch's pipelining (Plan::zero3_whole_step):
// a stage's parameters and gradients stay whole through the step -- the memory of ZeRO-1, only the
// optimizer's state sharded -- and each layer is gathered and reduce-scattered once a step, so the
// exposed data-parallel time does not grow with the micro-batches. Without stages ZeRO-3 shards
// them. (torchtitan's 405B 1F1B run on 512 H100s, FSDP 8 x TP 8 x PP 8, reported 82.5 GiB; sharded
// weights and gradients would have put it near 36.)
TEST(AnalyticModel, FullyShardedPipelineStagesHoldTheirLayersWhole) {
  const ModelSpec m = model("llama3-70b");
  const ClusterSpec c = cluster("dgx-h100-ndr", 256);
  AnalyticModel am(m, c);
  Plan z3 = plan(4, 4, 16, 1, 128);
  z3.zero_stage = 3;
  z3.recompute = Recompute::kFull;
  Plan z1 = z3;
  z1.zero_stage = 1;
  ASSERT_TRUE(z3.zero3_whole_step());
  const MemoryBreakdown a = am.evaluate(z3).memory, b = am.evaluate(z1).memory;
  EXPECT_DOUBLE_EQ(a.weights, b.weights);
  EXPECT_DOUBLE_EQ(a.gradients, b.gradients);
  EXPECT_DOUBLE_EQ(a.optimizer, b.optimizer);
  Plan flat = z3;  // no stages: sharded, and two layers gathered at a time
  flat.pp = 1;
  flat.dp = 64;
  flat.global_batch = 128;
  ASSERT_FALSE(flat.zero3_whole_step());
  const MemoryBreakdown f = am.evaluate(flat).memory;
  EXPECT_LT(f.weights * 4, a.weights);  // a quarter of the layers, but the whole of them
  EXPECT_LT(f.gradients * 4, a.gradients);
  // Once a step: twice the micro-batches, the same exposed data-parallel time.
  Plan twice = z3;
  twice.global_batch = 256;
  const Prediction once = am.evaluate(z3), more = am.evaluate(twice);
  EXPECT_NEAR(more.time.dp_comm, once.time.dp_comm, 1e-9 * once.step_time_s);
  EXPECT_GT(once.time.dp_comm, 0.0);
  testing::expect_engines_agree(m, c, z3, 0.05, "ZeRO-3 across 4 stages");
}

// Plan::fsdp_copies (FSDP2): under ZeRO-3 every layer and micro-batch copies its gathered weights
// out of the all-gather buffer, forward and backward, and its gradients into the reduce-scatter
// input, on the compute stream: 2 x 2 bytes and (2 + 4) bytes a parameter of this rank's layer for
// bf16 weights and fp32 reduction, each copy one kernel. With the gathers hidden either way the
// step grows by exactly those copies; both engines price them; other ZeRO stages have none.
TEST(AnalyticModel, FsdpCopiesAreComputeStreamPasses) {
  const ModelSpec m = model("llama3-8b");
  const ClusterSpec c = cluster("dgx-h100-ndr", 8);
  const DeviceSpec& d = c.node.accelerator();
  AnalyticModel am(m, c);
  Plan p = plan(1, 1, 8, 1, 32);
  p.zero_stage = 3;
  const double params = layer_params_per_device(m, false, 1, 1);
  EXPECT_DOUBLE_EQ(fsdp_copies(d, p, params).fwd_s, 0.0);  // not asked for
  p.fsdp_copies = true;
  const FsdpCopies k = fsdp_copies(d, p, params);
  const double rate = d.memory_bandwidth * d.memory_efficiency;
  EXPECT_DOUBLE_EQ(k.copy_out_bytes, 4 * params);
  EXPECT_DOUBLE_EQ(k.chunk_cat_bytes, 6 * params);
  EXPECT_NEAR(k.fwd_s, 4 * params / rate + d.kernel_overhead_s, 1e-12);
  EXPECT_NEAR(k.bwd_s, 10 * params / rate + 2 * d.kernel_overhead_s, 1e-12);
  Plan without = p;
  without.fsdp_copies = false;
  const Prediction a = am.evaluate(without), b = am.evaluate(p);
  const double expected = static_cast<double>(p.micro_batches()) * m.layers * (k.fwd_s + k.bwd_s);
  EXPECT_GT(expected, 0.01 * a.step_time_s);  // large enough to matter here
  EXPECT_NEAR(b.time.compute - a.time.compute, expected, 1e-6 * expected);
  EXPECT_NEAR(b.step_time_s - a.step_time_s, expected, 0.02 * expected);
  const SimResult sa = testing::expect_engines_agree(m, c, without, 0.03, "ZeRO-3 without copies");
  const SimResult sb = testing::expect_engines_agree(m, c, p, 0.03, "ZeRO-3 with FSDP2's copies");
  // In the simulator the longer layers also hide more of the gathers and reductions (two layers
  // live, the collectives sharing NVLink): the step grows by a little less than the copies.
  EXPECT_NEAR(sb.prediction.step_time_s - sa.prediction.step_time_s, expected, 0.2 * expected);
  // ZeRO-1 has no such copies: the flag changes nothing there.
  Plan z1 = p;
  z1.zero_stage = 1;
  Plan z1_plain = z1;
  z1_plain.fsdp_copies = false;
  EXPECT_DOUBLE_EQ(am.evaluate(z1).step_time_s, am.evaluate(z1_plain).step_time_s);
  // The plan file carries it.
  auto back = plan_from_json(plan_to_json(p), "p.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_TRUE(back->fsdp_copies);
  EXPECT_FALSE(plan_to_json(Plan{}).contains("fsdp_copies"));
}

// FP8 delayed scaling (Transformer Engine's DelayedScaling): each chunk's forward and backward end
// with a synchronous all-reduce of its amaxes over every rank of the stage. Without a pipeline
// the step grows by exactly micro-batches x chunks x the two all-reduces, priced on the stage's
// group (here dp 16 x tp 2 over four nodes, ZeRO-1); the simulator runs them on a stream of their own and
// the compute waits, in the data-parallel line; current scaling and bf16 have none.
TEST(AnalyticModel, Fp8DelayedScalingReducesItsAmaxesOverTheStage) {
  const ModelSpec m = model("llama3-8b");
  const ClusterSpec c = cluster("dgx-h100-ndr", 32);
  Plan p = sp_plan(2, 1, 16, 1, 64);
  p.precision = Precision::kFp8;
  p.fp8_recipe = Fp8Recipe::kDelayed;
  const AnalyticModel am(m, c);
  const double fwd = fp8_amax_bytes(m, p, m.layers, true), bwd = fp8_amax_bytes(m, p, m.layers, false);
  EXPECT_DOUBLE_EQ(fwd, 4.0 * 3 * 4 * m.layers);  // three amaxes per GEMM, four GEMMs a layer
  EXPECT_DOUBLE_EQ(bwd, 4.0 * 2 * 4 * m.layers);
  const GroupLink stage = group_link(c, 1, 32, false);
  ASSERT_TRUE(stage.crosses_nodes);
  const double per_mb = allreduce_time(stage, fwd) + allreduce_time(stage, bwd);
  EXPECT_GT(per_mb, 0.0);
  Plan current = p;
  current.fp8_recipe = Fp8Recipe::kCurrent;
  EXPECT_DOUBLE_EQ(fp8_amax_bytes(m, current, m.layers, true), 0.0);
  Plan bf16 = p;
  bf16.precision = Precision::kBf16;
  EXPECT_DOUBLE_EQ(fp8_amax_bytes(m, bf16, m.layers, true), 0.0);
  // Blockwise scaling prices the same kernels without the reductions (it scales each block from
  // its own maximum): the difference is the reductions, in the chunk's time and the
  // data-parallel line.
  Plan blockwise = p;
  blockwise.fp8_recipe = Fp8Recipe::kBlockwise;
  EXPECT_DOUBLE_EQ(fp8_amax_bytes(m, blockwise, m.layers, true), 0.0);
  const Prediction a = am.evaluate(p), b = am.evaluate(blockwise);
  const double expected = static_cast<double>(p.micro_batches()) * per_mb;
  EXPECT_NEAR(a.step_time_s - b.step_time_s, expected, 1e-6 * expected);
  EXPECT_NEAR(a.time.dp_comm - b.time.dp_comm, expected, 1e-6 * expected);
  // Both engines price them; each within 3% of the other, the simulator's difference near the
  // analytic one.
  const SimResult da = testing::expect_engines_agree(m, c, p, 0.03, "fp8 delayed scaling, dp 16 x tp 2");
  const SimResult db = testing::simulated(m, c, blockwise);
  const double simulated = da.prediction.step_time_s - db.prediction.step_time_s;
  EXPECT_GT(simulated, 0.5 * expected);
  EXPECT_LT(simulated, 2.0 * expected);
  // On one GPU there is nothing to reduce.
  const ClusterSpec one = cluster("dgx-h100-ndr", 1);
  Plan solo = plan(1, 1, 1, 1, 4);
  solo.precision = Precision::kFp8;
  solo.fp8_recipe = Fp8Recipe::kDelayed;
  EXPECT_DOUBLE_EQ(AnalyticModel(m, one).evaluate(solo).time.dp_comm, 0.0);
}

TEST(AnalyticModel, PlanThatDoesNotFitIsRejectedWithTheReason) {
  const ModelSpec m = model("llama3-70b");
  const ClusterSpec c = cluster("dgx-a100-hdr", 8);
  auto r = predict(m, c, plan(8, 1, 1, 1, 8), "plan.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("plan.json: plan does not fit in memory: needs"), std::string::npos)
      << r.error().message();
  EXPECT_NE(r.error().message().find("of 80.0 GiB"), std::string::npos) << r.error().message();
}

TEST(AnalyticModel, RecomputeTradesTimeForMemory) {
  const ModelSpec m = model("gpt3-175b");
  const ClusterSpec c = cluster("dgx-a100-hdr", 64);
  AnalyticModel am(m, c);
  Plan p = plan(8, 8, 1, 1, 64);
  p.flash_attention = false;
  p.sequence_parallel = true;
  p.recompute = Recompute::kNone;
  const Prediction none = am.evaluate(p);
  p.recompute = Recompute::kSelective;
  const Prediction sel = am.evaluate(p);
  p.recompute = Recompute::kFull;
  const Prediction full = am.evaluate(p);
  EXPECT_LT(none.step_time_s, sel.step_time_s);
  EXPECT_LT(sel.step_time_s, full.step_time_s);
  EXPECT_GT(none.memory.activations, sel.memory.activations);
  EXPECT_GT(sel.memory.activations, full.memory.activations);
  // Full recompute re-runs the forward: about 4/3 of the work (Korthikanti et al. report 1.32x).
  EXPECT_NEAR(full.time.compute / none.time.compute, 4.0 / 3.0, 0.05);
  EXPECT_NEAR(full.hardware_flops / full.model_flops, 4.0 / 3.0, 0.01);
}

TEST(AnalyticModel, MoreMicroBatchesShrinkTheBubble) {
  const ModelSpec m = model("llama3-70b");
  const ClusterSpec c = cluster("dgx-h100-ndr", 64);
  AnalyticModel am(m, c);
  Plan few = plan(8, 8, 1, 1, 8);
  few.sequence_parallel = true;
  Plan many = few;
  many.global_batch = 64;
  const Prediction a = am.evaluate(few), b = am.evaluate(many);
  EXPECT_GT(a.time.bubble / a.step_time_s, b.time.bubble / b.step_time_s);
  EXPECT_GT(b.mfu, a.mfu);
}

TEST(AnalyticModel, MoeWithExpertParallelism) {
  const ModelSpec m = model("mixtral-8x7b");
  const ClusterSpec c = cluster("dgx-h100-ndr", 64);
  Plan p = plan(2, 1, 32, 1, 256);
  p.ep = 8;
  p.sequence_parallel = true;
  p.zero_stage = 1;
  auto r = predict(m, c, p, "plan");
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_GT(r->time.ep_comm, 0.0);
  // Active parameters, not total, set the FLOPs: MFU stays physical.
  EXPECT_LT(r->mfu, 1.0);
  EXPECT_GT(r->mfu, 0.05);
}

// FP8 as Transformer Engine runs it: the linear layers' GEMMs at the device's FP8 efficiency,
// plus the quantisation kernels; attention, norms and the output layer in 16 bits. The step is
// faster than BF16's, but well short of the peaks' 2x, and a device without gemm_fp8 prices FP8
// GEMMs at its 16-bit efficiency.
TEST(AnalyticModel, Fp8SpeedsUpOnlyTheLinearLayers) {
  const ModelSpec m = model("llama3-70b");
  const ClusterSpec c = cluster("dgx-h100-ndr", 64);
  Plan p = sp_plan(4, 4, 4, 1, 256);
  const Prediction bf16 = AnalyticModel(m, c).evaluate(p);
  p.precision = Precision::kFp8;
  const Prediction fp8 = AnalyticModel(m, c).evaluate(p);
  const double speedup = bf16.time.compute / fp8.time.compute;
  EXPECT_GT(speedup, 1.2);
  EXPECT_LT(speedup, 2.0 * c.node.accelerator().fp8_gemm_efficiency() / c.node.accelerator().gemm_efficiency);
  // With FP8 GEMMs as efficient as 16-bit ones, still short of 2x: the casts and the 16-bit parts.
  ClusterSpec same = c;
  for (auto& g : same.node.devices) g.device.gemm_fp8_efficiency = 0;
  const Prediction fp8_same = AnalyticModel(m, same).evaluate(p);
  EXPECT_LT(fp8_same.time.compute, fp8.time.compute);
  EXPECT_LT(bf16.time.compute / fp8_same.time.compute, 1.9);
}

// Plan::fp8_recipe: current scaling reads each cast's input once more for its amax (and runs the
// scale's kernel), so it is slower than delayed scaling by a memory pass: on a device with 100x
// the memory bandwidth the gap shrinks to the extra launches. Fused norms and activations
// (kernel_fusion) produce the amax of what they write, so less of it is paid there. Blockwise and
// MXFP8 find their scales inside the cast, as delayed scaling prices it; a bf16 plan ignores the
// recipe.
TEST(AnalyticModel, Fp8CurrentScalingReadsEachCastInputOnceMore) {
  const ModelSpec m = model("llama3-70b");
  const ClusterSpec c = cluster("dgx-h100-ndr", 64);
  Plan p = sp_plan(4, 4, 4, 1, 256);
  p.precision = Precision::kFp8;
  auto compute = [&](const ClusterSpec& on, Fp8Recipe r, bool fusion, Precision precision = Precision::kFp8) {
    Plan q = p;
    q.fp8_recipe = r;
    q.precision = precision;
    q.kernel_fusion = fusion;
    return AnalyticModel(m, on).evaluate(q).time.compute;
  };
  const double delayed = compute(c, Fp8Recipe::kDelayed, false),
               current = compute(c, Fp8Recipe::kCurrent, false);
  EXPECT_GT(current, delayed * 1.005);
  EXPECT_LT(current, delayed * 1.10);
  EXPECT_DOUBLE_EQ(compute(c, Fp8Recipe::kBlockwise, false), delayed);
  EXPECT_DOUBLE_EQ(compute(c, Fp8Recipe::kMxfp8, false), delayed);
  EXPECT_DOUBLE_EQ(compute(c, Fp8Recipe::kCurrent, false, Precision::kBf16),
                   compute(c, Fp8Recipe::kDelayed, false, Precision::kBf16));
  ClusterSpec fast = c;
  for (auto& g : fast.node.devices) g.device.memory_bandwidth *= 100;
  const double gap_fast =
      compute(fast, Fp8Recipe::kCurrent, false) - compute(fast, Fp8Recipe::kDelayed, false);
  EXPECT_GT(gap_fast, 0.0);
  EXPECT_LT(gap_fast, 0.35 * (current - delayed));
  const double gap_fused = compute(c, Fp8Recipe::kCurrent, true) - compute(c, Fp8Recipe::kDelayed, true);
  EXPECT_GT(gap_fused, 0.0);
  EXPECT_LT(gap_fused, 0.8 * (current - delayed));
}

TEST(AnalyticModel, MlaModelEvaluates) {
  const ModelSpec m = model("deepseek-v3");
  const ClusterSpec c = cluster("h800-ib", 2048);
  Plan p = plan(1, 16, 128, 1, 15360 / 4);
  p.ep = 64;
  p.schedule = Schedule::kDualPipe;
  p.zero_stage = 1;
  p.precision = Precision::kFp8;
  AnalyticModel am(m, c);
  const Prediction r = am.evaluate(p);
  EXPECT_GT(r.step_time_s, 0.0);
  EXPECT_TRUE(std::isfinite(r.mfu));
}

// A per-chunk layer_split that spells out the even chunks changes nothing; the uneven one of
// Megatron-Bridge's 405B run (126 layers, pp 8, vp 8, the embedding and the loss each taking a
// layer's place) gives stage 0 and stage 7 one layer fewer: 15, 16, ..., 16, 15.
TEST(AnalyticModel, PerChunkLayerSplit) {
  ModelSpec m = model("llama3-405b");
  const ClusterSpec c = cluster("dgx-h100-ndr", 1024);
  Plan p = testing::make_plan(8, 8, 16, 1, 512);
  p.sequence_parallel = true;
  p.zero_stage = 1;
  p.recompute = Recompute::kFull;
  p.schedule = Schedule::kInterleaved1F1B;
  p.virtual_stages = 8;
  m.layers = 128;  // even: 2 per chunk
  const AnalyticModel even(m, c);
  const Prediction implicit = even.evaluate(p);
  Plan spelled = p;
  spelled.layer_split.assign(64, 2);
  const Prediction explicit_split = even.evaluate(spelled);
  EXPECT_EQ(implicit.step_time_s, explicit_split.step_time_s);
  EXPECT_EQ(implicit.memory.total, explicit_split.memory.total);

  m.layers = 126;
  const AnalyticModel am(m, c);
  EXPECT_FALSE(validate_plan(p, m, 1024, "plan").ok());  // 64 chunks do not divide 126 layers
  p.layer_split.assign(64, 2);
  p.layer_split.front() = 1;
  p.layer_split.back() = 1;
  ASSERT_TRUE(validate_plan(p, m, 1024, "plan").ok());
  EXPECT_EQ(p.stage_layer_count(m.layers, 0), 15);
  EXPECT_EQ(p.stage_layer_count(m.layers, 3), 16);
  EXPECT_EQ(p.stage_layer_count(m.layers, 7), 15);
  // A middle stage holds one layer more than stage 0: its weights are 16/15 of theirs less the
  // embedding table, which only stage 0 holds.
  const MemoryBreakdown first = am.stage_memory(p, 0), middle = am.stage_memory(p, 3);
  const double table = static_cast<double>(m.vocab) * m.hidden / p.tp * weight_bytes(p.precision);
  EXPECT_GT(middle.weights, 0.0);
  EXPECT_NEAR(first.weights - table, 15.0 / 16.0 * middle.weights, 1e-6 * middle.weights);
  const Prediction uneven = am.evaluate(p);
  EXPECT_GT(uneven.step_time_s, 0);
  // 126 of 128 layers' work, both ends still on the critical path: a little faster than 128.
  EXPECT_LT(uneven.step_time_s, implicit.step_time_s);
  EXPECT_GT(uneven.step_time_s, 0.95 * implicit.step_time_s);
}

// The overlapped gradient reduction runs a bucket per layer, each paying the ring's n-1 latency
// steps: at a fixed batch per rank the exposed part grows with the data-parallel group (as
// Nemotron-4 15B's step did from 768 to 2,304 GPUs, Parmar et al. Table 2), where one
// collective's latency would hardly move it.
// A parallel block (attention and MLP on one norm's output) reduces both blocks' row-parallel
// outputs at once: half the TP collectives of a sequential layer, one norm, less activation
// memory; a sliding window of w keys prices the attention over seq*w - w^2/2 pairs instead of
// seq^2/2.
TEST(AnalyticModel, ParallelBlocksAndSlidingWindows) {
  const ModelSpec m = model("gpt3-175b");
  const ClusterSpec c = cluster("dgx-a100-hdr", 64);
  Plan p = plan(8, 8, 1, 1, 64);
  p.sequence_parallel = true;
  const Prediction seq = AnalyticModel(m, c).evaluate(p);
  ModelSpec par = m;
  par.parallel_block = true;
  const Prediction side = AnalyticModel(par, c).evaluate(p);
  EXPECT_NEAR(side.time.tp_comm / seq.time.tp_comm, 0.5, 0.02);
  EXPECT_LT(side.memory.activations, seq.memory.activations);
  EXPECT_LT(side.time.compute, seq.time.compute);  // a norm and a residual add fewer

  const LayerShape full = plan_layer_shape(m, p);
  ModelSpec swa = m;
  swa.sliding_window = 512;
  const LayerShape band = plan_layer_shape(swa, p);
  const double s = m.seq_len, w = 512;
  EXPECT_NEAR(0.5 * s * band.kv_seq, s * w - w * w / 2, 1e-6);  // causal pairs of the band
  EXPECT_NEAR(dense_layer_flops(swa, band).attn_core / dense_layer_flops(m, full).attn_core,
              (2 * w - w * w / s) / s, 1e-12);
  EXPECT_LT(AnalyticModel(swa, c).evaluate(p).time.compute, seq.time.compute);
  swa.sliding_window = m.seq_len;  // a window as long as the sequence changes nothing
  EXPECT_DOUBLE_EQ(plan_layer_shape(swa, p).kv_seq, full.kv_seq);
}

// With MoE parallel folding an MoE layer's MLP keeps its own norm even in a parallel-block model
// (the kernel list runs it): its activations keep both norms' inputs and the MLP's own norm
// output, as a sequential layer's do; dense layers and unfolded MoE layers share one norm.
TEST(AnalyticModel, FoldedExpertsKeepTheirNormInParallelBlocks) {
  const ModelSpec m = model("mixtral-8x7b");
  ModelSpec par = m;
  par.parallel_block = true;
  Plan p = plan(4, 1, 8, 1, 64);
  p.sequence_parallel = true;
  p.ep = 8;
  p.expert_tp = 1;
  LayerShape s = plan_layer_shape(m, p);
  ASSERT_TRUE(s.experts_folded);
  for (bool moe : {false, true}) {
    const double seq = layer_activation_bytes(m, s, Recompute::kNone, true, moe);
    const double side = layer_activation_bytes(par, s, Recompute::kNone, true, moe);
    if (moe)
      EXPECT_DOUBLE_EQ(side, seq);
    else
      EXPECT_LT(side, seq);
  }
  p.expert_tp = 0;  // unfolded: the MoE layer shares the attention's norm too
  s = plan_layer_shape(m, p);
  ASSERT_FALSE(s.experts_folded);
  EXPECT_LT(layer_activation_bytes(par, s, Recompute::kNone, true, true),
            layer_activation_bytes(m, s, Recompute::kNone, true, true));
}

// An "interleaved" plan with one model chunk per rank is 1F1B: the same micro-batches in flight
// (it once counted 2p-1 on the first stage and refused Llama 3 70B on 64 H100s at 139 GiB), the
// same bubble and the same step.
TEST(AnalyticModel, InterleavedWithOneVirtualStageIsOneFOneB) {
  const ModelSpec m = model("llama3-70b");
  const ClusterSpec c = cluster("dgx-h100-ndr", 64);
  Plan p = sp_plan(8, 4, 2, 1, 256);
  p.recompute = Recompute::kSelective;
  const Prediction plain = AnalyticModel(m, c).evaluate(p);
  p.schedule = Schedule::kInterleaved1F1B;
  p.virtual_stages = 1;
  const Prediction one = AnalyticModel(m, c).evaluate(p);
  EXPECT_DOUBLE_EQ(activations_in_flight(p, 0), 4.0);
  EXPECT_DOUBLE_EQ(one.memory.activations, plain.memory.activations);
  EXPECT_DOUBLE_EQ(one.step_time_s, plain.step_time_s);
  p.virtual_stages = 2;  // two chunks: more in flight than 1F1B
  EXPECT_GT(activations_in_flight(p, 0), 4.0);
}

// Merged forward/backward pairs (overlap_ep_comm) keep one chunk's activations more: Megatron-Core
// runs one more warm-up forward (interleaved), and one stage runs the next forward before the
// backward (two micro-batches in flight); DualPipe's pairs are inside its own schedule.
TEST(AnalyticModel, MergedPairsKeepOneMoreChunkInFlight) {
  Plan p = plan(1, 4, 16, 1, 256);
  p.ep = 8;
  p.schedule = Schedule::kInterleaved1F1B;
  p.virtual_stages = 2;
  const double alone = activations_in_flight(p, 0);
  p.overlap_ep_comm = true;
  EXPECT_DOUBLE_EQ(activations_in_flight(p, 0), alone + 0.5);
  p.schedule = Schedule::kDualPipe;
  p.virtual_stages = 1;
  const double dualpipe = activations_in_flight(p, 0);
  p.overlap_ep_comm = false;
  EXPECT_DOUBLE_EQ(activations_in_flight(p, 0), dualpipe);
  p = plan(1, 1, 64, 1, 256);
  p.ep = 8;
  EXPECT_DOUBLE_EQ(activations_in_flight(p, 0), 1.0);
  p.overlap_ep_comm = true;
  EXPECT_DOUBLE_EQ(activations_in_flight(p, 0), 2.0);
}

TEST(AnalyticModel, OverlappedReductionPaysEachBucketsLatency) {
  const ModelSpec m = model("llama3-8b");
  auto exposed = [&](int dp) {
    Plan p = plan(8, 1, dp, 1, dp);
    p.sequence_parallel = true;
    p.zero_stage = 1;
    p.overlap_grad_reduce = true;
    return AnalyticModel(m, cluster("dgx-h100-ndr", 8 * dp)).evaluate(p).time.dp_comm;
  };
  const double small = exposed(32), large = exposed(256);
  EXPECT_GT(large, small);
  const GroupLink ring = group_link(cluster("dgx-h100-ndr", 8 * 256), 8, 256);
  const double bucket_latency = collective_latency_steps(CollectiveOp::kReduceScatter, 256) * ring.latency_s;
  EXPECT_GT(large - small, 0.5 * (m.layers - 1) * (bucket_latency * (1 - 31.0 / 255)));
}

// With the gradient reduction overlapped, the layers' buckets hide behind the backward but the
// tables' share (embedding and head, whose gradients the simulator reduces after the backward)
// waits whole: by hand, on one 8-GPU node.
TEST(AnalyticModel, OverlappedReductionExposesTheTables) {
  const ModelSpec m = model("llama3-8b");
  const ClusterSpec c = cluster("dgx-h100-ndr", 8);
  Plan p = plan(1, 1, 8, 1, 16);
  p.zero_stage = 0;  // an all-reduce, nothing to gather after the step
  p.overlap_grad_reduce = true;
  const Prediction pr = AnalyticModel(m, c).evaluate(p);
  const double tables = m.end_params_on_stage(0, 1, false, 1);
  const double all = m.layers * layer_params_per_device(m, false, 1, 1) + tables;
  const GroupLink link = group_link(c, 1, 8);
  const double reduce = allreduce_time(link, all * 4.0);  // fp32 gradients
  const double table_share = reduce * tables / all;
  const double per_bucket = collective_latency_steps(CollectiveOp::kAllReduce, 8) * link.latency_s;
  const double layers_part = reduce - table_share + (m.layers - 1) * per_bucket;
  const double exposed = layers_part / m.layers + table_share;
  // The compute beside the hidden rest runs without NCCL's 16 of the H100's 132 SMs.
  const double stretch = 132.0 / (132 - 16);
  EXPECT_NEAR(pr.time.dp_comm, exposed + (reduce - exposed) * (stretch - 1), 1e-6 * pr.time.dp_comm);
  EXPECT_GT(table_share, 0.1 * reduce);  // a 128K vocabulary: a large share
}

// Megatron-Core's buckets (Plan::grad_bucket_params), by hand on one 8-GPU node as above: one
// bucket for the stage's layers hides nothing; six expose the last one (a sixth of the
// bandwidth term and a latency of its own) beside the tables' reduction.
TEST(AnalyticModel, MegatronBucketsExposeTheirLastBucket) {
  const ModelSpec m = model("llama3-8b");
  const ClusterSpec c = cluster("dgx-h100-ndr", 8);
  Plan p = plan(1, 1, 8, 1, 16);
  p.zero_stage = 0;
  p.overlap_grad_reduce = true;
  const double tables = m.end_params_on_stage(0, 1, false, 1);
  const double layers = m.layers * layer_params_per_device(m, false, 1, 1);
  const GroupLink link = group_link(c, 1, 8);
  const double reduce = allreduce_time(link, (layers + tables) * 4.0);
  const double table_share = reduce * tables / (layers + tables);
  const double per_bucket = collective_latency_steps(CollectiveOp::kAllReduce, 8) * link.latency_s;
  const double stretch = 132.0 / (132 - 16);
  p.grad_bucket_params = plan_range::kGradBucketParams.max;
  EXPECT_NEAR(AnalyticModel(m, c).evaluate(p).time.dp_comm, reduce, 1e-9 * reduce);
  p.grad_bucket_params = static_cast<std::int64_t>(layers / 6.5);
  const double exposed = (reduce - table_share - per_bucket) / 6 + per_bucket + table_share;
  const double dp_comm = AnalyticModel(m, c).evaluate(p).time.dp_comm;
  EXPECT_NEAR(dp_comm, exposed + (reduce - exposed) * (stretch - 1), 1e-6 * dp_comm);
  p.grad_bucket_params = 0;  // a bucket a layer: less exposed than six buckets
  EXPECT_LT(AnalyticModel(m, c).evaluate(p).time.dp_comm, dp_comm);
}

// A collective overlapped with compute holds SMs of its own (NodeSpec::collective_sms): the
// compute beside it runs on the rest, in both engines; a node that would leave no SM is refused.
TEST(AnalyticModel, OverlappedCollectivesTakeSmsFromTheCompute) {
  const ModelSpec m = model("llama3-8b");
  const ClusterSpec c = cluster("dgx-h100-ndr", 32);
  ASSERT_EQ(c.node.collective_sms, 16);
  EXPECT_DOUBLE_EQ(collective_compute_stretch(c.node, c.node.accelerator()), 132.0 / 116);
  ClusterSpec free = c;
  free.node.collective_sms = 0;
  EXPECT_DOUBLE_EQ(collective_compute_stretch(free.node, free.node.accelerator()), 1.0);
  Plan p = plan(1, 1, 32, 1, 64);
  p.zero_stage = 3;  // FSDP: every layer's gathers and reduce-scatters beside its compute
  p.recompute = Recompute::kFull;
  const Prediction held = AnalyticModel(m, c).evaluate(p), alone = AnalyticModel(m, free).evaluate(p);
  EXPECT_DOUBLE_EQ(held.time.compute, alone.time.compute);
  const double extra = held.step_time_s - alone.step_time_s;
  EXPECT_GT(extra, 0.01 * alone.step_time_s);                // four nodes: the gathers run over InfiniBand
  EXPECT_LT(extra, (132.0 / 116 - 1) * alone.time.compute);  // at most all the compute slowed
  const SimResult d_held = testing::expect_engines_agree(m, c, p, 0.03, "with collective_sms");
  const SimResult d_alone = testing::expect_engines_agree(m, free, p, 0.03, "without");
  EXPECT_NEAR(d_held.prediction.step_time_s - d_alone.prediction.step_time_s, extra, 0.5 * extra);

  auto doc = parse_json_text(R"({"name": "n", "devices": [{"device": "h100-sxm5-80gb", "count": 8}],
                                 "fabric": {"bandwidth": "450GB/s"}, "collective_sms": 132})",
                             "n.json");
  ASSERT_TRUE(doc.ok());
  auto n = node_from_json(*doc, "n.json");
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.error().message().find("/collective_sms: 132 leaves no SM of device h100-sxm5-80gb (132 SMs)"),
            std::string::npos)
      << n.error().message();
}

}  // namespace
}  // namespace foresight

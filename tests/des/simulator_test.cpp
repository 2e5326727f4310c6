// The discrete-event simulator: schedules against closed forms, agreement with the analytic model,
// symmetry against full simulation, traces.
#include "sim/des/simulator.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "sim/analytic/analytic_model.h"
#include "sim/analytic/collective.h"
#include "sim/analytic/layer_ops.h"
#include "sim/des/trace.h"
#include "sim/spec/json_reader.h"
#include "sim/spec/presets.h"
#include "tests/engines.h"
#include "tests/test_util.h"

namespace foresight {
namespace {

ModelSpec model(const std::string& name) { return testing::preset_model(name); }

ClusterSpec cluster(const std::string& name, int gpus) { return testing::preset_cluster(name, gpus); }

Plan plan(int tp, int pp, int dp, int mb, long long gb) { return testing::make_plan(tp, pp, dp, mb, gb); }

SimResult run(const ModelSpec& m, const ClusterSpec& c, const Plan& p, SimOptions o = {}) {
  return testing::simulated(m, c, p, o);
}

// A model whose stages are uniform and whose embedding and head are negligible (`layers` layers of
// `name`, an 8-token vocabulary) on a 4-GPU node whose fabric makes pipeline transfers free.
// (Callers take .first and .second: clang 14 cannot capture structured bindings in lambdas.)
std::pair<ModelSpec, ClusterSpec> uniform_pipeline(const std::string& name, int layers) {
  ModelSpec m = model(name);
  m.layers = layers;
  m.vocab = 8;
  ClusterSpec c = cluster("dgx-a100-hdr", 4);
  c.node.fabric.bandwidth = 1e18;
  c.node.fabric.latency_s = 0;
  return {m, c};
}

// Uniform stages, free transfers: the 1F1B bubble must be (p-1)/(m+p-1).
TEST(Simulator, OneFOneBBubbleMatchesClosedForm) {
  const auto setup = uniform_pipeline("gpt3-175b", 8);
  const ModelSpec& m = setup.first;
  const ClusterSpec& c = setup.second;
  for (int mbs : {4, 8, 16}) {
    const SimResult r = run(m, c, plan(1, 4, 1, 1, mbs));
    const double p = 4;
    const double fraction = (r.prediction.time.bubble + r.prediction.time.pp_comm) / r.prediction.step_time_s;
    EXPECT_NEAR(fraction, (p - 1) / (mbs + p - 1), 0.02) << "m=" << mbs;
  }
}

TEST(Simulator, InterleavingDividesTheBubble) {
  const auto setup = uniform_pipeline("llama3-8b", 16);
  const ModelSpec& m = setup.first;
  const ClusterSpec& c = setup.second;
  Plan p1 = plan(1, 4, 1, 1, 16);
  Plan p2 = p1;
  p2.schedule = Schedule::kInterleaved1F1B;
  p2.virtual_stages = 2;
  const SimResult a = run(m, c, p1), b = run(m, c, p2);
  const double bubble_a = a.prediction.step_time_s - a.prediction.time.compute;
  const double bubble_b = b.prediction.step_time_s - b.prediction.time.compute;
  EXPECT_NEAR(bubble_b / bubble_a, 0.5, 0.05);
}

TEST(Simulator, ZeroBubbleBeatsOneFOneB) {
  ModelSpec m = model("gpt3-175b");
  m.layers = 8;
  m.vocab = 8;
  ClusterSpec c = cluster("dgx-a100-hdr", 4);
  Plan p = plan(1, 4, 1, 1, 8);
  const SimResult a = run(m, c, p);
  p.schedule = Schedule::kZeroBubble;
  const SimResult b = run(m, c, p);
  EXPECT_LT(b.prediction.step_time_s, a.prediction.step_time_s);
  EXPECT_NEAR(b.prediction.time.compute, a.prediction.time.compute, 1e-6 * a.prediction.time.compute);
  // ZB-H1's bubble is (p-1)(F+B-W) (Qi et al. 2024): a third of 1F1B's when F = B = W; here
  // attention and the elementwise kernels have no weight part, so W is under a third of the work
  // and the bubble between a third and a half of 1F1B's.
  const double bubble_1f1b = a.prediction.step_time_s - a.prediction.time.compute;
  const double bubble_zb = b.prediction.step_time_s - b.prediction.time.compute;
  EXPECT_GT(bubble_zb / bubble_1f1b, 1.0 / 3);
  EXPECT_LT(bubble_zb / bubble_1f1b, 0.5);
  // And the simulator agrees with the analytic formula.
  const Prediction analytic = AnalyticModel(m, c).evaluate(p);
  EXPECT_NEAR(b.prediction.step_time_s / analytic.step_time_s, 1.0, 0.03);
}

// ZB-H1 with tensor parallelism and full recompute, as many micro-batches as stages (where the
// bubble weighs most): the weight gradients are a quarter of a micro-batch's work, not a third,
// and the later stages hold theirs back so that the cooldown's backwards pass through unqueued.
// Both engines were 16-21% apart on such plans (the simulator ran every W as a gap filler, which
// a steady state without gaps piles up at the end; the closed form took W as a third).
TEST(Simulator, ZeroBubbleWithRecomputeAgreesWithTheClosedForm) {
  ModelSpec m = model("llama3-70b");
  m.seq_len = 2048;
  m.layers = 16;
  const ClusterSpec c = cluster("dgx-h100-ndr", 64);
  Plan p = plan(8, 8, 1, 1, 8);
  p.sequence_parallel = true;
  p.recompute = Recompute::kFull;
  p.schedule = Schedule::kZeroBubble;
  ASSERT_TRUE(validate_plan_on(p, m, c, "plan").ok());
  const SimResult zb = testing::expect_engines_agree(m, c, p, 0.07, "zero-bubble, full recompute");
  Plan one = p;
  one.schedule = Schedule::k1F1B;
  const SimResult f1b = run(m, c, one);
  EXPECT_LT(zb.prediction.step_time_s, f1b.prediction.step_time_s);
}

// Without contention and without overlap, the simulator and the analytic model agree within 2%.
TEST(Simulator, AgreesWithTheAnalyticModel) {
  struct Case {
    const char* model;
    const char* cluster;
    int gpus, tp, pp, dp, mb;
    long long gb;
    bool sp;
    int zero;
  };
  const Case cases[] = {
      {"llama3-70b", "dgx-h100-ndr", 64, 8, 2, 4, 1, 256, true, 1},
      {"gpt3-175b", "dgx-a100-hdr", 64, 8, 8, 1, 1, 64, true, 0},
      {"llama3-8b", "dgx-h100-ndr", 16, 2, 2, 4, 1, 64, true, 1},
      {"llama3-405b", "dgx-h100-ndr", 2048, 8, 16, 16, 1, 256, true, 1},
  };
  for (const auto& k : cases) {
    const ModelSpec m = model(k.model);
    const ClusterSpec c = cluster(k.cluster, k.gpus);
    Plan p = plan(k.tp, k.pp, k.dp, k.mb, k.gb);
    p.sequence_parallel = k.sp;
    p.zero_stage = k.zero;
    if (k.pp == 16) p.recompute = Recompute::kFull;
    const SimResult r = run(m, c, p);
    const Prediction a = AnalyticModel(m, c).evaluate(p);
    EXPECT_NEAR(r.prediction.step_time_s / a.step_time_s, 1.0, 0.02) << k.model << " on " << k.gpus;
  }
}

// Symmetry: simulating one rank per stage gives the same step as simulating every rank.
TEST(Simulator, SymmetricEqualsFull) {
  const ModelSpec m = model("llama3-8b");
  for (const auto& [tp, pp, dp] : {std::tuple{2, 2, 4}, std::tuple{4, 2, 2}, std::tuple{1, 4, 4}}) {
    const ClusterSpec c = cluster("dgx-h100-ndr", 16);
    Plan p = plan(tp, pp, dp, 1, 32);
    p.zero_stage = 1;
    p.recompute = Recompute::kFull;
    const SimResult sym = run(m, c, p);
    SimOptions full;
    full.full = true;
    const SimResult all = run(m, c, p, full);
    EXPECT_NEAR(sym.prediction.step_time_s, all.prediction.step_time_s, 1e-9 * all.prediction.step_time_s)
        << tp << "x" << pp << "x" << dp;
    EXPECT_EQ(static_cast<int>(all.simulated_ranks.size()), 16);
    EXPECT_EQ(static_cast<int>(sym.simulated_ranks.size()), pp);
  }
}

// FSDP over an oversubscribed two-tier fabric: flows keep changing rates, so completion events
// go stale and network task slots are reused. A stale event once completed the slot's next task
// (versions restarted per task); symmetric and full runs then disagreed (1.2199 s vs 1.2228 s).
TEST(Simulator, SymmetricEqualsFullUnderContention) {
  const ModelSpec m = model("llama3-8b");
  const ClusterSpec c = cluster("two-tier-ib-eth", 64);
  Plan p = plan(2, 2, 16, 1, 64);
  p.zero_stage = 3;
  const SimResult sym = run(m, c, p);
  SimOptions full;
  full.full = true;
  const SimResult all = run(m, c, p, full);
  EXPECT_NEAR(sym.prediction.step_time_s, all.prediction.step_time_s, 1e-9 * all.prediction.step_time_s);
}

TEST(Simulator, DataParallelOverlapHidesGradientReduction) {
  const ModelSpec m = model("llama3-8b");
  const ClusterSpec c = cluster("dgx-a100-hdr", 32);
  Plan p = plan(1, 1, 32, 1, 64);
  p.zero_stage = 1;
  p.recompute = Recompute::kFull;
  const SimResult serial = run(m, c, p);
  p.overlap_grad_reduce = true;
  const SimResult overlapped = run(m, c, p);
  EXPECT_LT(overlapped.prediction.time.dp_comm, serial.prediction.time.dp_comm);
  EXPECT_LT(overlapped.prediction.step_time_s, serial.prediction.step_time_s);
}

// Interleaved, a chunk's gradients are reduced once its last micro-batch's backward is done, and
// the last group of micro-batches runs its backward chunk by chunk: the reduction hides behind the
// backward of the chunks still to come, not one micro-batch's. Llama 3 70B at 1K tokens, tp 8,
// four stages of four chunks, 8 micro-batches over 4 data-parallel ranks across nodes, whose
// reduction (fp32 gradients) outlasts a micro-batch's backward: both engines agree on what stays
// exposed.
// Interleaved 1F1B at tp 8 with SP and ZeRO-1, 32 sequences: pp stages of vp chunks, dp ranks.
Plan interleaved_sp_plan(int pp, int dp, int vp) {
  Plan p = plan(8, pp, dp, 1, 32);
  p.sequence_parallel = true;
  p.zero_stage = 1;
  p.schedule = Schedule::kInterleaved1F1B;
  p.virtual_stages = vp;
  return p;
}

// That plan: four stages of four chunks, dp 4, the reduction overlapped.
Plan interleaved_reduction_plan() {
  Plan p = interleaved_sp_plan(4, 4, 4);
  p.overlap_grad_reduce = true;
  return p;
}

TEST(Simulator, InterleavedReductionHidesBehindTheLastGroupsBackward) {
  ModelSpec m = model("llama3-70b");
  m.seq_len = 1024;
  const ClusterSpec c = cluster("dgx-a100-hdr", 128);
  const Plan p = interleaved_reduction_plan();
  ASSERT_TRUE(validate_plan_on(p, m, c, "plan").ok());
  const Prediction a = AnalyticModel(m, c).evaluate(p);
  // Within 4%: the exposed reduction, where the engines' schedules differ most, is a large share of
  // this short step (3.0% apart at the A100's fitted GEMM rate of 0.70).
  const SimResult d = testing::expect_engines_agree(m, c, p, 0.04, "interleaved reduction");
  EXPECT_NEAR(a.time.dp_comm, d.prediction.time.dp_comm, 0.3 * d.prediction.time.dp_comm);
  Plan one = p;  // the same reduction behind one micro-batch's backward
  one.schedule = Schedule::k1F1B;
  one.virtual_stages = 1;
  EXPECT_LT(a.time.dp_comm, AnalyticModel(m, c).evaluate(one).time.dp_comm);
}

// Megatron-Core's buckets on the same plan (Plan::grad_bucket_params): NeMo 2's 128Mi, and one
// bucket a chunk (bucketing off): both engines agree. Where the backward hides the reduction
// (4K tokens), a bucket a chunk exposes its first chunk's reduction, more than a bucket a layer
// exposes; where the reduction outlasts the backward (1K), the bucketing matters little.
TEST(Simulator, MegatronBucketsAgreeAcrossEngines) {
  ModelSpec m = model("llama3-70b");
  const ClusterSpec c = cluster("dgx-a100-hdr", 128);
  Plan p = interleaved_reduction_plan();
  for (int seq : {1024, 4096}) {
    m.seq_len = seq;
    p.grad_bucket_params = 0;
    const Prediction layered = AnalyticModel(m, c).evaluate(p);
    const SimResult layered_d = run(m, c, p);
    for (std::int64_t size : {std::int64_t{128} * 1024 * 1024, plan_range::kGradBucketParams.max}) {
      p.grad_bucket_params = size;
      const SimResult d = testing::expect_engines_agree(m, c, p, 0.04, "megatron buckets");
      const Prediction a = AnalyticModel(m, c).evaluate(p);
      EXPECT_NEAR(a.time.dp_comm, d.prediction.time.dp_comm, 0.3 * d.prediction.time.dp_comm) << size;
      if (seq == 1024) {
        EXPECT_NEAR(a.step_time_s, layered.step_time_s, 0.01 * layered.step_time_s) << size;
      }
    }
    if (seq == 4096) {
      EXPECT_GT(AnalyticModel(m, c).evaluate(p).time.dp_comm, 1.1 * layered.time.dp_comm);
      EXPECT_GT(run(m, c, p).prediction.step_time_s, layered_d.prediction.step_time_s);
    }
  }
}

// Megatron's --overlap-param-gather: the ZeRO-1 parameter all-gather moves from the end of the
// step into the first forward, where the compute hides it; both engines agree on the result.
TEST(Simulator, ParamGatherOverlapHidesTheZeroOneAllGather) {
  const ModelSpec m = model("llama3-8b");
  const ClusterSpec c = cluster("dgx-a100-hdr", 32);
  Plan p = plan(1, 1, 32, 1, 64);
  p.zero_stage = 1;
  p.recompute = Recompute::kFull;
  p.overlap_grad_reduce = true;
  const SimResult serial = run(m, c, p);
  const Prediction serial_a = AnalyticModel(m, c).evaluate(p);
  p.overlap_param_gather = true;
  const SimResult overlapped = testing::expect_engines_agree(m, c, p, 0.05, "overlap_param_gather");
  const Prediction overlapped_a = AnalyticModel(m, c).evaluate(p);
  EXPECT_LT(overlapped.prediction.step_time_s, serial.prediction.step_time_s);
  EXPECT_LT(overlapped_a.time.dp_comm, serial_a.time.dp_comm);
  // Without ZeRO-1/2 there is no parameter all-gather to overlap.
  p.zero_stage = 0;
  const Prediction z0_on = AnalyticModel(m, c).evaluate(p);
  p.overlap_param_gather = false;
  EXPECT_DOUBLE_EQ(AnalyticModel(m, c).evaluate(p).step_time_s, z0_on.step_time_s);
}

// Interleaved, a chunk's parameters are first needed by its group's first micro-batch, after the
// group ran the chunks before it (Megatron's schedule syncs chunk k+1 a group ahead): the window
// that hides the gather is the group's forwards, not one micro-batch's. GPT-3 175B's 96 layers on
// 4 stages of 12 chunks, 4-way data parallel across nodes: the analytic model once exposed 0.24 s
// of it (0.10 s above the simulator's step).
TEST(Simulator, InterleavedParamGatherHidesBehindTheGroup) {
  const ModelSpec m = model("gpt3-175b");
  const ClusterSpec c = cluster("dgx-h100-ndr", 128);
  Plan p = interleaved_sp_plan(4, 4, 12);
  p.overlap_grad_reduce = p.overlap_param_gather = p.overlap_p2p_comm = true;
  testing::expect_engines_agree(m, c, p, 0.02, "interleaved param gather");
}

// grad_reduce_precision bf16 halves the gradient reduction's bytes (and the gradient buffer).
TEST(Simulator, GradientsReducedInBf16MoveHalfTheBytes) {
  const ModelSpec m = model("llama3-8b");
  const ClusterSpec c = cluster("dgx-a100-hdr", 32);
  Plan p = plan(1, 1, 32, 1, 64);
  p.zero_stage = 2;  // gradients sharded: their reduce-scatter is the step's only reduction
  p.recompute = Recompute::kFull;
  const Prediction fp32 = AnalyticModel(m, c).evaluate(p);
  const SimResult fp32_d = run(m, c, p);
  p.grad_reduce_precision = Precision::kBf16;
  const Prediction bf16 = AnalyticModel(m, c).evaluate(p);
  const SimResult bf16_d = run(m, c, p);
  EXPECT_LT(bf16.time.dp_comm, fp32.time.dp_comm);
  EXPECT_NEAR(bf16.memory.gradients, 0.5 * fp32.memory.gradients, 1e-6 * fp32.memory.gradients);
  EXPECT_LT(bf16_d.prediction.step_time_s, fp32_d.prediction.step_time_s);
}

TEST(Simulator, TraceOpensAsChromeTraceJson) {
  const ModelSpec m = model("tiny");
  const ClusterSpec c = cluster("dgx-a100-hdr", 4);
  Plan p = plan(2, 2, 1, 1, 4);
  auto w = lower(m, c, p);
  ASSERT_TRUE(w.ok()) << w.error().message();
  Simulator sim(*w, SimOptions{.full = true, .record = true});
  auto r = sim.run();
  ASSERT_TRUE(r.ok());
  const std::string path = testing::test_temp_path("trace.json").string();
  ASSERT_TRUE(write_chrome_trace(path, *w, *r, "predicted").ok());
  auto doc = read_json_file(path);
  ASSERT_TRUE(doc.ok()) << doc.error().message();
  const auto& events = (*doc)["traceEvents"];
  std::size_t complete = 0;
  bool found_qkv = false;
  for (const auto& e : events) {
    if (e["ph"] == "X") {
      ++complete;
      if (e["args"]["id"] == "r0/L0/mb0/fwd/qkv") found_qkv = true;
    }
  }
  EXPECT_EQ(complete, r->ops.size());
  EXPECT_EQ(complete, w->op_count() * 2);  // 4 ranks, 2 per stage program
  EXPECT_TRUE(found_qkv);
  EXPECT_EQ((*doc)["metadata"]["kind"], "predicted");
  std::remove(path.c_str());
}

TEST(Simulator, MoeAndContextParallelRun) {
  const ModelSpec m = model("mixtral-8x7b");
  const ClusterSpec c = cluster("dgx-h100-ndr", 32);
  Plan p = plan(2, 2, 8, 1, 64);
  p.ep = 4;
  p.cp = 1;
  p.sequence_parallel = true;
  p.zero_stage = 1;
  p.recompute = Recompute::kFull;
  const SimResult r = run(m, c, p);
  EXPECT_GT(r.prediction.step_time_s, 0);
  const ModelSpec l = model("llama3-8b");
  Plan q = plan(2, 1, 4, 1, 16);
  q.cp = 2;
  q.zero_stage = 1;
  const SimResult s = run(l, cluster("dgx-h100-ndr", 16), q);
  EXPECT_GT(s.prediction.time.compute, 0);
  EXPECT_GT(s.prediction.step_time_s, 0);
}

// Mixtral 8x7B on 64 H100s, 8-way expert parallelism, ZeRO-1, full recompute, the gradient
// reduction overlapped.
Plan mixtral_zero1_plan() {
  Plan p = plan(1, 1, 64, 1, 128);
  p.ep = 8;
  p.zero_stage = 1;
  p.recompute = Recompute::kFull;
  p.overlap_grad_reduce = true;
  return p;
}

// Stage 0's expert data-parallel collectives `op`: how many run in the passes, and at the step's end.
std::pair<int, int> expert_collectives(const Workload& w, CollectiveOp op) {
  int in_passes = 0, at_step = 0;
  for (auto v : boost::make_iterator_range(boost::vertices(w.stages[0].graph()))) {
    const Op& o = w.stages[0].graph()[v];
    if (o.group == GroupKind::kExpertDp && o.kind == OpKind::kCollective && o.collective == op)
      (o.phase == Phase::kStep ? at_step : in_passes) += 1;
  }
  return {in_passes, at_step};
}

// Megatron-Core's --overlap-param-gather gathers the experts' parameters (their own buffer, over
// the expert data-parallel group) as the first forward reaches each layer, as the dense ones: none
// waits at the step's end; the tables' (embedding, head) gather does, in both engines.
TEST(Simulator, OverlappedParamGatherCoversTheExperts) {
  const ModelSpec m = model("mixtral-8x7b");
  const ClusterSpec c = cluster("dgx-h100-ndr", 64);
  Plan p = mixtral_zero1_plan();
  p.overlap_param_gather = true;
  auto w = lower(m, c, p);
  ASSERT_TRUE(w.ok()) << w.error().message();
  EXPECT_EQ(expert_collectives(*w, CollectiveOp::kAllGather), std::make_pair(m.moe_layers(), 0));
  const SimResult d = testing::expect_engines_agree(m, c, p, 0.03, "experts' gather overlapped");
  const Prediction a = AnalyticModel(m, c).evaluate(p);
  EXPECT_NEAR(a.time.dp_comm, d.prediction.time.dp_comm, 0.25 * d.prediction.time.dp_comm);
  // The tables wait whole: more exposed than the layers' one-bucket share alone.
  const double tables = m.end_params_on_stage(0, 1, false, 1);
  const GroupLink link = group_link(c, 1, 64);
  EXPECT_GT(a.time.dp_comm, allgather_time(link, tables * 2.0));
}

// Megatron-Core's --overlap-grad-reduce reduces the experts' gradients (their own buffer, over
// the expert data-parallel group) layer by layer in the backward, as the dense ones: none is left
// for the step's end, and the engines agree.
TEST(Simulator, OverlappedGradientReductionCoversTheExperts) {
  const ModelSpec m = model("mixtral-8x7b");
  const ClusterSpec c = cluster("dgx-h100-ndr", 64);
  const Plan p = mixtral_zero1_plan();
  auto w = lower(m, c, p);
  ASSERT_TRUE(w.ok()) << w.error().message();
  EXPECT_EQ(expert_collectives(*w, CollectiveOp::kReduceScatter), std::make_pair(m.moe_layers(), 0));
  testing::expect_engines_agree(m, c, p, 0.10, "experts' reduction overlapped");
}

// Experts are carved out of dp x cp: with cp > 1, ep may exceed dp (Megatron-Core; NeMo's
// Mixtral 8x22B at 64K runs dp 4, cp 8, ep 8). Its groups stay inside the stage's ranks (this
// crashed the simulator's routing once), and the two engines agree.
TEST(Simulator, ExpertParallelBeyondDataParallelWithContextParallel) {
  const ModelSpec m = model("tiny-moe");
  const ClusterSpec c = cluster("dgx-h100-ndr", 16);
  Plan p = plan(1, 1, 2, 1, 8);
  p.cp = 8;
  p.ep = m.moe.experts % 8 == 0 ? 8 : 4;
  p.zero_stage = 1;
  const SimResult r = testing::expect_engines_agree(m, c, p, 0.05, "ep > dp");
  EXPECT_GT(r.prediction.step_time_s, 0);
  auto w = lower(m, c, p);
  ASSERT_TRUE(w.ok()) << w.error().message();
  for (int rank = 0; rank < p.gpus(); ++rank) {
    const auto ep = w->group_members(rank, GroupKind::kEp);
    EXPECT_EQ(static_cast<int>(ep.size()), p.ep);
    for (int member : ep) EXPECT_LT(member, p.gpus());
    for (int member : w->group_members(rank, GroupKind::kExpertDp)) EXPECT_LT(member, p.gpus());
  }
}

// ZeRO-3 / FSDP as the simulator lowers it: each layer's parameters gathered before its forward
// and its backward, and its gradients reduce-scattered after its backward, the experts' over the
// expert data-parallel group that shards them (dp*cp/ep ranks) and the rest over dp*cp; a
// layer's gather waits for the layer two back (FSDP holds two layers' parameters: it prefetches
// one layer ahead, not the whole model). The analytic model prices the same.
TEST(Simulator, FullyShardedLayersGatherExpertsApartAndOneLayerAhead) {
  const ModelSpec m = model("mixtral-8x7b");
  const ClusterSpec c = cluster("dgx-b200-ndr", 16);
  Plan p = plan(1, 1, 8, 2, 16);
  p.cp = 2;
  p.ep = 8;
  p.zero_stage = 3;
  p.precision = Precision::kFp8;
  ASSERT_TRUE(validate_plan_on(p, m, c, "plan").ok()) << validate_plan_on(p, m, c, "plan").error().message();
  auto w = lower(m, c, p);
  ASSERT_TRUE(w.ok()) << w.error().message();
  const OpGraph& g = w->stages[0].graph();
  const double experts = m.moe.experts * m.expert_params() / p.ep;
  const double dense = layer_params_per_device(m, true, p.tp, p.ep, p.etp()) - experts;
  std::map<std::string, int> count;
  for (auto v : boost::make_iterator_range(boost::vertices(g))) {
    const Op& o = g[v];
    if (o.kind != OpKind::kCollective || o.layer < 0) continue;
    const std::string name = o.name;
    if (name != "param_all_gather" && name != "expert_param_all_gather" && name != "grad_reduce_scatter" &&
        name != "expert_grad_reduce_scatter")
      continue;
    ++count[name];
    const bool expert = name.rfind("expert_", 0) == 0, gather = name.find("gather") != std::string::npos;
    EXPECT_EQ(o.group, expert ? GroupKind::kExpertDp : GroupKind::kDp) << name;
    EXPECT_DOUBLE_EQ(o.bytes,
                     (expert ? experts : dense) * (gather ? weight_bytes(p.precision) : grad_bytes(p)))
        << name;
    // Forward gathers from the third layer of a pass on: after the layer two back.
    if (gather && o.phase == Phase::kForward && o.layer >= 2) {
      bool after_two_back = false;
      for (auto e : boost::make_iterator_range(boost::in_edges(v, g)))
        after_two_back |= g[boost::source(e, g)].layer == o.layer - 2;
      EXPECT_TRUE(after_two_back) << "layer " << o.layer;
    }
  }
  const int passes = static_cast<int>(p.micro_batches()) * m.layers;
  EXPECT_EQ(count["param_all_gather"], 2 * passes);
  EXPECT_EQ(count["expert_param_all_gather"], 2 * passes);
  EXPECT_EQ(count["grad_reduce_scatter"], passes);
  EXPECT_EQ(count["expert_grad_reduce_scatter"], passes);
  testing::expect_engines_agree(m, c, p, 0.10, "ZeRO-3 with experts over 2 ranks");
}

// ZeRO-3 across pipeline stages (Plan::zero3_whole_step, FSDP2 under PyTorch's pipelining): each
// stage gathers a layer once, in its first micro-batch's forward, and reduce-scatters it once, after
// its last backward, the optimizer waiting for the reductions.
TEST(Simulator, FullyShardedPipelineStagesGatherOnceAndReduceAfterTheLastBackward) {
  const ModelSpec m = model("llama3-8b");
  const ClusterSpec c = cluster("dgx-h100-ndr", 32);
  Plan p = plan(1, 4, 8, 1, 64);
  p.zero_stage = 3;
  ASSERT_TRUE(validate_plan_on(p, m, c, "plan").ok()) << validate_plan_on(p, m, c, "plan").error().message();
  auto w = lower(m, c, p);
  ASSERT_TRUE(w.ok()) << w.error().message();
  const int last_mb = static_cast<int>(p.micro_batches()) - 1, layers = m.layers / p.pp;
  for (int st : {0, p.pp - 1}) {
    const OpGraph& g = w->stages[static_cast<std::size_t>(st)].graph();
    int gathers = 0, reductions = 0;
    for (auto v : boost::make_iterator_range(boost::vertices(g))) {
      const Op& o = g[v];
      if (o.kind != OpKind::kCollective || o.layer < 0) continue;
      const std::string name = o.name;
      if (name == "param_all_gather") {
        ++gathers;
        EXPECT_EQ(o.phase, Phase::kForward);
        EXPECT_EQ(o.micro_batch, 0);
      } else if (name == "grad_reduce_scatter") {
        ++reductions;
        EXPECT_EQ(o.micro_batch, last_mb);
        bool waited_for = false;  // by the optimizer
        for (auto e : boost::make_iterator_range(boost::out_edges(v, g)))
          waited_for |= std::string(g[boost::target(e, g)].name) == "optimizer";
        EXPECT_TRUE(waited_for) << "layer " << o.layer;
      }
    }
    EXPECT_EQ(gathers, layers) << "stage " << st;
    EXPECT_EQ(reductions, layers) << "stage " << st;
  }
  testing::expect_engines_agree(m, c, p, 0.05, "ZeRO-3 across 4 stages");
}

// Megatron-Core numbers the experts' ranks apart from the dense layers' (expert tensor parallel,
// then expert parallel, then expert data parallel): an expert-parallel group is ep consecutive
// expert-tensor-parallel groups, so with cp > 1 it takes the context-parallel ranks first. Both
// engines place it so: tp 2, cp 4 on 8-GPU nodes keeps an ep-4 group in one node (ranks 0, 2, 4,
// 6), where ep over the data-parallel ranks would cross four nodes.
TEST(Simulator, ExpertGroupsFollowMegatronCoresNumbering) {
  const ModelSpec m = model("mixtral-8x7b");
  const ClusterSpec c = cluster("dgx-h100-ndr", 16);
  Plan p = plan(2, 1, 2, 1, 8);
  p.cp = 4;
  p.ep = 4;
  p.sequence_parallel = true;
  p.zero_stage = 1;
  ASSERT_TRUE(validate_plan_on(p, m, c, "plan").ok()) << validate_plan_on(p, m, c, "plan").error().message();
  auto w = lower(m, c, p);
  ASSERT_TRUE(w.ok()) << w.error().message();
  EXPECT_EQ(w->group_members(0, GroupKind::kEp), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(w->group_members(0, GroupKind::kExpertDp), (std::vector<int>{0, 8}));
  const GroupLink ep = expert_group_link(c, p);
  EXPECT_EQ(ep.size, 4);
  EXPECT_FALSE(ep.crosses_nodes);
  testing::expect_engines_agree(m, c, p, 0.05, "ep over cp ranks");
}

// Megatron's overlap_p2p_comm with interleaved 1F1B: a chunk's send does not hold up the next
// chunk, the next receive is posted beside it, and the two engines agree (both see each group of
// pp micro-batches wait for its wrap around the pipeline in the warm-up and the cool-down). Each
// TP rank sends its 1/tp of the activation; without SP the group all-gathers it after the receive.
TEST(Simulator, OverlappedPipelineTransfersHideBehindTheChunks) {
  const ModelSpec m = model("llama3-70b");
  const ClusterSpec c = cluster("dgx-h100-ndr", 128);
  Plan p = interleaved_sp_plan(8, 2, 10);
  Plan overlapped = p;
  overlapped.overlap_p2p_comm = true;
  EXPECT_TRUE(overlapped.p2p_overlapped());
  Plan plain = overlapped;
  plain.schedule = Schedule::k1F1B;
  plain.virtual_stages = 1;
  EXPECT_FALSE(plain.p2p_overlapped());  // Megatron turns it off without virtual stages
  const AnalyticModel am(m, c);
  const Prediction a0 = am.evaluate(p), a1 = am.evaluate(overlapped);
  // In line, every transfer waits (16 micro-batches x 10 chunks + the 7 fill hops, each way);
  // overlapped, only the fill's and the drain's hops and the wraps of the warm-up and cool-down
  // (vp-1 each, pp hops each): the chunks' forwards cover the rest.
  const double hop = a0.time.pp_comm / (2.0 * (16 * 10 + 7));
  EXPECT_NEAR(a1.time.pp_comm, hop * (2 * 7 + 2 * 9 * 8), 0.01 * a1.time.pp_comm);
  const SimResult d0 = run(m, c, p);
  const SimResult d1 = testing::expect_engines_agree(m, c, overlapped, 0.02, "overlap_p2p_comm");
  EXPECT_LT(d1.prediction.step_time_s, d0.prediction.step_time_s);
  EXPECT_NEAR(d0.prediction.step_time_s, a0.step_time_s, 0.10 * a0.step_time_s);

  auto w = lower(m, c, overlapped);
  ASSERT_TRUE(w.ok()) << w.error().message();
  const double slice = 1.0 * m.seq_len * m.hidden * 2 / p.tp;
  int sends = 0, recvs = 0;
  for (auto v : boost::make_iterator_range(boost::vertices(w->stages[3].graph()))) {
    const Op& op = w->stages[3].graph()[v];
    if (op.kind == OpKind::kSend) {
      ++sends;
      EXPECT_DOUBLE_EQ(op.bytes, slice);
      EXPECT_EQ(op.stream, StreamId::kPp);
    }
    if (op.kind == OpKind::kRecv) {
      ++recvs;
      EXPECT_EQ(op.stream, StreamId::kPpRecv);
    }
  }
  EXPECT_EQ(sends, 2 * 16 * 10);  // every chunk of every micro-batch, forward and backward
  EXPECT_EQ(recvs, sends);

  Plan no_sp = p;
  no_sp.sequence_parallel = false;
  no_sp.global_batch = 16;
  auto w2 = lower(m, c, no_sp);
  ASSERT_TRUE(w2.ok()) << w2.error().message();
  int gathers = 0;
  for (auto v : boost::make_iterator_range(boost::vertices(w2->stages[3].graph())))
    gathers += w2->stages[3].graph()[v].name == std::string("pp_activation_all_gather");
  EXPECT_EQ(gathers, 8 * 10);
  testing::expect_engines_agree(m, c, no_sp, 0.10, "without SP");
}

// All-gather context parallelism (Plan::cp_comm, Llama 3's and torchtitan's): each layer gathers
// K and V before the attention and again before its backward, and reduce-scatters their gradients
// after it, all exposed -- by hand, per layer and micro-batch; the ring hides its exchange behind
// the attention; both engines agree on both.
TEST(Simulator, AllGatherContextParallelIsExposed) {
  const ModelSpec m = model("llama3-8b");
  const ClusterSpec c = cluster("dgx-h100-ndr", 8);
  Plan ring = plan(1, 1, 4, 1, 8);
  ring.cp = 2;
  ring.zero_stage = 1;
  Plan gathered = ring;
  gathered.cp_comm = CpComm::kAllGather;
  const AnalyticModel am(m, c);
  const Prediction a0 = am.evaluate(ring), a1 = am.evaluate(gathered);
  const double kv = 1.0 * m.seq_len / ring.cp * 2 * m.kv_dim() * 2;  // one rank's K and V, bf16
  const GroupLink link = group_link(c, 1, 2);
  const double per_layer = 2 * allgather_time(link, 2 * kv) + reduce_scatter_time(link, 4 * kv);
  const int micro_batches = 8 / 4;
  EXPECT_NEAR(a1.time.cp_comm, per_layer * m.layers * micro_batches, 1e-9 * a1.time.cp_comm);
  EXPECT_LT(a0.time.cp_comm, 0.1 * a1.time.cp_comm);
  EXPECT_NEAR(a1.step_time_s - a0.step_time_s, a1.time.cp_comm - a0.time.cp_comm, 1e-9 * a1.step_time_s);
  testing::expect_engines_agree(m, c, ring, 0.03, "ring");
  const SimResult d = testing::expect_engines_agree(m, c, gathered, 0.03, "all-gather");
  EXPECT_GT(d.prediction.time.cp_comm, 0.5 * a1.time.cp_comm);
  // The plan file and the option carry it.
  auto back = plan_from_json(plan_to_json(gathered), "plan.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->cp_comm, CpComm::kAllGather);
  EXPECT_FALSE(parse_cp_comm("allgather").ok());
}

// FlashAttention-2-class attention (Plan::attention_kernel, PyTorch SDPA's default) on Hopper runs
// at its own efficiency: only the attention kernels slow down, by the ratio of the two
// efficiencies, in both engines; on A100, where it is the best kernel, nothing changes.
TEST(Simulator, Flash2AttentionRunsAtItsOwnEfficiency) {
  const ModelSpec m = model("llama3-8b");
  const ClusterSpec h100 = cluster("dgx-h100-ndr", 8);
  Plan best = plan(1, 1, 8, 1, 8);
  best.zero_stage = 3;  // FSDP, as the PyTorch stacks that run it
  Plan fa2 = best;
  fa2.attention_kernel = AttentionKernel::kFlash2;
  const DeviceSpec& d = h100.node.accelerator();
  ASSERT_GT(d.attention_flash2_efficiency, 0);
  ASSERT_LT(d.attention_flash2_efficiency, d.attention_efficiency);
  const Prediction a = AnalyticModel(m, h100).evaluate(best), b = AnalyticModel(m, h100).evaluate(fa2);
  EXPECT_GT(b.step_time_s, a.step_time_s);
  // The attention share of the compute grows by exactly the efficiency ratio.
  const LayerKernels ka = layer_kernels(m, d, best, plan_layer_shape(m, best), false),
                     kb = layer_kernels(m, d, fa2, plan_layer_shape(m, fa2), false);
  double ta = 0, tb = 0, other_a = 0, other_b = 0;
  for (int i = 0; i < ka.count; ++i) {
    (ka.fwd[i].cls == KernelClass::kAttention ? ta : other_a) += ka.fwd[i].fwd_s;
    (kb.fwd[i].cls == KernelClass::kAttention ? tb : other_b) += kb.fwd[i].fwd_s;
  }
  EXPECT_DOUBLE_EQ(other_a, other_b);
  EXPECT_GT(tb, ta * 1.2);
  testing::expect_engines_agree(m, h100, fa2, 0.03, "flash2");
  const ClusterSpec a100 = cluster("dgx-a100-hdr", 8);
  EXPECT_DOUBLE_EQ(AnalyticModel(m, a100).evaluate(best).step_time_s,
                   AnalyticModel(m, a100).evaluate(fa2).step_time_s);
  auto back = plan_from_json(plan_to_json(fa2), "plan.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->attention_kernel, AttentionKernel::kFlash2);
  EXPECT_FALSE(parse_attention_kernel("fa2").ok());
}

// FlashAttention-1-class attention (AttentionKernel::kFlash1: FlashAttention v1 or its Triton
// port, as llm-foundry's attn_impl "triton" ran it) runs at half the device's FlashAttention-2-class
// rate: the core attention kernel's time doubles against flash2's on Hopper and against the A100's
// best (FlashAttention-2), nothing else moves, and both engines agree.
TEST(Simulator, Flash1AttentionRunsAtHalfTheFlash2Rate) {
  const ModelSpec m = model("llama3-8b");
  for (const char* preset : {"dgx-h100-ndr", "dgx-a100-hdr"}) {
    const ClusterSpec c = cluster(preset, 8);
    Plan fa2 = plan(1, 1, 8, 1, 8);
    fa2.zero_stage = 3;
    fa2.attention_kernel = AttentionKernel::kFlash2;
    Plan fa1 = fa2;
    fa1.attention_kernel = AttentionKernel::kFlash1;
    const DeviceSpec& d = c.node.accelerator();
    const LayerKernels k2 = layer_kernels(m, d, fa2, plan_layer_shape(m, fa2), false),
                       k1 = layer_kernels(m, d, fa1, plan_layer_shape(m, fa1), false);
    ASSERT_EQ(k1.count, k2.count);
    int attention = 0;
    for (int i = 0; i < k1.count; ++i) {
      if (k1.fwd[i].cls != KernelClass::kAttention) {
        EXPECT_DOUBLE_EQ(k1.fwd[i].fwd_s, k2.fwd[i].fwd_s) << preset << " " << i;
        continue;
      }
      ++attention;
      // Twice the rate-bound part; the launch and the per-block fixed costs stay.
      EXPECT_GT(k1.fwd[i].fwd_s, 1.8 * k2.fwd[i].fwd_s) << preset;
      EXPECT_LT(k1.fwd[i].fwd_s, 2.0 * k2.fwd[i].fwd_s) << preset;
      EXPECT_GT(k1.fwd[i].bwd_s, 1.8 * k2.fwd[i].bwd_s) << preset;
    }
    EXPECT_EQ(attention, 1) << preset;
    EXPECT_GT(AnalyticModel(m, c).evaluate(fa1).step_time_s, AnalyticModel(m, c).evaluate(fa2).step_time_s);
    testing::expect_engines_agree(m, c, fa1, 0.03, "flash1");
  }
  EXPECT_EQ(to_string(AttentionKernel::kFlash1), "flash1");
  auto parsed = parse_attention_kernel("flash1");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, AttentionKernel::kFlash1);
  EXPECT_NE(parse_attention_kernel("triton").error().message().find("flash1"), std::string::npos);
}

// Context parallelism runs the attention as cp steps: each step after the first adds a kernel
// and a correction of the running output (3 fp32 passes) forward, a kernel and the dQ/dK/dV
// accumulations (2 fp32 passes each) backward -- by hand against the same local shape without
// context parallelism.
TEST(Simulator, ContextParallelStepsCostAKernelAndACorrectionEach) {
  const ModelSpec m = model("llama3-8b");
  DeviceSpec d = cluster("dgx-h100-ndr", 8).node.accelerator();
  d.attention_tile = {};  // each step's fixed cost per block row: Hardware.AttentionShape* tests
  Plan p = plan(1, 1, 2, 1, 2);
  p.cp = 4;
  const LayerShape s = plan_layer_shape(m, p);
  Plan one = p;
  one.cp = 1;
  const LayerKernels with = layer_kernels(m, d, p, s, false), without = layer_kernels(m, d, one, s, false);
  const KernelCost &a = with.fwd[with.attention_first], &b = without.fwd[without.attention_first];
  ASSERT_EQ(a.name, KernelName::kAttention);
  const double tokens = s.batch * s.seq;
  const double o = tokens * m.q_dim() * 4.0, kv = tokens * 2.0 * m.kv_dim() * 4.0;
  const double launch = d.kernel_overhead_s;
  EXPECT_NEAR(a.fwd_s - b.fwd_s, 3 * (2 * launch + d.attention_setup_s + d.stream_seconds(3 * o)), 1e-12);
  EXPECT_NEAR(a.bwd_s - b.bwd_s, 3 * (2 * launch + d.attention_setup_s + d.stream_seconds(2 * (o + kv))),
              1e-12);
  for (int i = 0; i < with.count; ++i) {
    if (i != with.attention_first) {
      EXPECT_DOUBLE_EQ(with.fwd[i].fwd_s, without.fwd[i].fwd_s) << i;
    }
  }
}

// MoE parallel folding (expert_tp 1 below tp): the expert groups number all of a stage's ranks,
// consecutive ones forming an EP group, those congruent modulo ep the expert data-parallel
// group; the MLP block has no TP collective; each rank holds 1/ep of the experts, whole; the two
// engines agree.
TEST(Simulator, FoldedExpertParallelismSpansTheTensorParallelRanks) {
  const ModelSpec m = model("mixtral-8x7b");
  const ClusterSpec c = cluster("dgx-h100-ndr", 16);
  Plan p = plan(4, 1, 4, 1, 16);
  p.ep = 8;  // more than the 4 data-parallel ranks could hold
  p.expert_tp = 1;
  p.sequence_parallel = true;
  p.zero_stage = 1;
  p.recompute = Recompute::kFull;
  ASSERT_TRUE(validate_plan_on(p, m, c, "plan").ok());
  auto w = lower(m, c, p);
  ASSERT_TRUE(w.ok()) << w.error().message();
  for (int rank = 0; rank < p.gpus(); ++rank) {
    const auto ep = w->group_members(rank, GroupKind::kEp);
    ASSERT_EQ(static_cast<int>(ep.size()), 8);
    EXPECT_EQ(ep.front(), rank / 8 * 8);  // ranks 0-7 and 8-15
    for (std::size_t i = 1; i < ep.size(); ++i) EXPECT_EQ(ep[i], ep[i - 1] + 1);
    const auto edp = w->group_members(rank, GroupKind::kExpertDp);
    ASSERT_EQ(static_cast<int>(edp.size()), 2);
    EXPECT_EQ(edp[0], rank % 8);
    EXPECT_EQ(edp[1], rank % 8 + 8);
  }
  const LayerKernels folded = layer_kernels(m, c.node.accelerator(), p, plan_layer_shape(m, p), true);
  Plan classic = p;
  classic.expert_tp = 0;
  classic.ep = 4;
  const LayerKernels carved =
      layer_kernels(m, c.node.accelerator(), classic, plan_layer_shape(m, classic), true);
  EXPECT_EQ(carved.tp_count - folded.tp_count, 2);  // the MLP's all-gather and reduce-scatter
  EXPECT_DOUBLE_EQ(layer_params_per_device(m, true, 4, 8, 1) - layer_params_per_device(m, true, 4, 8),
                   m.moe.experts * m.expert_params() * (1.0 / 8 - 1.0 / 32));
  testing::expect_engines_agree(m, c, p, 0.05, "expert_tp 1");
}

// ZeRO-Offload: copies over the host link and Adam on the host, as copy-engine and host ops.
TEST(Simulator, OptimizerOffloadUsesCopyEngineAndHost) {
  const ModelSpec m = model("llama3-8b");
  const ClusterSpec c = cluster("dgx-h100-ndr", 8);
  Plan p = plan(1, 1, 8, 1, 64);
  p.offload_optimizer = true;
  p.recompute = Recompute::kFull;
  auto w = lower(m, c, p);
  ASSERT_TRUE(w.ok()) << w.error().message();
  int copies = 0, host = 0;
  for (auto v : boost::make_iterator_range(boost::vertices(w->stages[0].graph()))) {
    copies += w->stages[0].graph()[v].kind == OpKind::kCopy;
    host += w->stages[0].graph()[v].stream == StreamId::kHost;
  }
  EXPECT_EQ(copies, 2);
  EXPECT_EQ(host, 1);
  const SimResult r = run(m, c, p);
  const Prediction a = AnalyticModel(m, c).evaluate(p);
  EXPECT_GT(r.prediction.time.offload, 0);
  EXPECT_NEAR(r.prediction.time.offload / a.time.offload, 1.0, 1e-9);
  EXPECT_NEAR(r.prediction.step_time_s / a.step_time_s, 1.0, 0.02);
}

// Plan::overlap_ep_comm: merged forward/backward pairs hide the expert all-to-alls behind the
// other micro-batch's compute, in both engines, for each schedule that pairs (interleaved with
// virtual stages, DualPipe, one stage), and the step gets shorter. Mixtral 8x7B's layers with 16
// experts spread over 16 ranks of two nodes, so that the all-to-alls cross the network.
TEST(Simulator, MergedPairsHideTheExpertAllToAlls) {
  ModelSpec m = model("mixtral-8x7b");
  m.layers = 8;
  m.moe.experts = 16;
  const ClusterSpec c = cluster("dgx-h100-ndr", 64);
  struct Case {
    const char* name;
    int pp;
    Schedule schedule;
    int v;
  };
  for (const Case& k :
       {Case{"interleaved", 4, Schedule::kInterleaved1F1B, 2}, Case{"dualpipe", 4, Schedule::kDualPipe, 1},
        Case{"one stage", 1, Schedule::k1F1B, 1}}) {
    Plan p = plan(1, k.pp, 64 / k.pp, 1, 32 * (64 / k.pp));
    p.ep = 16;
    p.schedule = k.schedule;
    p.virtual_stages = k.v;
    p.overlap_p2p_comm = k.v > 1;
    const SimResult alone = testing::expect_engines_agree(m, c, p, 0.05, std::string(k.name) + ", alone");
    p.overlap_ep_comm = true;
    const SimResult merged = testing::expect_engines_agree(m, c, p, 0.05, std::string(k.name) + ", merged");
    EXPECT_LT(merged.prediction.step_time_s, 0.97 * alone.prediction.step_time_s) << k.name;
    EXPECT_LT(merged.prediction.time.ep_comm, 0.7 * alone.prediction.time.ep_comm) << k.name;
  }
}

// DualPipe (DeepSeek-V3 report, Table 2): bubble (p/2-1)(F&B + B - 3W) against 1F1B's
// (p-1)(F+B+W). With F = B = W = f and no overlap inside F&B (3f), that is (p/2-1) f against
// 3(p-1) f: a ninth of 1F1B's at p = 4. Transfers are free here so only the order matters.
TEST(Simulator, DualPipeBubbleMatchesTheReport) {
  const auto setup = uniform_pipeline("gpt3-175b", 8);
  const ModelSpec& m = setup.first;
  const ClusterSpec& c = setup.second;
  Plan p = plan(1, 4, 1, 1, 8);
  auto step = [&](const Plan& plan) {  // timing only: two copies of these layers exceed 80 GB
    auto w = lower(m, c, plan);
    EXPECT_TRUE(w.ok());
    return *Simulator(*w, {}).run();
  };
  const SimResult a = step(p);
  p.schedule = Schedule::kDualPipe;
  const SimResult d = step(p);
  auto idle = [](const SimResult& r) {
    return r.prediction.step_time_s - r.prediction.time.compute - r.prediction.time.optimizer;
  };
  // The same work per rank: every micro-batch passes every stage once, half of them backwards.
  // (Up to the tiny head and embedding, which DualPipe's end ranks run for half the batch each.)
  EXPECT_NEAR(d.prediction.time.compute, a.prediction.time.compute, 1e-3 * a.prediction.time.compute);
  EXPECT_NEAR(idle(d) / idle(a), 1.0 / 9, 0.04) << idle(d) << " vs " << idle(a);
  // Two copies of the parameters: twice the optimizer work per rank, plus summing the mirror
  // copy's gradients into one's own (read two, write one). Up to the final norm (hidden
  // parameters of billions), which an end rank holds once either way.
  const double expected = 2.0 + 3 * grad_bytes(p.precision) / kAdamBytesPerParam;
  EXPECT_NEAR(d.prediction.time.optimizer / a.prediction.time.optimizer, expected, 1e-4);
}

// Llama 3.1 405B (126 layers) on pp 8, vp 8 as Megatron-Bridge runs it, the embedding and the loss
// each counted as a layer: (126 + 2) / 64 = 2 per chunk, 1 in the first chunk of stage 0 and in the
// last chunk of stage 7. The simulator places the chunks' layers as Plan::chunk_layer_range says.
std::vector<int> embedding_and_loss_split(int layers, int chunks) {
  std::vector<int> split(static_cast<std::size_t>(chunks), (layers + 2) / chunks);
  --split.front();
  --split.back();
  return split;
}

TEST(Simulator, InterleavedChunksHoldTheirLayerSplit) {
  const ModelSpec m = model("llama3-405b");
  const ClusterSpec c = cluster("dgx-h100-ndr", 1024);
  Plan p = plan(8, 8, 16, 1, 512);
  p.sequence_parallel = true;
  p.zero_stage = 1;
  p.recompute = Recompute::kFull;
  p.virtual_stages = 8;
  p.schedule = Schedule::kInterleaved1F1B;
  p.layer_split = embedding_and_loss_split(m.layers, 64);
  ASSERT_EQ(p.layer_split.front(), 1);
  ASSERT_EQ(p.layer_split[1], 2);
  ASSERT_EQ(p.layer_split.back(), 1);
  auto w = lower(m, c, p);
  ASSERT_TRUE(w.ok()) << w.error().message();
  int total = 0;
  for (const StageProgram& sp : w->stages) {
    ASSERT_EQ(sp.chunk_layers.size(), 8u);
    for (int chunk = 0; chunk < 8; ++chunk) {
      const auto [begin, end] = p.chunk_layer_range(m.layers, sp.stage, chunk);
      const std::vector<int>& got = sp.chunk_layers[static_cast<std::size_t>(chunk)];
      ASSERT_EQ(static_cast<int>(got.size()), end - begin) << "stage " << sp.stage << " chunk " << chunk;
      if (!got.empty()) {
        EXPECT_EQ(got.front(), begin);
      }
      const bool short_chunk = (sp.stage == 0 && chunk == 0) || (sp.stage == 7 && chunk == 7);
      EXPECT_EQ(end - begin, short_chunk ? 1 : 2) << "stage " << sp.stage << " chunk " << chunk;
      total += end - begin;
    }
  }
  EXPECT_EQ(total, m.layers);
}

// Both engines take the uneven chunks alike. At vp 4 ((126 + 2) / 32 = 4 per chunk, 3 at both
// ends) they agree within 5% (30.3 s against 31.5 s); at vp 8 the gap is the one even
// interleaving with two-layer chunks already has (the same model with 128 layers, even: 30.7 s
// against 33.9 s, 10.2%; 126 layers as [1, 2, ..., 2, 1]: 29.9 s against 33.1 s, 10.7%), so it
// is only bounded there.
TEST(Simulator, UnevenInterleavedChunksAgreeWithTheAnalyticModel) {
  const ModelSpec m = model("llama3-405b");
  const ClusterSpec c = cluster("dgx-h100-ndr", 1024);
  Plan p = plan(8, 8, 16, 1, 512);
  p.sequence_parallel = true;
  p.zero_stage = 1;
  p.recompute = Recompute::kFull;
  p.schedule = Schedule::kInterleaved1F1B;
  p.virtual_stages = 4;
  p.layer_split = embedding_and_loss_split(m.layers, 32);
  ASSERT_EQ(p.layer_split.front(), 3);
  testing::expect_engines_agree(m, c, p, 0.05, "405b pp8 vp4, embedding and loss counted");
  p.virtual_stages = 8;
  p.layer_split = embedding_and_loss_split(m.layers, 64);
  testing::expect_engines_agree(m, c, p, 0.15, "405b pp8 vp8, embedding and loss counted");
}

// Every rank runs each micro-batch of each direction forward and backward once, the split-off
// weight gradients run in order at their slots (none deferred), and nothing stalls: symmetric and
// full simulation agree; the analytic model is close.
TEST(Simulator, DualPipeRunsEveryMicroBatchBothWays) {
  const ModelSpec m = model("llama3-8b");
  for (const auto& [pp, mbs] :
       {std::pair{2, 4}, std::pair{4, 8}, std::pair{4, 10}, std::pair{8, 16}, std::pair{8, 18}}) {
    const ClusterSpec c = cluster("dgx-h100-ndr", 8 * pp);
    Plan p = plan(8, pp, 1, 1, mbs);
    p.schedule = Schedule::kDualPipe;
    p.recompute = Recompute::kFull;
    auto w = lower(m, c, p);
    ASSERT_TRUE(w.ok()) << w.error().message();
    for (const StageProgram& sp : w->stages) {
      EXPECT_TRUE(sp.deferred.empty());
      ASSERT_EQ(sp.chunk_layers.size(), 2u);
      EXPECT_EQ(sp.chunk_layers[0].front(), sp.stage * (m.layers / pp));
      EXPECT_EQ(sp.chunk_layers[1].front(), (pp - 1 - sp.stage) * (m.layers / pp));
      std::map<std::tuple<int, int, int>, int> passes;  // (chunk, mb, phase) -> first-layer ops
      for (auto v : boost::make_iterator_range(boost::vertices(sp.graph()))) {
        const Op& op = sp.graph()[v];
        const int first = sp.chunk_layers[op.chunk].front();
        if (op.kind == OpKind::kCompute && op.layer == first && std::string(op.name) == "qkv" &&
            (op.phase == Phase::kForward || op.phase == Phase::kBackward))
          ++passes[{op.chunk, op.micro_batch, static_cast<int>(op.phase)}];
      }
      ASSERT_EQ(static_cast<int>(passes.size()), 2 * mbs)
          << "stage " << sp.stage;  // mbs/2 per chunk, F and B
      for (const auto& [key, n] : passes) {
        const int chunk = std::get<0>(key), mb = std::get<1>(key);
        EXPECT_EQ(n, 1);
        EXPECT_EQ(mb / (mbs / 2), chunk) << "micro-batches 0..m/2-1 go one way, the rest the other";
      }
    }
    const SimResult sym = run(m, c, p);
    SimOptions full;
    full.full = true;
    const SimResult all = run(m, c, p, full);
    EXPECT_NEAR(sym.prediction.step_time_s / all.prediction.step_time_s, 1.0, 1e-3) << pp << " " << mbs;
    const Prediction a = AnalyticModel(m, c).evaluate(p);
    EXPECT_NEAR(sym.prediction.step_time_s / a.step_time_s, 1.0, 0.10) << pp << " " << mbs;
    // Two copies of the parameters (the analytic memory model): the fullest rank, an end rank
    // either way, holds twice 1F1B's (its own stage and its mirror, embedding and head), up to
    // the final norm, which it holds once either way (hidden parameters of billions).
    Plan one = p;
    one.schedule = Schedule::k1F1B;
    EXPECT_NEAR(AnalyticModel(m, c).memory(p).weights / AnalyticModel(m, c).memory(one).weights, 2.0, 1e-4);
  }
}

// ZeRO-3 with pipeline parallelism: each backward waits for the gradient from the next stage as
// well as for its gathered parameters. (The gathers once took over the received gradient's
// dependency, and the simulated pipeline had no bubble: 20.4 s against the analytic 27.0 s.)
TEST(Simulator, Zero3PipelineKeepsItsBubble) {
  const ModelSpec m = testing::preset_model("gpt3-175b");
  const ClusterSpec c = testing::preset_cluster("dgx-a100-hdr", 512);
  Plan p = testing::make_plan(8, 4, 16, 8, 512);
  p.zero_stage = 3;
  p.sequence_parallel = true;
  p.recompute = Recompute::kFull;
  const SimResult d = testing::expect_engines_agree(m, c, p, 0.05);
  // 4 micro-batches through 4 stages: at least (p-1)/(m+p-1) of the step waits.
  EXPECT_GT(d.prediction.step_time_s,
            7.0 / 4.0 * (d.prediction.time.compute + d.prediction.time.tp_comm) * 0.95);
}

// A parallel block's single TP reduction and a sliding window's shorter attention, simulated as
// the analytic model prices them.
TEST(Simulator, ParallelBlockAndSlidingWindowAgreeWithTheAnalyticModel) {
  ModelSpec m = testing::preset_model("gpt3-175b");
  m.parallel_block = true;
  m.sliding_window = 512;
  const ClusterSpec c = testing::preset_cluster("dgx-a100-hdr", 64);
  Plan p = testing::make_plan(8, 8, 1, 1, 16);
  p.sequence_parallel = true;
  const SimResult d = testing::expect_engines_agree(m, c, p, 0.05);
  EXPECT_NEAR(d.prediction.time.tp_comm, AnalyticModel(m, c).evaluate(p).time.tp_comm,
              0.01 * d.prediction.time.tp_comm);
}

// ZeRO-3 at fixed work per rank: a layer's gathers and reduce-scatter take a ring's n-1 steps,
// so past some scale they outgrow the layer's compute and the throughput per GPU falls. Both
// engines see it phase by phase (the forward's gathers behind the forward, the backward's gather
// and reduce-scatter behind the backward), and agree. (The analytic model once hid all of the
// step's collectives behind all of its compute, at the network's latency on every ring step:
// 10.5 s at 4,096 GPUs against the simulator's 4.76 s.)
TEST(Simulator, Zero3SaturatesAtScaleInBothEngines) {
  const ModelSpec m = testing::preset_model("llama3-70b");
  auto at = [&](int gpus) {
    const ClusterSpec c = testing::preset_cluster("dgx-h100-ndr", gpus);
    Plan p = testing::make_plan(1, 1, gpus, 1, gpus);
    p.zero_stage = 3;
    p.seq_len = 4096;
    p.recompute = Recompute::kFull;
    return testing::expect_engines_agree(m, c, p, 0.05, std::to_string(gpus) + " GPUs");
  };
  const SimResult small = at(1024), large = at(4096);
  // At 1,024 GPUs the collectives hide behind the compute, which runs without NCCL's 16 of the
  // 132 SMs meanwhile (NodeSpec::collective_sms): that slowing is all of the data-parallel time.
  EXPECT_LT(small.prediction.time.dp_comm,
            (132.0 / 116 - 1) * small.prediction.time.compute + 0.01 * small.prediction.step_time_s);
  EXPECT_GT(large.prediction.time.dp_comm,
            small.prediction.time.dp_comm + 0.08 * large.prediction.step_time_s);
  EXPECT_GT(large.prediction.step_time_s, 1.1 * small.prediction.step_time_s);  // the same work per GPU
}

}  // namespace
}  // namespace foresight

// Plan search: the known best on a hand-checked case, pruning never drops a plan that fits
// (brute force), ranking order, Pareto front, economics.
#include "sim/search/search.h"

#include <gtest/gtest.h>

#include <numeric>

#include "sim/analytic/analytic_model.h"
#include "sim/analytic/capacity.h"
#include "sim/spec/presets.h"

namespace foresight {
namespace {

ModelSpec model(const std::string& name) {
  auto src = resolve_spec(PresetKind::kModel, name);
  return *model_from_text(src->text, src->file);
}

// The tiny model's compute is microseconds; what costs is latency: per-layer TP collectives,
// pipeline hops, ring steps of context parallelism. One gradient all-reduce per step (pure data
// parallelism) is the cheapest layout, by hand.
TEST(Search, TinyModelPrefersPureDataParallelism) {
  SearchOptions o;
  o.gpus = 8;
  o.global_batch = 64;
  o.space.offload_optimizer = {false};
  o.threads = 1;
  auto r = search(model("tiny"), *load_cluster("dgx-h100-ndr"), o);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_FALSE(r->plans.empty());
  const Plan& best = r->plans.front().plan;
  EXPECT_EQ(best.tp, 1);
  EXPECT_EQ(best.pp, 1);
  // Pure data parallelism is (one of) the fastest: context parallelism can tie it, nothing beats it.
  bool pure_dp_is_best = false;
  for (const auto& p : r->plans)
    if (p.plan.dp == 8 && p.score <= r->plans.front().score * (1 + 1e-12)) pure_dp_is_best = true;
  EXPECT_TRUE(pure_dp_is_best);
  for (std::size_t i = 1; i < r->plans.size(); ++i) EXPECT_LE(r->plans[i - 1].score, r->plans[i].score);
}

// Interleaved plans carry Megatron's default, overlap_p2p_comm; the others do not need it.
TEST(Search, InterleavedPlansOverlapTheirTransfers) {
  SearchOptions o;
  o.gpus = 32;
  o.global_batch = 64;
  o.top_k = 1 << 20;
  o.threads = 1;
  o.space.tp = {8};
  o.space.pp = {4};
  o.space.micro_batch = {1};
  o.space.virtual_stages = {1, 2};
  o.space.schedules = {Schedule::k1F1B, Schedule::kInterleaved1F1B};
  o.space.offload_optimizer = {false};
  auto r = search(model("llama3-70b"), *load_cluster("dgx-h100-ndr"), o);
  ASSERT_TRUE(r.ok()) << r.error().message();
  int interleaved = 0;
  for (const auto& p : r->plans) {
    EXPECT_EQ(p.plan.overlap_p2p_comm, p.plan.virtual_stages > 1);
    interleaved += p.plan.virtual_stages > 1;
  }
  EXPECT_GT(interleaved, 0);
}

// Brute force on a small space: every plan that validates and fits must have been timed, and
// every rejection for memory must really not fit.
TEST(Search, MemoryPruningNeverDropsAPlanThatFits) {
  const ModelSpec m = model("llama3-8b");
  ClusterSpec c = *load_cluster("dgx-a100-hdr");
  SearchOptions o;
  o.gpus = 16;
  o.global_batch = 64;
  o.top_k = 1 << 20;
  o.threads = 2;
  o.space.tp = {1, 2, 4, 8};
  o.space.pp = {1, 2, 4};
  o.space.cp = {1, 2};
  o.space.micro_batch = {1, 2};
  o.space.virtual_stages = {1};
  o.space.schedules = {Schedule::k1F1B};
  o.space.overlap_grad_reduce = {true};
  o.space.overlap_tp_comm = {false};
  o.space.overlap_param_gather = {false};
  o.min_headroom = 0;  // checked against fits() alone; the margin has its own test
  auto r = search(m, c, o);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_TRUE(resize_cluster(c, 16, "test").ok());
  const AnalyticModel am(m, c);
  std::uint64_t fitting = 0, oom = 0;
  for (int tp : o.space.tp)
    for (int pp : o.space.pp)
      for (int cp : o.space.cp)
        for (int mb : o.space.micro_batch)
          for (int zero : {0, 1, 2, 3})
            for (Recompute rc : {Recompute::kNone, Recompute::kFull, Recompute::kOptimal})
              for (bool sp : {false, true})
                for (bool off : {false, true}) {
                  if (sp && tp == 1) continue;
                  Plan p;
                  p.tp = tp;
                  p.pp = pp;
                  p.cp = cp;
                  p.dp = 16 / (tp * pp * cp);
                  p.micro_batch = mb;
                  p.global_batch = 64;
                  p.zero_stage = zero;
                  p.recompute = rc;
                  p.sequence_parallel = sp;
                  p.offload_optimizer = off;
                  p.overlap_grad_reduce = true;
                  if (!validate_plan(p, m, 16, "p").ok()) continue;
                  if (rc == Recompute::kOptimal) {
                    // Per-layer recompute is tried only where no recompute does not fit.
                    Plan none = p;
                    none.recompute = Recompute::kNone;
                    if (am.memory(none).fits()) continue;
                  }
                  const MemoryBreakdown mem = am.memory(p);
                  (mem.total <= mem.capacity ? fitting : oom) += 1;
                }
  EXPECT_EQ(r->evaluated, fitting);
  EXPECT_EQ(r->plans.size(), fitting);
  const std::uint64_t rejected_oom = r->rejected.count("out of memory") ? r->rejected.at("out of memory") : 0;
  EXPECT_EQ(rejected_oom, oom);
  EXPECT_GT(fitting, 0u);
  EXPECT_GT(oom, 0u);
}

// The search tries what the stacks can do: every interleaving of the layers (126 layers on 16
// stages: 128 chunks with the first and last one short, as Llama 3 405B ran), pipeline degrees
// that divide the layers, and the TP and parameter-gather overlaps.
TEST(Search, TriesUnevenInterleavingAndOverlaps) {
  const ModelSpec m = model("llama3-405b");
  ASSERT_EQ(m.layers, 126);
  SearchOptions o;
  o.gpus = 2304;
  o.global_batch = 576;
  o.top_k = 1 << 20;
  o.threads = 2;
  o.space.tp = {8};
  o.space.cp = {1};
  o.space.pp = {9, 16};
  o.space.micro_batch = {1};
  o.space.zero_stage = {1};
  o.space.recompute = {Recompute::kFull};
  o.space.schedules = {Schedule::kInterleaved1F1B};
  o.space.sequence_parallel = {true};
  o.space.offload_optimizer = {false};
  o.space.overlap_grad_reduce = {true};
  auto r = search(m, *load_cluster("dgx-h100-ndr"), o);
  ASSERT_TRUE(r.ok()) << r.error().message();
  bool meta = false, nine = false, tp_overlap = false, gather = false;
  for (const RankedPlan& p : r->plans) {
    const Plan& pl = p.plan;
    if (pl.pp == 16 && pl.virtual_stages == 8) {
      ASSERT_EQ(pl.layer_split.size(), 128u);
      EXPECT_EQ(pl.layer_split.front(), 0);
      EXPECT_EQ(pl.layer_split.back(), 0);
      EXPECT_EQ(std::accumulate(pl.layer_split.begin(), pl.layer_split.end(), 0), 126);
      meta = true;
    }
    nine |= pl.pp == 9 && pl.virtual_stages == 2 && pl.layer_split.empty();  // 18 chunks of 7 layers
    tp_overlap |= pl.overlap_tp_comm;
    gather |= pl.overlap_param_gather;
  }
  EXPECT_TRUE(meta);
  EXPECT_TRUE(nine);
  EXPECT_TRUE(tp_overlap);
  EXPECT_TRUE(gather);
}

// The search tries merged forward/backward pairs (overlap_ep_comm) where a plan's experts are
// spread and its schedule and recompute allow them, and only there.
TEST(Search, MergedPairsWhereTheScheduleAllowsThem) {
  const ModelSpec m = model("mixtral-8x7b");
  SearchOptions o;
  o.gpus = 64;
  o.global_batch = 256;
  o.top_k = 1 << 20;
  o.threads = 2;
  o.space.tp = {1};
  o.space.pp = {1, 4};
  o.space.cp = {1};
  o.space.ep = {1, 8};
  o.space.micro_batch = {1};
  o.space.zero_stage = {1};
  o.space.recompute = {Recompute::kNone, Recompute::kFull};
  o.space.schedules = {Schedule::k1F1B, Schedule::kInterleaved1F1B};
  o.space.sequence_parallel = {false};
  o.space.offload_optimizer = {false};
  o.space.overlap_grad_reduce = {true};
  o.space.overlap_tp_comm = {false};
  o.space.overlap_param_gather = {false};
  auto r = search(m, *load_cluster("dgx-h100-ndr"), o);
  ASSERT_TRUE(r.ok()) << r.error().message();
  int merged = 0, alone = 0;
  for (const RankedPlan& p : r->plans) {
    const Plan& pl = p.plan;
    (pl.overlap_ep_comm ? merged : alone) += 1;
    if (!pl.overlap_ep_comm) continue;
    EXPECT_GT(pl.ep, 1);
    EXPECT_TRUE(pl.pp == 1 || (pl.schedule == Schedule::kInterleaved1F1B && pl.virtual_stages > 1))
        << layout_string(pl);
    EXPECT_NE(pl.recompute, Recompute::kFull);
  }
  EXPECT_GT(merged, 0);
  EXPECT_GT(alone, merged);
}

// Full recompute in the search recomputes only the layers memory needs: the fewest that fit.
// Every plan the search keeps leaves the margin free; a plan that fits with less is rejected
// under a reason that names the margin, and without a margin it is kept. A margin takes more
// recomputed layers where fewer would fit, never fewer.
TEST(Search, PlansLeaveTheAllocatorMarginFree) {
  const ModelSpec m = model("llama3-70b");
  const ClusterSpec c = *load_cluster("dgx-h100-ndr");
  SearchOptions o;
  o.gpus = 64;
  o.global_batch = 128;
  o.top_k = 1 << 20;
  o.threads = 2;
  o.space.tp = {4, 8};
  o.space.pp = {2, 4};
  o.space.cp = {1};
  o.space.micro_batch = {1, 2};
  o.space.schedules = {Schedule::k1F1B};
  EXPECT_EQ(o.min_headroom, kDefaultMinHeadroom);
  o.min_headroom = 0.20;
  auto with = search(m, c, o);
  ASSERT_TRUE(with.ok()) << with.error().message();
  o.min_headroom = 0;
  auto without = search(m, c, o);
  ASSERT_TRUE(without.ok()) << without.error().message();
  ASSERT_FALSE(with->plans.empty());
  for (const RankedPlan& p : with->plans)
    EXPECT_GE(p.memory_headroom, 0.20 * p.prediction.memory.capacity) << layout_string(p.plan);
  const auto reason = with->rejected.find("under 20% of memory free (allocator margin)");
  ASSERT_NE(reason, with->rejected.end());
  std::uint64_t tight = 0;  // plans kept without the margin that leave less than 20% free
  for (const RankedPlan& p : without->plans)
    if (p.memory_headroom < 0.20 * p.prediction.memory.capacity) ++tight;
  EXPECT_GT(tight, 0u);
  EXPECT_EQ(without->rejected.count("under 20% of memory free (allocator margin)"), 0u);
  EXPECT_GT(without->evaluated, with->evaluated);

  ClusterSpec sized = c;
  ASSERT_TRUE(resize_cluster(sized, 64, "test").ok());
  const AnalyticModel am(m, sized);
  Plan p;
  p.tp = 8;
  p.pp = 4;
  p.dp = 2;
  p.global_batch = 128;
  p.recompute = Recompute::kFull;
  const int fits = fewest_recompute_layers(am, p), margin = fewest_recompute_layers(am, p, 0.20);
  ASSERT_GE(fits, 0);
  EXPECT_GE(margin, fits);
  if (margin >= 0) {
    p.recompute_layers = margin;
    const MemoryBreakdown mem = am.memory(p);
    EXPECT_GE(mem.capacity - mem.total, 0.20 * mem.capacity);
  }
  o.min_headroom = 1.0;
  EXPECT_FALSE(search(m, c, o).ok());
}

TEST(Search, FullRecomputeTakesOnlyTheLayersItNeeds) {
  const ModelSpec m = model("llama3-70b");
  const ClusterSpec c = *load_cluster("dgx-h100-ndr");
  SearchOptions o;
  o.gpus = 64;
  o.global_batch = 128;
  o.threads = 1;
  o.space.tp = {8};
  o.space.pp = {4};
  o.space.cp = {1};
  o.space.micro_batch = {1};
  o.space.zero_stage = {1};
  o.space.recompute = {Recompute::kFull};
  o.space.schedules = {Schedule::k1F1B};
  o.space.sequence_parallel = {false};  // without it, no recompute does not fit
  o.space.offload_optimizer = {false};
  o.space.overlap_grad_reduce = {false};
  auto r = search(m, c, o);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_EQ(r->plans.size(), 1u);
  const Plan& best = r->plans.front().plan;
  EXPECT_GT(best.recompute_layers, 0);
  EXPECT_LT(best.recompute_layers, m.layers / 4);
  ClusterSpec sized = c;
  ASSERT_TRUE(resize_cluster(sized, 64, "test").ok());
  Plan all = best;
  all.recompute_layers = -1;
  EXPECT_EQ(best.recompute_layers, fewest_recompute_layers(AnalyticModel(m, sized), all, o.min_headroom));
  EXPECT_LT(r->plans.front().prediction.step_time_s, AnalyticModel(m, sized).evaluate(all).step_time_s);
}

TEST(Search, ParetoFrontIsNotDominated) {
  SearchOptions o;
  o.gpus = 64;
  o.global_batch = 256;
  o.threads = 2;
  o.space.pp = {1, 2, 4, 8};
  o.space.virtual_stages = {1, 2, 4};
  auto r = search(model("llama3-70b"), *load_cluster("dgx-h100-ndr"), o);
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->pareto.empty());
  for (const auto& a : r->pareto)
    for (const auto& b : r->pareto) {
      if (&a == &b) continue;
      const bool dominates = b.prediction.step_time_s <= a.prediction.step_time_s &&
                             b.economics.cost_per_mtok_usd <= a.economics.cost_per_mtok_usd &&
                             b.memory_headroom >= a.memory_headroom &&
                             (b.prediction.step_time_s < a.prediction.step_time_s ||
                              b.economics.cost_per_mtok_usd < a.economics.cost_per_mtok_usd ||
                              b.memory_headroom > a.memory_headroom);
      EXPECT_FALSE(dominates);
    }
}

TEST(Search, ReSimulatesTheBest) {
  SearchOptions o;
  o.gpus = 16;
  o.global_batch = 64;
  o.resimulate = 3;
  o.threads = 2;
  o.space.offload_optimizer = {false};
  auto r = search(model("llama3-8b"), *load_cluster("dgx-h100-ndr"), o);
  ASSERT_TRUE(r.ok());
  int simulated = 0;
  for (const auto& p : r->plans) simulated += p.simulated_step_s > 0;
  EXPECT_GE(simulated, 1);
  EXPECT_GE(r->simulated, 3u);
}

// One measure: the simulated plans lead, by their simulated step; each keeps its analytic
// prediction beside it; and every plan shown is ranked by the simulator (more are simulated than
// --resimulate asked for when the analytic order alone cannot settle the top).
TEST(Search, RanksByOneMeasureAndShowsBothTimes) {
  SearchOptions o;
  o.gpus = 16;
  o.global_batch = 64;
  o.resimulate = 4;
  o.top_k = 4;
  o.threads = 2;
  o.space.offload_optimizer = {false};
  const ModelSpec m = model("llama3-8b");
  ClusterSpec c = *load_cluster("dgx-h100-ndr");
  auto r = search(m, c, o);
  ASSERT_TRUE(r.ok());
  ASSERT_GE(r->plans.size(), 4u);
  ASSERT_TRUE(resize_cluster(c, 16, "test").ok());
  const AnalyticModel am(m, c);
  double last = 0, kth = 0;
  std::size_t n_sim = 0;
  for (const auto& p : r->plans) {
    EXPECT_DOUBLE_EQ(p.prediction.step_time_s, am.evaluate(p.plan).step_time_s);  // analytic, kept
    if (p.simulated_step_s < 0) continue;
    ++n_sim;
    EXPECT_GE(p.simulated_step_s, last);  // objective time: the score is the simulated step
    last = p.simulated_step_s;
    if (n_sim == 4) kth = p.simulated_step_s;
  }
  EXPECT_EQ(n_sim, 4u);  // the top 4 are all the simulator's
  EXPECT_GT(kth, 0);
  EXPECT_GE(r->simulated, 4u);
  EXPECT_LE(r->simulated, 4u * 4 + 16);
}

// Cost and energy: by hand for one plan.
TEST(Economics, CostAndEnergyByHand) {
  Prediction p;
  p.step_time_s = 10;
  p.devices = 8;
  p.time.compute = 5;  // busy half the step
  ClusterSpec c = *load_cluster("dgx-h100-ndr");
  Plan plan;
  plan.global_batch = 100;
  CostOptions o;
  o.price_per_device_hour = 3.6;
  o.pue = 1.5;
  o.tokens = 1e9;
  const Economics e = economics(p, c, plan, 1000, o);
  const DeviceSpec& d = c.node.accelerator();
  const double watts = d.power_idle_w + 0.5 * (d.power_load_w - d.power_idle_w);
  EXPECT_DOUBLE_EQ(e.device_power_w, watts);
  EXPECT_DOUBLE_EQ(e.energy_per_step_j, 8 * watts * 10 * 1.5);
  EXPECT_DOUBLE_EQ(e.cost_per_step_usd, 8 * 3.6 * 10 / 3600);  // $0.08
  EXPECT_DOUBLE_EQ(e.cost_per_mtok_usd, 0.08 / 1e5 * 1e6);     // 1e5 tokens per step
  EXPECT_DOUBLE_EQ(e.steps, 1e4);
  EXPECT_DOUBLE_EQ(e.time_to_train_s, 1e5);
}

}  // namespace
}  // namespace foresight

// Lowering: op counts, ids, stream orders and groups follow from the plan.
#include "sim/workload/workload.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "sim/analytic/analytic_model.h"
#include "sim/spec/presets.h"

namespace foresight {
namespace {

ModelSpec preset_model(const char* name) {
  auto src = resolve_spec(PresetKind::kModel, name);
  return *model_from_text(src->text, src->file);
}

ClusterSpec sized_cluster(const char* name, int devices) {
  auto c = load_cluster(name);
  EXPECT_TRUE(resize_cluster(*c, devices, "test").ok());
  return *c;
}

Workload lowered(int tp, int pp, int dp, long long gb, Schedule s = Schedule::k1F1B, int v = 1) {
  const ModelSpec m = preset_model("tiny");
  const ClusterSpec c = sized_cluster("dgx-a100-hdr", tp * pp * dp);
  Plan p;
  p.tp = tp;
  p.pp = pp;
  p.dp = dp;
  p.global_batch = gb;
  p.schedule = s;
  p.virtual_stages = v;
  auto w = lower(m, c, p);
  EXPECT_TRUE(w.ok()) << (w.ok() ? "" : w.error().message());
  return std::move(w).value();
}

int count(const StageProgram& s, const char* name, Phase ph) {
  int n = 0;
  for (auto v : boost::make_iterator_range(boost::vertices(s.graph())))
    if (std::string(s.graph()[v].name) == name && s.graph()[v].phase == ph) ++n;
  return n;
}

TEST(Workload, EveryLayerAndMicroBatchHasItsKernels) {
  const Workload w = lowered(2, 2, 1, 8);  // tiny: 2 layers, 1 per stage; 8 micro-batches
  ASSERT_EQ(w.stages.size(), 2u);
  for (const auto& s : w.stages) {
    EXPECT_EQ(count(s, "qkv", Phase::kForward), 8);
    EXPECT_EQ(count(s, "qkv", Phase::kBackward), 8);
    EXPECT_EQ(count(s, "attn.tp_all_reduce", Phase::kForward), 8);  // two per layer without SP
    EXPECT_EQ(count(s, "mlp.tp_all_reduce", Phase::kForward), 8);
  }
  EXPECT_EQ(count(w.stages[0], "embedding", Phase::kForward), 8);
  EXPECT_EQ(count(w.stages[1], "lm_head_loss", Phase::kForward), 8);
  EXPECT_EQ(count(w.stages[0], "send_activation", Phase::kForward), 8);
  EXPECT_EQ(count(w.stages[1], "recv_activation", Phase::kForward), 8);
  EXPECT_EQ(count(w.stages[0], "optimizer", Phase::kStep), 1);
}

TEST(Workload, TheHeadRunsVocabularyParallelUnderTp) {
  // Without TP: final norm and the fused head, no collective.
  const Workload serial = lowered(1, 1, 1, 4);
  EXPECT_EQ(count(serial.stages[0], "final_norm", Phase::kForward), 4);
  EXPECT_EQ(count(serial.stages[0], "final_norm", Phase::kBackward), 4);
  EXPECT_EQ(count(serial.stages[0], "ce.tp_all_gather", Phase::kForward), 0);
  EXPECT_EQ(count(serial.stages[0], "cross_entropy_grad", Phase::kForward), 0);
  // TP: the statistics are gathered and the gradient scaled in a second pass; the head's input
  // gradient is all-reduced. On the last stage only.
  const Workload tp = lowered(2, 2, 1, 4);
  EXPECT_EQ(count(tp.stages[1], "ce.tp_all_gather", Phase::kForward), 4);
  EXPECT_EQ(count(tp.stages[1], "cross_entropy_grad", Phase::kForward), 4);
  EXPECT_EQ(count(tp.stages[1], "lm_head.tp_all_reduce", Phase::kBackward), 4);
  EXPECT_EQ(count(tp.stages[0], "ce.tp_all_gather", Phase::kForward), 0);
  EXPECT_EQ(count(tp.stages[0], "final_norm", Phase::kForward), 0);
}

// The step reduces and updates every parameter a rank holds: with one stage, both the input
// embedding and the LM head of an untied model (the tiny model's). Once only the embedding was
// counted, and the data-parallel all-reduce and the optimizer missed the head's parameters.
TEST(Workload, TheStepReducesEveryParameterOfTheStage) {
  const ModelSpec m = preset_model("tiny");
  ASSERT_FALSE(m.tied_embeddings);
  for (const auto& [pp, dp] : std::vector<std::pair<int, int>>{{1, 2}, {2, 2}}) {
    const Workload w = lowered(1, pp, dp, 8);
    double reduced = 0, optimizer_bytes = 0;
    for (const auto& s : w.stages)
      for (auto v : boost::make_iterator_range(boost::vertices(s.graph()))) {
        const Op& op = s.graph()[v];
        if (op.kind == OpKind::kCollective && op.group == GroupKind::kDp &&
            std::string(op.name) == "grad_reduce")
          reduced += op.bytes;
        if (std::string(op.name) == "optimizer") optimizer_bytes += op.bytes;
      }
    EXPECT_DOUBLE_EQ(reduced, m.total_params() * grad_bytes(w.plan.precision)) << "pp " << pp;
    EXPECT_DOUBLE_EQ(optimizer_bytes, m.total_params() * kAdamBytesPerParam) << "pp " << pp;
  }
}

// Megatron-Core's gradient buckets (Plan::grad_bucket_params): the first stage's first chunk
// is reduced in buckets of at least the size, in backward order, the rest of it at the chunk's
// end; every other chunk, and every chunk of a later stage, in one bucket after its last backward.
// Llama 3 8B on two stages of two chunks (8 layers each), buckets of two and a half layers.
TEST(Workload, MegatronBucketsSplitOnlyTheFirstStagesFirstChunk) {
  const ModelSpec m = preset_model("llama3-8b");
  const ClusterSpec c = sized_cluster("dgx-a100-hdr", 4);
  Plan p;
  p.pp = 2;
  p.dp = 2;
  p.global_batch = 8;
  p.schedule = Schedule::kInterleaved1F1B;
  p.virtual_stages = 2;
  p.zero_stage = 1;
  p.overlap_grad_reduce = true;
  const double layer = layer_params_per_device(m, false, 1, 1), gb = grad_bytes(p);
  auto buckets = [&](std::int64_t size) {
    p.grad_bucket_params = size;
    auto w = lower(m, c, p);
    EXPECT_TRUE(w.ok()) << (w.ok() ? "" : w.error().message());
    std::vector<std::vector<double>> out(2);
    for (int st = 0; st < 2; ++st)
      for (auto v : boost::make_iterator_range(boost::vertices(w->stages[st].graph()))) {
        const Op& op = w->stages[st].graph()[v];
        if (op.phase == Phase::kBackward && std::string(op.name) == "grad_reduce_scatter")
          out[st].push_back(op.bytes / gb / layer);
      }
    return out;
  };
  const auto per_layer = buckets(0);
  EXPECT_EQ(per_layer[0].size(), 16u);
  EXPECT_EQ(per_layer[1].size(), 16u);
  const auto megatron = buckets(static_cast<std::int64_t>(2.5 * layer));
  ASSERT_EQ(megatron[0].size(), 4u);  // chunk 0: 3 + 3 + 2 layers; chunk 1: 8
  ASSERT_EQ(megatron[1].size(), 2u);  // 8 and 8
  std::vector<double> first = megatron[0], later = megatron[1];
  std::sort(first.begin(), first.end());
  const std::vector<double> expected_first{2, 3, 3, 8}, expected_later{8, 8};
  for (std::size_t i = 0; i < first.size(); ++i) EXPECT_NEAR(first[i], expected_first[i], 1e-9);
  for (std::size_t i = 0; i < later.size(); ++i) EXPECT_NEAR(later[i], expected_later[i], 1e-9);
}

TEST(Workload, OpIdsAreStable) {
  const Workload w = lowered(1, 1, 2, 4);
  bool found = false;
  for (auto v : boost::make_iterator_range(boost::vertices(w.stages[0].graph())))
    if (w.op_id(1, 0, static_cast<int>(v)) == "r1/L1/mb1/fwd/mlp_up") found = true;
  EXPECT_TRUE(found);
}

TEST(Workload, OneFOneBWarmupDependsOnTheStage) {
  const Workload w = lowered(1, 2, 1, 8);
  // Stage 0 runs p-1 = 1 forward before its first backward; the last stage alternates at once.
  auto first_phases = [&](int stage) {
    std::vector<Phase> phases;
    const auto& s = w.stages[stage];
    for (int v : s.streams[static_cast<int>(StreamId::kCompute)]) {
      const Op& op = s.graph()[v];
      if (std::string(op.name) == "qkv" && op.phase != Phase::kRecompute) phases.push_back(op.phase);
      if (phases.size() == 3) break;
    }
    return phases;
  };
  EXPECT_EQ(first_phases(0), (std::vector<Phase>{Phase::kForward, Phase::kForward, Phase::kBackward}));
  EXPECT_EQ(first_phases(1), (std::vector<Phase>{Phase::kForward, Phase::kBackward, Phase::kForward}));
}

// Plan::overlap_ep_comm: a steady-state forward and backward run as one pair, issued in
// Megatron-Core's order -- the backward's combine, the forward's attention and dispatch, the
// backward's experts and dispatch, the forward's experts and combine, ... -- so the compute stream
// alternates between the two micro-batches inside every MoE layer.
TEST(Workload, MergedPairsAlternateTheirLayersHalves) {
  const ModelSpec m = preset_model("tiny-moe");
  const ClusterSpec c = sized_cluster("dgx-h100-ndr", 8);
  Plan p;
  p.dp = 8;
  p.ep = 4;
  p.global_batch = 32;  // 4 micro-batches per replica
  auto switches = [&](bool merged) {
    p.overlap_ep_comm = merged;
    auto w = lower(m, c, p);
    EXPECT_TRUE(w.ok()) << (w.ok() ? "" : w.error().message());
    if (!w.ok()) return std::pair<int, int>{-1, -1};
    const StageProgram& s = w->stages[0];
    int compute = 0, ep = 0;
    Phase last = Phase::kStep;
    for (int v : s.streams[static_cast<int>(StreamId::kCompute)]) {
      const Phase ph = s.graph()[v].phase;
      if (ph != Phase::kForward && ph != Phase::kBackward) continue;
      compute += last != Phase::kStep && ph != last;
      last = ph;
    }
    std::vector<std::string> order;
    for (int v : s.streams[static_cast<int>(StreamId::kEp)])
      order.push_back(std::string(s.graph()[v].phase == Phase::kForward ? "F." : "B.") + s.graph()[v].name);
    // The first pair (forward of micro-batch 1, backward of 0) starts with the backward's combine.
    const auto first_b = std::find(order.begin(), order.end(), "B.ep_combine");
    if (first_b != order.end() && first_b + 2 < order.end()) {
      ep = *(first_b + 1) == "F.ep_dispatch" && *(first_b + 2) == "B.ep_dispatch";
    }
    return std::pair<int, int>{compute, ep};
  };
  const auto [plain, plain_order] = switches(false);
  const auto [merged, merged_order] = switches(true);
  // One stage, 4 micro-batches: alone the phases switch F B F B ... (7 times); merged, every MoE
  // layer of the 3 pairs switches 4 times.
  EXPECT_EQ(plain, 7);
  EXPECT_GE(merged, plain + 3 * 4 * (m.layers - m.moe.dense_layers) - 3 * 2);
  EXPECT_EQ(plain_order, 0);
  EXPECT_EQ(merged_order, 1);
}

TEST(Workload, GroupsFollowMegatronRankOrder) {
  const Workload w = lowered(2, 2, 2, 8);
  EXPECT_EQ(w.group_members(5, GroupKind::kTp), (std::vector<int>{4, 5}));
  EXPECT_EQ(w.group_members(5, GroupKind::kDp), (std::vector<int>{5, 7}));
  EXPECT_EQ(w.stage_of(5), 1);
  EXPECT_EQ(w.stage_groups(0, GroupKind::kTp).size(), 2u);
}

TEST(Workload, InterleavedStagesHoldEveryChunk) {
  ModelSpec m = preset_model("gpt3-175b");
  m.layers = 8;
  const ClusterSpec c = sized_cluster("dgx-a100-hdr", 2);
  Plan p;
  p.pp = 2;
  p.global_batch = 4;
  p.schedule = Schedule::kInterleaved1F1B;
  p.virtual_stages = 2;
  auto w = lower(m, c, p);
  ASSERT_TRUE(w.ok()) << w.error().message();
  EXPECT_EQ(w->stages[0].layers, 4);
  // Stage 0 holds layers 0,1 (chunk 0) and 4,5 (chunk 1).
  bool l4 = false, l2 = false;
  for (auto v : boost::make_iterator_range(boost::vertices(w->stages[0].graph()))) {
    l4 = l4 || w->stages[0].graph()[v].layer == 4;
    l2 = l2 || w->stages[0].graph()[v].layer == 2;
  }
  EXPECT_TRUE(l4);
  EXPECT_FALSE(l2);
}

}  // namespace
}  // namespace foresight

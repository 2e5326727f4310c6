// TP communication overlap (Plan::overlap_tp_comm, TpOverlap): each collective paired with its
// GEMM as Transformer Engine's userbuffers pair them, the SMs the communication kernels take from
// the GEMMs, the exposed part by hand, and the simulator running the same pairs.
#include <gtest/gtest.h>

#include <boost/range/iterator_range.hpp>
#include <string>

#include "sim/analytic/analytic_model.h"
#include "sim/analytic/layer_ops.h"
#include "sim/des/simulator.h"
#include "sim/workload/workload.h"
#include "tests/engines.h"
#include "tests/test_util.h"

namespace foresight {
namespace {

int index_of(const LayerKernels& k, KernelName name) {
  for (int i = 0; i < k.count; ++i)
    if (k.fwd[i].name == name) return i;
  ADD_FAILURE() << "no kernel " << kernel_name(name);
  return 0;
}

// Each forward op of a layer on simulated stage `stage`, by name.
template <class F>
void for_each_forward_layer_op(const Workload& w, int stage, F&& f) {
  for (auto v : boost::make_iterator_range(boost::vertices(w.stages[stage].graph()))) {
    const Op& op = w.stages[stage].graph()[v];
    if (op.phase == Phase::kForward && op.layer >= 0) f(std::string(op.name), op);
  }
}

struct Tp8 {
  ModelSpec m = testing::preset_model("llama3-70b");
  ClusterSpec c = testing::preset_cluster("dgx-h100-ndr", 64);
  Plan p = [] {
    Plan p = testing::make_plan(8, 4, 2, 1, 32);
    p.sequence_parallel = true;
    p.zero_stage = 1;
    return p;
  }();
  LayerKernels kernels(const Plan& plan, bool moe = false) const {
    return layer_kernels(m, c.node.accelerator(), plan, plan_layer_shape(m, plan), moe);
  }
  // b*s*h of one micro-batch in the activations' type: a TP collective's whole tensor.
  double activation_bytes(const Plan& plan) const {
    const LayerShape s = plan_layer_shape(m, plan);
    return s.batch * s.seq * static_cast<double>(m.hidden) * s.bytes_per_element;
  }
};

// Forward: the all-gathers ring-exchanged beside the QKV and MLP-up GEMMs, the reduce-scatters
// pipelined after the projection and MLP-down GEMMs; backward: the gradient all-gathers beside the
// projection's and MLP-down's backward, the input-gradient reduce-scatters beside the QKV's and
// MLP-up's. The pipelined GEMMs' forward and the bulk ones' weight gradient lose 16 of the H100's
// 132 SMs; nothing else changes.
TEST(TpOverlap, PairsEachCollectiveWithItsGemm) {
  Tp8 t;
  Plan on = t.p;
  on.overlap_tp_comm = true;
  const LayerKernels a = t.kernels(t.p), b = t.kernels(on);
  const int qkv = index_of(b, KernelName::kQkv), proj = index_of(b, KernelName::kProj),
            up = index_of(b, KernelName::kMlpUp), down = index_of(b, KernelName::kMlpDown);
  ASSERT_EQ(b.tp_count, 4);
  const TpOverlap fwd[4] = {TpOverlap::kRing, TpOverlap::kPipeline, TpOverlap::kRing, TpOverlap::kPipeline};
  const int fwd_gemm[4] = {qkv, proj, up, down};
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(b.tp_overlap[j], fwd[j]) << j;
    EXPECT_EQ(b.tp_gemm[j], fwd_gemm[j]) << j;
    EXPECT_EQ(a.tp_overlap[j], TpOverlap::kNone) << j;
  }
  ASSERT_EQ(b.tp_bwd_count, 4);
  for (int j = 0; j < 4; ++j) {
    const bool gather = b.tp_bwd_kind[j] == TpCollective::kAllGather;
    EXPECT_EQ(b.tp_bwd_overlap[j], gather ? TpOverlap::kRing : TpOverlap::kBulk) << j;
    const int g = b.tp_bwd_gemm[j];
    EXPECT_TRUE(gather ? (g == proj || g == down) : (g == qkv || g == up)) << j;
  }
  EXPECT_EQ(t.c.node.accelerator().sm_count, 132);
  const double stretch = 132.0 / (132 - kTpOverlapSms);
  for (int i = 0; i < b.count; ++i) {
    const KernelCost &x = a.fwd[i], &y = b.fwd[i];
    if (i == proj || i == down) {
      EXPECT_GT(y.fwd_s, x.fwd_s * 1.05) << i;
      EXPECT_DOUBLE_EQ(y.bwd_s, x.bwd_s) << i;
    } else if (i == qkv || i == up) {
      EXPECT_DOUBLE_EQ(y.fwd_s, x.fwd_s) << i;
      EXPECT_GT(y.bwd_weight_s, x.bwd_weight_s * 1.05) << i;
      EXPECT_LE(y.bwd_weight_s, x.bwd_weight_s * stretch + 1e-12) << i;
      EXPECT_NEAR(y.bwd_s - x.bwd_s, y.bwd_weight_s - x.bwd_weight_s, 1e-12) << i;
    } else {
      EXPECT_DOUBLE_EQ(y.fwd_s, x.fwd_s) << i;
      EXPECT_DOUBLE_EQ(y.bwd_s, x.bwd_s) << i;
    }
  }
  // Megatron's overlap needs sequence parallelism: without it nothing pairs or slows.
  Plan no_sp = on;
  no_sp.sequence_parallel = false;
  const LayerKernels c = t.kernels(no_sp), d = t.kernels([&] {
    Plan q = no_sp;
    q.overlap_tp_comm = false;
    return q;
  }());
  for (int j = 0; j < c.tp_count; ++j) EXPECT_EQ(c.tp_overlap[j], TpOverlap::kNone);
  for (int i = 0; i < c.count; ++i) EXPECT_DOUBLE_EQ(c.fwd[i].fwd_s, d.fwd[i].fwd_s);
}

// An MoE layer's expert GEMMs are outside TE's overlapped linears: its MLP block's collectives are
// not overlapped, its attention block's are.
TEST(TpOverlap, MoeExpertsAreNotOverlapped) {
  Tp8 t;
  t.m = testing::preset_model("mixtral-8x7b");
  Plan on = t.p;
  on.overlap_tp_comm = true;
  const LayerKernels k = t.kernels(on, true);
  ASSERT_EQ(k.tp_count, 4);
  EXPECT_EQ(k.tp_overlap[0], TpOverlap::kRing);
  EXPECT_EQ(k.tp_overlap[1], TpOverlap::kPipeline);
  EXPECT_EQ(k.tp_overlap[2], TpOverlap::kNone);
  EXPECT_EQ(k.tp_overlap[3], TpOverlap::kNone);
}

// The exposed part by hand: a ring exchange or a bulk overlap shows only what outlasts the GEMM;
// a pipelined reduce-scatter shows that and its last quarter.
TEST(TpOverlap, ExposedPartByHand) {
  EXPECT_DOUBLE_EQ(tp_overlap_exposed(TpOverlap::kNone, 5, 2), 2);
  EXPECT_DOUBLE_EQ(tp_overlap_exposed(TpOverlap::kRing, 5, 2), 0);
  EXPECT_DOUBLE_EQ(tp_overlap_exposed(TpOverlap::kRing, 2, 5), 3);
  EXPECT_DOUBLE_EQ(tp_overlap_exposed(TpOverlap::kBulk, 2, 5), 3);
  EXPECT_DOUBLE_EQ(tp_overlap_exposed(TpOverlap::kPipeline, 5, 1.5, 0.5), 0.5);
  EXPECT_DOUBLE_EQ(tp_overlap_exposed(TpOverlap::kPipeline, 1, 1.5, 0.5), 1.0);
}

// Overlap hides most of the TP time but not all of it (the pipelined reduce-scatters' last
// quarters), and costs the GEMMs the SMs it takes; both engines price the same pairs.
TEST(TpOverlap, EnginesAgreeAndSomeTimeStaysExposed) {
  Tp8 t;
  Plan on = t.p;
  on.overlap_tp_comm = true;
  const AnalyticModel am(t.m, t.c);
  const Prediction off = am.evaluate(t.p), with = am.evaluate(on);
  EXPECT_GT(with.time.tp_comm, 0);
  EXPECT_LT(with.time.tp_comm, 0.5 * off.time.tp_comm);
  EXPECT_GT(with.time.compute, off.time.compute);  // the SMs the overlap takes
  EXPECT_LT(with.step_time_s, off.step_time_s);
  const SimResult d = testing::expect_engines_agree(t.m, t.c, on, 0.03, "overlap_tp_comm");
  testing::expect_engines_agree(t.m, t.c, t.p, 0.03, "without overlap");

  // The simulator's graph: each pipelined reduce-scatter runs as 3/4 beside its GEMM and a
  // last quarter after it; the runtime reduces whole at the first and skips the second.
  auto w = lower(t.m, t.c, on);
  ASSERT_TRUE(w.ok()) << w.error().message();
  const double bytes = t.activation_bytes(on);
  int heads = 0, tails = 0;
  for_each_forward_layer_op(*w, 1, [&](const std::string& name, const Op& op) {
    if (name == "attn.tp_reduce_scatter" || name == "mlp.tp_reduce_scatter") {
      ++heads;
      EXPECT_DOUBLE_EQ(op.bytes, 0.75 * bytes);
    }
    if (name == "attn.tp_reduce_scatter_tail" || name == "mlp.tp_reduce_scatter_tail") {
      ++tails;
      EXPECT_DOUBLE_EQ(op.bytes, 0.25 * bytes);
    }
  });
  EXPECT_GT(heads, 0);
  EXPECT_EQ(heads, tails);
  EXPECT_GT(d.prediction.time.tp_comm, 0);
}

// Plan::overlap_tp_dgrad (no userbuffers): only the backward's input-gradient collectives of the
// QKV and MLP-up GEMMs pair with those GEMMs (reduce-scatters with SP, all-reduces without), no
// GEMM loses SMs; the exposed TP time falls by what those GEMMs' backward hides, and both engines
// agree. With userbuffers on as well, userbuffers' pairing stands.
TEST(TpOverlap, AsyncDgradHidesTheInputGradients) {
  Tp8 t;
  const AnalyticModel am(t.m, t.c);
  for (bool sp : {true, false}) {
    Plan off = t.p;
    off.sequence_parallel = sp;
    if (!sp) off.recompute = Recompute::kFull;  // to fit in memory without SP
    Plan on = off;
    on.overlap_tp_dgrad = true;
    const LayerKernels a = t.kernels(off), b = t.kernels(on);
    const int qkv = index_of(b, KernelName::kQkv), up = index_of(b, KernelName::kMlpUp);
    for (int j = 0; j < b.tp_count; ++j) EXPECT_EQ(b.tp_overlap[j], TpOverlap::kNone) << j;
    int paired = 0;
    for (int j = 0; j < b.tp_bwd_count; ++j) {
      const bool input_grad = b.tp_bwd_kind[j] != TpCollective::kAllGather;
      EXPECT_EQ(b.tp_bwd_overlap[j], input_grad ? TpOverlap::kBulk : TpOverlap::kNone) << sp << j;
      if (!input_grad) continue;
      ++paired;
      EXPECT_TRUE(b.tp_bwd_gemm[j] == qkv || b.tp_bwd_gemm[j] == up) << sp << j;
    }
    EXPECT_EQ(paired, 2) << sp;
    for (int i = 0; i < b.count; ++i) {
      EXPECT_DOUBLE_EQ(b.fwd[i].fwd_s, a.fwd[i].fwd_s) << i;
      EXPECT_DOUBLE_EQ(b.fwd[i].bwd_s, a.fwd[i].bwd_s) << i;
    }
    const Prediction x = am.evaluate(off), y = am.evaluate(on);
    EXPECT_LT(y.time.tp_comm, x.time.tp_comm) << sp;
    EXPECT_GT(y.time.tp_comm, 0.4 * x.time.tp_comm) << sp;  // the forward's and the gradients' gathers
    EXPECT_DOUBLE_EQ(y.time.compute, x.time.compute) << sp;
    EXPECT_LT(y.step_time_s, x.step_time_s) << sp;
    testing::expect_engines_agree(t.m, t.c, on, 0.03, sp ? "overlap_tp_dgrad with SP" : "overlap_tp_dgrad");
  }
  Plan ub = t.p;
  ub.overlap_tp_comm = true;
  Plan both = ub;
  both.overlap_tp_dgrad = true;
  const LayerKernels u = t.kernels(ub), v = t.kernels(both);
  for (int j = 0; j < u.tp_bwd_count; ++j) EXPECT_EQ(v.tp_bwd_overlap[j], u.tp_bwd_overlap[j]) << j;
  EXPECT_DOUBLE_EQ(am.evaluate(both).step_time_s, am.evaluate(ub).step_time_s);
  // An MoE layer's experts are grouped GEMMs outside TE's linears: only its attention pairs.
  Tp8 mixtral;
  mixtral.m = testing::preset_model("mixtral-8x7b");
  Plan moe = mixtral.p;
  moe.overlap_tp_dgrad = true;
  const LayerKernels k = mixtral.kernels(moe, true);
  int paired = 0;
  for (int j = 0; j < k.tp_bwd_count; ++j) paired += k.tp_bwd_overlap[j] == TpOverlap::kBulk;
  EXPECT_EQ(paired, 1);
}

// In fp8 plans the sequence-parallel all-gathers that feed FP8 GEMMs move the FP8 tensor, one
// byte an element (Transformer Engine and torchao cast before they gather); the reduce-scatters
// sum 16-bit outputs, and an MoE block's gathers feed the router in 16 bits. Both engines move
// those bytes, and a plan without overlap gets faster by the gathers' halved time.
TEST(TpOverlap, Fp8PlansGatherFp8) {
  Tp8 t;
  Plan fp8 = t.p;
  fp8.precision = Precision::kFp8;
  const LayerKernels k = t.kernels(fp8), moe = t.kernels(fp8, true);
  const double full = t.activation_bytes(fp8);  // b*s*h in bf16
  ASSERT_EQ(k.tp_count, 4);
  for (int i = 0; i < k.tp_count; ++i) {
    const bool gather = k.tp_kind[i] == TpCollective::kAllGather;
    EXPECT_DOUBLE_EQ(k.tp_fwd_bytes[i], gather ? full / 2 : full) << i;
    EXPECT_DOUBLE_EQ(k.tp_bwd_bytes[i], k.tp_bwd_kind[i] == TpCollective::kAllGather ? full / 2 : full) << i;
  }
  // The MoE layer: the attention's gathers in FP8, the MLP's in bf16.
  int fp8_gathers = 0, bf16_gathers = 0;
  for (int i = 0; i < moe.tp_count; ++i)
    if (moe.tp_kind[i] == TpCollective::kAllGather)
      (moe.tp_fwd_bytes[i] < full ? fp8_gathers : bf16_gathers)++;
  EXPECT_EQ(fp8_gathers, 1);
  EXPECT_EQ(bf16_gathers, 1);
  // bf16 plans: every collective the full activation.
  const LayerKernels bf = t.kernels(t.p);
  for (int i = 0; i < bf.tp_count; ++i) EXPECT_DOUBLE_EQ(bf.tp_fwd_bytes[i], full);
  // Without overlap the halved gathers make the exposed TP time shorter than the bf16 plan's.
  const AnalyticModel am(t.m, t.c);
  EXPECT_LT(am.evaluate(fp8).time.tp_comm, am.evaluate(t.p).time.tp_comm);
  // The simulator's ops carry the same bytes.
  auto w = lower(t.m, t.c, fp8);
  ASSERT_TRUE(w.ok()) << w.error().message();
  int gathers = 0;
  for_each_forward_layer_op(*w, 1, [&](const std::string& name, const Op& op) {
    if (name == "attn.tp_all_gather" || name == "mlp.tp_all_gather") {
      ++gathers;
      EXPECT_DOUBLE_EQ(op.bytes, full / 2);
    }
    if (name == "attn.tp_reduce_scatter" || name == "mlp.tp_reduce_scatter") {
      EXPECT_DOUBLE_EQ(op.bytes, full);
    }
  });
  EXPECT_GT(gathers, 0);
  testing::expect_engines_agree(t.m, t.c, fp8, 0.03, "fp8 without overlap");
}

}  // namespace
}  // namespace foresight

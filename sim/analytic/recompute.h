// Activation recompute chosen per layer: which modules each layer of a pipeline stage drops and
// rebuilds (layer_cost.h's RecomputeMask) so that the stage fits its device at the least recompute
// time -- a multiple-choice knapsack solved exactly by dynamic programming over the layers and a
// discretised memory budget.
//
//   RecomputeAssignment a = recompute_assignment(model, cluster, plan);  // plan.recompute == optimal
//   RecomputeMask m = a.layer_masks[layer];                                // what layer `layer` recomputes
//
// Both engines take the same assignment: the analytic model's memory and layer times, and the
// simulator's lowering (which kernels re-run in each layer's backward).
#pragma once

#include <optional>
#include <vector>

#include "sim/analytic/layer_cost.h"
#include "sim/spec/hardware.h"
#include "sim/spec/model.h"
#include "sim/spec/plan.h"

namespace foresight {

// One way to treat one layer: what it keeps per micro-batch and what its recompute costs.
struct RecomputeOption {
  RecomputeMask mask = 0;
  double bytes = 0;    // activation bytes kept for the backward, per micro-batch
  double seconds = 0;  // extra step time per micro-batch (re-run kernels and collectives)
};

// Memory buckets of the dynamic programme: each layer's kept bytes are rounded up to 1/kRecomputeBins
// of the budget, so a choice always fits and loses at most (layers / kRecomputeBins) of the budget.
inline constexpr int kRecomputeBins = 4096;

// The least-seconds choice of one option per item whose kept bytes sum to at most `budget`
// (bytes rounded up to budget/bins, see above): the chosen option's index per item, or nullopt
// when nothing fits. Exact on the rounded sizes (dynamic programming over the items, each step
// keeping the undominated (memory, seconds) states). Deterministic: among equal totals the least
// memory, then the first found (options in the order given).
std::optional<std::vector<int>> choose_recompute(const std::vector<std::vector<RecomputeOption>>& items,
                                                 double budget, int bins = kRecomputeBins);

// The module sets worth considering for a layer: every set of core_attn (unfused attention only),
// layernorm, act and mlp (act folded into mlp), and full.
std::vector<RecomputeMask> candidate_recompute_masks(bool flash_attention);
// The options of `masks` without those another option beats on both bytes and seconds (ties keep
// the first), in the order given.
std::vector<RecomputeOption> undominated(const std::vector<RecomputeOption>& options);

// The layers pipeline stage `stage` holds (with virtual stages: each of its chunks' layers, in
// chunk order), as the simulator lowers them. Not for DualPipe.
std::vector<int> stage_layer_list(const Plan& p, int layers, int stage);

// Per layer of the model, the modules it recomputes under `p` (Recompute::kOptimal: chosen per
// stage as above; the other policies: their fixed sets, Plan::recompute_layers applied).
struct RecomputeAssignment {
  std::vector<RecomputeMask> layer_masks;  // by layer index
  bool fits = true;  // false: even full recompute everywhere does not fit (layers then recompute fully)
};
RecomputeAssignment recompute_assignment(const ModelSpec& m, const ClusterSpec& c, const Plan& p);

}  // namespace foresight

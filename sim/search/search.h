// Plan search: enumerate layouts, prune by memory, rank by the analytic model, re-simulate the
// best with the discrete-event simulator, and report the Pareto front.
//
//   SearchOptions o;  o.gpus = 1024;  o.global_batch = 1024;
//   Result<SearchResult> r = search(model, cluster, o);
//   r->plans.front().plan   // the best layout; r->rejected["out of memory"] = how many did not fit
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "sim/analytic/economics.h"
#include "sim/analytic/prediction.h"
#include "sim/core/status.h"
#include "sim/spec/hardware.h"
#include "sim/spec/model.h"
#include "sim/spec/plan.h"

namespace foresight {

enum class Objective { kTime, kCost, kEnergy };

// Values each knob may take; empty lists take the defaults described in search.cpp.
struct SearchSpace {
  std::vector<int> tp, pp, cp, ep, micro_batch, virtual_stages, zero_stage;
  std::vector<Recompute> recompute;
  std::vector<Schedule> schedules;
  std::vector<bool> sequence_parallel, offload_optimizer, overlap_grad_reduce;
  // TP communication overlap (with SP) and ZeRO-1/2's parameter all-gather behind the next
  // forward (with the gradient reduction overlapped, as Megatron requires): default both ways.
  std::vector<bool> overlap_tp_comm, overlap_param_gather;
  // Merged forward/backward pairs hiding the expert all-to-alls (MoE with ep > 1, on the
  // schedules that pair): default both ways.
  std::vector<bool> overlap_ep_comm;
  // Parameter and activation offload (default: off; parameter offload only with the optimizer's).
  std::vector<bool> offload_params, offload_activations;
  Precision precision = Precision::kBf16;
  bool flash_attention = true;
};

// The share of the fullest device's memory a searched plan leaves free by default: a margin for
// what the memory model does not price (the caching allocator's fragmentation and rounding,
// transient peaks between the ops it sums). A chosen default, not a measurement; users with
// measured reserved-versus-allocated figures set their own (`search --min-headroom`).
inline constexpr double kDefaultMinHeadroom = 0.05;

struct SearchOptions {
  int gpus = 0;                   // 0: the whole cluster
  std::int64_t global_batch = 0;  // sequences; 0: 1024
  Objective objective = Objective::kTime;
  int top_k = 10;  // plans reported
  // Plans must leave this share of the fullest device's memory free (0: fitting is enough);
  // the others are rejected as "under N% of memory free".
  double min_headroom = kDefaultMinHeadroom;
  // Rank with the simulator: the best N (analytic), then more until the top min(N, top_k) is
  // settled (0: none; the analytic model ranks).
  int resimulate = 0;
  CostOptions cost;
  SearchSpace space;
  unsigned threads = 0;  // 0: all cores
};

struct RankedPlan {
  Plan plan;
  Prediction prediction;         // analytic
  Economics economics;           // analytic
  double simulated_step_s = -1;  // discrete-event simulator, when re-simulated
  double memory_headroom = 0;    // bytes left on the fullest device
  double score = 0;              // the objective (lower is better): the simulated one when re-simulated
};

struct SearchResult {
  std::uint64_t evaluated = 0;                    // plans timed
  std::uint64_t candidates = 0;                   // plans enumerated
  std::map<std::string, std::uint64_t> rejected;  // reason -> count
  std::vector<RankedPlan> plans;                  // best first, top_k of them: re-simulated plans
                                                  // (ranked by the simulator) before the others
  std::vector<RankedPlan> pareto;                 // analytic time vs cost vs memory headroom
  std::uint64_t simulated = 0;                    // plans re-simulated to settle the ranking
  double wall_s = 0;
};

// `progress(done, total)` is called now and then from the calling thread.
Result<SearchResult> search(const ModelSpec& model, const ClusterSpec& cluster, const SearchOptions& options,
                            const std::function<void(std::uint64_t, std::uint64_t)>& progress = {});

std::string to_string(Objective o);

}  // namespace foresight

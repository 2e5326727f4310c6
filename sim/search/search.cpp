// Enumeration, pruning, ranking, re-simulation and the Pareto front.
#include "sim/search/search.h"

#include <tbb/combinable.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>

#include "sim/analytic/analytic_model.h"
#include "sim/analytic/capacity.h"
#include "sim/des/simulator.h"
#include "sim/net/topology.h"
#include "sim/spec/interleavings.h"

namespace foresight {

std::string to_string(Objective o) {
  switch (o) {
    case Objective::kTime:
      return "time";
    case Objective::kCost:
      return "cost";
    case Objective::kEnergy:
      return "energy";
  }
  return "time";
}

namespace {

std::vector<int> powers_of_two_up_to(int n) {
  std::vector<int> v;
  for (int x = 1; x <= n; x *= 2) v.push_back(x);
  return v;
}

template <typename T>
std::vector<T> or_default(const std::vector<T>& given, std::vector<T> fallback) {
  return given.empty() ? fallback : given;
}

// The field a validation error names, as a short rejection reason ("tp", "global_batch", ...).
std::string reason_of(const Error& e) {
  const std::string& m = e.message();
  const auto slash = m.find(": /");
  if (slash == std::string::npos) return "invalid";
  const auto end = m.find(':', slash + 3);
  return "invalid " + m.substr(slash + 3, end == std::string::npos ? std::string::npos : end - slash - 3);
}

double score_of(const Prediction& p, const Economics& e, Objective o) {
  switch (o) {
    case Objective::kTime:
      return p.step_time_s;
    case Objective::kCost:
      return e.cost_per_mtok_usd;
    case Objective::kEnergy:
      return e.energy_per_mtok_kwh;
  }
  return p.step_time_s;
}

// The values each knob takes: the space's, else the defaults: TP within a node, PP up to 64
// stages, CP up to 16, EP over the experts.
struct Axes {
  std::vector<int> tp, pp, cp, ep, micro_batch, virtual_stages, zero_stage;
  std::vector<Recompute> recompute;
  std::vector<Schedule> schedules;
  std::vector<bool> sequence_parallel, offload_optimizer, overlap_grad_reduce, offload_params,
      offload_activations, overlap_tp_comm, overlap_param_gather, overlap_ep_comm;
};

// Pipeline degrees: the powers of two and every divisor of the layer count, up to 64 stages.
std::vector<int> pipeline_degrees(int layers) {
  std::vector<int> v = powers_of_two_up_to(std::min(64, layers));
  for (int d = 3; d <= std::min(64, layers); ++d)
    if (layers % d == 0 && (d & (d - 1)) != 0) v.push_back(d);
  std::sort(v.begin(), v.end());
  return v;
}

Axes search_axes(const ModelSpec& model, int per_node, const SearchSpace& sp) {
  Axes a;
  a.tp = or_default(sp.tp, powers_of_two_up_to(std::min(per_node, 8)));
  a.pp = or_default(sp.pp, pipeline_degrees(model.layers));
  a.cp = or_default(sp.cp, powers_of_two_up_to(16));
  a.ep = or_default(
      sp.ep, model.is_moe() ? powers_of_two_up_to(std::min(64, model.moe.experts)) : std::vector<int>{1});
  a.micro_batch = or_default(sp.micro_batch, std::vector<int>{1, 2, 4, 8, 16});
  a.virtual_stages = sp.virtual_stages;  // empty: interleavings() per pipeline degree
  a.zero_stage = or_default(sp.zero_stage, std::vector<int>{0, 1, 2, 3});
  a.recompute = or_default(sp.recompute, std::vector<Recompute>{Recompute::kNone, Recompute::kSelective,
                                                                Recompute::kFull, Recompute::kOptimal});
  a.schedules = or_default(sp.schedules, std::vector<Schedule>{Schedule::k1F1B, Schedule::kInterleaved1F1B,
                                                               Schedule::kZeroBubble, Schedule::kDualPipe});
  a.sequence_parallel = or_default(sp.sequence_parallel, std::vector<bool>{false, true});
  a.offload_optimizer = or_default(sp.offload_optimizer, std::vector<bool>{false, true});
  a.overlap_grad_reduce = or_default(sp.overlap_grad_reduce, std::vector<bool>{false, true});
  a.offload_params = or_default(sp.offload_params, std::vector<bool>{false});
  a.offload_activations = or_default(sp.offload_activations, std::vector<bool>{false});
  a.overlap_tp_comm = or_default(sp.overlap_tp_comm, std::vector<bool>{false, true});
  a.overlap_param_gather = or_default(sp.overlap_param_gather, std::vector<bool>{false, true});
  a.overlap_ep_comm = or_default(sp.overlap_ep_comm, std::vector<bool>{false, true});
  return a;
}

// Which accelerators the stages use. On nodes with one accelerator type: all of them. On nodes
// that mix types (GPUs and NPUs): every stage on one type (each type in turn), and pipelines
// whose first stages run on one type and the rest on another (both orders), as many stages on
// each as its share of the devices, with layers split by each type's speed.
struct DeviceLayout {
  std::vector<std::string> stage_devices;  // empty: the node's first accelerator type
  int ranks = 0;
};
std::vector<DeviceLayout> device_layouts(const ClusterSpec& cluster, int gpus, int pp) {
  std::vector<int> groups;
  for (std::size_t g = 0; g < cluster.node.devices.size(); ++g)
    if (cluster.node.devices[g].device.kind != DeviceKind::kCpu) groups.push_back(static_cast<int>(g));
  std::vector<DeviceLayout> v{{{}, gpus}};
  if (groups.size() < 2) return v;
  auto capacity = [&](int g) { return cluster.node.devices[g].count * cluster.nodes; };
  const auto& name = [&](int g) -> const std::string& { return cluster.node.devices[g].device.name; };
  for (std::size_t i = 1; i < groups.size(); ++i)
    v.push_back(
        {std::vector<std::string>(static_cast<std::size_t>(pp), name(groups[i])), capacity(groups[i])});
  for (int a : groups)
    for (int b : groups) {
      if (a == b || pp < 2) continue;
      const int ranks = capacity(a) + capacity(b);
      if (ranks % pp != 0) continue;
      const int per_stage = ranks / pp;
      if (capacity(a) % per_stage != 0) continue;
      const int k = capacity(a) / per_stage;
      if (k < 1 || k > pp - 1) continue;
      DeviceLayout l{std::vector<std::string>(static_cast<std::size_t>(k), name(a)), ranks};
      l.stage_devices.resize(static_cast<std::size_t>(pp), name(b));
      v.push_back(std::move(l));
    }
  return v;
}

// The overlap variants of one plan (each with Plan::overlap_tp_dgrad where TP has collectives): the
// gradient reduction (ZeRO-3 overlaps by construction,
// FSDP's prefetch: one variant), TP communication (with SP: Transformer Engine's userbuffers
// split the SP collectives), ZeRO-1/2's parameter all-gather (only beside the overlapped
// reduction, as Megatron requires) and the expert all-to-alls behind merged forward/backward
// pairs (where the plan's experts, schedule and recompute allow them).
void add_overlaps(const Plan& base, const Axes& a, std::vector<Plan>& out) {
  const bool pairs = base.ep > 1 && base.schedule_pairs() && base.recompute_pairs();
  for (bool grad : a.overlap_grad_reduce) {
    if (base.zero_stage == 3 && grad != a.overlap_grad_reduce.front()) continue;
    for (bool tp : a.overlap_tp_comm) {
      if (tp && !base.sequence_parallel) continue;
      for (bool gather : a.overlap_param_gather) {
        if (gather && (base.zero_stage == 0 || base.zero_stage == 3 || !grad)) continue;
        for (bool ep : a.overlap_ep_comm) {
          if (ep && !pairs) continue;
          Plan p = base;
          p.overlap_grad_reduce = grad;
          p.overlap_tp_comm = tp;
          p.overlap_param_gather = gather;
          p.overlap_ep_comm = ep;
          // Megatron's and Transformer Engine's default: the input gradients' TP collectives
          // beside their weight gradients (Plan::overlap_tp_dgrad).
          p.overlap_tp_dgrad = p.tp > 1;
          out.push_back(std::move(p));
        }
      }
    }
  }
}

// The memory and recompute variants of one layout (`base`: its degrees, micro-batch and
// schedule), those the models cover, appended to `out` in enumeration order.
void add_variants(const Plan& base, const Axes& a, const SearchSpace& sp, std::vector<Plan>& out) {
  const Schedule sched = base.schedule;
  for (int zero : a.zero_stage)
    for (Recompute rc : a.recompute)
      for (bool s : a.sequence_parallel) {
        // With fused attention, selective recompute has nothing to re-run: it is the same plan as
        // no recompute.
        if (rc == Recompute::kSelective && sp.flash_attention) continue;
        if (s && base.tp == 1) continue;
        for (bool off : a.offload_optimizer)
          for (bool off_p : a.offload_params)
            for (bool off_a : a.offload_activations) {
              // Parameter offload needs the optimizer on the host; neither it nor activation
              // offload is modelled with split weight gradients.
              if (off_p && !off) continue;
              if ((off_p || off_a) && (sched == Schedule::kZeroBubble || sched == Schedule::kDualPipe))
                continue;
              // Per-layer recompute is not modelled with activation offload or DualPipe.
              if (rc == Recompute::kOptimal && (off_a || sched == Schedule::kDualPipe)) continue;
              Plan p = base;
              p.zero_stage = zero;
              p.recompute = rc;
              p.sequence_parallel = s;
              p.offload_optimizer = off;
              p.offload_params = off_p;
              p.offload_activations = off_a;
              add_overlaps(p, a, out);
            }
      }
}

// The schedules and micro-batches of one layout (`base`: its degrees), each with its variants,
// appended to `out`.
void add_schedules(const Plan& base, const Axes& a, const SearchSpace& sp, const DeviceLayout& devices,
                   const std::vector<std::pair<int, std::vector<int>>>& chunkings, std::vector<Plan>& out) {
  for (int mb : a.micro_batch)
    for (Schedule sched : a.schedules)
      for (const auto& [vp, split] : chunkings) {
        if ((sched == Schedule::kInterleaved1F1B) != (vp > 1)) continue;
        if (sched != Schedule::k1F1B && base.pp == 1) continue;
        // A chunk per stage device is not modelled (validate_plan_on says so).
        if (!devices.stage_devices.empty() && (vp > 1 || sched == Schedule::kDualPipe)) continue;
        Plan p = base;
        p.micro_batch = mb;
        p.schedule = sched;
        p.virtual_stages = vp;
        p.layer_split = split;
        // Megatron's default with virtual stages (its training scripts, NeMo and Megatron-Bridge
        // turn it on there): never slower in either engine.
        p.overlap_p2p_comm = vp > 1;
        p.precision = sp.precision;
        p.flash_attention = sp.flash_attention;
        p.stage_devices = devices.stage_devices;
        add_variants(p, a, sp, out);
      }
}

// Every plan of the space on `gpus` devices that the models cover, in enumeration order.
std::vector<Plan> enumerate_plans(const ModelSpec& model, const ClusterSpec& cluster, int gpus,
                                  std::int64_t gb, const SearchSpace& sp) {
  const Axes a = search_axes(model, cluster.node.accelerators(), sp);
  std::vector<Plan> candidates;
  for (int pp : a.pp) {
    // Virtual stages: the space's, else every interleaving of the layers over pp stages.
    std::vector<std::pair<int, std::vector<int>>> chunkings;
    if (a.virtual_stages.empty()) {
      chunkings.push_back({1, {}});
      if (pp > 1)
        for (auto& c : interleavings(model.layers, pp)) chunkings.push_back(std::move(c));
    } else {
      for (int vp : a.virtual_stages) chunkings.push_back({vp, {}});
    }
    for (int tp : a.tp)
      for (const DeviceLayout& devices : device_layouts(cluster, gpus, pp))
        for (int cp : a.cp) {
          if (devices.ranks % (tp * pp * cp) != 0) continue;
          for (int ep : a.ep) {
            Plan p;
            p.tp = tp;
            p.pp = pp;
            p.cp = cp;
            p.dp = devices.ranks / (tp * pp * cp);
            p.ep = ep;
            p.global_batch = gb;
            add_schedules(p, a, sp, devices, chunkings, candidates);
          }
        }
  }
  return candidates;
}

// Fits, and leaves the options' share of the fullest device free.
bool leaves_margin(const MemoryBreakdown& mem, const SearchOptions& o) {
  return mem.fits() && mem.capacity - mem.total >= o.min_headroom * mem.capacity;
}

// The rejection reason of a plan that fits but leaves less than the margin: "under 5% of memory
// free (allocator margin)".
std::string margin_reason(const SearchOptions& o) {
  std::ostringstream s;
  s << "under " << 100 * o.min_headroom << "% of memory free (allocator margin)";
  return s.str();
}

// Validates, completes (layer split, recompute layers), checks the memory of and times one
// candidate into `r`; false, with the reason counted in `rejected`, when it is out. `margin`:
// margin_reason(o), built once per search.
bool evaluate_candidate(const AnalyticModel& am, const ClusterSpec& cluster, const SearchOptions& o,
                        const std::string& margin, Plan& p, std::map<std::string, std::uint64_t>& rejected,
                        RankedPlan& r) {
  const ModelSpec& model = am.model();
  if (Status s = validate_plan_on(p, model, cluster, "plan"); !s) {
    ++rejected[reason_of(s.error())];
    return false;
  }
  // Stages on different accelerator types: layers by speed (needs the plan's degrees).
  const bool mixed = std::adjacent_find(p.stage_devices.begin(), p.stage_devices.end(),
                                        std::not_equal_to<>()) != p.stage_devices.end();
  if (mixed && p.layer_split.empty()) p.layer_split = am.balanced_layer_split(p);
  // Full recompute where no recompute does not fit: only as many layers per stage as memory
  // needs (the fewest that fit is the fastest; layers cost the same). Where no recompute fits,
  // the candidate stays full (the space's none variant covers the other).
  if (p.recompute == Recompute::kFull && p.recompute_layers < 0) {
    const int k = fewest_recompute_layers(am, p, o.min_headroom);
    if (k > 0 && k < most_layers_per_chunk(p, model.layers)) p.recompute_layers = k;
  }
  // Per-layer recompute where no recompute fits chooses none: the space's none variant.
  const bool optimal = p.recompute == Recompute::kOptimal;
  if (optimal) p.recompute_headroom = o.min_headroom;  // solve to the margin it is held to
  if (optimal) {
    Plan none = p;
    none.recompute = Recompute::kNone;
    if (leaves_margin(am.memory(none), o)) {
      ++rejected["recompute optimal: none fits (same plan)"];
      return false;
    }
  }
  // The optimal assignment is solved once, by evaluate (its memory is the same).
  Prediction pred;
  if (optimal) pred = am.evaluate(p);
  const MemoryBreakdown mem = optimal ? pred.memory : am.memory(p);
  if (!mem.fits()) {
    ++rejected[mem.total > mem.capacity ? "out of memory" : "out of host memory"];
    return false;
  }
  if (!leaves_margin(mem, o)) {
    ++rejected[margin];
    return false;
  }
  r.plan = p;
  r.prediction = optimal ? pred : am.evaluate(p);
  r.economics = economics(r.prediction, cluster, p, model.seq_len, o.cost);
  r.memory_headroom = mem.capacity - mem.total;
  r.score = score_of(r.prediction, r.economics, o.objective);
  return true;
}

// Evaluates every candidate in parallel (o.threads) and returns those that fit, in enumeration
// order; the rejected ones are counted in `out`.
std::vector<RankedPlan> evaluate_candidates(const AnalyticModel& am, const ClusterSpec& cluster,
                                            const SearchOptions& o, std::vector<Plan>& candidates,
                                            const std::function<void(std::uint64_t, std::uint64_t)>& progress,
                                            SearchResult& out) {
  std::unique_ptr<tbb::global_control> limit;
  if (o.threads > 0)
    limit = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, o.threads);
  std::vector<RankedPlan> results(candidates.size());
  std::vector<char> fits(candidates.size(), 0);
  tbb::combinable<std::map<std::string, std::uint64_t>> rejected;
  std::atomic<std::uint64_t> done{0};
  const std::string margin = margin_reason(o);
  const std::size_t chunk = 4096;
  const std::size_t chunks = (candidates.size() + chunk - 1) / chunk;
  std::size_t next_chunk = 0;
  // Chunks are handed out from the calling thread so it can report progress between them.
  const std::size_t wave = std::max<std::size_t>(1, std::thread::hardware_concurrency()) * 4;
  while (next_chunk < chunks) {
    const std::size_t end_chunk = std::min(chunks, next_chunk + wave);
    tbb::parallel_for(next_chunk, end_chunk, [&](std::size_t c) {
      auto& rej = rejected.local();
      const std::size_t b = c * chunk, e = std::min(candidates.size(), b + chunk);
      for (std::size_t i = b; i < e; ++i)
        if (evaluate_candidate(am, cluster, o, margin, candidates[i], rej, results[i])) fits[i] = 1;
      done += e - b;
    });
    next_chunk = end_chunk;
    if (progress) progress(done.load(), candidates.size());
  }
  rejected.combine_each([&](const std::map<std::string, std::uint64_t>& m) {
    for (const auto& [k, v] : m) out.rejected[k] += v;
  });
  std::vector<RankedPlan> survivors;
  for (std::size_t i = 0; i < results.size(); ++i)
    if (fits[i]) survivors.push_back(std::move(results[i]));
  return survivors;
}

// Simulates survivors[i] for i in [begin, end) with the discrete-event simulator (it sees
// contention and overlap): simulated_step_s, and the score on the simulated step. The analytic
// prediction and economics stay as they are.
void simulate_range(const ModelSpec& model, const ClusterSpec& cluster, const Topology& topology,
                    const SearchOptions& o, std::size_t begin, std::size_t end,
                    std::vector<RankedPlan>& survivors) {
  tbb::parallel_for(begin, end, [&](std::size_t i) {
    RankedPlan& r = survivors[i];
    auto w = lower(model, cluster, r.plan);
    if (!w) return;
    SimOptions so;
    so.topology = &topology;
    Simulator sim(*w, so);
    auto s = sim.run();
    if (!s) return;
    r.simulated_step_s = s->prediction.step_time_s;
    r.score = score_of(s->prediction, economics(s->prediction, cluster, r.plan, model.seq_len, o.cost),
                       o.objective);
  });
}

// Ranks by one measure, the simulator's: the analytic best `n_sim` are simulated, then, while the
// next plan in the analytic order scores better (analytically) than the k-th best simulated one
// (k = min(top_k, n_sim)) and could therefore belong in the top k, it is simulated too, up to 4 * n_sim + 16
// plans in all (the order is settled when the loop stops before the cap). Simulated plans come first, by
// their simulated score; the others keep the analytic order. Returns how many were simulated.
std::size_t resimulate(const ModelSpec& model, const ClusterSpec& cluster, const SearchOptions& o,
                       std::size_t n_sim, std::size_t top_k, std::vector<RankedPlan>& survivors) {
  MaxMinSystem capacities;
  const Topology shared_topology(cluster, capacities);  // built once, read by every run
  const std::size_t cap = std::min(survivors.size(), 4 * n_sim + 16);
  std::vector<double> analytic(survivors.size());
  for (std::size_t i = 0; i < survivors.size(); ++i) analytic[i] = survivors[i].score;
  std::size_t done = 0, next = n_sim;
  while (true) {
    simulate_range(model, cluster, shared_topology, o, done, next, survivors);
    done = next;
    std::vector<double> simulated;
    for (std::size_t i = 0; i < done; ++i)
      if (survivors[i].simulated_step_s >= 0) simulated.push_back(survivors[i].score);
    std::sort(simulated.begin(), simulated.end());
    const double kth = simulated.size() >= top_k && top_k > 0 ? simulated[top_k - 1] : INFINITY;
    next = done;
    while (next < cap && analytic[next] < kth && next - done < std::max<std::size_t>(n_sim, 1)) ++next;
    if (next == done) break;
  }
  std::stable_sort(survivors.begin(), survivors.begin() + static_cast<std::ptrdiff_t>(done),
                   [](const RankedPlan& a, const RankedPlan& b) {
                     // A plan the simulator could not run goes after the simulated ones.
                     if ((a.simulated_step_s >= 0) != (b.simulated_step_s >= 0))
                       return a.simulated_step_s >= 0;
                     return a.score < b.score;
                   });
  return done;
}

// The Pareto front over (step time, cost per Mtok, -memory headroom), from the analytic ranking;
// at most 64 plans.
std::vector<RankedPlan> pareto_front(const std::vector<RankedPlan>& survivors) {
  std::vector<RankedPlan> front;
  std::vector<const RankedPlan*> by_time;
  for (const auto& r : survivors) by_time.push_back(&r);
  // Ties broken by cost, then by headroom: a plan can then only be dominated by one before it.
  std::sort(by_time.begin(), by_time.end(), [](const RankedPlan* a, const RankedPlan* b) {
    return std::tuple(a->prediction.step_time_s, a->economics.cost_per_mtok_usd, -a->memory_headroom) <
           std::tuple(b->prediction.step_time_s, b->economics.cost_per_mtok_usd, -b->memory_headroom);
  });
  for (const RankedPlan* r : by_time) {
    bool dominated = false;
    for (const RankedPlan& f : front) {
      if (f.prediction.step_time_s <= r->prediction.step_time_s &&
          f.economics.cost_per_mtok_usd <= r->economics.cost_per_mtok_usd &&
          f.memory_headroom >= r->memory_headroom) {
        dominated = true;
        break;
      }
    }
    if (!dominated) front.push_back(*r);
    if (front.size() >= 64) break;
  }
  return front;
}

}  // namespace

Result<SearchResult> search(const ModelSpec& model, const ClusterSpec& cluster_in, const SearchOptions& o,
                            const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  ClusterSpec cluster = cluster_in;
  const int gpus = o.gpus > 0 ? o.gpus : cluster.total_accelerators();
  FS_RETURN_IF_ERROR(resize_cluster(cluster, gpus, "--gpus"));
  const std::int64_t gb = o.global_batch > 0 ? o.global_batch : 1024;
  if (!(o.min_headroom >= 0 && o.min_headroom < 1))
    return Error("min_headroom: " + std::to_string(o.min_headroom) +
                 " is not a share of memory in [0, 1) (0.05 leaves 5% free)");

  std::vector<Plan> candidates = enumerate_plans(model, cluster, gpus, gb, o.space);
  SearchResult out;
  out.candidates = candidates.size();
  if (candidates.empty())
    return Error("search: no layout of " + std::to_string(gpus) + " devices in the search space");

  // Evaluate in parallel: validate, memory check, time, economics.
  const AnalyticModel am(model, cluster);
  std::vector<RankedPlan> survivors = evaluate_candidates(am, cluster, o, candidates, progress, out);
  out.evaluated = survivors.size();
  if (survivors.empty()) {
    out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;  // every plan rejected: the caller reports the reasons
  }
  // Stable: equal scores keep the enumeration order, so results do not depend on threads.
  std::stable_sort(survivors.begin(), survivors.end(),
                   [](const RankedPlan& a, const RankedPlan& b) { return a.score < b.score; });
  const std::size_t n_sim =
      std::min<std::size_t>(static_cast<std::size_t>(std::max(0, o.resimulate)), survivors.size());
  const std::size_t k =
      std::min<std::size_t>(static_cast<std::size_t>(std::max(1, o.top_k)), survivors.size());
  out.pareto = pareto_front(survivors);  // analytic, for every plan alike
  if (n_sim > 0) out.simulated = resimulate(model, cluster, o, n_sim, std::min(k, n_sim), survivors);
  out.plans.assign(survivors.begin(), survivors.begin() + static_cast<std::ptrdiff_t>(k));
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace foresight

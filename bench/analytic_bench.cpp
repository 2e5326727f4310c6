// Plans evaluated per second by the analytic model: Llama 3 405B on 16,384 H100s, one thread.
// Run: build/bench/analytic_bench --benchmark_min_time=2
#include <benchmark/benchmark.h>

#include <vector>

#include "sim/analytic/analytic_model.h"
#include "sim/spec/presets.h"

namespace {

using namespace foresight;

struct Setup {
  ModelSpec model;
  ClusterSpec cluster;
  std::vector<Plan> plans;
};

// A realistic search space: every valid combination of the main layout knobs.
Setup make_setup() {
  Setup s;
  auto src = resolve_spec(PresetKind::kModel, "llama3-405b");
  s.model = *model_from_text(src->text, src->file);
  s.cluster = *load_cluster("dgx-h100-ndr");
  (void)resize_cluster(s.cluster, 16384, "bench");
  const int gpus = 16384;
  for (int tp : {1, 2, 4, 8, 16})
    for (int pp : {1, 2, 4, 8, 16, 32})
      for (int cp : {1, 2, 4})
        for (int mb : {1, 2, 4})
          for (int v : {1, 2, 3})
            for (auto rc : {Recompute::kNone, Recompute::kSelective, Recompute::kFull})
              for (int zero : {0, 1, 3})
                for (bool sp : {false, true}) {
                  Plan p;
                  p.tp = tp;
                  p.pp = pp;
                  p.cp = cp;
                  p.micro_batch = mb;
                  p.dp = gpus / (tp * pp * cp);
                  p.virtual_stages = v;
                  p.schedule = v > 1 ? Schedule::kInterleaved1F1B : Schedule::k1F1B;
                  p.recompute = rc;
                  p.zero_stage = zero;
                  p.sequence_parallel = sp;
                  p.global_batch = 2048;  // 16M tokens of 8192, as Llama 3 405B's main phase
                  if (validate_plan(p, s.model, gpus, "bench").ok()) s.plans.push_back(p);
                }
  return s;
}

void BM_AnalyticEvaluate(benchmark::State& state) {
  static const Setup s = make_setup();
  const AnalyticModel am(s.model, s.cluster);
  std::size_t i = 0;
  for (auto _ : state) {
    const Prediction p = am.evaluate(s.plans[i]);
    benchmark::DoNotOptimize(p.step_time_s);
    if (++i == s.plans.size()) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["plans_in_space"] = static_cast<double>(s.plans.size());
}
BENCHMARK(BM_AnalyticEvaluate);

void BM_AnalyticMemoryOnly(benchmark::State& state) {
  static const Setup s = make_setup();
  const AnalyticModel am(s.model, s.cluster);
  std::size_t i = 0;
  for (auto _ : state) {
    const MemoryBreakdown m = am.memory(s.plans[i]);
    benchmark::DoNotOptimize(m.total);
    if (++i == s.plans.size()) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AnalyticMemoryOnly);

}  // namespace

BENCHMARK_MAIN();

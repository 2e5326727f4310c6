// Discrete-event simulator throughput: events per second on a full-fidelity step, and the two
// scale targets (wall time per simulated step).
// Run: build/bench/des_bench --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include "sim/des/simulator.h"
#include "sim/spec/presets.h"

namespace {

using namespace foresight;

struct Case {
  Workload workload;
};

Workload make(const char* model_name, const char* cluster_name, int gpus, int tp, int pp, long long gb,
              Recompute rc) {
  auto src = resolve_spec(PresetKind::kModel, model_name);
  const ModelSpec m = *model_from_text(src->text, src->file);
  ClusterSpec c = *load_cluster(cluster_name);
  (void)resize_cluster(c, gpus, "bench");
  Plan p;
  p.tp = tp;
  p.pp = pp;
  p.dp = gpus / (tp * pp);
  p.global_batch = gb;
  p.sequence_parallel = true;
  p.zero_stage = 1;
  p.recompute = rc;
  return std::move(lower(m, c, p)).value();
}

void run(benchmark::State& state, const Workload& w, bool full) {
  std::uint64_t events = 0;
  for (auto _ : state) {
    Simulator sim(w, SimOptions{.full = full});
    auto r = sim.run();
    benchmark::DoNotOptimize(r->prediction.step_time_s);
    events += r->events;
  }
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.counters["ops"] = static_cast<double>(w.op_count());
}

// GPT-3 175B on 1,024 A100s, TP8 PP8 DP16, 1F1B, 64 micro-batches, every rank simulated.
void BM_Gpt3_1024_Full(benchmark::State& state) {
  static const Workload w = make("gpt3-175b", "dgx-a100-hdr", 1024, 8, 8, 1024, Recompute::kSelective);
  run(state, w, true);
}
BENCHMARK(BM_Gpt3_1024_Full)->Unit(benchmark::kMillisecond)->Iterations(3);

// Llama 3 405B on 16,384 H100s, TP8 PP16 DP128, one rank per stage by symmetry.
void BM_Llama405_16k_Symmetric(benchmark::State& state) {
  static const Workload w = make("llama3-405b", "dgx-h100-ndr", 16384, 8, 16, 2048, Recompute::kFull);
  run(state, w, false);
}
BENCHMARK(BM_Llama405_16k_Symmetric)->Unit(benchmark::kMillisecond)->Iterations(5);

// Lowering cost alone (plan -> op graphs) for the 16K case.
void BM_Lower_Llama405_16k(benchmark::State& state) {
  for (auto _ : state) {
    Workload w = make("llama3-405b", "dgx-h100-ndr", 16384, 8, 16, 2048, Recompute::kFull);
    benchmark::DoNotOptimize(w.stages.size());
  }
}
BENCHMARK(BM_Lower_Llama405_16k)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();

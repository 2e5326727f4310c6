// runtime_parallel_check: run under mpirun with a layout; every rank also runs the serial model
// (tp = pp = dp = 1, same global batch) in-process and compares, element by element through the
// shard maps:
//   1. the reduced gradients of the first step (before the optimizer; ZeRO-0 only, since ZeRO-1
//      keeps only this rank's block of them), and the loss;
//   2. the parameters after `steps` optimizer steps (ZeRO-0 and ZeRO-1).
// With gradient compression (compression=int8|topk, topk=F) the run is no longer the serial one;
// it checks instead
//   1. int8, ZeRO-0: the reduced gradients against the serial (uncompressed) ones within int8's
//      rounding;
//   2. after `steps` steps, that the replicas agree bit for bit: the DP ranks of a (stage, TP
//      rank) hold the same parameters, and the tensors replicated in the TP group (norms, the
//      embedding) are the same on every TP rank of a stage.
// Exit 0 when everything agrees within the tolerance, 1 with the first mismatches printed.
//
//   mpirun -np 4 runtime_parallel_check model=tiny4.json tp=2 pp=2 schedule=1f1b gb=8
//   mpirun -np 4 runtime_parallel_check model=tiny4.json tp=2 dp=2 compression=topk topk=0.1
//   mpirun -np 4 runtime_parallel_check model=tiny4.json tp=2 pp=2 sp=1 memory=separate
//   mpirun -np 2 runtime_parallel_check model=tiny4.json pp=2 precision=fp32 backend=cuda
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include "runtime/communication/comm.h"
#include "runtime/training/hash.h"
#include "runtime/training/trainer.h"
#include "sim/spec/presets.h"

using namespace foresight;
using namespace foresight::runtime;

namespace {

// Tolerance: fp32 sums in a different order (TP partial sums, micro-batch accumulation, DP
// reduction) differ by a few ulps per addition; 1e-4 of the tensor's largest magnitude, plus an
// absolute 1e-7 for tensors that are nearly zero, is 2-3 orders above that and far below any
// real error (a missing or doubled contribution moves elements by O(their size)).
bool close(float a, float b, float scale, float rel) { return std::fabs(a - b) <= rel * scale + 1e-7f; }

struct Compare {
  int rank = 0, bad = 0;
  float rel = 1e-4f;
  void tensors(const char* what, const Trainer& par, const Buffer& pv, const Trainer& ser, const Buffer& sv) {
    for (const TensorSlot& t : par.layout().tensors()) {
      const TensorSlot* s = ser.layout().find(t.name, t.layer);
      if (!s) {
        std::fprintf(stderr, "rank %d: %s has no serial counterpart\n", rank, t.name.c_str());
        ++bad;
        continue;
      }
      float scale = 0;
      for (std::size_t i = 0; i < s->size(); ++i) scale = std::max(scale, std::fabs(sv[s->offset + i]));
      for (int r = 0; r < t.rows; ++r)
        for (int c = 0; c < t.cols; ++c) {
          const auto [gr, gc] = par.layout().global_coords(t, r, c);
          const float a = pv[t.offset + static_cast<std::size_t>(r) * t.cols + c];
          const float b = sv[s->offset + static_cast<std::size_t>(gr) * s->cols + gc];
          if (!close(a, b, scale, rel) && bad++ < 8)
            std::fprintf(stderr,
                         "rank %d: %s L%d %s[%d,%d] (full [%d,%d]) = %.9g, serial %.9g (scale %.3g)\n", rank,
                         what, t.layer, t.name.c_str(), r, c, gr, gc, a, b, scale);
        }
    }
  }
};

using Args = std::map<std::string, std::string>;

// Ends the job (exit 2 on every rank) after saying why.
[[noreturn]] void input_failure(const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  Comm::abort_job(2);
}

int num(const Args& a, const char* k, int d) { return a.count(k) ? std::atoi(a.at(k).c_str()) : d; }

// The layout under test, from the key=value arguments.
Plan plan_from_args(const Args& a) {
  Plan p;
  p.tp = num(a, "tp", 1);
  p.pp = num(a, "pp", 1);
  p.dp = num(a, "dp", 1);
  p.micro_batch = num(a, "mb", 1);
  p.global_batch = num(a, "gb", 8);
  p.virtual_stages = num(a, "vp", 1);
  p.zero_stage = num(a, "zero", 0);
  p.flash_attention = num(a, "flash", 1) != 0;
  p.overlap_grad_reduce = num(a, "overlap_grad", 0) != 0;
  p.overlap_tp_comm = num(a, "overlap_tp", 0) != 0;
  p.sequence_parallel = num(a, "sp", 0) != 0;
  if (a.count("schedule")) p.schedule = *parse_schedule(a.at("schedule"));
  if (a.count("recompute")) p.recompute = *parse_recompute(a.at("recompute"));
  if (a.count("recompute_method")) p.recompute_method = *parse_recompute_method(a.at("recompute_method"));
  p.recompute_layers = num(a, "recompute_layers", -1);
  if (a.count("precision")) p.precision = *parse_precision(a.at("precision"));
  if (a.count("compression")) {
    auto c = parse_grad_compression(a.at("compression"));
    if (!c) input_failure(c.error().message());
    p.grad_compression = *c;
    p.compression_topk = a.count("topk") ? std::atof(a.at("topk").c_str()) : 0.1;
  }
  return p;
}

// The serial reference of a layout: one rank, the same global batch, no compression.
Plan serial_plan_of(const Plan& p) {
  Plan serial = p;
  serial.tp = serial.pp = serial.dp = 1;
  serial.virtual_stages = 1;
  serial.zero_stage = 0;
  serial.schedule = Schedule::k1F1B;
  serial.grad_compression = GradCompression::kNone;
  return serial;
}

// memory=separate: the parallel run keeps its tensors as a device backend does (backend.h);
// backend=cuda: it runs on the GPU of its local rank (the serial reference stays on the CPU).
std::unique_ptr<Backend> parallel_backend(const Args& a, const Comm& world) {
  std::unique_ptr<Backend> be = make_cpu_backend(a.count("memory") && a.at("memory") == "separate");
  if (!a.count("backend")) return be;
  auto chosen = make_backend(a.at("backend"), Comm::local_rank(world.rank()));
  if (!chosen) input_failure("backend=" + a.at("backend") + ": " + chosen.error().message());
  return std::move(*chosen);
}

// The first step without the update: the loss, and the reduced gradients (ZeRO-0 only, since
// ZeRO-1 keeps only this rank's block of them; not with top-k, whose reduction is not the serial
// one). Returns the serial loss.
double check_first_step(const Plan& p, Trainer& par, Trainer& ser, Compare& cmp) {
  auto g_par = par.step(false);
  auto g_ser = ser.step(false);
  if (!g_par || !g_ser) {
    std::fprintf(stderr, "step failed\n");
    Comm::abort_job(1);
  }
  if (std::fabs(g_par->loss - g_ser->loss) > 1e-5 * std::fabs(g_ser->loss)) {
    std::fprintf(stderr, "rank %d: loss %.9g, serial %.9g\n", cmp.rank, g_par->loss, g_ser->loss);
    ++cmp.bad;
  }
  // int8 of dp ranks' gradients: each rank's rounding and the sum's, at most half a step
  // (absmax / 127) of their block each; the ranks' gradients are of the sum's size, so about
  // (dp + 1) / 2 / 127 of the tensor's largest element -- 1.2% at dp = 2; 3% allows blocks whose
  // largest element exceeds the sum's. A mean instead of a sum, or a missing rank, errs by 50%.
  if (p.grad_compression == GradCompression::kInt8) cmp.rel = 0.03f;
  if (p.zero_stage == 0 && p.grad_compression != GradCompression::kTopK)
    cmp.tensors("grad", par, par.grads(), ser, ser.grads());
  return g_ser->loss;
}

// Compressed runs: the replicas agree bit for bit. A hash of all parameters per (stage, TP rank)
// and of the TP-replicated ones per stage, compared at rank 0.
void check_replicas(const Trainer& t, const Comm& world, Compare& cmp) {
  std::string replicated;
  for (const TensorSlot& ts : t.layout().tensors())
    if (ts.shard == Shard::kReplicated)
      replicated.append(reinterpret_cast<const char*>(t.params().data() + ts.offset),
                        ts.size() * sizeof(float));
  const std::string all(reinterpret_cast<const char*>(t.params().data()), t.params().size() * sizeof(float));
  const std::string mine = std::to_string(t.stage()) + " " + std::to_string(t.tp_rank()) + " " +
                           std::to_string(fnv1a(all)) + " " + std::to_string(fnv1a(replicated));
  const auto lines = world.gather_bytes(mine);
  std::map<std::pair<int, int>, std::string> full_of;
  std::map<int, std::string> replicated_of;
  for (std::size_t r = 0; r < lines.size(); ++r) {
    int st = 0, tp = 0;
    char full[32] = {0}, repl[32] = {0};
    std::sscanf(lines[r].c_str(), "%d %d %31s %31s", &st, &tp, full, repl);
    auto [f, new_f] = full_of.emplace(std::make_pair(st, tp), full);
    auto [q, new_q] = replicated_of.emplace(st, repl);
    if (!new_f && f->second != full && cmp.bad++ < 8)
      std::fprintf(stderr, "rank %zu: parameters differ from another DP replica of stage %d, TP rank %d\n", r,
                   st, tp);
    if (!new_q && q->second != repl && cmp.bad++ < 8)
      std::fprintf(stderr, "rank %zu: TP-replicated tensors differ from another TP rank of stage %d\n", r,
                   st);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    const auto eq = s.find('=');
    if (eq == std::string::npos) {
      std::fprintf(stderr, "usage: key=value ...\n");
      return 2;
    }
    a[s.substr(0, eq)] = s.substr(eq + 1);
  }
  Comm world = Comm::world();
  auto model =
      a.count("model") ? load_model_file(a["model"]) : Result<ModelSpec>(Error("model=FILE is required"));
  auto cluster = load_cluster("cpu-local");
  if (!model || !cluster) input_failure((!model ? model.error() : cluster.error()).message());
  const Plan p = plan_from_args(a);
  const bool compressed = p.grad_compression != GradCompression::kNone;
  const int steps = num(a, "steps", 2);
  ClusterSpec c = *cluster;
  if (Status s = resize_cluster(c, p.gpus(), "gpus"); !s) input_failure(s.error().message());
  if (Status s = validate_plan(p, *model, p.gpus(), "plan"); !s) input_failure(s.error().message());
  ClusterSpec c1 = *cluster;
  (void)resize_cluster(c1, 1, "gpus");
  auto w = lower(*model, c, p);
  auto w1 = lower(*model, c1, serial_plan_of(p));
  if (!w || !w1) input_failure((!w ? w.error() : w1.error()).message());
  RunOptions o;
  o.adam.weight_decay = 0.1f;  // exercise decoupled weight decay too
  o.record_ops = false;
  Comm self;  // the serial reference: a one-rank world inside this process
  auto par = Trainer::create(*w, world, o, parallel_backend(a, world));
  auto ser = Trainer::create(*w1, self, o);
  if (!par || !ser) input_failure((!par ? par.error() : ser.error()).message());

  Compare cmp{world.rank(), 0};
  const double serial_loss = check_first_step(p, **par, **ser, cmp);
  for (int s = 0; s < steps; ++s) {
    if (!(*par)->step() || (!compressed && !(*ser)->step())) {
      std::fprintf(stderr, "step failed\n");
      Comm::abort_job(1);
    }
  }
  if (compressed)
    check_replicas(**par, world, cmp);
  else
    cmp.tensors("param", **par, (*par)->params(), **ser, (*ser)->params());
  double bad = cmp.bad;
  world.all_reduce(&bad, 1);
  if (world.rank() == 0)
    std::printf("%s: %s (loss %.6f, %d steps)\n", bad == 0 ? "OK" : "MISMATCH", argc > 1 ? argv[1] : "",
                serial_loss, steps);
  Comm::finalize();
  return bad == 0 ? 0 : 1;
}

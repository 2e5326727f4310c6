// The runtime's executor: one rank runs its pipeline stage's lowered op graph (sim/workload), op by
// op in graph order, with real tensors. The trainer decides everything host-side (the schedule,
// which tensors live, the loss scale); its backend (runtime/backends/backend.h) holds the tensors, runs the
// kernels and the collectives: the CPU backend with Eigen GEMMs and the reference kernels over
// MPI, the CUDA backend with cuBLAS and kernels/*.cu over NCCL. The ids and order are the
// simulator's, so a measured trace lines up with a predicted one op by op.
//
//   Comm world = Comm::world();
//   auto w = lower(model, cluster, plan);
//   auto t = Trainer::create(*w, world, options);             // the CPU backend
//   auto g = Trainer::create(*w, world, options, *make_backend("cuda", local_rank));
//   for (int s = 0; s < 10; ++s) { auto st = (*t)->step(); ... st->loss ... }
//
// What it executes (anything else is refused by `check_runtime_plan` with the reason): dense
// decoder-only models (RMSNorm or LayerNorm, GQA attention with rotary embeddings, GeLU or SwiGLU
// MLP, no linear biases or dropout); TP (Megatron column/row split, all-reduce; the LM head and its
// cross-entropy split by vocabulary, the embedding replicated in the TP group; optional sequence
// parallelism), PP with GPipe, 1F1B or interleaved 1F1B, DP with
// all-reduce (ZeRO-0) or reduce-scatter + all-gather (ZeRO-1), gradient compression on the DP
// group (int8, top-k with error feedback: runtime/communication/grad_compression.h), gradient accumulation,
// full or selective recompute (block or uniform method) and per-layer recompute modules, kernel fusion off
// (eager RMSNorm and SwiGLU passes, with flash attention: cpu_fast.h),
// --overlap-grad-reduce. The CPU backend computes in fp32 whatever the plan's
// precision; with fp16 it runs dynamic loss scaling the way a GPU would (a gradient beyond the fp16
// range skips the step and halves the scale).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/reference.h"
#include "runtime/backends/backend.h"
#include "runtime/backends/buffer.h"
#include "runtime/communication/comm.h"
#include "runtime/training/algorithms.h"
#include "runtime/training/checkpoint.h"
#include "runtime/training/params.h"
#include "sim/core/status.h"
#include "sim/workload/workload.h"

namespace foresight::runtime {

struct RunOptions {
  std::uint64_t seed = 1234;  // parameters and synthetic data
  kernels::AdamWConfig adam{1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f};
  float initial_loss_scale = 65536.0f;  // fp16 only (2^16, apex's default)
  int loss_scale_window = 1000;         // good steps before the scale doubles (Megatron's default)
  bool record_ops = true;               // per-op timings of each step
  AlgorithmOptions algorithms;          // the articles' options (algorithms.h), off by default
};

struct StepStats {
  int step = 0;                   // 1-based
  double loss = 0;                // mean cross-entropy over the global batch
  double seconds = 0;             // wall time of the step on this rank
  bool skipped = false;           // fp16 overflow: no update
  double loss_scale = 1;          // the dynamic fp16 scale after this step
  double applied_loss_scale = 1;  // the scale this step's backward used (variance-adjusted or not)
  // This rank's data-parallel gradient collectives (dp > 1), sized as the op graph sizes a
  // collective: an all-reduce or reduce-scatter its buffer, an all-gather the gathered total.
  double dp_grad_bytes = 0;
};

struct OpTiming {
  int op = 0;                     // vertex of the stage program
  double start_s = 0, end_s = 0;  // from the start of the step
  double bytes = 0;               // the backend's tensors held once the op was issued (Backend::live_bytes)
};

// Empty Status when the runtime can execute `plan` for `model`; otherwise the reason, naming the field.
Status check_runtime_plan(const ModelSpec& model, const Plan& plan, const std::string& file);

// Deterministic synthetic training data: sequence `sample` of step `step` (0-based), S+1 tokens
// (inputs are [0, S), targets [1, S]). Mostly a fixed affine next-token rule with 10% noise, so
// the loss of a working model falls well below log(vocab).
void synthetic_tokens(std::uint64_t seed, int step, std::int64_t sample, int seq, int vocab, int* out);

// One rank's checkpoint file, as Trainer::checkpoint_bytes writes it: the magic "FSCKPT01", the
// header's length (u64), the header (JSON: model, plan, rank, ranks, step, loss_scale,
// good_steps, params, moments, seed, residual), the fp32 tensors (parameters, AdamW m and v, the
// error-feedback residual) and the FNV-1a 64 hash of everything before it (u64).
struct CheckpointFile {
  std::string model;
  std::string plan_json;  // the header's plan, dumped ("null" when it has none)
  int rank = -1, ranks = -1;
  int step = 0, good_steps = 0;
  double loss_scale = 1;
  bool has_seed = false;
  std::uint64_t seed = 0;
  std::uint64_t params = 0, moments = 0, residual = 0;  // element counts
  std::size_t header_bytes = 0;                         // the header's length
  std::string_view tensors;  // the bytes between the header and the hash (a view into the input)
};

// Reads a checkpoint file's bytes: the magic, the hash, the header's length and every header
// field's type and range. The tensors' size is not checked against the header here (the trainer
// checks it against its model and plan). `path` names the file in errors.
Result<CheckpointFile> parse_checkpoint_file(std::string_view bytes, const std::string& path);

class Trainer {
 public:
  // `w` and `world` must outlive the trainer; `world.size()` must equal the plan's rank count.
  // Without a backend the trainer runs on the CPU backend.
  static Result<std::unique_ptr<Trainer>> create(const Workload& w, Comm& world, const RunOptions& o,
                                                 std::unique_ptr<Backend> backend = nullptr);
  ~Trainer();

  // One optimizer step. With `apply_update` false it stops after the gradient reduction (tests
  // compare gradients then); the step counter and the error-feedback residual do not advance.
  Result<StepStats> step(bool apply_update = true);

  int rank() const;
  int stage() const;
  int tp_rank() const;
  int steps_done() const;
  const ParamLayout& layout() const;
  // Host copies of the training state (copied out of the backend's memory at the call).
  Buffer params() const;
  void set_param(std::size_t index, float value);  // tests perturb parameters (finite differences)
  Buffer grads() const;
  Buffer error_feedback() const;  // the top-k residual, indexed like grads (empty without top-k)
  const Backend& backend() const;
  const std::vector<OpTiming>& timings() const;  // of the last step
  const Workload& workload() const;

  // Checkpoints are sets, one per step (runtime/training/checkpoint.h): DIR/step-NNNNNNNN/ holds every
  // rank's file (parameters, AdamW moments, step, loss scale, the top-k error-feedback residual,
  // with a content hash) and, written last, MANIFEST.json with every file's size and hash.
  // Both calls are collective over the trainer's world: every rank calls them, and every rank
  // gets the same outcome. save_checkpoint writes the set of steps_done() and then removes the
  // other sets; load_checkpoint restores the newest set that every rank can load and says which
  // (and which newer sets it passed over, and why).
  Status save_checkpoint(const std::string& dir) const;
  Result<CheckpointSetRead> load_checkpoint(const std::string& dir);
  // This rank's state as one checkpoint file's bytes, and back (`path` names the file in errors).
  std::string checkpoint_bytes() const;
  Status restore_checkpoint(const std::string& bytes, const std::string& path);
  // What a set must match to be resumed by this trainer: model, plan, rank count.
  CheckpointIdentity checkpoint_identity() const;

  struct Impl;

 private:
  explicit Trainer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace foresight::runtime

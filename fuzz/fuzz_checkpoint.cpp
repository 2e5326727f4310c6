// Fuzzes the checkpoint readers (runtime/training/trainer.h, runtime/training/checkpoint.h). The first byte
// of the input picks the reader, the rest is what it reads:
//
//   0  a rank's checkpoint file (FSCKPT01), as read from disk: parse_checkpoint_file, then
//      Trainer::restore_checkpoint into a trainer of the seed's model and plan;
//   1  the same, with the FNV-1a hash of the rest appended first, so that mutations get past the
//      content hash to the header and the tensors (a file as a bug in the writer would leave it);
//   2  a set's MANIFEST.json: parse_checkpoint_manifest against the seed set's identity (step 2).
//
// The seeds in fuzz/corpus/fuzz_checkpoint/ are a real set written by
//   foresight run --steps 2 --model MICRO --checkpoint-dir D     (MICRO: kMicroModel below)
// with the reader's byte in front (and, for 1, the file without its trailing hash).
// Every outcome must be a value: an Error, or a restore after which the trainer writes back the
// very tensors and step it read.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "runtime/communication/comm.h"
#include "runtime/training/checkpoint.h"
#include "runtime/training/hash.h"
#include "runtime/training/trainer.h"
#include "sim/spec/hardware.h"
#include "sim/spec/model.h"
#include "sim/spec/plan.h"

namespace {

using namespace foresight;

// The smallest model the runtime trains (a checkpoint file of 10.7 KB) and the plan that
// `foresight run` gives it on one rank, as the seed set's manifest has it.
constexpr const char* kMicroModel =
    R"({"name": "fuzz-micro", "layers": 1, "hidden": 8, "heads": 2, "kv_heads": 1,
  "ffn_hidden": 16, "mlp": "swiglu", "norm": "rmsnorm", "rope": true, "vocab": 16, "seq_len": 4})";
constexpr const char* kPlan =
    R"({"cp": 1, "dp": 1, "ep": 1, "flash_attention": true, "global_batch": 4, "micro_batch": 1,
  "offload_optimizer": false, "overlap_grad_reduce": false, "overlap_tp_comm": false, "pp": 1, "precision": "fp32",
  "recompute": "none", "schedule": "1f1b", "sequence_parallel": false, "tp": 1, "virtual_stages": 1, "zero_stage": 0})";

struct Fixture {
  Workload w;
  runtime::Comm self;
  std::unique_ptr<runtime::Trainer> t;
};

Fixture& fixture() {
  static Fixture* f = [] {
    auto* fx = new Fixture;
    auto model = model_from_text(kMicroModel, "micro.json");
    auto cluster = load_cluster("cpu-local");
    auto plan = plan_from_json(nlohmann::json::parse(kPlan), "plan.json");
    if (!model || !cluster || !plan || !resize_cluster(*cluster, 1, "gpus")) std::abort();
    auto w = lower(*model, *cluster, *plan);
    if (!w) std::abort();
    fx->w = std::move(w).value();
    runtime::RunOptions o;
    o.record_ops = false;
    auto t = runtime::Trainer::create(fx->w, fx->self, o);
    if (!t) std::abort();
    fx->t = std::move(t).value();
    return fx;
  }();
  return *f;
}

void file_reader(const std::string& bytes) {
  auto file = runtime::parse_checkpoint_file(bytes, "rank-00000.ckpt");
  if (file && file->tensors.size() > bytes.size()) __builtin_trap();
  runtime::Trainer& t = *fixture().t;
  const Status restored = t.restore_checkpoint(bytes, "rank-00000.ckpt");
  if (!restored) return;
  // A restore needs the file to parse; the trainer then holds what it read, and writes it back.
  if (!file || t.steps_done() != file->step) __builtin_trap();
  const std::string again = t.checkpoint_bytes();
  auto reread = runtime::parse_checkpoint_file(again, "again.ckpt");
  if (!reread || reread->tensors != file->tensors || reread->step != file->step ||
      reread->good_steps != file->good_steps || reread->loss_scale != file->loss_scale)
    __builtin_trap();
}

void manifest_reader(std::string_view text) {
  static const runtime::CheckpointIdentity id{"fuzz-micro", plan_to_json(fixture().w.plan).dump(), 1};
  bool other_launch = false;
  auto files = runtime::parse_checkpoint_manifest(text, "step-00000002/MANIFEST.json", 2, id, other_launch);
  if (!files) {
    if (files.error().message().empty()) __builtin_trap();
    return;
  }
  if (other_launch || files->size() != 1) __builtin_trap();
  const auto& e = files->front();
  if (e.file.empty() || e.file.find('/') != std::string::npos || e.fnv1a.size() != 16) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      file_reader(std::string(rest));
      break;
    case 1: {
      std::string bytes(rest);
      const std::uint64_t hash = runtime::fnv1a(bytes);
      bytes.append(reinterpret_cast<const char*>(&hash), sizeof hash);
      file_reader(bytes);
      break;
    }
    default:
      manifest_reader(rest);
  }
  return 0;
}

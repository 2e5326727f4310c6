// Prediction: what the analytic model (and later the simulator) says about one training step.
#pragma once

#include <array>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "sim/core/status.h"

namespace foresight {

// Seconds of one step, by what the slowest pipeline stage spends them on.
struct TimeBreakdown {
  double compute = 0;    // GEMMs, attention and elementwise kernels, recompute included
  double recompute = 0;  // the part of compute that re-runs the forward pass
  double host_wait = 0;  // the part of compute the device waits for the host to issue the kernels
  double tp_comm = 0;    // exposed tensor/sequence-parallel collectives
  double cp_comm = 0;    // exposed context-parallel KV exchange
  double ep_comm = 0;    // exposed expert-parallel all-to-all
  double pp_comm = 0;    // exposed pipeline send/recv
  double bubble = 0;     // pipeline fill and drain
  double dp_comm = 0;    // exposed data-parallel gradient / parameter collectives
  double optimizer = 0;  // optimizer step
  double offload = 0;    // host transfers and host optimizer work not hidden
  double data = 0;       // waiting for input: data loading the loader could not hide
  double total = 0;
};

// Bytes on the most loaded device.
struct MemoryBreakdown {
  double weights = 0;
  double gradients = 0;
  double optimizer = 0;
  double activations = 0;
  double buffers = 0;   // logits, communication buckets, workspaces
  double reserved = 0;  // runtime context and allocator fragmentation (device preset)
  double total = 0;
  double capacity = 0;
  int stage = 0;  // the pipeline stage it belongs to
  // Host memory the device's offloaded state takes (optimizer, parameters, activations, embedding
  // table), and the device's share of its node's host memory (0: not checked).
  double host = 0;
  double host_capacity = 0;
  bool fits() const { return total <= capacity && (host_capacity <= 0 || host <= host_capacity); }
};

enum class FitVerdict { kFits, kOutOfMemory };

struct Prediction {
  double step_time_s = 0;
  TimeBreakdown time;
  MemoryBreakdown memory;
  FitVerdict fit = FitVerdict::kFits;
  double model_flops = 0;     // per step, 6*N*tokens-style (no recompute), whole job
  double hardware_flops = 0;  // per step, what the devices execute (recompute included)
  double mfu = 0;             // model FLOPs / (time * devices * peak)
  double hfu = 0;             // hardware FLOPs / (time * devices * peak)
  double tokens_per_s = 0;
  double data_load_s = 0;        // the data loader's time per step, hidden or not (data_loading.h)
  double tflops_per_device = 0;  // hardware FLOP/s per device, in TFLOP/s
  long long micro_batches = 0;
  int devices = 0;
  bool fits() const { return fit == FitVerdict::kFits; }
};

// The parts of a breakdown as tables show them, in display order (the CLI's and the GUI's).
struct NamedAmount {
  const char* name;
  double amount;
};
// What the step time adds up to; recompute is inside compute, so it is not among them.
std::array<NamedAmount, 10> time_parts(const TimeBreakdown& t);
// What the device memory adds up to.
std::array<NamedAmount, 6> memory_parts(const MemoryBreakdown& m);

// "needs 91.2 GiB of 80.0 GiB on stage 0 (weights 20.1 GiB, ...)" -- for errors and tables.
std::string describe_memory(const MemoryBreakdown& m);
nlohmann::json prediction_to_json(const Prediction& p);
// An error unless the step time, its breakdown, the throughput and the memory are finite numbers:
// validated inputs should never give inf or NaN, so this names the input and says so, instead of
// printing "inf h" and "-nan %" with exit 0.
Status check_finite(const Prediction& p, const std::string& source);

}  // namespace foresight

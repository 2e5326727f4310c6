// Device memory over a simulated step, per simulated rank: what stays for the whole step (weights,
// gradients, optimizer state, buffers, reserved: the analytic model's figures for the rank's
// pipeline stage), plus each layer's kept activations (and the embedding's output on the first
// stage) from the end of its forward for a micro-batch to the end of its backward for it, and what
// a recomputing layer rebuilds from its recompute's start to that end -- so the peak follows the
// schedule as simulated (how many micro-batches each stage holds at once) rather than a closed
// form. Zero-bubble schedules' deferred weight gradients are taken to keep nothing beyond the
// backward (their GEMMs' inputs, which the schedules' design counts within the 1F1B footprint).
//
//   SimOptions so;  so.record = true;
//   auto r = Simulator(w, so).run();
//   for (const MemoryTrack& t : memory_tracks(w, *r))  t.samples ...  // (time, bytes) at each change
//
// Not modelled: offloaded activations' round trips, per-stage tensor-parallel degrees; a layer's
// kept bytes are the plan's (recompute_assignment).
#pragma once

#include <utility>
#include <vector>

#include "sim/des/simulator.h"
#include "sim/workload/workload.h"

namespace foresight {

struct MemoryTrack {
  int rank = 0, stage = 0;
  double static_bytes = 0;                         // weights, gradients, optimizer, buffers, reserved
  std::vector<std::pair<double, double>> samples;  // (seconds, bytes in use) from 0, at each change
  double peak_bytes = 0, peak_s = 0;
  double analytic_bytes = 0;  // the analytic model's total for the stage (its closed-form in-flight count)
  double capacity_bytes = 0;
};

// One track per simulated rank, by rank; empty without op records (SimOptions::record off).
std::vector<MemoryTrack> memory_tracks(const Workload& w, const SimResult& r);

}  // namespace foresight

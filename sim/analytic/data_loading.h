// Data loading: the input pipeline of one training step -- reading the step's samples from shared
// storage (less what a local cache serves), decompressing them and any other CPU preprocessing
// on the loader cores of the nodes that feed the first pipeline stage -- and the stall it adds
// when the loader cannot keep ahead of training.
//
//   DataLoadCost c = data_load_cost(model, cluster, plan);   // per step
//   double stall = input_stall(c, plan, step_without_stall);  // what the step waits for data
//
// With prefetch (Plan::data.prefetch >= 1) the loader runs beside training and its stages
// (storage, CPU) overlap: the step waits only for what exceeds the rest of the step. Without
// prefetch, each micro-batch's loading runs in the training loop before its forward pass.
#pragma once

#include "sim/spec/hardware.h"
#include "sim/spec/model.h"
#include "sim/spec/plan.h"

namespace foresight {

struct DataLoadCost {
  double raw_bytes = 0;   // uncompressed bytes of the step's samples, whole job
  double read_bytes = 0;  // bytes read from shared storage (compressed, less the cached share)
  int loader_nodes = 1;   // nodes that read and decode (those holding first-stage ranks)
  double storage_s = 0;   // the reads at the cluster's aggregate storage bandwidth
  double cpu_s = 0;       // decompression and preprocessing on one loader node's cores
  double seconds = 0;     // one step's loading: max(storage, cpu) with prefetch, else their sum
};

// Bytes one sample (sequence) takes uncompressed: Plan::data.sample_bytes, else the sequence's
// token ids at Plan::data.token_bytes (default: 2 bytes below 65,536 vocabulary entries, else 4,
// as Megatron's indexed datasets store them).
double sample_bytes(const ModelSpec& m, const Plan& p);
DataLoadCost data_load_cost(const ModelSpec& m, const ClusterSpec& c, const Plan& p);
// Seconds the step waits for input, given how long it takes without waiting.
double input_stall(const DataLoadCost& cost, const Plan& p, double step_without_stall_s);

}  // namespace foresight

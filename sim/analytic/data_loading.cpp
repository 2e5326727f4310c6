// Data loading cost per step and the stall it causes.
#include "sim/analytic/data_loading.h"

#include <algorithm>

namespace foresight {

double sample_bytes(const ModelSpec& m, const Plan& p) {
  if (p.data.sample_bytes > 0) return p.data.sample_bytes;
  const int seq = effective_seq_len(p, m);
  const int token_bytes = p.data.token_bytes > 0 ? p.data.token_bytes : (m.vocab <= 65536 ? 2 : 4);
  return static_cast<double>(seq) * token_bytes;
}

DataLoadCost data_load_cost(const ModelSpec& m, const ClusterSpec& c, const Plan& p) {
  DataLoadCost out;
  const DataLoading& d = p.data;
  out.raw_bytes = sample_bytes(m, p) * static_cast<double>(p.global_batch);
  out.read_bytes = out.raw_bytes / std::max(1.0, d.compression_ratio) * (1.0 - d.cached_fraction);
  // Ranks of the first pipeline stage come first in rank order: the nodes they fill load data.
  const int per_node = std::max(1, c.node.accelerators());
  out.loader_nodes = std::max(1, (p.tp * p.cp * p.dp + per_node - 1) / per_node);
  out.storage_s = c.storage_bandwidth > 0 ? out.read_bytes / c.storage_bandwidth : 0.0;
  const double node_bytes = out.raw_bytes / out.loader_nodes;
  const double cores = std::max(1, d.loader_cores);
  if (d.compression_ratio > 1 && d.decompress_rate > 0) out.cpu_s += node_bytes / (cores * d.decompress_rate);
  if (d.preprocess_rate > 0) out.cpu_s += node_bytes / (cores * d.preprocess_rate);
  out.seconds = d.prefetch >= 1 ? std::max(out.storage_s, out.cpu_s) : out.storage_s + out.cpu_s;
  return out;
}

double input_stall(const DataLoadCost& cost, const Plan& p, double step_without_stall_s) {
  if (p.data.prefetch < 1) return cost.seconds;
  return std::max(0.0, cost.seconds - step_without_stall_s);
}

}  // namespace foresight

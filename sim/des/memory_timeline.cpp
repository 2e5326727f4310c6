// Device memory over a simulated step from its op records: the static part per stage, and each
// (layer, micro-batch)'s kept activations from its forward's end to its backward's end.
#include "sim/des/memory_timeline.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string_view>
#include <unordered_map>

#include "sim/analytic/analytic_model.h"
#include "sim/analytic/layer_cost.h"
#include "sim/analytic/recompute.h"

namespace foresight {

namespace {

// Per layer: what it keeps for the backward, and what its recompute rebuilds beside that; the
// embedding's output (layer -1), kept on the first stage for the backward of its first layer.
struct LayerBytes {
  std::vector<double> kept, rebuilt;
  double embedding_out = 0;
  double kept_by(std::int64_t layer) const {
    return layer < 0 ? embedding_out : kept[static_cast<std::size_t>(layer)];
  }
};

LayerBytes layer_bytes(const Workload& w, const AnalyticModel& am) {
  const ModelSpec& m = w.model;
  const Plan& p = w.plan;
  const RecomputeAssignment masks = am.recompute_assignment(p);
  const LayerShape shape = plan_layer_shape(m, p);
  LayerBytes b;
  b.kept.assign(static_cast<std::size_t>(std::max(0, m.layers)), 0.0);
  b.rebuilt.assign(b.kept.size(), 0.0);
  for (int layer = 0; layer < m.layers; ++layer) {
    const RecomputeMask mask = static_cast<std::size_t>(layer) < masks.layer_masks.size()
                                   ? masks.layer_masks[static_cast<std::size_t>(layer)]
                                   : recompute_mask(p);
    const bool moe = layer >= m.dense_layers();
    b.kept[static_cast<std::size_t>(layer)] = layer_activation_bytes(m, shape, mask, p.flash_attention, moe);
    b.rebuilt[static_cast<std::size_t>(layer)] =
        layer_activation_bytes(m, shape, RecomputeMask{0}, p.flash_attention, moe) -
        b.kept[static_cast<std::size_t>(layer)];
  }
  b.embedding_out = embedding_output_bytes(m, p, shape);
  return b;
}

// Per (rank, layer, micro-batch): when its forward ended, and when the last of its backward
// (weight gradients and recompute included) did. The embedding counts as layer -1.
struct Span {
  double kept_from = -1, freed_at = -1;
  double rebuilt_from = -1;  // its recompute's first start
};
struct Spans {
  std::map<int, std::unordered_map<std::int64_t, Span>> by_rank;  // rank -> (layer, mb) -> span
  std::map<int, int> stage_of_rank;
  double step = 0;  // the last op's end
};

Spans activation_spans(const Workload& w, const SimResult& r) {
  Spans out;
  for (const OpRecord& o : r.ops) {
    out.step = std::max(out.step, o.end_s);
    out.stage_of_rank.emplace(o.rank, o.stage);
    const Op& op = w.stages[o.stage].graph()[o.op];
    const bool embedding = op.layer < 0 && std::string_view(op.name) == "embedding";
    if ((op.layer < 0 && !embedding) || op.micro_batch < 0 || op.phase == Phase::kStep) continue;
    Span& s = out.by_rank[o.rank][static_cast<std::int64_t>(op.layer) * (std::int64_t{1} << 32) +
                                  static_cast<std::uint32_t>(op.micro_batch)];
    // The deferred weight gradients of zero-bubble schedules keep only their GEMMs' inputs, which
    // the schedule's design counts as the 1F1B footprint: freed with the backward proper.
    if (op.phase == Phase::kForward)
      s.kept_from = std::max(s.kept_from, o.end_s);
    else if (op.phase != Phase::kWeightGrad)
      s.freed_at = std::max(s.freed_at, o.end_s);
    if (op.phase == Phase::kRecompute && (s.rebuilt_from < 0 || o.start_s < s.rebuilt_from))
      s.rebuilt_from = o.start_s;
  }
  return out;
}

// One rank's track: its static bytes, then each span's activations from the forward's end to the
// backward's (a recompute's rebuilt part from its start), the peak where the sum is highest.
MemoryTrack rank_track(int rank, int stage, const MemoryBreakdown& mem, const LayerBytes& b,
                       const std::unordered_map<std::int64_t, Span>& spans, double step) {
  MemoryTrack t;
  t.rank = rank;
  t.stage = stage;
  t.static_bytes = mem.weights + mem.gradients + mem.optimizer + mem.buffers + mem.reserved;
  t.analytic_bytes = mem.total;
  t.capacity_bytes = mem.capacity;
  std::vector<std::pair<double, double>> changes;  // (time, +/- bytes)
  for (const auto& [key, s] : spans) {
    if (s.kept_from < 0) continue;
    const std::int64_t layer = key >= 0 ? key >> 32 : -1;
    const double bytes = b.kept_by(layer);
    const double freed = s.freed_at >= s.kept_from ? s.freed_at : step;
    changes.emplace_back(s.kept_from, bytes);
    changes.emplace_back(freed, -bytes);
    if (layer >= 0 && s.rebuilt_from >= 0 && b.rebuilt[static_cast<std::size_t>(layer)] > 0) {
      changes.emplace_back(s.rebuilt_from, b.rebuilt[static_cast<std::size_t>(layer)]);
      changes.emplace_back(freed, -b.rebuilt[static_cast<std::size_t>(layer)]);
    }
  }
  // Frees before allocations at the same moment: a layer's backward ending as another's forward does.
  std::sort(changes.begin(), changes.end());
  double in_use = t.static_bytes;
  t.samples.emplace_back(0.0, in_use);
  t.peak_bytes = in_use;
  for (std::size_t i = 0; i < changes.size();) {
    const double at = changes[i].first;
    for (; i < changes.size() && changes[i].first == at; ++i) in_use += changes[i].second;
    t.samples.emplace_back(at, in_use);
    if (in_use > t.peak_bytes) t.peak_bytes = in_use, t.peak_s = at;
  }
  return t;
}

}  // namespace

std::vector<MemoryTrack> memory_tracks(const Workload& w, const SimResult& r) {
  std::vector<MemoryTrack> out;
  if (r.ops.empty()) return out;
  const AnalyticModel am(w.model, w.cluster);
  const std::vector<MemoryBreakdown> stages = am.stage_memories(w.plan);
  const LayerBytes bytes = layer_bytes(w, am);
  Spans spans = activation_spans(w, r);
  for (const auto& [rank, stage] : spans.stage_of_rank) {
    const MemoryBreakdown& mem =
        stages[static_cast<std::size_t>(std::min<int>(stage, static_cast<int>(stages.size()) - 1))];
    out.push_back(rank_track(rank, stage, mem, bytes, spans.by_rank[rank], spans.step));
  }
  return out;
}

}  // namespace foresight

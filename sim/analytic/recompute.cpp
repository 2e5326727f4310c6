// The per-layer recompute choice: candidate module sets, the knapsack, and the stage layer lists.
#include "sim/analytic/recompute.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <unordered_map>

#include "sim/analytic/analytic_model.h"

namespace foresight {

namespace {

std::optional<std::vector<int>> solve(const std::vector<std::vector<RecomputeOption>>& items, double budget,
                                      int bins);

// A search asks the same question many times (plans that differ only in what leaves the layers'
// memory unchanged): answers are kept per thread, keyed by the whole question.
struct Question {
  std::vector<std::vector<RecomputeOption>> items;
  double budget;
  int bins;
  bool operator==(const Question& o) const {
    if (budget != o.budget || bins != o.bins || items.size() != o.items.size()) return false;
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (items[i].size() != o.items[i].size()) return false;
      for (std::size_t j = 0; j < items[i].size(); ++j) {
        const RecomputeOption &a = items[i][j], &b = o.items[i][j];
        if (a.mask != b.mask || a.bytes != b.bytes || a.seconds != b.seconds) return false;
      }
    }
    return true;
  }
};

struct QuestionHash {
  std::size_t operator()(const Question& q) const {
    // One 64-bit word at a time (splitmix64's finaliser as the mixer).
    std::uint64_t h = 0x9e3779b97f4a7c15ULL;
    auto mix = [&h](std::uint64_t v) {
      h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
      h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
      h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
      h ^= h >> 31;
    };
    mix(std::bit_cast<std::uint64_t>(q.budget));
    mix(static_cast<std::uint64_t>(q.bins));
    for (const auto& opts : q.items)
      for (const RecomputeOption& o : opts) {
        mix(o.mask);
        mix(std::bit_cast<std::uint64_t>(o.bytes));
        mix(std::bit_cast<std::uint64_t>(o.seconds));
      }
    return static_cast<std::size_t>(h);
  }
};

}  // namespace

std::optional<std::vector<int>> choose_recompute(const std::vector<std::vector<RecomputeOption>>& items,
                                                 double budget, int bins) {
  thread_local std::unordered_map<Question, std::optional<std::vector<int>>, QuestionHash> answers;
  Question q{items, budget, bins};
  if (auto it = answers.find(q); it != answers.end()) return it->second;
  auto answer = solve(items, budget, bins);
  if (answers.size() >= 4096) answers.clear();  // bounded: a search's questions repeat close together
  answers.emplace(std::move(q), answer);
  return answer;
}

namespace {

std::optional<std::vector<int>> solve(const std::vector<std::vector<RecomputeOption>>& items, double budget,
                                      int bins) {
  const std::size_t n = items.size();
  if (n == 0) return std::vector<int>{};
  if (!(budget > 0) || bins < 1) return std::nullopt;
  const double unit = budget / bins;
  // Nothing fits when even each item's smallest option does not: answer before the programme.
  double least = 0;
  for (const auto& opts : items) {
    double m = std::numeric_limits<double>::infinity();
    for (const RecomputeOption& o : opts) m = std::min(m, o.bytes);
    least += m;
  }
  if (least > budget) return std::nullopt;
  // The programme over the items, keeping after each only the states no other beats: a state
  // (units used, seconds) with more units and no fewer seconds than another can never end better
  // (what follows depends on the units alone). Exact on the rounded sizes; the lists stay far
  // shorter than `bins` (each is at most bins + 1 long).
  struct State {
    int units;
    double seconds;
    int parent;  // index in the previous item's list
    int option;
  };
  // Buffers kept per thread: a search solves thousands of these.
  thread_local std::vector<std::vector<State>> fronts;
  thread_local std::vector<State> at;
  if (fronts.size() < n) fronts.resize(n);
  for (std::size_t i = 0; i < n; ++i) fronts[i].clear();
  const std::vector<State> start{{0, 0.0, -1, -1}};
  // Per unit count, the best state reaching it from the previous list (reset after each item).
  const double inf = std::numeric_limits<double>::infinity();
  at.assign(static_cast<std::size_t>(bins) + 1, State{0, inf, -1, -1});
  std::vector<State>& slots = at;
  std::vector<std::vector<int>> units(n);
  // rest[i]: the fewest units items i.. can take; a state leaving less room cannot be completed.
  std::vector<int> rest(n + 1, 0);
  for (std::size_t i = n; i-- > 0;) {
    int least_units = bins + 1;
    for (const RecomputeOption& o : items[i]) {
      const double u = std::ceil(o.bytes / unit);
      units[i].push_back(u > bins ? bins + 1 : static_cast<int>(u));
      least_units = std::min(least_units, units[i].back());
    }
    rest[i] = std::min(bins + 1, rest[i + 1] + least_units);
  }
  for (std::size_t i = 0; i < n; ++i) {
    const std::vector<State>& prev = i == 0 ? start : fronts[i - 1];
    std::vector<State>& front = fronts[i];
    const int room = bins - rest[i + 1];
    int lo = bins + 1, hi = -1;
    for (std::size_t k = 0; k < prev.size(); ++k)
      for (std::size_t j = 0; j < items[i].size(); ++j) {
        const int u = prev[k].units + units[i][j];
        if (u > room) continue;
        const double t = prev[k].seconds + items[i][j].seconds;
        State& slot = slots[static_cast<std::size_t>(u)];
        if (t < slot.seconds) slot = {u, t, static_cast<int>(k), static_cast<int>(j)};
        lo = std::min(lo, u);
        hi = std::max(hi, u);
      }
    if (hi < 0) return std::nullopt;
    for (int u = lo; u <= hi; ++u) {
      State& slot = slots[static_cast<std::size_t>(u)];
      if (slot.seconds < inf && (front.empty() || slot.seconds < front.back().seconds)) front.push_back(slot);
      slot.seconds = inf;
    }
  }
  // The last state of the final list has the fewest seconds (and, among equals, the fewest units).
  std::vector<int> out(n);
  int k = static_cast<int>(fronts[n - 1].size()) - 1;
  for (std::size_t i = n; i-- > 0;) {
    const State& st = fronts[i][static_cast<std::size_t>(k)];
    out[i] = st.option;
    k = st.parent;
  }
  return out;
}

}  // namespace

std::vector<RecomputeMask> candidate_recompute_masks(bool flash_attention) {
  namespace rm = recompute_module;
  std::vector<RecomputeMask> out;
  for (RecomputeMask core : {RecomputeMask{0}, rm::kCoreAttn}) {
    if (core && flash_attention) continue;  // flash attention stores no scores: nothing to drop
    for (RecomputeMask norm : {RecomputeMask{0}, rm::kLayernorm})
      for (RecomputeMask mlp : {RecomputeMask{0}, rm::kAct, rm::kMlp})
        out.push_back(static_cast<RecomputeMask>(core | norm | mlp));
  }
  out.push_back(rm::kFull);
  return out;
}

std::vector<RecomputeOption> undominated(const std::vector<RecomputeOption>& options) {
  std::vector<RecomputeOption> out;
  for (std::size_t i = 0; i < options.size(); ++i) {
    const RecomputeOption& a = options[i];
    bool beaten = false;
    for (std::size_t j = 0; j < options.size() && !beaten; ++j) {
      if (i == j) continue;
      const RecomputeOption& b = options[j];
      const bool no_worse = b.bytes <= a.bytes && b.seconds <= a.seconds;
      const bool better = b.bytes < a.bytes || b.seconds < a.seconds;
      beaten = no_worse && (better || j < i);  // equal options: the first stays
    }
    if (!beaten) out.push_back(a);
  }
  return out;
}

std::vector<int> stage_layer_list(const Plan& p, int layers, int stage) {
  std::vector<int> out;
  for (int chunk = 0; chunk < p.chunks(); ++chunk) {
    const auto [begin, end] = p.chunk_layer_range(layers, stage, chunk);
    for (int i = begin; i < end; ++i) out.push_back(i);
  }
  return out;
}

RecomputeAssignment recompute_assignment(const ModelSpec& m, const ClusterSpec& c, const Plan& p) {
  return AnalyticModel(m, c).recompute_assignment(p);
}

}  // namespace foresight

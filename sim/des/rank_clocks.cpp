#include "sim/des/rank_clocks.h"

#include <algorithm>
#include <boost/range/iterator_range.hpp>
#include <cmath>
#include <cstddef>
#include <limits>
#include <map>
#include <unordered_map>
#include <utility>

namespace foresight {
namespace {

double median(std::vector<double> v) {
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2 == 1) return *mid;
  return 0.5 * (*mid + *std::max_element(v.begin(), mid));
}

// Two ranks' clocks as their shared collectives tell it: the second's offset is the first's plus
// `offset_s` (the median of the first's end time less the second's).
struct SameCollectives {
  double offset_s = 0, spread_s = 0;
  int pairs = 0;
};

// Two ranks' clocks as their pipeline transfers bound them: with d the higher rank's offset less
// the lower's, d >= lo_s (the lower rank's sends: its send's start less the receive's end, the
// largest) and d <= hi_s (the higher rank's sends, likewise, negated). The transfer whose receive
// waited longest makes its bound nearly tight: one transfer's latency away.
struct TransferBounds {
  double lo_s = -std::numeric_limits<double>::infinity(), hi_s = std::numeric_limits<double>::infinity();
  int pairs = 0;
  // d: the middle of the bounds where both directions ran, else the one bound; and half the gap.
  std::pair<double, double> offset() const {
    if (std::isinf(lo_s)) return {hi_s, 0.0};
    if (std::isinf(hi_s)) return {lo_s, 0.0};
    return {0.5 * (lo_s + hi_s), 0.5 * std::fabs(hi_s - lo_s)};
  }
};

}  // namespace

std::vector<RankClock> align_rank_clocks(const Workload& w, std::vector<OpRecord>& ops) {
  const int n = w.ranks();
  std::vector<std::unordered_map<int, std::size_t>> at(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (ops[i].rank >= 0 && ops[i].rank < n) at[static_cast<std::size_t>(ops[i].rank)][ops[i].op] = i;
  auto find = [&](int rank, int op) -> const OpRecord* {
    const auto& m = at[static_cast<std::size_t>(rank)];
    const auto it = m.find(op);
    return it == m.end() ? nullptr : &ops[it->second];
  };

  // Every member of a rank's group, against the group's first member (its lowest rank).
  std::map<std::pair<int, int>, std::vector<double>> ends;  // (first, member) -> end differences
  std::map<std::pair<int, int>, TransferBounds> transfers;  // (lower rank, higher rank)
  const int per_stage = w.stage_ranks();
  for (std::size_t s = 0; s < w.stages.size(); ++s) {
    const OpGraph& g = w.stages[s].graph();
    const int first_rank = static_cast<int>(s) * per_stage;
    std::map<GroupKind, std::vector<int>> leader;  // by rank within the stage
    for (auto v : boost::make_iterator_range(boost::vertices(g))) {
      const Op& op = g[v];
      const int vi = static_cast<int>(v);
      if (op.kind == OpKind::kCollective && op.group != GroupKind::kNone) {
        auto [it, fresh] = leader.try_emplace(op.group);
        if (fresh)
          for (int r = first_rank; r < first_rank + per_stage; ++r) {
            const std::vector<int> members = w.group_members(r, op.group);
            it->second.push_back(members.size() > 1 ? members.front() : r);
          }
        for (int r = first_rank; r < first_rank + per_stage; ++r) {
          const int a = it->second[static_cast<std::size_t>(r - first_rank)];
          if (a == r || a < 0 || a >= n) continue;
          const OpRecord *x = find(a, vi), *y = find(r, vi);
          if (x && y) ends[{a, r}].push_back(x->end_s - y->end_s);
        }
      } else if (op.kind == OpKind::kSend && op.peer_stage >= 0 && op.match >= 0 &&
                 op.peer_stage < static_cast<int>(w.stages.size())) {
        for (int r = first_rank; r < first_rank + per_stage; ++r) {
          const int q = w.counterpart(r, op.peer_stage);
          if (q < 0 || q >= n) continue;
          const OpRecord *send = find(r, vi), *recv = find(q, op.match);
          if (!send || !recv) continue;
          TransferBounds& b = transfers[{std::min(r, q), std::max(r, q)}];
          if (r < q)
            b.lo_s = std::max(b.lo_s, send->start_s - recv->end_s);
          else
            b.hi_s = std::min(b.hi_s, recv->end_s - send->start_s);
          ++b.pairs;
        }
      }
    }
  }
  std::map<std::pair<int, int>, SameCollectives> same;
  for (auto& [key, d] : ends) {
    SameCollectives c;
    c.offset_s = median(d);
    c.pairs = static_cast<int>(d.size());
    for (double& x : d) x = std::fabs(x - c.offset_s);
    c.spread_s = median(d);
    same[key] = c;
  }

  // From the lowest rank with ops: every rank its collectives reach, then across one transfer at a
  // time (the one with the most pairs), and its collectives again.
  std::vector<int> present;
  for (int r = 0; r < n; ++r)
    if (!at[static_cast<std::size_t>(r)].empty()) present.push_back(r);
  std::vector<RankClock> clock(static_cast<std::size_t>(n));
  std::vector<char> known(static_cast<std::size_t>(n), 0);
  if (present.empty()) return {};
  const int root = present.front();
  clock[static_cast<std::size_t>(root)] = RankClock{root, root, 0.0, 0.0, 0.0, 0, "reference"};
  known[static_cast<std::size_t>(root)] = 1;
  auto set = [&](int rank, int ref, double offset, double spread, int pairs, const char* by) {
    clock[static_cast<std::size_t>(rank)] = RankClock{rank, ref, offset, 0.0, spread, pairs, by};
    known[static_cast<std::size_t>(rank)] = 1;
  };
  for (;;) {
    for (bool grew = true; grew;) {
      grew = false;
      for (const auto& [key, c] : same) {
        const auto [a, b] = key;
        const bool ka = known[static_cast<std::size_t>(a)], kb = known[static_cast<std::size_t>(b)];
        if (ka && !kb)
          set(b, a, clock[static_cast<std::size_t>(a)].offset_s + c.offset_s, c.spread_s, c.pairs,
              "collectives");
        else if (kb && !ka)
          set(a, b, clock[static_cast<std::size_t>(b)].offset_s - c.offset_s, c.spread_s, c.pairs,
              "collectives");
        else
          continue;
        grew = true;
      }
    }
    const std::pair<const std::pair<int, int>, TransferBounds>* best = nullptr;
    for (const auto& e : transfers) {
      const auto [r, q] = e.first;
      if (known[static_cast<std::size_t>(r)] == known[static_cast<std::size_t>(q)]) continue;
      if (!best || e.second.pairs > best->second.pairs) best = &e;
    }
    if (!best) break;
    const auto [lo, hi] = best->first;
    const auto [d, spread] = best->second.offset();
    if (known[static_cast<std::size_t>(lo)])
      set(hi, lo, clock[static_cast<std::size_t>(lo)].offset_s + d, spread, best->second.pairs,
          "pipeline transfers");
    else
      set(lo, hi, clock[static_cast<std::size_t>(hi)].offset_s - d, spread, best->second.pairs,
          "pipeline transfers");
  }

  double first = std::numeric_limits<double>::infinity();
  for (OpRecord& o : ops) {
    if (o.rank < 0 || o.rank >= n) continue;
    RankClock& c = clock[static_cast<std::size_t>(o.rank)];
    first = std::min(first, o.start_s + c.offset_s);
  }
  const double move = first < 0 ? -first : 0.0;
  std::vector<RankClock> out;
  for (int r : present) {
    RankClock& c = clock[static_cast<std::size_t>(r)];
    if (!known[static_cast<std::size_t>(r)]) c = RankClock{r, r, 0.0, 0.0, 0.0, 0, "none"};
    c.applied_s = c.offset_s + move;
    out.push_back(c);
  }
  for (OpRecord& o : ops) {
    if (o.rank < 0 || o.rank >= n) continue;
    const double add = clock[static_cast<std::size_t>(o.rank)].applied_s;
    o.start_s += add;
    o.end_s += add;
  }
  return out;
}

}  // namespace foresight

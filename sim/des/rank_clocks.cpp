#include "sim/des/rank_clocks.h"

#include <algorithm>
#include <boost/range/iterator_range.hpp>
#include <cmath>
#include <cstddef>
#include <limits>
#include <map>
#include <unordered_map>
#include <utility>

#include "sim/core/stats.h"

namespace foresight {
namespace {

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

// The ops of a measured step by rank and program vertex.
class OpIndex {
 public:
  OpIndex(int ranks, const std::vector<OpRecord>& ops) : ops_(ops), at_(static_cast<std::size_t>(ranks)) {
    for (std::size_t i = 0; i < ops.size(); ++i)
      if (ops[i].rank >= 0 && ops[i].rank < ranks) at_[static_cast<std::size_t>(ops[i].rank)][ops[i].op] = i;
  }
  const OpRecord* find(int rank, int op) const {
    const auto& m = at_[static_cast<std::size_t>(rank)];
    const auto it = m.find(op);
    return it == m.end() ? nullptr : &ops_[it->second];
  }
  bool has_ops(int rank) const { return !at_[static_cast<std::size_t>(rank)].empty(); }

 private:
  const std::vector<OpRecord>& ops_;
  std::vector<std::unordered_map<int, std::size_t>> at_;
};

// What the step's shared ops say about pairs of ranks' clocks.
struct Evidence {
  std::map<std::pair<int, int>, SameCollectives> same;      // (group's first member, member)
  std::map<std::pair<int, int>, TransferBounds> transfers;  // (lower rank, higher rank)
};

// Every collective of stage `s` against its group's first member (its lowest rank), as end-time
// differences; every send of the stage as a bound on the two ranks' offset.
void gather_stage(const Workload& w, int s, const OpIndex& at,
                  std::map<std::pair<int, int>, std::vector<double>>& ends, Evidence& e) {
  const int n = w.ranks(), per_stage = w.stage_ranks(), first_rank = s * per_stage;
  const OpGraph& g = w.stages[static_cast<std::size_t>(s)].graph();
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
        const OpRecord *x = at.find(a, vi), *y = at.find(r, vi);
        if (x && y) ends[{a, r}].push_back(x->end_s - y->end_s);
      }
    } else if (op.kind == OpKind::kSend && op.peer_stage >= 0 && op.match >= 0 &&
               op.peer_stage < static_cast<int>(w.stages.size())) {
      for (int r = first_rank; r < first_rank + per_stage; ++r) {
        const int q = w.counterpart(r, op.peer_stage);
        if (q < 0 || q >= n) continue;
        const OpRecord *send = at.find(r, vi), *recv = at.find(q, op.match);
        if (!send || !recv) continue;
        TransferBounds& b = e.transfers[{std::min(r, q), std::max(r, q)}];
        if (r < q)
          b.lo_s = std::max(b.lo_s, send->start_s - recv->end_s);
        else
          b.hi_s = std::min(b.hi_s, recv->end_s - send->start_s);
        ++b.pairs;
      }
    }
  }
}

Evidence gather_evidence(const Workload& w, const OpIndex& at) {
  Evidence e;
  std::map<std::pair<int, int>, std::vector<double>> ends;
  for (int s = 0; s < static_cast<int>(w.stages.size()); ++s) gather_stage(w, s, at, ends, e);
  for (const auto& [key, d] : ends) {
    const MedianSpread m = median_and_spread(d);
    e.same[key] = SameCollectives{m.median, m.spread, static_cast<int>(d.size())};
  }
  return e;
}

// Each rank's offset against `root`'s: every rank its collectives reach, then across one
// transfer at a time (the one with the most pairs), and its collectives again. Ranks reached by
// neither keep a default RankClock (`known` false).
void propagate(const Evidence& e, int root, std::vector<RankClock>& clock, std::vector<char>& known) {
  clock[static_cast<std::size_t>(root)] = RankClock{root, root, 0.0, 0.0, 0.0, 0, "reference"};
  known[static_cast<std::size_t>(root)] = 1;
  auto is = [&](int r) { return known[static_cast<std::size_t>(r)] != 0; };
  auto offset = [&](int r) { return clock[static_cast<std::size_t>(r)].offset_s; };
  auto set = [&](int rank, int ref, double off, double spread, int pairs, const char* by) {
    clock[static_cast<std::size_t>(rank)] = RankClock{rank, ref, off, 0.0, spread, pairs, by};
    known[static_cast<std::size_t>(rank)] = 1;
  };
  for (;;) {
    for (bool grew = true; grew;) {
      grew = false;
      for (const auto& [key, c] : e.same) {
        const auto [a, b] = key;
        if (is(a) == is(b)) continue;
        if (is(a))
          set(b, a, offset(a) + c.offset_s, c.spread_s, c.pairs, "collectives");
        else
          set(a, b, offset(b) - c.offset_s, c.spread_s, c.pairs, "collectives");
        grew = true;
      }
    }
    const std::pair<const std::pair<int, int>, TransferBounds>* best = nullptr;
    for (const auto& t : e.transfers)
      if (is(t.first.first) != is(t.first.second) && (!best || t.second.pairs > best->second.pairs))
        best = &t;
    if (!best) return;
    const auto [lo, hi] = best->first;
    const auto [d, spread] = best->second.offset();
    if (is(lo))
      set(hi, lo, offset(lo) + d, spread, best->second.pairs, "pipeline transfers");
    else
      set(lo, hi, offset(hi) - d, spread, best->second.pairs, "pipeline transfers");
  }
}

}  // namespace

std::vector<RankClock> align_rank_clocks(const Workload& w, std::vector<OpRecord>& ops) {
  const int n = w.ranks();
  const OpIndex at(n, ops);
  std::vector<int> present;
  for (int r = 0; r < n; ++r)
    if (at.has_ops(r)) present.push_back(r);
  if (present.empty()) return {};
  std::vector<RankClock> clock(static_cast<std::size_t>(n));
  std::vector<char> known(static_cast<std::size_t>(n), 0);
  propagate(gather_evidence(w, at), present.front(), clock, known);

  // On the reference's clock, moved together so that no op starts before 0.
  double first = std::numeric_limits<double>::infinity();
  for (const OpRecord& o : ops)
    if (o.rank >= 0 && o.rank < n)
      first = std::min(first, o.start_s + clock[static_cast<std::size_t>(o.rank)].offset_s);
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

// Walks a simulated step's op records back from the last end, each op to the predecessor whose end
// let it start.
#include "sim/des/critical_path.h"

#include <algorithm>
#include <boost/range/iterator_range.hpp>
#include <cstdint>
#include <map>
#include <set>
#include <tuple>

namespace foresight {

namespace {

// Lean tables, a few bytes per record (a full simulation of hundreds of ranks records tens of
// millions of ops): each record by (rank, op), and a simulated rank of each stage.
struct RecordIndex {
  std::vector<int> slot;                         // rank -> its row of `index`, or -1
  std::vector<int> stage_rank;                   // a simulated rank of each stage, or -1
  std::vector<std::vector<std::int32_t>> index;  // [slot][op] -> record, or -1
  std::int64_t record(int rank, int op) const {
    const int sl = slot[static_cast<std::size_t>(rank)];
    return sl < 0 ? -1 : index[static_cast<std::size_t>(sl)][static_cast<std::size_t>(op)];
  }
};

RecordIndex index_records(const Workload& w, const SimResult& r) {
  RecordIndex x;
  x.slot.assign(static_cast<std::size_t>(w.ranks()), -1);
  x.stage_rank.assign(w.stages.size(), -1);
  for (std::size_t i = 0; i < r.ops.size(); ++i) {
    const OpRecord& o = r.ops[i];
    int& sl = x.slot[static_cast<std::size_t>(o.rank)];
    if (sl < 0) {
      sl = static_cast<int>(x.index.size());
      x.index.emplace_back(boost::num_vertices(w.stages[o.stage].graph()), -1);
      if (x.stage_rank[o.stage] < 0) x.stage_rank[o.stage] = o.rank;
    }
    x.index[static_cast<std::size_t>(sl)][o.op] = static_cast<std::int32_t>(i);
  }
  return x;
}

// Each record's predecessor on its rank's stream (-1 for the first). The records come in the
// order ops end, so a stream's (one op at a time) are in order already: one pass, each record's
// predecessor the last seen on its rank's stream. Sorted where not.
std::vector<std::int32_t> stream_predecessors(const Workload& w, const SimResult& r, const RecordIndex& x) {
  const std::size_t n = r.ops.size();
  auto stream_of = [&](std::size_t i) {
    return static_cast<std::size_t>(w.stages[r.ops[i].stage].graph()[r.ops[i].op].stream);
  };
  std::vector<std::int32_t> prev(n, -1);
  std::vector<std::int32_t> last(x.index.size() * kStreamCount, -1);
  bool in_order = true;
  for (std::size_t i = 0; i < n && in_order; ++i) {
    std::int32_t& l =
        last[static_cast<std::size_t>(x.slot[static_cast<std::size_t>(r.ops[i].rank)]) * kStreamCount +
             stream_of(i)];
    if (l >= 0 && r.ops[static_cast<std::size_t>(l)].start_s > r.ops[i].start_s) in_order = false;
    prev[i] = l;
    l = static_cast<std::int32_t>(i);
  }
  if (in_order) return prev;
  std::vector<std::uint32_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = static_cast<std::uint32_t>(i);
  std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    const OpRecord& p = r.ops[a];
    const OpRecord& q = r.ops[b];
    const std::size_t sa = stream_of(a), sb = stream_of(b);
    return std::tie(p.rank, sa, p.start_s, a) < std::tie(q.rank, sb, q.start_s, b);
  });
  std::fill(prev.begin(), prev.end(), -1);
  for (std::size_t k = 1; k < n; ++k)
    if (r.ops[order[k]].rank == r.ops[order[k - 1]].rank && stream_of(order[k]) == stream_of(order[k - 1]))
      prev[order[k]] = static_cast<std::int32_t>(order[k - 1]);
  return prev;
}

// The send each receive waits for: (receiving stage, recv op) -> (sending stage, send op).
std::map<std::pair<int, int>, std::pair<int, int>> sends_by_receive(const Workload& w) {
  std::map<std::pair<int, int>, std::pair<int, int>> send_of;
  for (std::size_t s = 0; s < w.stages.size(); ++s) {
    const OpGraph& g = w.stages[s].graph();
    for (auto v : boost::make_iterator_range(boost::vertices(g)))
      if (g[v].kind == OpKind::kSend && g[v].peer_stage >= 0 && g[v].match >= 0)
        send_of[{g[v].peer_stage, g[v].match}] = {static_cast<int>(s), static_cast<int>(v)};
  }
  return send_of;
}

}  // namespace

CriticalPath critical_path(const Workload& w, const SimResult& r) {
  CriticalPath path;
  if (r.ops.empty() || r.ops.size() >= static_cast<std::size_t>(INT32_MAX)) return path;
  const RecordIndex x = index_records(w, r);
  const std::vector<std::int32_t> stream_prev = stream_predecessors(w, r, x);
  const auto send_of = sends_by_receive(w);

  // From the op that ends last, back to each op's predecessor whose end let it start.
  std::size_t cur = 0;
  for (std::size_t i = 1; i < r.ops.size(); ++i)
    if (r.ops[i].end_s > r.ops[cur].end_s) cur = i;
  path.end_s = r.ops[cur].end_s;
  const double eps = 1e-12 + 1e-9 * path.end_s;
  std::set<int> ranks;
  std::vector<bool> seen(r.ops.size(), false);
  while (true) {
    seen[cur] = true;
    path.ops.push_back(cur);
    const OpRecord& o = r.ops[cur];
    ranks.insert(o.rank);
    const OpGraph& g = w.stages[o.stage].graph();
    const Op& op = g[o.op];
    const double dur = o.end_s - o.start_s;
    (op.kind == OpKind::kCompute || op.kind == OpKind::kCopy ? path.compute_s : path.communication_s) += dur;
    // The candidates: its program's dependencies, its stream's previous op, a receive's send.
    std::int64_t best = -1;
    auto consider = [&](std::int64_t c) {
      if (c < 0 || seen[static_cast<std::size_t>(c)]) return;
      const OpRecord& p = r.ops[static_cast<std::size_t>(c)];
      if (p.end_s > o.start_s + eps) return;  // ended after this op began: not what it waited for
      if (best < 0 || p.end_s > r.ops[static_cast<std::size_t>(best)].end_s) best = c;
    };
    for (auto e : boost::make_iterator_range(boost::in_edges(static_cast<std::size_t>(o.op), g)))
      consider(x.record(o.rank, static_cast<int>(boost::source(e, g))));
    consider(stream_prev[cur]);
    if (op.kind == OpKind::kRecv) {
      if (const auto s = send_of.find({o.stage, o.op}); s != send_of.end()) {
        // The counterpart rank's send, or (symmetric simulation) the simulated rank's of that stage.
        const auto [stage, send] = s->second;
        const std::int64_t c = x.record(w.counterpart(o.rank, stage), send);
        consider(c >= 0 || x.stage_rank[stage] < 0 ? c : x.record(x.stage_rank[stage], send));
      }
    }
    if (best < 0) {
      path.waiting_s += o.start_s;  // the first op: anything before it is the step's start
      break;
    }
    path.waiting_s += std::max(0.0, o.start_s - r.ops[static_cast<std::size_t>(best)].end_s);
    cur = static_cast<std::size_t>(best);
  }
  std::reverse(path.ops.begin(), path.ops.end());
  path.ranks = static_cast<int>(ranks.size());
  return path;
}

}  // namespace foresight

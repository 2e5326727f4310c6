// Walks a simulated step's op records back from the last end, each op to the predecessor whose end
// let it start.
#include "sim/des/critical_path.h"

#include <algorithm>
#include <boost/range/iterator_range.hpp>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

namespace foresight {

CriticalPath critical_path(const Workload& w, const SimResult& r) {
  CriticalPath path;
  if (r.ops.empty()) return path;
  // Records by (rank, stage, op); each record's predecessor on its stream (the same rank's previous
  // op on that stream, by start).
  auto key = [](std::int64_t rank, std::int64_t stage, std::int64_t op) {
    return (rank << 42) | (stage << 21) | op;
  };
  std::unordered_map<std::int64_t, std::size_t> at;
  at.reserve(r.ops.size());
  std::map<std::pair<int, int>, std::vector<std::size_t>> by_stream;  // (rank, stream) -> records
  std::map<std::pair<int, int>, std::vector<std::size_t>> by_op;      // (stage, op) -> records of any rank
  for (std::size_t i = 0; i < r.ops.size(); ++i) {
    const OpRecord& o = r.ops[i];
    at[key(o.rank, o.stage, o.op)] = i;
    const Op& op = w.stages[o.stage].graph()[o.op];
    by_stream[{o.rank, static_cast<int>(op.stream)}].push_back(i);
    by_op[{o.stage, o.op}].push_back(i);
  }
  std::vector<std::ptrdiff_t> stream_prev(r.ops.size(), -1);
  for (auto& [lane, idx] : by_stream) {
    std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
      return r.ops[a].start_s != r.ops[b].start_s ? r.ops[a].start_s < r.ops[b].start_s : a < b;
    });
    for (std::size_t k = 1; k < idx.size(); ++k) stream_prev[idx[k]] = static_cast<std::ptrdiff_t>(idx[k - 1]);
  }
  // The send each receive waits for: (receiving stage, recv op) -> (sending stage, send op).
  std::map<std::pair<int, int>, std::pair<int, int>> send_of;
  for (std::size_t s = 0; s < w.stages.size(); ++s) {
    const OpGraph& g = w.stages[s].graph();
    for (auto v : boost::make_iterator_range(boost::vertices(g)))
      if (g[v].kind == OpKind::kSend && g[v].peer_stage >= 0 && g[v].match >= 0)
        send_of[{g[v].peer_stage, g[v].match}] = {static_cast<int>(s), static_cast<int>(v)};
  }

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
    std::ptrdiff_t best = -1;
    auto consider = [&](std::ptrdiff_t c) {
      if (c < 0 || seen[static_cast<std::size_t>(c)]) return;
      const OpRecord& p = r.ops[static_cast<std::size_t>(c)];
      if (p.end_s > o.start_s + eps) return;  // ended after this op began: not what it waited for
      if (best < 0 || p.end_s > r.ops[static_cast<std::size_t>(best)].end_s) best = c;
    };
    for (auto e : boost::make_iterator_range(boost::in_edges(static_cast<std::size_t>(o.op), g))) {
      const auto it = at.find(key(o.rank, o.stage, static_cast<std::int64_t>(boost::source(e, g))));
      if (it != at.end()) consider(static_cast<std::ptrdiff_t>(it->second));
    }
    consider(stream_prev[cur]);
    if (op.kind == OpKind::kRecv) {
      if (const auto s = send_of.find({o.stage, o.op}); s != send_of.end()) {
        // The counterpart rank's send, or (symmetric simulation) the simulated rank of that stage
        // whose send ended last before the receive.
        const auto it = at.find(key(w.counterpart(o.rank, s->second.first), s->second.first, s->second.second));
        if (it != at.end()) {
          consider(static_cast<std::ptrdiff_t>(it->second));
        } else if (const auto b = by_op.find(s->second); b != by_op.end()) {
          for (std::size_t c : b->second) consider(static_cast<std::ptrdiff_t>(c));
        }
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

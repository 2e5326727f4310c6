// A small event loop over the max-min network: phases of several collectives at once.
#include "sim/des/network_run.h"

#include <memory>
#include <queue>

#include "sim/net/topology.h"

namespace foresight {

double bus_bandwidth(CollectiveOp op, int n, double bytes, double seconds) {
  const double algbw = bytes / seconds;
  switch (op) {
    case CollectiveOp::kAllReduce:
      return algbw * 2.0 * (n - 1) / n;
    case CollectiveOp::kAllGather:
    case CollectiveOp::kReduceScatter:
    case CollectiveOp::kAllToAll:
      return algbw * (n - 1.0) / n;
    default:
      return algbw;
  }
}

Result<std::vector<double>> run_collectives(const ClusterSpec& cluster,
                                            const std::vector<CollectiveRun>& runs) {
  MaxMinSystem system;
  Topology topo(cluster, system);
  struct State {
    CollectivePlan plan;
    std::size_t phase = 0;
    int action = -1;
    double remaining = 0, rate = 0, updated = 0;
    unsigned version = 0;
    double done = -1;
  };
  std::vector<State> st(runs.size());
  for (std::size_t i = 0; i < runs.size(); ++i) {
    for (const auto& g : runs[i].groups)
      for (int d : g)
        if (d < 0 || d >= topo.devices())
          return Error("device " + std::to_string(d) + " is outside the cluster's " +
                       std::to_string(topo.devices()));
    st[i].plan = plan_collective(topo, runs[i].op, runs[i].groups, runs[i].bytes, runs[i].algorithm);
  }
  struct Ev {
    double t;
    unsigned long seq;
    int run;
    int kind;  // 0 phase start, 1 transfer done
    unsigned version;
    bool operator>(const Ev& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };
  std::priority_queue<Ev, std::vector<Ev>, std::greater<>> q;
  unsigned long seq = 0;
  double now = 0;
  std::vector<int> action_run;
  std::vector<int> changed;
  auto reschedule = [&] {
    changed.clear();
    system.solve(&changed);
    for (int a : changed) {
      const int i = action_run[a];
      State& s = st[i];
      s.remaining = std::max(0.0, s.remaining - s.rate * (now - s.updated));
      s.updated = now;
      s.rate = system.rate(a);
      ++s.version;
      if (s.rate > 0) q.push({now + s.remaining / s.rate, seq++, i, 1, s.version});
    }
  };
  auto begin_phase = [&](int i) {
    State& s = st[i];
    if (s.phase >= s.plan.phases.size()) {
      s.done = now;
      return;
    }
    q.push({now + s.plan.phases[s.phase].latency_s, seq++, i, 0, 0});
  };
  for (std::size_t i = 0; i < runs.size(); ++i) begin_phase(static_cast<int>(i));
  while (!q.empty()) {
    const Ev e = q.top();
    q.pop();
    now = e.t;
    State& s = st[e.run];
    if (e.kind == 0) {
      const FlowPhase& ph = s.plan.phases[s.phase];
      if (ph.bytes <= 0 || ph.usages.empty()) {
        ++s.phase;
        begin_phase(e.run);
        continue;
      }
      s.remaining = ph.work();
      s.rate = 0;
      s.updated = now;
      s.action = system.add_action(ph.usages, ph.work_bound());
      if (static_cast<int>(action_run.size()) <= s.action) action_run.resize(s.action + 1, -1);
      action_run[s.action] = e.run;
      reschedule();
    } else {
      if (e.version != s.version || s.action < 0) continue;
      system.remove_action(s.action);
      s.action = -1;
      reschedule();
      ++s.phase;
      begin_phase(e.run);
    }
  }
  std::vector<double> out;
  for (const State& s : st) out.push_back(s.done);
  return out;
}

}  // namespace foresight

// A small event loop over the max-min network: phases of several collectives at once.
#include "sim/des/network_run.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <string>
#include <vector>

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

namespace {

// The event loop of run_collectives: each run's collective as a sequence of flow phases, every
// phase's flows one max-min action, rates re-solved whenever an action starts or ends.
class CollectiveRunner {
 public:
  explicit CollectiveRunner(const ClusterSpec& cluster) : topo_(cluster, system_) {}

  Result<std::vector<double>> run(const std::vector<CollectiveRun>& runs) {
    st_.resize(runs.size());
    for (std::size_t i = 0; i < runs.size(); ++i) {
      for (const auto& g : runs[i].groups)
        for (int d : g)
          if (d < 0 || d >= topo_.devices())
            return Error("device " + std::to_string(d) + " is outside the cluster's " +
                         std::to_string(topo_.devices()));
      st_[i].plan = plan_collective(topo_, runs[i].op, runs[i].groups, runs[i].bytes, runs[i].algorithm);
    }
    for (std::size_t i = 0; i < runs.size(); ++i) begin_phase(static_cast<int>(i));
    while (!q_.empty()) {
      const Ev e = q_.top();
      q_.pop();
      now_ = e.t;
      if (e.kind == 0)
        phase_start(e.run);
      else
        transfer_done(e);
    }
    std::vector<double> out;
    for (const State& s : st_) out.push_back(s.done);
    return out;
  }

 private:
  struct State {
    CollectivePlan plan;
    std::size_t phase = 0;
    int action = -1;
    double remaining = 0, rate = 0, updated = 0;
    unsigned version = 0;
    double done = -1;
  };
  struct Ev {
    double t;
    unsigned long seq;
    int run;
    int kind;  // 0 phase start, 1 transfer done
    unsigned version;
    bool operator>(const Ev& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };

  // New rates: each changed action's transfer finishes at its new rate (a later version
  // supersedes the events of the earlier ones).
  void reschedule() {
    changed_.clear();
    system_.solve(&changed_);
    for (int a : changed_) {
      const int i = action_run_[a];
      State& s = st_[i];
      s.remaining = std::max(0.0, s.remaining - s.rate * (now_ - s.updated));
      s.updated = now_;
      s.rate = system_.rate(a);
      ++s.version;
      if (s.rate > 0) q_.push({now_ + s.remaining / s.rate, seq_++, i, 1, s.version});
    }
  }
  // Run `i`'s next phase starts after its latency (or the run is done).
  void begin_phase(int i) {
    State& s = st_[i];
    if (s.phase >= s.plan.phases.size()) {
      s.done = now_;
      return;
    }
    q_.push({now_ + s.plan.phases[s.phase].latency_s, seq_++, i, 0, 0});
  }
  void phase_start(int i) {
    State& s = st_[i];
    const FlowPhase& ph = s.plan.phases[s.phase];
    if (ph.bytes <= 0 || ph.usages.empty()) {
      ++s.phase;
      begin_phase(i);
      return;
    }
    s.remaining = ph.work();
    s.rate = 0;
    s.updated = now_;
    s.action = system_.add_action(ph.usages, ph.work_bound());
    if (static_cast<int>(action_run_.size()) <= s.action) action_run_.resize(s.action + 1, -1);
    action_run_[s.action] = i;
    reschedule();
  }
  void transfer_done(const Ev& e) {
    State& s = st_[e.run];
    if (e.version != s.version || s.action < 0) return;
    system_.remove_action(s.action);
    s.action = -1;
    reschedule();
    ++s.phase;
    begin_phase(e.run);
  }

  MaxMinSystem system_;
  Topology topo_;
  std::vector<State> st_;
  std::priority_queue<Ev, std::vector<Ev>, std::greater<>> q_;
  unsigned long seq_ = 0;
  double now_ = 0;
  std::vector<int> action_run_;  // max-min action -> run
  std::vector<int> changed_;
};

}  // namespace

Result<std::vector<double>> run_collectives(const ClusterSpec& cluster,
                                            const std::vector<CollectiveRun>& runs) {
  return CollectiveRunner(cluster).run(runs);
}

}  // namespace foresight

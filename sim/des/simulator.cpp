// The event loop: streams, dependencies, collectives and transfers over the max-min network.
#include "sim/des/simulator.h"

#include <sys/mman.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <queue>
#include <tuple>

#include "sim/analytic/analytic_model.h"
#include "sim/analytic/data_loading.h"
#include "sim/des/event_queue.h"
#include "sim/net/maxmin.h"
#include "sim/net/topology.h"

namespace foresight {

namespace {

enum class EventType : std::uint8_t { kOpDone, kPhaseStart, kTransferDone };

// Events at equal times run in the order they were pushed (EventQueue keeps it): the run is
// deterministic. 16 bytes, the type in the top bits of `tagged`: the queue moves each event a few
// times, and 24 bytes moved half as much again.
struct Event {
  double time;
  std::uint32_t tagged;  // type << kTypeShift | rank index (kOpDone) or network task (others)
  std::uint32_t b;       // op (kOpDone) or version (kTransferDone)
};
constexpr int kTypeShift = 30;
constexpr std::uint32_t kIndexMask = (std::uint32_t{1} << kTypeShift) - 1;

// Per op of a simulated rank, one word: its unmet dependencies (low bits) and the stream of the
// last one met (top 4 bits). One word, not two arrays: with 1,024 ranks advancing in turn their
// state does not stay in cache, and meeting a dependency then costs one miss instead of two.
using OpState = std::uint32_t;
constexpr int kStreamShift = 28;
constexpr OpState kPendingMask = (OpState{1} << kStreamShift) - 1;
static_assert(kStreamCount <= 16, "the stream of the last dependency met takes 4 bits");
constexpr int kSuccShift = 4;  // op counts are below 2^28 (kPendingMask), so op << 4 fits

constexpr int kGroupKinds = static_cast<int>(GroupKind::kStage) + 1;  // the last GroupKind

// What the event loop reads of an op, packed (the graph's vertices carry names, shapes and edge
// lists): 24 bytes instead of a Boost vertex, and successors in one array per stage.
struct OpInfo {
  double seconds;
  std::int32_t succ_begin, succ_end;  // range in StageInfo::succ
  std::int32_t plan_class;            // collectives and sends: same stage, kind and bytes, same plan
  OpKind kind;
  StreamId stream;
  Phase phase;
  // Collectives: the group that takes part. Here, not only in the graph, so that a collective's
  // start reads no Boost vertex (a cache miss each: 6.3 M of the 22 M op starts of the GPT-3
  // 1,024-rank step are collectives). It fills what was padding.
  GroupKind group;
};
static_assert(sizeof(OpInfo) == 24, "OpInfo stays 24 bytes");
struct StageInfo {
  std::vector<OpInfo> ops;
  // Each successor's op << kSuccShift | its stream: meeting a dependency then reads no OpInfo to
  // find the stream to issue on (a cache miss per dependency with 1,024 ranks in turn).
  std::vector<std::uint32_t> succ;
  std::vector<OpState> initial;  // each rank's state of each op before the step
  // The stage's compute ops' waits for the host (Op::host_wait), run once per step by each rank:
  // summed here, so that OpInfo keeps its size.
  double host_wait = 0;
  // Compute beside a data-parallel collective runs this much longer (collective_compute_stretch:
  // the collective holds some of the device's SMs); see RankState::sm_debt.
  double collective_stretch = 1;
};

// Every simulated rank's OpState, in one block the kernel is asked to back with 2 MiB pages:
// tens of MiB in 4 KiB pages cost a page fault each on first touch and a TLB miss on most
// accesses (GPT-3 on 1,024 ranks, 75 MiB: a quarter of the process's time under
// `perf record build/bench/des_bench --benchmark_filter=Gpt3_1024`).
class OpStateBlock {
 public:
  explicit OpStateBlock(std::size_t words) {
    constexpr std::size_t kHuge = std::size_t{2} << 20;
    const std::size_t bytes = std::max<std::size_t>(1, (words * sizeof(OpState) + kHuge - 1) / kHuge) * kHuge;
    data_.reset(static_cast<OpState*>(std::aligned_alloc(kHuge, bytes)));
    if (!data_) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    madvise(data_.get(), bytes, MADV_HUGEPAGE);  // a hint: without it the block is plain memory
#endif
  }
  OpState* data() { return data_.get(); }

 private:
  struct Free {
    void operator()(OpState* p) const { std::free(p); }
  };
  std::unique_ptr<OpState[], Free> data_;
};

// Which simulated ranks finish an op when a network task completes.
struct Waiter {
  std::int32_t rank_index;
  std::int32_t op;
};

// A collective or a transfer in flight: phases of a plan, one network action at a time.
struct NetTask {
  const CollectivePlan* plan = nullptr;
  std::size_t phase = 0;
  int action = -1;
  double remaining = 0;  // work left per flow in the current phase (FlowPhase::work)
  double rate = 0;
  double updated = 0;  // time `remaining` was last brought up to date
  std::uint32_t version = 0;
  double started = 0;
  std::vector<Waiter> done;    // ops that complete with it
  std::vector<Waiter> signal;  // recv ops it releases (sends)
  bool active = false;
};

}  // namespace

struct Simulator::Impl {
  const Workload& w;
  SimOptions opt;
  MaxMinSystem system;
  std::unique_ptr<Topology> own_topo;
  const Topology* topo = nullptr;

  struct RankState {
    int rank = 0;
    int stage = 0;
    OpState* state = nullptr;  // per op, in `op_state`
    std::array<std::size_t, kStreamCount> cursor{};
    std::size_t deferred_cursor = 0;
    std::array<bool, kStreamCount> busy{};
    std::vector<double> start, end;  // per op, only when recording a trace
    std::size_t done_ops = 0;
    std::array<double, kStreamCount> stream_start{};  // start of each stream's current op
    // Overlapped data-parallel collectives hold SMs (StageInfo::collective_stretch): the compute
    // stream's busy seconds so far, their value when each DP stream's collective started (or last
    // settled), and the compute seconds the collectives have slowed and not yet charged. A compute
    // op that ends with a debt runs on by it once (`extended`, `paid`: its op and the seconds);
    // what accrues meanwhile falls to the next one.
    double compute_busy = 0;
    std::array<double, 2> dp_mark{};
    double sm_debt = 0;
    int extended = -1;
    double paid = 0;
    // Full mode: group_leader() of each GroupKind (its divisions once, not per collective).
    std::array<std::pair<int, int>, kGroupKinds> groups{};
    // The step's breakdown, accumulated as the compute stream runs: busy time by phase, and each
    // idle gap charged to what the next op waited on.
    TimeBreakdown acc;
    double compute_cursor = 0;
    double last_end = 0;
    double wire = 0;          // pipeline sends in flight, summed
    double offload_tail = 0;  // host copies and host work of the step's end
  };
  std::vector<RankState> ranks;
  std::unique_ptr<OpStateBlock> op_state;
  std::vector<StageInfo> info;  // per stage, see OpInfo
  std::vector<int> rank_index;  // global rank -> index in `ranks`, -1 if not simulated
  EventQueue<Event> queue;
  std::uint64_t events = 0, actions = 0;
  double now = 0;
  std::vector<NetTask> tasks;
  std::vector<int> free_tasks;
  std::vector<int> action_task;  // maxmin action -> task, -1 if none (ids are dense)
  // Plans of collectives and transfers, built on first use: slot plan_class * plan_width (+ in full
  // mode the place in its stage of the group's first member, or of the sender), an index instead
  // of a hash lookup per network op.
  struct PlanSlot {
    std::unique_ptr<CollectivePlan> plan;
    std::vector<std::int32_t> members;  // full-mode collectives: the group's rank indexes, in order
  };
  std::vector<PlanSlot> plans;
  int plan_width = 1;
  // Full mode: members that reached a collective, by their group's first member (rank index) --
  // (op, count), a few at a time per group.
  struct Arrival {
    std::int32_t op, count;
  };
  std::vector<std::vector<Arrival>> arrivals;
  std::vector<int> changed;
  // Network actions were added or removed at `now`: the rates are solved once, after every event
  // at this instant (collectives that start together cost one solve, not one each).
  bool rates_stale = false;
  std::vector<double> link_bytes;  // per resource, bytes carried

  Impl(const Workload& wl, SimOptions o) : w(wl), opt(o) {}

  void push(double t, EventType type, int a, std::uint32_t b = 0) {
    assert(static_cast<std::uint32_t>(a) <= kIndexMask);
    queue.push(Event{t, static_cast<std::uint32_t>(type) << kTypeShift | static_cast<std::uint32_t>(a), b});
  }

  const StageProgram& prog(const RankState& r) const { return w.stages[r.stage]; }

  // ---- network ----
  PlanSlot& plan_slot(const OpInfo& oi, int key_rank) {
    return plans[static_cast<std::size_t>(oi.plan_class) * plan_width +
                 (opt.full ? key_rank % w.stage_ranks() : 0)];
  }

  const PlanSlot& collective_plan(const RankState& r, const OpInfo& oi, int v) {
    PlanSlot& slot = plan_slot(oi, opt.full ? r.groups[static_cast<int>(oi.group)].first : 0);
    if (slot.plan) return slot;
    const Op& op = prog(r).graph()[v];  // the plan's first use: the op's full description
    std::vector<std::vector<int>> groups;
    if (opt.full) {
      groups.push_back(w.group_members(r.rank, op.group));
      for (int m : groups[0]) slot.members.push_back(rank_index[m]);
    } else {
      groups = w.stage_groups(r.stage, op.group);
    }
    for (auto& group : groups)
      for (int& m : group) m = w.devices[m];  // ranks -> devices of the topology
    slot.plan = std::make_unique<CollectivePlan>(plan_collective(
        *topo, op.collective, groups, op.bytes, opt.algorithm, !opt.full, /*measured=*/!op.cold));
    if (op.cold) cold_data(*topo, op.collective, *slot.plan);
    return slot;
  }

  const CollectivePlan* transfer_plan(int src_rank, int dst_rank, int stage, const OpInfo& oi, int peer_stage,
                                      double bytes) {
    std::unique_ptr<CollectivePlan>& slot = plan_slot(oi, src_rank).plan;
    if (slot) return slot.get();
    std::vector<std::vector<int>> pairs;
    if (opt.full) {
      pairs.push_back({w.devices[src_rank], w.devices[dst_rank]});
    } else {
      // Every rank of the stage sends to its counterpart at the same time.
      const int per_stage = w.stage_ranks();
      for (int i = 0; i < per_stage; ++i)
        pairs.push_back({w.devices[stage * per_stage + i], w.devices[peer_stage * per_stage + i]});
    }
    slot = std::make_unique<CollectivePlan>(
        plan_collective(*topo, CollectiveOp::kSendRecv, pairs, bytes, std::nullopt, !opt.full));
    return slot.get();
  }

  int new_task() {
    if (!free_tasks.empty()) {
      const int id = free_tasks.back();
      free_tasks.pop_back();
      NetTask& t = tasks[id];
      std::vector<Waiter> done = std::move(t.done), signal = std::move(t.signal);
      done.clear();  // keep their storage: no allocation per collective
      signal.clear();
      const std::uint32_t version = t.version;
      t = NetTask{};
      t.done = std::move(done);
      t.signal = std::move(signal);
      // Versions keep counting across reuse: a stale completion event of the id's previous task
      // must never match the new one.
      t.version = version + 1;
      return id;
    }
    tasks.emplace_back();
    return static_cast<int>(tasks.size()) - 1;
  }

  void start_task(int id) {
    NetTask& t = tasks[id];
    t.active = true;
    t.started = now;
    ++actions;
    if (t.plan->phases.empty()) {
      finish_task(id);
      return;
    }
    if (opt.network == NetworkModel::kAlphaBeta) {
      // Alpha-beta: the plan's isolated time, no sharing with other traffic.
      t.phase = t.plan->phases.size();
      ++t.version;
      push(now + isolated_time(system, *t.plan), EventType::kTransferDone, id, t.version);
      return;
    }
    push(now + t.plan->phases[0].latency_s, EventType::kPhaseStart, id);
  }

  // Brings every changed action's remaining bytes to `now` and reschedules its completion.
  void apply_rates() {
    changed.clear();
    system.solve(&changed);
    for (int action : changed) {
      const int id = action_task[action];
      if (id < 0) continue;
      NetTask& t = tasks[id];
      t.remaining = std::max(0.0, t.remaining - t.rate * (now - t.updated));
      t.updated = now;
      t.rate = system.rate(action);
      ++t.version;
      if (t.rate > 0) push(now + t.remaining / t.rate, EventType::kTransferDone, id, t.version);
    }
  }

  void phase_start(int id) {
    NetTask& t = tasks[id];
    const FlowPhase& ph = t.plan->phases[t.phase];
    if (ph.bytes <= 0 || ph.usages.empty()) {
      next_phase(id);
      return;
    }
    t.remaining = ph.work();
    t.rate = 0;
    t.updated = now;
    t.action = system.add_action(ph.usages, ph.work_bound());
    if (t.action >= static_cast<int>(action_task.size())) action_task.resize(t.action + 1, -1);
    action_task[t.action] = id;
    for (const Usage& u : ph.usages) link_bytes[u.resource] += u.weight * ph.bytes;
    rates_stale = true;
  }

  void transfer_done(int id, std::uint32_t version) {
    NetTask& t = tasks[id];
    if (!t.active || t.version != version) return;  // stale
    if (opt.network == NetworkModel::kAlphaBeta) {
      finish_task(id);
      return;
    }
    if (t.action < 0) return;
    action_task[t.action] = -1;
    system.remove_action(t.action);
    t.action = -1;
    rates_stale = true;
    next_phase(id);
  }

  void next_phase(int id) {
    NetTask& t = tasks[id];
    ++t.phase;
    if (t.phase < t.plan->phases.size()) {
      push(now + t.plan->phases[t.phase].latency_s, EventType::kPhaseStart, id);
    } else {
      finish_task(id);
    }
  }

  void finish_task(int id) {
    tasks[id].active = false;
    // Indexes, not references: the ops released may start tasks and grow `tasks`. The id is
    // freed only afterwards, so none of them reuses it meanwhile.
    for (std::size_t i = 0; i < tasks[id].done.size(); ++i) {
      const Waiter wt = tasks[id].done[i];
      op_done(wt.rank_index, wt.op);
    }
    for (std::size_t i = 0; i < tasks[id].signal.size(); ++i) {
      const Waiter wt = tasks[id].signal[i];
      const RankState& r = ranks[wt.rank_index];
      dependency_met(wt.rank_index, wt.op, info[r.stage].ops[wt.op].stream, StreamId::kPp);
    }
    free_tasks.push_back(id);
  }

  // The first member and the size of `rank`'s group of kind g (as group_members, without
  // building the list).
  std::pair<int, int> group_leader(int rank, GroupKind g) const {
    const int pp = w.stage_of(rank), local = rank % w.stage_ranks();
    const Plan& p = w.stage_plan(pp);
    const int t = p.tp, c = p.cp, d = p.dp;
    const int tp = local % t, cp = (local / t) % c, dp = local / (t * c);
    switch (g) {
      case GroupKind::kTp:
        return {w.rank_of(0, cp, dp, pp), t};
      case GroupKind::kCp:
        return {w.rank_of(tp, 0, dp, pp), c};
      case GroupKind::kDp:
        return {w.rank_of(tp, 0, 0, pp), d * c};
      case GroupKind::kEp:  // local = lane + etp * y, as Workload::group_members
      case GroupKind::kExpertDp: {
        const int etp = p.etp(), y = local / etp, lane = local % etp, base = pp * w.stage_ranks();
        if (g == GroupKind::kEp) return {base + lane + etp * (y / p.ep * p.ep), p.ep};
        const int first = y % p.ep;
        return {base + lane + etp * first, (t * c * d / etp - first + p.ep - 1) / p.ep};
      }
      case GroupKind::kStage:
        return {pp * w.stage_ranks(), w.stage_ranks()};
      case GroupKind::kNone:
        break;
    }
    return {rank, 1};
  }

  // ---- ranks and streams ----
  // The data-parallel streams' slot in RankState::dp_mark; -1 for the others.
  static int dp_slot(StreamId s) { return s == StreamId::kDp ? 0 : s == StreamId::kDpReduce ? 1 : -1; }
  double compute_busy_at(const RankState& r) const {
    const int c = static_cast<int>(StreamId::kCompute);
    return r.compute_busy + (r.busy[c] ? now - r.stream_start[c] : 0.0);
  }
  // The compute seconds the running data-parallel collectives have slowed since their marks.
  void accrue_sm_debt(RankState& r, double stretch) const {
    const double at = compute_busy_at(r);
    for (StreamId s : {StreamId::kDp, StreamId::kDpReduce}) {
      const int d = dp_slot(s);
      if (!r.busy[static_cast<int>(s)]) continue;
      r.sm_debt += (at - r.dp_mark[d]) * (stretch - 1);
      r.dp_mark[d] = at;
    }
  }
  void dependency_met(int ri, int op, StreamId stream, StreamId from) {
    OpState& s = ranks[ri].state[op];
    s = ((s & kPendingMask) - 1) | static_cast<OpState>(from) << kStreamShift;
    if ((s & kPendingMask) == 0) try_issue(ri, stream);
  }

  void try_issue(int ri, StreamId stream) {
    RankState& r = ranks[ri];
    const int s = static_cast<int>(stream);
    if (r.busy[s]) return;
    const auto& order = prog(r).streams[s];
    if (r.cursor[s] < order.size()) {
      const int op = order[r.cursor[s]];
      if ((r.state[op] & kPendingMask) == 0) {
        ++r.cursor[s];
        r.busy[s] = true;
        start_op(ri, op);
        return;
      }
    }
    // The regular op is not ready (or none is left): run deferrable work meanwhile.
    if (stream != StreamId::kCompute) return;
    const auto& deferred = prog(r).deferred;
    if (r.deferred_cursor >= deferred.size()) return;
    const int op = deferred[r.deferred_cursor];
    if ((r.state[op] & kPendingMask) != 0) return;
    ++r.deferred_cursor;
    r.busy[s] = true;
    start_op(ri, op);
  }

  // The compute stream's idle time before op `v`, charged to what it waited for: the stream of
  // the dependency met last.
  void charge_compute_gap(RankState& r, int v) {
    const double gap = std::max(0.0, now - r.compute_cursor);
    switch (static_cast<StreamId>(r.state[v] >> kStreamShift)) {
      case StreamId::kTp:
        r.acc.tp_comm += gap;
        break;
      case StreamId::kCp:
        r.acc.cp_comm += gap;
        break;
      case StreamId::kEp:
        r.acc.ep_comm += gap;
        break;
      case StreamId::kDp:
      case StreamId::kDpReduce:
      case StreamId::kAmax:  // the stage-wide amax reduction, reported with the data-parallel collectives
        r.acc.dp_comm += gap;
        break;
      case StreamId::kCopy:
      case StreamId::kCopyIn:
      case StreamId::kHost:
        r.acc.offload += gap;
        break;  // host copies not hidden by compute
      case StreamId::kLoader:
        r.acc.data += gap;
        break;  // input not ready
      case StreamId::kPartner:
        r.acc.compute += gap;
        break;  // the layer's attention on its partner
      default:
        r.acc.bubble += gap;
        break;  // pipeline waits and fill/drain
    }
  }

  void start_op(int ri, int v) {
    RankState& r = ranks[ri];
    const OpInfo& op = info[r.stage].ops[v];
    if (opt.record) r.start[v] = now;
    if (const int d = dp_slot(op.stream); d >= 0) r.dp_mark[d] = compute_busy_at(r);
    r.stream_start[static_cast<int>(op.stream)] = now;
    if (op.stream == StreamId::kCompute) charge_compute_gap(r, v);
    switch (op.kind) {
      case OpKind::kCompute:
      case OpKind::kCopy:  // the copy engine's time over the host link
      case OpKind::kRecv:  // a recv's data has arrived by the time it is issued
        push(now + (op.kind == OpKind::kRecv ? 0.0 : op.seconds), EventType::kOpDone, ri,
             static_cast<std::uint32_t>(v));
        break;
      case OpKind::kSend: {
        const Op& full_op = prog(r).graph()[v];
        const int peer = w.counterpart(r.rank, full_op.peer_stage);
        const int id = new_task();
        tasks[id].plan = transfer_plan(r.rank, peer, r.stage, op, full_op.peer_stage, full_op.bytes);
        tasks[id].done.push_back({ri, v});
        const int pi = rank_index[peer];
        if (pi >= 0) tasks[id].signal.push_back({pi, full_op.match});
        start_task(id);
        break;
      }
      case OpKind::kCollective: {
        if (!opt.full) {
          const int id = new_task();
          tasks[id].plan = collective_plan(r, op, v).plan.get();
          tasks[id].done.push_back({ri, v});
          start_task(id);
          break;
        }
        // Full mode: the collective starts when the last member arrives.
        const auto [leader, size] = r.groups[static_cast<int>(op.group)];
        std::vector<Arrival>& at = arrivals[rank_index[leader]];
        auto it = std::find_if(at.begin(), at.end(), [v](const Arrival& a) { return a.op == v; });
        if (it == at.end()) it = at.insert(at.end(), Arrival{v, 0});
        if (++it->count < size) break;
        *it = at.back();
        at.pop_back();
        const int id = new_task();
        const PlanSlot& slot = collective_plan(r, op, v);
        tasks[id].plan = slot.plan.get();
        for (std::int32_t m : slot.members) tasks[id].done.push_back({m, v});
        start_task(id);
        break;
      }
    }
  }

  void op_done(int ri, int v) {
    RankState& r = ranks[ri];
    ++r.done_ops;
    const StageInfo& si = info[r.stage];
    const OpInfo& op = si.ops[v];
    const int s = static_cast<int>(op.stream);
    if (opt.record) r.end[v] = now;
    r.last_end = now;
    const double dur = now - r.stream_start[s];
    if (si.collective_stretch > 1 && op.stream == StreamId::kCompute && op.kind == OpKind::kCompute) {
      // The compute op ran beside the data-parallel collectives, without their SMs: it lasts as
      // much longer as they slowed it (once; what they slow meanwhile falls to the next op).
      accrue_sm_debt(r, si.collective_stretch);
      if (r.sm_debt > 0 && r.extended != v) {
        r.extended = v;
        r.paid = r.sm_debt;
        push(now + r.sm_debt, EventType::kOpDone, ri, static_cast<std::uint32_t>(v));
        r.sm_debt = 0;
        --r.done_ops;
        return;
      }
    }
    if (dp_slot(op.stream) >= 0) accrue_sm_debt(r, si.collective_stretch);
    if (op.stream == StreamId::kCompute) {
      r.compute_busy += dur;
      const double paid = r.extended == v ? r.paid : 0.0;  // the collectives' share of `dur`
      r.extended = -1;
      r.acc.dp_comm += paid;
      if (op.phase == Phase::kStep)
        r.acc.optimizer += dur - paid;
      else
        r.acc.compute += dur - paid;
      if (op.phase == Phase::kRecompute) r.acc.recompute += dur - paid;
      r.compute_cursor = now;
    } else if (op.kind == OpKind::kSend) {
      r.wire += dur;
    } else if (op.phase == Phase::kStep && (op.stream == StreamId::kCopy || op.stream == StreamId::kCopyIn ||
                                            op.stream == StreamId::kHost)) {
      r.acc.offload += dur;  // the step's tail: nothing else runs while the host updates
      r.offload_tail += dur;
    }
    r.busy[s] = false;
    const StreamId stream = op.stream;  // `op` is not touched after the dependents start
    for (std::int32_t i = op.succ_begin; i < op.succ_end; ++i)
      dependency_met(ri, static_cast<int>(si.succ[i] >> kSuccShift),
                     static_cast<StreamId>(si.succ[i] & ((1u << kSuccShift) - 1)), stream);
    try_issue(ri, stream);
  }

  // run()'s steps, in order: the network, the stages' ops packed, the simulated ranks placed,
  // the events run, every op checked, and the results.
  Result<SimResult> run();
  void use_topology();
  Result<std::size_t> pack_stages();                       // the number of plan classes
  std::vector<int> place_ranks(std::size_t plan_classes);  // the simulated ranks
  void event_loop();
  Status check_all_ran() const;
  Prediction prediction() const;
  std::vector<LinkUse> busiest_links(double step) const;
  TimeBreakdown breakdown(const RankState& r) const;
};

TimeBreakdown Simulator::Impl::breakdown(const RankState& r) const {
  TimeBreakdown t = r.acc;
  t.host_wait = info[r.stage].host_wait;
  // After the last compute op: offload work (counted above), the rest is DP (parameter all-gather).
  t.dp_comm += std::max(0.0, r.last_end - r.compute_cursor - r.offload_tail);
  // Pipeline waits include the activations' time on the wire; count that part as pp_comm, at most
  // the waits themselves.
  t.pp_comm = std::min(t.bubble, r.wire);
  t.bubble -= t.pp_comm;
  t.total = r.last_end;
  return t;
}

void Simulator::Impl::use_topology() {
  if (opt.topology) {
    // A topology built once for many runs on the same cluster: start from its link capacities.
    system = opt.topology->system();
    topo = opt.topology;
  } else {
    own_topo = std::make_unique<Topology>(w.cluster, system);
    topo = own_topo.get();
  }
  link_bytes.assign(system.resources(), 0.0);
}

Result<std::size_t> Simulator::Impl::pack_stages() {
  info.resize(w.stages.size());
  // (stage, group kind or -1 for sends, collective (x2, +1 for cold data) or peer stage, bytes) ->
  // OpInfo::plan_class
  std::map<std::tuple<int, int, int, double>, std::int32_t> plan_classes;
  for (std::size_t st = 0; st < w.stages.size(); ++st) {
    const OpGraph& g = w.stages[st].graph();
    StageInfo& si = info[st];
    const DeviceSpec& device = stage_accelerator(w.plan, w.cluster.node, static_cast<int>(st));
    si.collective_stretch = collective_compute_stretch(w.cluster.node, device);
    if (boost::num_vertices(g) > kPendingMask)  // an op's dependency count must fit its bits
      return Error("simulation: stage " + std::to_string(st) + " has too many ops (" +
                   std::to_string(boost::num_vertices(g)) + ")");
    si.ops.reserve(boost::num_vertices(g));
    si.succ.reserve(boost::num_edges(g));
    si.initial.reserve(boost::num_vertices(g));
    for (auto v : boost::make_iterator_range(boost::vertices(g))) {
      const Op& op = g[v];
      si.host_wait += op.host_wait;
      OpInfo oi{op.seconds, static_cast<std::int32_t>(si.succ.size()), 0, -1, op.kind, op.stream, op.phase,
                op.group};
      if (op.kind == OpKind::kCollective || op.kind == OpKind::kSend) {
        const auto key = op.kind == OpKind::kSend
                             ? std::tuple(static_cast<int>(st), -1, op.peer_stage, op.bytes)
                             : std::tuple(static_cast<int>(st), static_cast<int>(op.group),
                                          2 * static_cast<int>(op.collective) + (op.cold ? 1 : 0), op.bytes);
        oi.plan_class =
            plan_classes.emplace(key, static_cast<std::int32_t>(plan_classes.size())).first->second;
      }
      for (auto e : boost::make_iterator_range(boost::out_edges(v, g))) {
        const auto to = boost::target(e, g);
        si.succ.push_back(static_cast<std::uint32_t>(to) << kSuccShift |
                          static_cast<std::uint32_t>(g[to].stream));
      }
      oi.succ_end = static_cast<std::int32_t>(si.succ.size());
      si.ops.push_back(oi);
      // A recv also waits for the matching send; no dependency met yet: the compute stream.
      si.initial.push_back(static_cast<OpState>(boost::in_degree(v, g) + (op.kind == OpKind::kRecv)) |
                           static_cast<OpState>(StreamId::kCompute) << kStreamShift);
    }
  }
  return plan_classes.size();
}

std::vector<int> Simulator::Impl::place_ranks(std::size_t plan_classes) {
  const int n = w.ranks();
  rank_index.assign(n, -1);
  std::vector<int> simulated;
  if (opt.full) {
    for (int r = 0; r < n; ++r) simulated.push_back(r);
  } else {
    for (int s = 0; s < w.plan.pp; ++s) simulated.push_back(w.rank_of(0, 0, 0, s));
  }
  plan_width = opt.full ? w.stage_ranks() : 1;
  plans.resize(plan_classes * plan_width);
  if (opt.full) arrivals.resize(simulated.size());
  std::size_t words = 0;
  for (int r : simulated) words += info[w.stage_of(r)].initial.size();
  op_state = std::make_unique<OpStateBlock>(words);
  OpState* next_state = op_state->data();
  ranks.reserve(simulated.size());
  for (int r : simulated) {
    RankState st;
    st.rank = r;
    st.stage = w.stage_of(r);
    if (opt.full)
      for (int g = 0; g < kGroupKinds; ++g) st.groups[g] = group_leader(r, static_cast<GroupKind>(g));
    const std::vector<OpState>& initial = info[st.stage].initial;
    st.state = next_state;
    next_state = std::copy(initial.begin(), initial.end(), next_state);
    if (opt.record) {
      st.start.assign(initial.size(), 0);
      st.end.assign(initial.size(), 0);
    }
    rank_index[r] = static_cast<int>(ranks.size());
    ranks.push_back(std::move(st));
  }
  return simulated;
}

void Simulator::Impl::event_loop() {
  for (int ri = 0; ri < static_cast<int>(ranks.size()); ++ri)
    for (int s = 0; s < kStreamCount; ++s) try_issue(ri, static_cast<StreamId>(s));
  while (true) {
    if (rates_stale && (queue.empty() || queue.next_time() > now)) {  // not top(): see EventQueue
      rates_stale = false;
      apply_rates();
    }
    if (queue.empty()) break;
    const Event e = queue.top();
    queue.pop();
    now = e.time;
    ++events;
    const int a = static_cast<int>(e.tagged & kIndexMask);
    switch (static_cast<EventType>(e.tagged >> kTypeShift)) {
      case EventType::kOpDone:
        op_done(a, static_cast<int>(e.b));
        break;
      case EventType::kPhaseStart:
        phase_start(a);
        break;
      case EventType::kTransferDone:
        transfer_done(a, e.b);
        break;
    }
  }
}

Status Simulator::Impl::check_all_ran() const {
  for (const RankState& r : ranks) {
    const std::size_t ops = info[r.stage].ops.size();
    if (r.done_ops == ops) continue;
    for (int s = 0; s < kStreamCount; ++s) {
      const auto& order = prog(r).streams[s];
      if (r.cursor[s] < order.size() || r.busy[s]) {
        const int v = order[std::min(r.cursor[s], order.size() - 1)];
        return Error("simulation stalled: " + w.op_id(r.rank, r.stage, v) + " never ran (" +
                     std::to_string(ops - r.done_ops) + " ops left on that rank)");
      }
    }
  }
  return Status::Ok();
}

Prediction Simulator::Impl::prediction() const {
  // The step ends when the slowest rank finishes; its timeline gives the breakdown.
  int crit = 0;
  double step = 0;
  for (int i = 0; i < static_cast<int>(ranks.size()); ++i) {
    if (ranks[i].last_end > step) {
      step = ranks[i].last_end;
      crit = i;
    }
  }
  Prediction p;
  p.step_time_s = step;
  p.time = breakdown(ranks[crit]);
  p.time.total = step;
  AnalyticModel am(w.model, w.cluster);
  p.memory = am.memory(w.plan);
  p.fit = p.memory.fits() ? FitVerdict::kFits : FitVerdict::kOutOfMemory;
  p.devices = w.plan.gpus();
  p.micro_batches = w.plan.micro_batches();
  p.model_flops = w.model_flops;
  p.hardware_flops = w.hardware_flops;
  const double peak = am.mean_peak(w.plan);
  const double denom = step * p.devices * peak;
  p.mfu = denom > 0 ? p.model_flops / denom : 0;
  p.hfu = denom > 0 ? p.hardware_flops / denom : 0;
  const int seq = effective_seq_len(w.plan, w.model);
  p.tokens_per_s = step > 0 ? static_cast<double>(w.plan.global_batch) * seq / step : 0;
  p.data_load_s = data_load_cost(w.model, w.cluster, w.plan).seconds;
  p.tflops_per_device = step > 0 ? p.hardware_flops / step / p.devices / 1e12 : 0;
  return p;
}

std::vector<LinkUse> Simulator::Impl::busiest_links(double step) const {
  std::vector<LinkUse> out;
  const TopoGraph& g = topo->graph();
  for (auto e : boost::make_iterator_range(boost::edges(g))) {
    const TopoLink& l = g[e];
    if (link_bytes[l.resource] <= 0) continue;
    out.push_back({g[boost::source(e, g)].name + "->" + g[boost::target(e, g)].name, l.kind,
                   link_bytes[l.resource], step > 0 ? link_bytes[l.resource] / (l.bandwidth * step) : 0});
  }
  std::sort(out.begin(), out.end(),
            [](const LinkUse& a, const LinkUse& b) { return a.utilisation > b.utilisation; });
  if (out.size() > 20) out.resize(20);
  return out;
}

Result<SimResult> Simulator::Impl::run() {
  use_topology();
  FS_ASSIGN_OR_RETURN(const std::size_t plan_classes, pack_stages());
  const std::vector<int> simulated = place_ranks(plan_classes);
  event_loop();
  // Every op must have run; otherwise the graph waits on something that never comes.
  FS_RETURN_IF_ERROR(check_all_ran());

  SimResult out;
  out.full = opt.full;
  out.events = events;
  out.network_actions = actions;
  out.simulated_ranks = simulated;
  out.prediction = prediction();
  if (opt.record) {
    for (const RankState& r : ranks)
      for (std::size_t v = 0; v < r.start.size(); ++v)
        out.ops.push_back({r.rank, r.stage, static_cast<std::int32_t>(v), r.start[v], r.end[v]});
  }
  // Link utilisation over the step, busiest first.
  out.busiest_links = busiest_links(out.prediction.step_time_s);
  return out;
}

Simulator::Simulator(const Workload& w, SimOptions options) : impl_(new Impl(w, options)) {}
Simulator::~Simulator() { delete impl_; }
Result<SimResult> Simulator::run() {
  auto r = impl_->run();
  if (r) FS_RETURN_IF_ERROR(check_finite(r->prediction, "simulate"));
  return r;
}

Result<SimResult> simulate(const ModelSpec& model, const ClusterSpec& cluster, const Plan& plan,
                           const std::string& plan_file, const SimOptions& options) {
  FS_RETURN_IF_ERROR(validate_plan_on(plan, model, cluster, plan_file));
  FS_RETURN_IF_ERROR(check_cluster_shape(cluster, cluster.name));
  auto w = lower(model, cluster, plan);
  if (!w) return w.error().with_context(plan_file);
  Simulator sim(*w, options);
  auto r = sim.run();
  if (!r) return r.error();
  if (!r->prediction.fits())
    return Error(plan_file + ": plan does not fit in memory: " + describe_memory(r->prediction.memory));
  return r;
}

}  // namespace foresight

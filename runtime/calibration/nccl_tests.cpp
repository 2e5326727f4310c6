// nccl-tests logs: the table, the ranks, and a cluster profile fitted from them.
#include "runtime/calibration/nccl_tests.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "runtime/calibration/calibrate_internal.h"
#include "sim/analytic/collective.h"
#include "sim/des/network_run.h"
#include "sim/spec/json_reader.h"

namespace foresight::runtime {

namespace {

// A log larger than this is not nccl-tests' (a full sweep of every size is a few hundred lines).
constexpr std::size_t kMaxLogBytes = std::size_t{16} << 20;

std::vector<std::string> split_words(std::string_view line) {
  std::vector<std::string> out;
  std::istringstream in{std::string(line)};
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

struct NamedOp {
  const char* name;  // as nccl-tests names its binary, without "_perf"
  CollectiveOp op;
  bool modelled;
};
// hypercube, gather, scatter and reduce run on no plan's groups; they are read and compared as
// the collective with their bus factor.
constexpr NamedOp kNamedOps[] = {{"all_reduce", CollectiveOp::kAllReduce, true},
                                 {"all_gather", CollectiveOp::kAllGather, true},
                                 {"reduce_scatter", CollectiveOp::kReduceScatter, true},
                                 {"alltoallv", CollectiveOp::kAllToAll, false},
                                 {"alltoall", CollectiveOp::kAllToAll, true},
                                 {"sendrecv", CollectiveOp::kSendRecv, true},
                                 {"broadcast", CollectiveOp::kBroadcast, true},
                                 {"reduce", CollectiveOp::kBroadcast, false},
                                 {"gather", CollectiveOp::kAllToAll, false},
                                 {"scatter", CollectiveOp::kAllToAll, false},
                                 {"hypercube", CollectiveOp::kAllGather, false}};

// The collective a program or file name names ("all_reduce_perf", "logs/ar-all_reduce.txt"): the
// longest name it contains (reduce_scatter before reduce).
const NamedOp* op_named_in(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char ch) { return ch == '-' ? '_' : static_cast<char>(std::tolower(ch)); });
  const NamedOp* best = nullptr;
  for (const NamedOp& o : kNamedOps)
    if (name.find(o.name) != std::string::npos &&
        (!best || std::string_view(o.name).size() > std::string_view(best->name).size()))
      best = &o;
  return best;
}

Result<double> number_at(const std::string& word, const std::string& where, const std::string& column) {
  double v = 0;
  const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), v);
  if (ec != std::errc() || end != word.data() + word.size() || !std::isfinite(v) || v < 0)
    return Error(where + ": column \"" + column + "\": \"" + word + "\" is not a number >= 0");
  return v;
}

// The header's column names (the line after "#" that starts with "size"), with the second set of
// time/algbw/busbw/#wrong renamed ip_* (in place).
std::vector<std::string> header_columns(const std::vector<std::string>& words) {
  std::vector<std::string> cols;
  std::set<std::string> seen;
  for (std::size_t i = 1; i < words.size(); ++i) {
    std::string w = words[i] == "cputime" ? "time" : words[i] == "error" ? "#wrong" : words[i];
    if (seen.count(w)) w = "ip_" + w;
    seen.insert(w);
    cols.push_back(w);
  }
  return cols;
}

// "#  Rank  3 Group  0 Pid  12345 on  host-1 device  3 [0x1b] NVIDIA H100 80GB HBM3" (older logs
// without "Group"): the host and the device's name.
bool read_rank_line(const std::vector<std::string>& w, std::string& host, std::string& device) {
  if (w.size() < 3 || w[0] != "#" || w[1] != "Rank") return false;
  for (std::size_t i = 2; i + 1 < w.size(); ++i)
    if (w[i] == "on") host = w[i + 1];
  for (std::size_t i = 2; i < w.size(); ++i)
    if (!w[i].empty() && w[i].front() == '[' && w[i].back() == ']') {
      device.clear();
      for (std::size_t j = i + 1; j < w.size(); ++j) device += (device.empty() ? "" : " ") + w[j];
      break;
    }
  return !host.empty();
}

}  // namespace

namespace {

// The table's columns as its header names them, and where each is.
struct Columns {
  std::vector<std::string> names;
  std::map<std::string, std::size_t> at;
};

// A "#" line: the version, the program, a rank's host and device, or the table's header.
Status read_comment_line(const std::string& line, const std::vector<std::string>& w, const std::string& where,
                         NcclTestsLog& log, Columns& cols) {
  std::string host, device;
  if (const auto v = line.find("nccl-tests version "); v != std::string::npos) {
    log.version = line.substr(v + 19);
  } else if (line.find("Collective test starting:") != std::string::npos && w.size() >= 5) {
    log.program = w.back();
  } else if (read_rank_line(w, host, device)) {
    ++log.ranks;
    if (log.device.empty()) log.device = device;
    if (std::find(log.hosts.begin(), log.hosts.end(), host) == log.hosts.end()) log.hosts.push_back(host);
  } else if (w.size() > 3 && w[1] == "size" && cols.names.empty()) {
    cols.names = header_columns(w);
    for (std::size_t i = 0; i < cols.names.size(); ++i) cols.at[cols.names[i]] = i;
    if (!cols.at.count("time") || !cols.at.count("busbw"))
      return Error(where + ": the table's header has no time and busbw columns (" + line + ")");
  }
  return Status::Ok();
}

// A row of the table: as many words as the header has columns, or more (a trailing timestamp).
Result<NcclTestsRow> read_row(const std::string& line, const std::vector<std::string>& w, int line_no,
                              const std::string& where, const Columns& cols) {
  const auto& at = cols.at;
  if (w.size() < at.at("busbw") + 1)
    return Error(fmt::format("{}: a row of {} columns where the header has {} ({})", where, w.size(),
                             cols.names.size(), line));
  auto column = [&](const std::string& name) -> Result<double> {
    const auto it = at.find(name);
    if (it == at.end() || it->second >= w.size()) return 0.0;
    if (name.ends_with("#wrong") && w[it->second] == "N/A") return -1.0;
    return number_at(w[it->second], where, name);
  };
  NcclTestsRow row;
  row.line = line_no;
  FS_ASSIGN_OR_RETURN(row.bytes, column("size"));
  FS_ASSIGN_OR_RETURN(row.count, column("count"));
  if (at.count("type") && at.at("type") < w.size()) row.type = w[at.at("type")];
  if (at.count("redop") && at.at("redop") < w.size()) row.redop = w[at.at("redop")];
  FS_ASSIGN_OR_RETURN(const double t, column("time"));
  FS_ASSIGN_OR_RETURN(const double bw, column("busbw"));
  FS_ASSIGN_OR_RETURN(const double ip_t, column("ip_time"));
  FS_ASSIGN_OR_RETURN(const double ip_bw, column("ip_busbw"));
  FS_ASSIGN_OR_RETURN(const double wrong, column("#wrong"));
  FS_ASSIGN_OR_RETURN(const double ip_wrong, column("ip_#wrong"));
  row.out_of_place_s = t * 1e-6;
  row.in_place_s = ip_t * 1e-6;
  row.out_of_place_busbw = bw * 1e9;
  row.in_place_busbw = ip_bw * 1e9;
  row.wrong = wrong < 0 || ip_wrong < 0 ? -1.0 : wrong + ip_wrong;
  return row;
}

// After the last line: a table with rows and ranks, the collective named by the log or the file,
// and the busbw column consistent with the time's (a log of another collective or a rank count
// misread shows here; the column rounds to 0.01 GB/s).
Status finish_log(const std::string& file, const Columns& cols, NcclTestsLog& log) {
  if (cols.names.empty())
    return Error(file +
                 ": no nccl-tests table (a header line \"#  size  count  type ... time  algbw  busbw\")");
  if (log.rows.empty()) return Error(file + ": the nccl-tests table has no rows");
  if (log.ranks == 0)
    return Error(file + ": no \"#  Rank N ... on HOST device D\" lines: the log's rank count is unknown");
  const NamedOp* named =
      op_named_in(log.program.empty() ? std::filesystem::path(file).filename().string() : log.program);
  if (!named)
    return Error(
        file +
        ": cannot tell the collective: the log has no \"# Collective test starting:\" line (nccl-tests "
        "before 2.14) and its file name names none of all_reduce, all_gather, reduce_scatter, alltoall, "
        "sendrecv, broadcast (name it e.g. all_reduce_perf.log)");
  if (log.program.empty()) log.program = std::string(named->name) + "_perf";
  log.op = named->op;
  log.modelled_op = named->modelled;
  for (const NcclTestsRow& r : log.rows)
    if (r.out_of_place_s > 0 && r.out_of_place_busbw >= 1e9) {
      const double bw = bus_bandwidth(log.op, log.ranks, r.bytes, r.out_of_place_s);
      if (std::abs(bw - r.out_of_place_busbw) > 0.03 * r.out_of_place_busbw) {
        log.warnings.push_back(
            fmt::format("{}:{}: busbw {:.2f} GB/s logged, {:.2f} GB/s from the time with {}'s bus factor "
                        "over {} ranks: the "
                        "collective or the rank count is not what the log ran",
                        file, r.line, r.out_of_place_busbw / 1e9, bw / 1e9, to_string(log.op), log.ranks));
        break;
      }
    }
  return Status::Ok();
}

}  // namespace

Result<NcclTestsLog> nccl_tests_log_from_text(std::string_view text, const std::string& file) {
  NcclTestsLog log;
  log.file = file;
  Columns cols;
  std::istringstream in{std::string(text)};
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::vector<std::string> w = split_words(line);
    if (w.empty()) continue;
    const std::string where = fmt::format("{}:{}", file, line_no);
    if (w[0] == "#") {
      FS_RETURN_IF_ERROR(read_comment_line(line, w, where, log, cols));
      continue;
    }
    if (cols.names.empty()) continue;  // NCCL's INFO lines, warnings, anything before the table
    if (!std::isdigit(static_cast<unsigned char>(w[0][0]))) continue;
    FS_ASSIGN_OR_RETURN(NcclTestsRow row, read_row(line, w, line_no, where, cols));
    if (row.wrong > 0)
      log.warnings.push_back(
          fmt::format("{}: {} wrong elements at {} B: nccl-tests found the results corrupt", where, row.wrong,
                      row.bytes));
    log.rows.push_back(std::move(row));
  }
  FS_RETURN_IF_ERROR(finish_log(file, cols, log));
  return log;
}

Result<NcclTestsLog> load_nccl_tests_log(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    return Error(path + ": cannot open nccl-tests log (no such file)");
  FS_ASSIGN_OR_RETURN(std::string text, read_text_file(path, kMaxLogBytes));
  return nccl_tests_log_from_text(text, path);
}

namespace {

double row_seconds(const NcclTestsRow& r, NcclTestsColumn c) {
  return c == NcclTestsColumn::kInPlace ? r.in_place_s : r.out_of_place_s;
}
const char* column_name(NcclTestsColumn c) {
  return c == NcclTestsColumn::kInPlace ? "in-place" : "out-of-place";
}

// The devices a log's ranks ran on, as the cluster numbers them: its hosts' ranks on consecutive
// nodes, each node's from its first accelerator.
std::vector<int> log_devices(const NcclTestsLog& log, const ClusterSpec& cluster) {
  const int hosts = std::max<int>(1, static_cast<int>(log.hosts.size()));
  const int per_host = log.ranks / hosts;
  std::vector<int> out;
  for (int h = 0; h < hosts; ++h)
    for (int g = 0; g < per_host; ++g) out.push_back(h * cluster.node.accelerators() + g);
  return out;
}

Status check_fits(const NcclTestsLog& log, const ClusterSpec& cluster) {
  const int hosts = std::max<int>(1, static_cast<int>(log.hosts.size()));
  if (log.ranks % hosts != 0)
    return Error(
        fmt::format("{}: {} ranks over {} hosts: not as many on each host", log.file, log.ranks, hosts));
  if (log.ranks / hosts > cluster.node.accelerators())
    return Error(fmt::format("{}: {} ranks per host, but a node of cluster {} has {} accelerators", log.file,
                             log.ranks / hosts, cluster.name, cluster.node.accelerators()));
  return Status::Ok();
}

// The cluster with at least `hosts` nodes.
ClusterSpec with_nodes(ClusterSpec c, int hosts) {
  c.nodes = std::max(c.nodes, hosts);
  return c;
}

// The model's time for a row of `log` on `cluster` (negative: the model failed).
double model_seconds(const ClusterSpec& cluster, const NcclTestsLog& log, double bytes) {
  const ClusterSpec c = with_nodes(cluster, static_cast<int>(log.hosts.size()));
  auto t = run_collectives(c, {CollectiveRun{log.op, {log_devices(log, c)}, bytes, std::nullopt}});
  return t ? t->front() : -1.0;
}

// Bisection of a monotone `f` on [lo, hi] for f(x) = target (increasing: f grows with x).
template <typename F>
double solve(F f, double lo, double hi, double target, bool increasing) {
  for (int i = 0; i < 40; ++i) {
    const double mid = 0.5 * (lo + hi);
    const bool below = f(mid) < target;
    ((below == increasing) ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

std::string describe_log(const NcclTestsLog& log) {
  return fmt::format("{} ({}, {} rank{} on {} host{}{})", std::filesystem::path(log.file).filename().string(),
                     log.program, log.ranks, log.ranks == 1 ? "" : "s", log.hosts.size(),
                     log.hosts.size() == 1 ? "" : "s", log.device.empty() ? "" : ", " + log.device);
}

// The node's fabric from the logs of one host.
Status fit_node_fabric(NcclTestsCalibration& out, const std::vector<const NcclTestsLog*>& logs,
                       NcclTestsColumn column) {
  const int n = logs.front()->ranks;
  for (const NcclTestsLog* l : logs)
    if (l->ranks != n)
      return Error(
          fmt::format("{} has {} ranks and {} has {}: the node's measured times are for one group size; "
                      "give logs of one rank count",
                      logs.front()->file, n, l->file, l->ranks));
  if (n < 2) return Error(logs.front()->file + ": one rank: no collective to calibrate");
  Calibration& c = out.fabric;
  c.backend = "cuda";
  c.ranks = n;
  c.fabric = out.cluster.node.fabric;
  c.fabric.measured = {};
  std::vector<std::string> used;
  for (const NcclTestsLog* l : logs) {
    const bool measured_op =
        std::find(std::begin(kMeasuredOps), std::end(kMeasuredOps), l->op) != std::end(kMeasuredOps);
    if (!l->modelled_op || !measured_op) continue;
    used.push_back(describe_log(*l));
    for (const NcclTestsRow& r : l->rows)
      if (r.bytes > 0 && row_seconds(r, column) > 0) {
        Measurement m;
        m.kind = std::string(to_string(l->op));
        m.shape = size_label(r.bytes);
        m.work = r.bytes;
        m.seconds = row_seconds(r, column);
        c.points.push_back(m);
      }
  }
  if (c.points.empty()) return Status::Ok();  // all-to-alls and the like: compared, not fitted
  fit_collectives(c, n);
  out.cluster.node.fabric = c.fabric;
  const std::string from =
      fmt::format("nccl-tests {} times of {}", column_name(column), fmt::join(used, ", "));
  if (c.fabric_measured) {
    out.fitted.push_back(fmt::format(
        "node fabric: all-reduce line over {} ranks, bus bandwidth {:.1f} GB/s, latency {:.2f} us per step{} "
        "(rms error {:.1f}% over the logged sizes)",
        n, c.fabric.bandwidth / 1e9, c.fabric.latency_s * 1e6,
        c.fabric.small_message_bytes > 0
            ? fmt::format(", {:.2f} us below {}", c.fabric.small_message_latency_s * 1e6,
                          size_label(c.fabric.small_message_bytes))
            : std::string(),
        100 * c.all_reduce.rms_rel_error));
    out.sources["fabric"] = fmt::format(
        "fitted: {}; ring model t = 2(n-1)*latency + 2(n-1)/n*S/B{}, weighted by 1/t; rms error {:.1f}%",
        from,
        c.fabric.small_message_bytes > 0 ? ", a second latency below the size where the protocol changes"
                                         : "",
        100 * c.all_reduce.rms_rel_error);
  }
  for (const OwnCollective& o : kOwnCollectives) {
    const CollectiveRates& r = *c.fabric.own_rates(o.op);
    if (r.bandwidth <= 0) continue;
    out.fitted.push_back(
        fmt::format("node fabric: {} bus bandwidth {:.1f} GB/s, latency {:.2f} us per step (rms {:.1f}%)",
                    to_string(o.op), r.bandwidth / 1e9, r.latency_s * 1e6, 100 * (c.*o.fit).rms_rel_error));
    out.sources[std::string("fabric.collectives.") + std::string(to_string(o.op))] =
        fmt::format("fitted: {}; t = steps*latency + {}; rms error {:.1f}%", from, o.model,
                    100 * (c.*o.fit).rms_rel_error);
  }
  if (!c.fabric.measured.empty()) {
    out.fitted.push_back(fmt::format("node fabric: measured times for groups of {} ranks: {}", n,
                                     measured_times_summary(c.fabric.measured)));
    out.sources["fabric.measured"] = fmt::format(
        "measured: {}; a plan's group of {} ranks inside the node takes them up to the largest size logged, "
        "interpolated in log size and log time (below the smallest, its time); each size left out and "
        "interpolated from its neighbours: {} rms",
        from, n, measured_times_summary(c.fabric.measured));
  }
  return Status::Ok();
}

// The NIC's efficiency (the largest size's busbw) and latency (the smallest size of 1 KiB or more)
// from a log across hosts, through the simulator's collective model.
void fit_network(NcclTestsCalibration& out, const NcclTestsLog& log, NcclTestsColumn column) {
  std::vector<const NcclTestsRow*> rows;
  for (const NcclTestsRow& r : log.rows)
    if (r.bytes >= 1024 && row_seconds(r, column) > 0) rows.push_back(&r);
  if (rows.size() < 2) return;
  const NcclTestsRow& big = *rows.back();
  const NcclTestsRow& small = *rows.front();
  ClusterSpec& c = out.cluster;
  const double eff0 = c.node.nic.efficiency;
  auto time_at = [&](double bytes) { return model_seconds(c, log, bytes); };
  auto with_efficiency = [&](double e) {
    c.node.nic.efficiency = e;
    return time_at(big.bytes);
  };
  // Time falls as the efficiency grows.
  const double target = row_seconds(big, column);
  double e = solve(with_efficiency, 0.01, 1.0, target, false);
  c.node.nic.efficiency = e;
  const double reached = time_at(big.bytes);
  std::string note;
  if (std::abs(reached - target) > 0.01 * target) {
    note = fmt::format(
        "; the model's time at efficiency {:.2f} is {:.1f} us against {:.1f} us logged (the log "
        "ran faster than the NICs' line rate allows, or slower than 1% of it: a fabric the model "
        "does not describe)",
        e, reached * 1e6, target * 1e6);
    if (reached > target * 1.01) e = 1.0, c.node.nic.efficiency = 1.0;
  }
  out.fitted.push_back(fmt::format("NIC efficiency {:.3f} (was {:.3f}) from {} at {}{}", e, eff0,
                                   describe_log(log), size_label(big.bytes), note));
  out.sources["node.nic.efficiency"] = fmt::format(
      "fitted: nccl-tests {} time of {} at {} ({:.1f} us), matched by the simulator's collective model{}",
      column_name(column), describe_log(log), size_label(big.bytes), target * 1e6, note);
  const double lat0 = c.node.nic.latency_s;
  const double small_target = row_seconds(small, column);
  auto with_latency = [&](double l) {
    c.node.nic.latency_s = l;
    return time_at(small.bytes);
  };
  const double at_zero = with_latency(0.0);
  if (at_zero >= small_target) {
    c.node.nic.latency_s = 0.0;
    out.fitted.push_back(
        fmt::format("NIC latency 0 (was {:.2f} us): at {} the model takes {:.1f} us with no network latency, "
                    "the log {:.1f} us",
                    lat0 * 1e6, size_label(small.bytes), at_zero * 1e6, small_target * 1e6));
  } else {
    const double l = solve(with_latency, 0.0, 1e-3, small_target, true);
    c.node.nic.latency_s = l;
    out.fitted.push_back(fmt::format("NIC latency {:.2f} us (was {:.2f} us) from {} at {}", l * 1e6,
                                     lat0 * 1e6, describe_log(log), size_label(small.bytes)));
  }
  out.sources["node.nic.latency"] = fmt::format(
      "fitted: nccl-tests {} time of {} at {} ({:.1f} us), matched by the simulator's collective model",
      column_name(column), describe_log(log), size_label(small.bytes), small_target * 1e6);
}

}  // namespace

Result<NcclTestsCalibration> calibrate_from_nccl_tests(const ClusterSpec& base,
                                                       const std::vector<NcclTestsLog>& logs,
                                                       NcclTestsColumn column) {
  if (logs.empty()) return Error("no nccl-tests logs given");
  NcclTestsCalibration out;
  out.cluster = base;
  out.sources = nlohmann::json::object();
  std::vector<const NcclTestsLog*> one_host;
  const NcclTestsLog* across = nullptr;
  for (const NcclTestsLog& l : logs) {
    FS_RETURN_IF_ERROR(check_fits(l, base));
    if (l.hosts.size() <= 1)
      one_host.push_back(&l);
    else if (l.modelled_op && (!across || (l.op == CollectiveOp::kAllReduce && across->op != l.op)))
      across = &l;
  }
  if (!one_host.empty()) FS_RETURN_IF_ERROR(fit_node_fabric(out, one_host, column));
  if (across) fit_network(out, *across, column);
  if (out.fitted.empty())
    return Error(
        "the logs hold no collective the profile has rates for (all-reduce, all-gather, reduce-scatter, "
        "send/recv inside a node; any modelled collective across hosts)");
  return out;
}

nlohmann::json nccl_tests_cluster_json(const NcclTestsCalibration& c, const std::string& name,
                                       const std::string& provenance) {
  nlohmann::json j = cluster_to_json(c.cluster);
  j["name"] = name;
  j["description"] =
      "calibrated from nccl-tests logs by `foresight calibrate --from-nccl-tests` (" + provenance + ")";
  nlohmann::json sources = c.sources;
  sources["all"] =
      "the rest as in profile " + c.cluster.name + " (hwprofiles/, with its sources); " + provenance;
  j["sources"] = sources;
  return j;
}

std::vector<NcclTestsCheck> check_against_nccl_tests(const ClusterSpec& cluster,
                                                     const std::vector<NcclTestsLog>& logs,
                                                     NcclTestsColumn column) {
  std::vector<NcclTestsCheck> out;
  for (const NcclTestsLog& l : logs)
    for (const NcclTestsRow& r : l.rows) {
      if (!(r.bytes > 0) || !(row_seconds(r, column) > 0)) continue;
      NcclTestsCheck k;
      k.file = l.file;
      k.collective = l.program;
      k.ranks = l.ranks;
      k.bytes = r.bytes;
      // busbw from the logged time (the log's busbw column is rounded to 0.01 GB/s)
      k.logged_busbw = bus_bandwidth(l.op, l.ranks, r.bytes, row_seconds(r, column));
      if (!l.modelled_op) {
        k.failure = "no plan runs " + l.program + ": not compared";
      } else if (Status s = check_fits(l, cluster); !s) {
        k.failure = s.error().message();
      } else if (const double t = model_seconds(cluster, l, r.bytes); t > 0) {
        k.predicted_busbw = bus_bandwidth(l.op, l.ranks, r.bytes, t);
        k.error_pct = (k.predicted_busbw - k.logged_busbw) / k.logged_busbw * 100;
      } else {
        k.failure = "the model could not run it";
      }
      out.push_back(k);
    }
  return out;
}

}  // namespace foresight::runtime

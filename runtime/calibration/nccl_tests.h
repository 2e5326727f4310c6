// nccl-tests logs (all_reduce_perf, all_gather_perf, reduce_scatter_perf, alltoall_perf,
// sendrecv_perf, ...: the table its README documents, out-of-place and in-place columns) read into
// a cluster profile: the node's fabric from logs of one host (its collectives' lines and measured
// times), the NIC's efficiency and the first tier's latency from logs across hosts; then every
// logged size predicted again on the calibrated cluster, busbw against busbw.
//
//   auto log = load_nccl_tests_log("all_reduce_perf.log");
//   auto cal = calibrate_from_nccl_tests(base, {*log}, NcclTestsColumn::kOutOfPlace);
//   auto rows = check_against_nccl_tests(cal->cluster, {*log}, NcclTestsColumn::kOutOfPlace);
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/calibration/calibrate.h"
#include "sim/core/status.h"
#include "sim/spec/hardware.h"

namespace foresight::runtime {

struct NcclTestsRow {
  int line = 0;      // in the log, from 1
  double bytes = 0;  // the "size" column: nccl-tests' size (all-gather's output, reduce-scatter's input)
  double count = 0;  // elements
  std::string type, redop;
  double out_of_place_s = 0, in_place_s = 0;          // the "time" columns (0: not printed)
  double out_of_place_busbw = 0, in_place_busbw = 0;  // bytes/s as logged
  double wrong = 0;                                   // the "#wrong" columns summed (-1: N/A)
};

struct NcclTestsLog {
  std::string file;
  std::string program;  // "all_reduce_perf": the log's "Collective test starting" line or the file's name
  std::string version;  // "2.13.9 nccl-headers=22107 nccl-library=22107" where the log says
  CollectiveOp op = CollectiveOp::kAllReduce;
  bool modelled_op = true;         // false: a collective the model has no rates for (reduce, gather, ...)
  int ranks = 0;                   // "#  Rank" lines
  std::vector<std::string> hosts;  // distinct, in rank order
  std::string device;              // the first rank's device, as logged
  std::vector<NcclTestsRow> rows;  // sizes as logged
  std::vector<std::string> warnings;
};

// Errors name the file and line: no table, a row whose columns do not match the header, a
// value that is not a number; a log that names no collective (neither a "Collective test
// starting" line nor a file name with all_reduce, all_gather, reduce_scatter, alltoall, sendrecv,
// broadcast) or has no "#  Rank" lines.
Result<NcclTestsLog> nccl_tests_log_from_text(std::string_view text, const std::string& file);
Result<NcclTestsLog> load_nccl_tests_log(const std::string& path);

enum class NcclTestsColumn { kOutOfPlace, kInPlace };

struct NcclTestsCalibration {
  ClusterSpec cluster;              // the base, its fabric and network as the logs measured them
  Calibration fabric;               // the node's fabric fit (points, lines); ranks 0: no log of one host
  std::vector<std::string> fitted;  // one line per fitted quantity: what, from which log, how well
  nlohmann::json sources;           // profile "sources" entries for what was fitted
};

// Logs of one host calibrate the node's fabric (they must agree on the rank count, at most the
// node's accelerators; the all-reduce's line, the other collectives' own rates, the measured
// times); logs across hosts (ranks spread evenly) calibrate the NIC's efficiency on the largest
// sizes and the first tier's latency on the smallest, through the simulator's own collective model.
Result<NcclTestsCalibration> calibrate_from_nccl_tests(const ClusterSpec& base,
                                                       const std::vector<NcclTestsLog>& logs,
                                                       NcclTestsColumn column);

// The profile: the base cluster with the calibrated fabric and network, and their sources.
nlohmann::json nccl_tests_cluster_json(const NcclTestsCalibration& c, const std::string& name,
                                       const std::string& provenance);

struct NcclTestsCheck {
  std::string file, collective;
  int ranks = 0;
  double bytes = 0;
  double logged_busbw = 0, predicted_busbw = 0;  // bytes/s
  double error_pct = 0;
  std::string failure;  // why the model could not run it (empty: it did)
};

// Every logged size of every log (the column chosen) predicted on `cluster` by the simulator's
// collective model, busbw against the log's busbw (sizes of 0 bytes, which nccl-tests prints for
// an all-gather smaller than its ranks, are skipped).
std::vector<NcclTestsCheck> check_against_nccl_tests(const ClusterSpec& cluster,
                                                     const std::vector<NcclTestsLog>& logs,
                                                     NcclTestsColumn column);

}  // namespace foresight::runtime

// nccl-tests logs: the table in its formats (2.13+ with the group and root columns, older ones
// without), the errors a damaged log gets, and `calibrate --from-nccl-tests`: a profile whose
// predicted busbw matches every logged size inside the node, the NICs fitted across hosts.
#include "runtime/calibration/nccl_tests.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "sim/spec/hardware.h"

namespace foresight::runtime {
namespace {

const std::string kDir = std::string(FORESIGHT_TEST_DATA) + "/nccl-tests/";

NcclTestsLog load(const std::string& name) {
  auto log = load_nccl_tests_log(kDir + name);
  EXPECT_TRUE(static_cast<bool>(log)) << (log ? "" : log.error().message());
  return log ? *log : NcclTestsLog{};
}

std::vector<NcclTestsLog> node_logs() {
  return {load("synthetic-h100x8-all_reduce_perf.log"), load("synthetic-h100x8-all_gather_perf.log"),
          load("synthetic-h100x8-reduce_scatter_perf.log"), load("synthetic-h100x8-alltoall_perf.log")};
}

TEST(NcclTestsLog, ReadsTheTableRanksAndCollective) {
  const NcclTestsLog log = load("synthetic-h100x8-all_reduce_perf.log");
  EXPECT_EQ(log.program, "all_reduce_perf");
  EXPECT_EQ(log.op, CollectiveOp::kAllReduce);
  EXPECT_EQ(log.ranks, 8);
  ASSERT_EQ(log.hosts.size(), 1u);
  EXPECT_EQ(log.device, "NVIDIA H100 80GB HBM3");
  EXPECT_NE(log.version.find("2.13.9"), std::string::npos);
  ASSERT_EQ(log.rows.size(), 31u);
  EXPECT_EQ(log.rows.front().bytes, 8);
  EXPECT_EQ(log.rows.back().bytes, 8589934592.0);
  EXPECT_GT(log.rows.back().out_of_place_s, 0.01);
  EXPECT_GT(log.rows.back().in_place_s, 0.01);
  EXPECT_NEAR(log.rows.back().out_of_place_busbw, 474.17e9, 1e7);
  EXPECT_TRUE(log.warnings.empty()) << log.warnings.front();
  const NcclTestsLog two = load("synthetic-h100x16-2nodes-all_reduce_perf.log");
  EXPECT_EQ(two.ranks, 16);
  EXPECT_EQ(two.hosts.size(), 2u);
}

// nccl-tests 2.0-2.10: no "Collective test starting" line, no group or root column, "error"
// where later versions print "#wrong"; the collective comes from the file's name.
TEST(NcclTestsLog, ReadsTheOlderFormatNamedByItsFile) {
  const std::string text =
      "# nThread 1 nGpus 2 minBytes 1024 maxBytes 4096 step: 2(factor) warmup iters: 5 iters: 20 validation: "
      "1\n"
      "#\n# Using devices\n"
      "#   Rank  0 Pid  12345 on   gpu-box device  0 [0x06] Tesla V100-SXM2-32GB\n"
      "#   Rank  1 Pid  12345 on   gpu-box device  1 [0x07] Tesla V100-SXM2-32GB\n"
      "#\n"
      "#                                                     out-of-place                       in-place\n"
      "#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  "
      "error\n"
      "#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n"
      "        1024           256   float     sum    10.00    0.10    0.10  0e+00     9.00    0.11    0.11  "
      "0e+00\n"
      "        2048           512   float     sum    12.00    0.17    0.17  0e+00    11.00    0.19    0.19  "
      "0e+00\n"
      "        4096          1024   float     sum    16.00    0.26    0.26  0e+00    15.00    0.27    0.27  "
      "0e+00\n"
      "# Out of bounds values : 0 OK\n";
  auto log = nccl_tests_log_from_text(text, "logs/v100-all_reduce_perf.txt");
  ASSERT_TRUE(log) << log.error().message();
  EXPECT_EQ(log->op, CollectiveOp::kAllReduce);
  EXPECT_EQ(log->ranks, 2);
  EXPECT_EQ(log->device, "Tesla V100-SXM2-32GB");
  ASSERT_EQ(log->rows.size(), 3u);
  EXPECT_DOUBLE_EQ(log->rows[1].out_of_place_s, 12e-6);
  EXPECT_DOUBLE_EQ(log->rows[1].in_place_s, 11e-6);
  EXPECT_EQ(log->rows[1].wrong, 0);
  // The same log under a name that says nothing: which collective it ran is asked for.
  auto unnamed = nccl_tests_log_from_text(text, "run3.txt");
  ASSERT_FALSE(unnamed);
  EXPECT_NE(unnamed.error().message().find("run3.txt: cannot tell the collective"), std::string::npos);
}

TEST(NcclTestsLog, DamagedLogsGetTheFileLineAndReason) {
  const std::string head =
      "# Collective test starting: all_gather_perf\n"
      "#  Rank  0 Group  0 Pid  1 on  h device  0 [0x18] NVIDIA H100 80GB HBM3\n"
      "#  Rank  1 Group  0 Pid  2 on  h device  1 [0x19] NVIDIA H100 80GB HBM3\n"
      "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   "
      "algbw   "
      "busbw  #wrong\n";
  auto error_of = [](const std::string& text) {
    auto log = nccl_tests_log_from_text(text, "ag.log");
    return log ? std::string("(parsed)") : log.error().message();
  };
  EXPECT_NE(error_of("").find("ag.log: no nccl-tests table"), std::string::npos);
  EXPECT_NE(error_of("{\"traceEvents\": []}\n").find("no nccl-tests table"), std::string::npos);
  EXPECT_NE(error_of(head).find("the nccl-tests table has no rows"), std::string::npos);
  EXPECT_NE(
      error_of(head + "        1024    128   float   none   -1   abc   0.1   0.1   0   9.0   0.1   0.1   0\n")
          .find("ag.log:5: column \"time\": \"abc\" is not a number"),
      std::string::npos);
  EXPECT_NE(error_of(head + "        1024    128   float\n").find("ag.log:5: a row of 3 columns"),
            std::string::npos);
  std::string no_ranks = head;
  no_ranks.erase(no_ranks.find("#  Rank"), no_ranks.find("#       size") - no_ranks.find("#  Rank"));
  EXPECT_NE(error_of(no_ranks + "1024 128 float none -1 9.0 0.11 0.06 0 9.0 0.11 0.06 0\n")
                .find("rank count is unknown"),
            std::string::npos);
  // A header whose type column comes after busbw, and a row that ends at busbw: the row is read
  // without its type (found by fuzz_nccl_tests: the type was read past the row's words).
  auto short_row = nccl_tests_log_from_text(
      "#  Rank  0 Group  0 Pid  1 on  h device  0 [0x18] NVIDIA H100 80GB HBM3\n"
      "#  Rank  1 Group  0 Pid  2 on  h device  1 [0x19] NVIDIA H100 80GB HBM3\n"
      "#       size     time   busbw   type\n"
      "        1024      9.0    0.06\n",
      "all_gather_perf.log");
  ASSERT_TRUE(short_row) << short_row.error().message();
  ASSERT_EQ(short_row->rows.size(), 1u);
  EXPECT_TRUE(short_row->rows[0].type.empty());
  // Wrong elements and a busbw that another rank count would give are reported, not dropped.
  auto log = nccl_tests_log_from_text(head +
                                          "  1048576  131072  float  none  -1  100.0  10.49  1.00  3  100.0  "
                                          "10.49  5.24  0\n",
                                      "ag.log");
  ASSERT_TRUE(log) << log.error().message();
  ASSERT_EQ(log->warnings.size(), 2u);
  EXPECT_NE(log->warnings[0].find("3 wrong elements"), std::string::npos);
  EXPECT_NE(log->warnings[1].find("the collective or the rank count is not what the log ran"),
            std::string::npos);
}

// Inside the node every logged size is predicted within 5% (the acceptance): the measured times
// take the logged sizes' place, and the profile written reads back to the same predictions.
TEST(NcclTestsCalibration, NodeFabricMatchesEveryLoggedSize) {
  auto base = load_cluster("dgx-h100-ndr");
  ASSERT_TRUE(base) << base.error().message();
  const std::vector<NcclTestsLog> logs = node_logs();
  // The base profile misses the synthetic machine by far at some sizes (the test would pass
  // without calibrating otherwise).
  double before = 0;
  for (const NcclTestsCheck& k : check_against_nccl_tests(*base, logs, NcclTestsColumn::kOutOfPlace))
    before = std::max(before, std::abs(k.error_pct));
  EXPECT_GT(before, 50);
  auto cal = calibrate_from_nccl_tests(*base, logs, NcclTestsColumn::kOutOfPlace);
  ASSERT_TRUE(cal) << cal.error().message();
  EXPECT_EQ(cal->cluster.node.fabric.measured.ranks, 8);
  EXPECT_EQ(cal->cluster.node.fabric.measured.all_to_all.size(), 31u);
  EXPECT_NEAR(cal->cluster.node.fabric.all_gather.bandwidth, 360e9, 0.02 * 360e9);  // the curve's 360 GB/s
  const nlohmann::json j = nccl_tests_cluster_json(*cal, "h100-from-logs", "test");
  EXPECT_TRUE(j["sources"].contains("fabric.measured"));
  auto written = cluster_from_json(j, "h100-from-logs.json");
  ASSERT_TRUE(written) << written.error().message();
  const auto checks = check_against_nccl_tests(*written, logs, NcclTestsColumn::kOutOfPlace);
  EXPECT_EQ(checks.size(), 4u * 31u);
  for (const NcclTestsCheck& k : checks) {
    ASSERT_TRUE(k.failure.empty()) << k.file << " " << k.bytes << ": " << k.failure;
    EXPECT_LT(std::abs(k.error_pct), 5) << k.collective << " at " << k.bytes << " B";
  }
  // The in-place column is another set of times.
  auto in_place = calibrate_from_nccl_tests(*base, logs, NcclTestsColumn::kInPlace);
  ASSERT_TRUE(in_place);
  EXPECT_NE(in_place->cluster.node.fabric.measured.all_reduce.back().seconds,
            cal->cluster.node.fabric.measured.all_reduce.back().seconds);
}

TEST(NcclTestsCalibration, RefusesLogsThatDoNotFitTheProfile) {
  auto base = load_cluster("dgx-h100-ndr");
  ASSERT_TRUE(base);
  std::vector<NcclTestsLog> logs = node_logs();
  logs[1].ranks = 4;  // an all-gather over half the node
  auto mixed = calibrate_from_nccl_tests(*base, logs, NcclTestsColumn::kOutOfPlace);
  ASSERT_FALSE(mixed);
  EXPECT_NE(mixed.error().message().find("has 8 ranks and"), std::string::npos);
  std::vector<NcclTestsLog> wide = {logs[0]};
  wide[0].ranks = 16;  // sixteen on one host of an 8-GPU node
  auto too_many = calibrate_from_nccl_tests(*base, wide, NcclTestsColumn::kOutOfPlace);
  ASSERT_FALSE(too_many);
  EXPECT_NE(too_many.error().message().find("16 ranks per host, but a node of cluster dgx-h100-ndr has 8"),
            std::string::npos);
}

// Across hosts the NICs' efficiency is fitted on the largest size: that size is then predicted
// within 2%, and the largest sizes near it within 5%.
TEST(NcclTestsCalibration, AcrossHostsFitsTheNicEfficiency) {
  auto base = load_cluster("dgx-h100-ndr");
  ASSERT_TRUE(base);
  const std::vector<NcclTestsLog> logs = {load("synthetic-h100x16-2nodes-all_reduce_perf.log")};
  auto cal = calibrate_from_nccl_tests(*base, logs, NcclTestsColumn::kOutOfPlace);
  ASSERT_TRUE(cal) << cal.error().message();
  EXPECT_NE(cal->cluster.node.nic.efficiency, base->node.nic.efficiency);
  EXPECT_TRUE(cal->sources.contains("node.nic.efficiency"));
  const auto checks = check_against_nccl_tests(cal->cluster, logs, NcclTestsColumn::kOutOfPlace);
  ASSERT_EQ(checks.size(), 31u);
  EXPECT_LT(std::abs(checks.back().error_pct), 2);
  for (std::size_t i = checks.size() - 4; i < checks.size(); ++i) EXPECT_LT(std::abs(checks[i].error_pct), 5);
}

}  // namespace
}  // namespace foresight::runtime

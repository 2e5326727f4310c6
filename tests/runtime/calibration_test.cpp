// Calibration: the fits (protocol switch, GEMM weight passes, attention terms, streaming
// exponentials), the peak, the host link, steadiest attempts, shared memory, per-precision peaks,
// collectives' own rates and measured times, and `run --predict` against a calibrated profile.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/calibration/calibrate.h"
#include "tests/runtime/runtime_test_util.h"

namespace foresight::runtime {
namespace {

// All-reduce times with a protocol switch (2 ranks: t = 2 alpha + S/B): the fit finds the switch,
// both latencies and the bandwidth; a plain line stays one line, and a slow spell at the two
// largest sizes is not taken for a protocol.
std::vector<Measurement> all_reduce_points(double alpha_small, double alpha, double below,
                                           double slow_from = 1e30) {
  std::vector<Measurement> pts;
  for (double S = 1024; S <= 16 * 1048576.0; S *= 2) {
    double t = 2 * (S < below ? alpha_small : alpha) + S / 9e9;
    if (S >= slow_from) t *= 6;
    pts.push_back({"all_reduce", "", S, t, 0});
  }
  return pts;
}

// GEMM times with weight passes (as Eigen's: the forward packs the weight, the backward also reads
// and writes its gradient): the fit recovers the four terms exactly; without weight passes it
// drops the two terms instead of inventing them.
TEST(Calibration, GemmFitFindsTheWeightPasses) {
  auto points = [](double fwd_s_per_byte, double bwd_s_per_byte) {
    std::vector<Measurement> pts;
    for (int rows : {32, 128, 512})
      for (auto [k, n] : std::vector<std::pair<int, int>>{{64, 128}, {256, 512}, {256, 2048}, {1024, 256}}) {
        const double flops = 2.0 * rows * k * n, w = 4.0 * k * n;
        pts.push_back({"gemm", "", flops, 1e-6 + flops / 120e9 + w * fwd_s_per_byte});
        pts.back().weight_bytes = w;
        pts.push_back({"gemm", "", 2 * flops, 2e-6 + 2 * flops / 120e9 + w * bwd_s_per_byte});
        pts.back().weight_bytes = w;
        pts.back().backward = true;
      }
    return pts;
  };
  auto pts = points(0.04e-9, 0.2e-9);
  const LineFit f = fit_gemm(pts, "gemm");
  EXPECT_NEAR(f.intercept_s, 1e-6, 1e-12);
  EXPECT_NEAR(1 / f.slope, 120e9, 1e3);
  EXPECT_NEAR(f.weight_fwd_s_per_byte, 0.04e-9, 1e-15);
  EXPECT_NEAR(f.weight_bwd_s_per_byte, 0.2e-9, 1e-15);
  EXPECT_LT(f.rms_rel_error, 1e-9);
  for (const auto& p : pts) EXPECT_NEAR(p.fitted_s, p.seconds, 1e-9 * p.seconds);
  auto plain = points(0, 0);
  const LineFit g = fit_gemm(plain, "gemm");
  EXPECT_NEAR(g.weight_fwd_s_per_byte, 0, 1e-16);
  EXPECT_NEAR(g.weight_bwd_s_per_byte, 0, 1e-16);
  EXPECT_NEAR(1 / g.slope, 120e9, 1e3);
}

// Attention pairs with a score term (work per score element that does not scale with the head
// width): the fit recovers the three terms; without one it drops the term instead of inventing it.
TEST(Calibration, AttentionFitFindsTheScoreTerm) {
  auto points = [](double score_s) {
    std::vector<Measurement> pts;
    for (int seq : {16, 32, 64, 128})
      for (auto [q, d] : std::vector<std::pair<int, int>>{{4, 16}, {8, 32}}) {
        const double flops = 3.5 * 0.5 * 2.0 * seq * seq * 2.0 * q * d, scores = 0.5 * q * seq * seq;
        pts.push_back({"attention", "", flops, 3e-6 + scores * score_s + flops / 30e9});
        pts.back().elements = scores;
      }
    return pts;
  };
  auto pts = points(2e-9);
  const LineFit f = fit_with_elements(pts, "attention");
  EXPECT_NEAR(f.intercept_s, 3e-6, 1e-12);
  EXPECT_NEAR(f.element_s, 2e-9, 1e-15);
  EXPECT_NEAR(1 / f.slope, 30e9, 1e3);
  EXPECT_LT(f.rms_rel_error, 1e-9);
  for (const auto& p : pts) EXPECT_NEAR(p.fitted_s, p.seconds, 1e-9 * p.seconds);
  auto plain = points(0);
  const LineFit g = fit_with_elements(plain, "attention");
  EXPECT_NEAR(g.element_s, 0, 1e-16);
  EXPECT_NEAR(1 / g.slope, 30e9, 1e3);
}

// Attention with a fixed cost per (sequence, head) besides the score and FLOP terms (the CPU
// backend's per-head GEMMs): fit_attention recovers all four; the three-term line cannot.
TEST(Calibration, AttentionFitFindsThePerHeadTerm) {
  std::vector<Measurement> pts;
  for (int seq : {16, 32, 64, 128})
    for (auto [q, d] : std::vector<std::pair<int, int>>{{2, 16}, {4, 16}, {8, 32}}) {
      const double flops = 3.5 * 0.5 * 2.0 * seq * seq * 2.0 * q * d, scores = 0.5 * q * seq * seq;
      pts.push_back({"attention", "", flops, 3e-6 + q * 1.2e-6 + scores * 2e-9 + flops / 30e9});
      pts.back().elements = scores;
      pts.back().heads = q;
    }
  const LineFit f = fit_attention(pts, "attention");
  EXPECT_NEAR(f.intercept_s, 3e-6, 1e-12);
  EXPECT_NEAR(f.head_s, 1.2e-6, 1e-12);
  EXPECT_NEAR(f.element_s, 2e-9, 1e-15);
  EXPECT_NEAR(1 / f.slope, 30e9, 1e3);
  EXPECT_LT(f.rms_rel_error, 1e-9);
  EXPECT_GT(fit_with_elements(pts, "attention").rms_rel_error, 1e-3);
}

// Timings whose per-head costs swamp the FLOPs (a loaded machine) drive the four-term fit's FLOP
// slope below zero: the fit drops terms until every one is physical, so the profile never holds a
// negative attention efficiency.
TEST(Calibration, AttentionFitKeepsEveryTermPhysical) {
  std::vector<Measurement> pts;
  for (int seq : {16, 32, 64, 128})
    for (auto [q, d] : std::vector<std::pair<int, int>>{{2, 16}, {4, 16}, {8, 32}}) {
      const double flops = 3.5 * 0.5 * 2.0 * seq * seq * 2.0 * q * d, scores = 0.5 * q * seq * seq;
      // More time per head and per score element than the work explains, less the more FLOPs.
      pts.push_back({"attention", "", flops, 3e-6 + q * 5e-6 + scores * 4e-9 - flops / 400e9});
      pts.back().elements = scores;
      pts.back().heads = q;
    }
  // The unconstrained four-term least squares (1, heads, elements, FLOPs, each column scaled to
  // its largest value), by its normal equations: its FLOP slope.
  std::array<double, 4> scale{};
  for (const Measurement& m : pts) {
    const std::array<double, 4> row{1.0, m.heads, m.elements, m.work};
    for (int j = 0; j < 4; ++j) scale[j] = std::max(scale[j], row[j]);
  }
  std::array<std::array<double, 5>, 4> n{};
  for (const Measurement& m : pts) {
    const std::array<double, 4> row{1.0, m.heads / scale[1], m.elements / scale[2], m.work / scale[3]};
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 4; ++j) n[i][j] += row[i] * row[j];
      n[i][4] += row[i] * m.seconds;
    }
  }
  for (int c = 0; c < 4; ++c)
    for (int r = c + 1; r < 4; ++r) {
      const double f = n[r][c] / n[c][c];
      for (int j = c; j < 5; ++j) n[r][j] -= f * n[c][j];
    }
  const double flop_slope = n[3][4] / n[3][3];  // the last unknown, back-substituted first
  ASSERT_LE(flop_slope, 0) << "the data must make the unconstrained fit unphysical";
  const LineFit f = fit_attention(pts, "attention");
  EXPECT_GT(f.slope, 0);
  EXPECT_GE(f.element_s, 0);
  EXPECT_GE(f.head_s, 0);
}

// Streaming kernels with an exponential per element for some (SwiGLU's): the same fit recovers the
// bandwidth and the cost per exponential, which one bytes line could not.
TEST(Calibration, StreamFitFindsTheExponentials) {
  std::vector<Measurement> pts;
  for (double n : {2048.0, 8192.0, 32768.0, 131072.0}) {
    pts.push_back({"stream", "residual", 12 * n, 0.2e-6 + 12 * n / 40e9});
    pts.push_back({"stream", "swiglu", 6 * n, 0.2e-6 + 6 * n / 40e9 + 0.5 * n * 0.3e-9});
    pts.back().elements = 0.5 * n;
  }
  const LineFit f = fit_with_elements(pts, "stream");
  EXPECT_NEAR(1 / f.slope, 40e9, 1e3);
  EXPECT_NEAR(f.element_s, 0.3e-9, 1e-15);
  EXPECT_LT(f.rms_rel_error, 1e-9);
}

TEST(Calibration, ThePeakIsNoSlowerThanTheSweepsGemms) {
  // The VM once ran the peak GEMM at 71 GFLOP/s and the sweep's at 130-140: a profile with the
  // measured peak capped every GEMM at 71 and predicted a plan 43% long.
  std::vector<Measurement> pts;
  for (double flops : {1e6, 1e7, 1e8}) pts.push_back({"gemm", "", flops, 2e-6 + flops / 130e9});
  pts.push_back({"stream", "", 1e9, 1e-3});  // not a GEMM: 1 TB/s must not become FLOP/s
  const LineFit gemm = fit_gemm(pts, "gemm");
  LineFit cache;
  cache.slope = 1 / 140e9;
  EXPECT_NEAR(gemm_peak(71e9, pts, {&gemm, &cache}), 140e9, 1e3);
  cache.slope = 0;  // no cache fit: the line's rate
  EXPECT_NEAR(gemm_peak(71e9, pts, {&gemm, &cache}), 130e9, 1e3);
  EXPECT_DOUBLE_EQ(gemm_peak(150e9, pts, {&gemm, &cache}), 150e9);  // a measured peak above them stands
  // A cache level's GEMM points count too, whatever the level's name.
  pts.push_back({"gemm-l2", "", 1e6, 1e6 / 145e9});
  EXPECT_NEAR(gemm_peak(71e9, pts, {&gemm}), 145e9, 1e3);
}

// Host<->device copies: a backend with its own memory gets uploads and downloads at each size and a
// fitted link, which the profile writes as the node's host_link with its source; a backend whose
// tensors are in host memory gets none.
TEST(Calibration, HostCopiesBecomeTheHostLink) {
  const std::vector<std::size_t> sizes = {64u << 10, 256u << 10, 1u << 20};
  std::vector<Measurement> none;
  const LineFit host = measure_host_copies(*make_cpu_backend(false), sizes, none);
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(host.slope, 0);
  Calibration c;
  c.backend = "cpu";
  const LineFit copies = measure_host_copies(*make_cpu_backend(true), sizes, c.points);
  ASSERT_EQ(c.points.size(), 2 * sizes.size());  // an upload and a download per size
  for (const Measurement& m : c.points) {
    EXPECT_EQ(m.kind, "host_copy");
    EXPECT_GT(m.seconds, 0);
  }
  ASSERT_GT(copies.slope, 0);
  // The profile: the fitted line as the node's host link, with its source; it reads back.
  c.host_copy.slope = 1 / 25e9;  // as if measured: 25 GB/s and 10 us
  c.host_copy.intercept_s = 10e-6;
  const ClusterSpec base = testing::preset_cluster("cpu-local", 2);
  c.device = base.node.accelerator();
  const nlohmann::json j = calibrated_cluster_json(c, base, "test", "a test");
  ASSERT_TRUE(j["node"].contains("host_link")) << j["node"].dump();
  EXPECT_NE(j["node"]["sources"]["host_link"].get<std::string>().find("64 KiB-1 MiB"), std::string::npos)
      << j["node"]["sources"].dump();
  auto back = cluster_from_json(j, "profile.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_NEAR(back->node.host_link.bandwidth, 25e9, 1e3);
  EXPECT_NEAR(back->node.host_link.latency_s, 10e-6, 1e-12);
  // Without copies measured, the base's host link stands.
  c.host_copy = {};
  const nlohmann::json plain = calibrated_cluster_json(c, base, "test", "a test");
  EXPECT_EQ(plain["node"].contains("host_link"), base.node.host_link.bandwidth > 0);
}

// The kernels measured while the machine's speed moved past kSpeedDriftWarnPct are measured again
// while retries are left; when they are spent, the steadiest attempt stands, the last one only if
// it is the steadiest.
TEST(Calibration, TheSteadiestAttemptStands) {
  const double over = kSpeedDriftWarnPct + 5;
  EXPECT_EQ(after_attempt(kSpeedDriftWarnPct - 1, 0, 2, -1), AfterAttempt::kKeep);
  EXPECT_EQ(after_attempt(kSpeedDriftWarnPct - 1, 2, 2, over), AfterAttempt::kKeep);  // steady at last
  EXPECT_EQ(after_attempt(over, 0, 2, -1), AfterAttempt::kRetry);
  EXPECT_EQ(after_attempt(over, 1, 2, over + 3), AfterAttempt::kRetry);
  EXPECT_EQ(after_attempt(over + 8, 2, 2, over), AfterAttempt::kSteadiest);  // an earlier one moved less
  EXPECT_EQ(after_attempt(over, 2, 2, over + 8), AfterAttempt::kKeep);       // this one moved least
  EXPECT_EQ(after_attempt(over, 0, 0, -1), AfterAttempt::kKeep);             // no retries: nothing to compare
}

// Calibrated under mpirun, the memory rates are each rank's with all of them at once and rank 0's
// alone: the profile writes both, the alone ones as the device's shared_memory with their source,
// and reads them back; with one rank there are none.
TEST(Calibration, TheAloneMemoryRatesBecomeTheSharedMemory) {
  const ClusterSpec base = testing::preset_cluster("cpu-local", 2);
  Calibration c;
  c.ranks = 2;
  c.device = base.node.accelerator();
  c.device.shared_memory.shared_by = 2;
  c.device.shared_memory.alone.gemm_efficiency = 0.9;
  c.device.shared_memory.alone.memory_bandwidth = 51e9;
  c.device.shared_memory.alone.optimizer_bandwidth = 72e9;
  c.alone_stream.rms_rel_error = 0.24;
  const nlohmann::json j = calibrated_cluster_json(c, base, "test", "a test");
  const auto& dev = j["node"]["devices"][0]["device"];
  ASSERT_TRUE(dev.contains("shared_memory")) << dev.dump();
  EXPECT_NE(dev["sources"]["shared_memory"].get<std::string>().find("rank 0 while the other ranks waited"),
            std::string::npos)
      << dev["sources"].dump();
  EXPECT_NE(dev["sources"]["shared_memory"].get<std::string>().find("streaming 24.0%"), std::string::npos);
  auto back = cluster_from_json(j, "profile.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->node.accelerator().shared_memory.shared_by, 2);
  EXPECT_NEAR(back->node.accelerator().shared_memory.alone.memory_bandwidth, 51e9, 1e3);
  EXPECT_NEAR(back->node.accelerator().shared_memory.alone.optimizer_bandwidth, 72e9, 1e3);
  c.device.shared_memory = {};
  const nlohmann::json one = calibrated_cluster_json(c, base, "test", "a test");
  EXPECT_FALSE(one["node"]["devices"][0]["device"].contains("shared_memory"));
  EXPECT_FALSE(one["node"]["devices"][0]["device"]["sources"].contains("shared_memory"));
}

// A backend that computes everything in fp32 (the CPU) gives every dtype the fp32 peak; one with
// tensor-core precisions (the CUDA backend) gives bf16 its bf16 GEMM's rate and fp16 and tf32 the
// fp16 plans' TF32 rate, so that a bf16 plan is not predicted at the fp32 rate.
TEST(Calibration, EachGemmPrecisionGetsItsOwnPeak) {
  DeviceSpec cpu = testing::preset_cluster("cpu-local", 1).node.accelerator();
  set_precision_peaks(cpu, 150e9, {});
  EXPECT_EQ(cpu.peak(DType::kFp32), 150e9);
  for (DType t : {DType::kTf32, DType::kBf16, DType::kFp16})
    EXPECT_TRUE(cpu.peak(t) == 0 || cpu.peak(t) == 150e9);
  DeviceSpec gpu = testing::preset_cluster("dgx-h100-ndr", 8).node.accelerator();
  ASSERT_GT(gpu.peak(DType::kBf16), 0);
  set_precision_peaks(gpu, 50e12, {{Precision::kBf16, 700e12}, {Precision::kFp16, 380e12}});
  EXPECT_EQ(gpu.peak(DType::kFp32), 50e12);
  EXPECT_EQ(gpu.peak(DType::kBf16), 700e12);
  EXPECT_EQ(gpu.peak(DType::kFp16), 380e12);
  EXPECT_EQ(gpu.peak(DType::kTf32), 380e12);
  // Before: the fp32 rate for all of them.
  set_precision_peaks(gpu, 50e12, {});
  EXPECT_EQ(gpu.peak(DType::kBf16), 50e12);
  // The CPU backend has no other precisions to measure; the CUDA backend's are bf16 and fp16.
  EXPECT_TRUE(make_cpu_backend()->gemm_precisions().empty());
}

TEST(Calibration, AllReduceSplitsWhereTheProtocolChanges) {
  auto pts = all_reduce_points(0.3e-6, 2.5e-6, 8192);
  const LineFit f = fit_protocols(pts, "all_reduce");
  EXPECT_DOUBLE_EQ(f.small_below, 8192);
  EXPECT_NEAR(f.small_intercept_s, 0.6e-6, 1e-12);
  EXPECT_NEAR(f.intercept_s, 5e-6, 1e-12);
  EXPECT_NEAR(1 / f.slope, 9e9, 1e3);
  EXPECT_LT(f.rms_rel_error, 1e-9);
  for (const auto& p : pts) EXPECT_NEAR(p.fitted_s, p.seconds, 1e-9 * p.seconds);

  auto line = all_reduce_points(2.5e-6, 2.5e-6, 0);
  EXPECT_EQ(fit_protocols(line, "all_reduce").small_below, 0.0);
  auto slow = all_reduce_points(2.5e-6, 2.5e-6, 0, 8 * 1048576.0);
  EXPECT_EQ(fit_protocols(slow, "all_reduce").small_below, 0.0);
}

// `run --predict` on a profile that `calibrate` wrote times the calibration's peak GEMM before and
// after the run and reports it against the calibration's (notes.peak_gemm); other cluster
// arguments (a preset, a file without the note or with a broken one) get no such line.
TEST(Calibration, RunComparesTheMachinesSpeedWithTheCalibrations) {
  const auto dir = test_temp_path("foresight-speed-check");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  nlohmann::json cluster = cluster_to_json(testing::preset_cluster("cpu-local", 1));
  const std::string plain = (dir / "plain.json").string(), noted = (dir / "noted.json").string(),
                    broken = (dir / "broken.json").string();
  std::ofstream(plain) << cluster.dump();
  cluster["notes"]["peak_gemm"] = {{"n", 64},
                                   {"backend", "cpu"},
                                   {"flops_per_s", 1e9},
                                   {"small", {{"shape", {32, 64, 128}}, {"seconds", 2e-6}}}};
  std::ofstream(noted) << cluster.dump();
  cluster["notes"]["peak_gemm"]["n"] = "64";
  std::ofstream(broken) << cluster.dump();
  EXPECT_FALSE(calibrated_peak("cpu-local"));
  EXPECT_FALSE(calibrated_peak(plain));
  EXPECT_FALSE(calibrated_peak(broken));
  const auto peak = calibrated_peak(noted);
  ASSERT_TRUE(peak);
  EXPECT_EQ(peak->n, 64);
  EXPECT_EQ(peak->backend, "cpu");
  EXPECT_EQ(peak->flops_per_s, 1e9);
  EXPECT_EQ(peak->small, (std::array<int, 3>{32, 64, 128}));
  EXPECT_EQ(peak->small_s, 2e-6);
  EXPECT_GT(peak_gemm_seconds(*make_cpu_backend(), 64), 0);
  EXPECT_GT(small_gemm_seconds(*make_cpu_backend(), {32, 64, 128}), 0);
  {  // a small GEMM note that is not one is left out, the peak kept
    nlohmann::json odd = cluster;
    odd["notes"]["peak_gemm"]["n"] = 64;
    odd["notes"]["peak_gemm"]["small"]["shape"] = {32, -1, 128};
    const std::string odd_path = (dir / "odd.json").string();
    std::ofstream(odd_path) << odd.dump();
    const auto p2 = calibrated_peak(odd_path);
    ASSERT_TRUE(p2);
    EXPECT_EQ(p2->small_s, 0);
  }
  const std::string summary = (dir / "s.json").string();
  for (const std::string& profile : {plain, noted}) {
    ASSERT_EQ(run_shell(std::string(FORESIGHT_BINARY) + " run --model tiny --steps 2 --predict --cluster " +
                        profile + " --summary " + summary + " > /dev/null"),
              0);
    const auto c = nlohmann::json::parse(std::ifstream(summary))["comparison"];
    ASSERT_TRUE(c.is_object());
    if (profile == plain) {
      EXPECT_FALSE(c.contains("gemm_speed_vs_calibration_pct"));
      EXPECT_FALSE(c.contains("small_gemm_speed_vs_calibration_pct"));
      continue;
    }
    ASSERT_TRUE(c.contains("gemm_speed_vs_calibration_pct")) << c.dump();
    const auto pct = c["gemm_speed_vs_calibration_pct"];
    ASSERT_EQ(pct.size(), 2u);
    for (const auto& v : pct) EXPECT_GT(v.get<double>(), -100.0);  // a rate was measured
    ASSERT_TRUE(c.contains("small_gemm_speed_vs_calibration_pct")) << c.dump();
    EXPECT_EQ(c["small_gemm_speed_vs_calibration_pct"].size(), 2u);
    EXPECT_EQ(c["speed_adjusted"], false);
  }
  // --speed-adjust: the prediction at the speed measured before the run. This note says 10
  // MFLOP/s, far below any machine's 64^3 GEMM (sanitizers included), so the adjusted step is
  // several times shorter. A profile without the note is an input error.
  const std::string slow = (dir / "slow.json").string();
  cluster["notes"]["peak_gemm"] = {{"n", 64}, {"backend", "cpu"}, {"flops_per_s", 1e7}};
  std::ofstream(slow) << cluster.dump();
  const auto predicted = [&](const std::string& extra) {
    EXPECT_EQ(run_shell(std::string(FORESIGHT_BINARY) + " run --model tiny --steps 2 --predict --cluster " +
                        slow + " --summary " + summary + " " + extra + " > /dev/null"),
              0);
    return nlohmann::json::parse(std::ifstream(summary));
  };
  const auto as_profiled = predicted(""), adjusted = predicted("--speed-adjust");
  EXPECT_EQ(adjusted["comparison"]["speed_adjusted"], true);
  EXPECT_LT(adjusted["predicted_step_s"].get<double>(), 0.2 * as_profiled["predicted_step_s"].get<double>());
  EXPECT_EQ(run_shell(std::string(FORESIGHT_BINARY) +
                      " run --model tiny --steps 2 --predict --speed-adjust --cluster " + plain +
                      " > /dev/null 2>&1"),
            2);
}

// Each other collective gets its own rates from its own points, read as the model counts them (an
// all-gather over 4 ranks: (n-1)/n S/B and a ring's 3 latency steps; a send/recv: S/B and one), split where
// the link's protocols split; the profile writes them under the fabric with their sources, and
// they read back.
TEST(Calibration, CollectivesGetTheirOwnRates) {
  Calibration c;
  c.backend = "cpu";
  c.ranks = 4;
  for (double S = 1024; S <= 16 * 1048576.0; S *= 2) {
    c.points.push_back({"all_gather", "", S, 3 * (S < 8192 ? 0.4e-6 : 1.5e-6) + 0.75 * S / 20e9, 0});
    c.points.push_back({"send_recv", "", S, 3e-6 + S / 8e9, 0});
  }
  c.points.push_back({"reduce_scatter", "", 1024, 1e-6, 0});  // too few points: no rates
  LineFit ag_line, sr_line, rs_line;
  const CollectiveRates ag =
      fit_collective_rates(c.points, "all_gather", CollectiveOp::kAllGather, 4, 8192, ag_line);
  EXPECT_NEAR(ag.bandwidth, 20e9, 1e3);
  EXPECT_NEAR(ag.latency_s, 1.5e-6, 1e-12);
  EXPECT_NEAR(ag.small_message_latency_s, 0.4e-6, 1e-12);
  EXPECT_LT(ag_line.rms_rel_error, 1e-9);
  const CollectiveRates sr =
      fit_collective_rates(c.points, "send_recv", CollectiveOp::kSendRecv, 2, 0, sr_line);
  EXPECT_NEAR(sr.bandwidth, 8e9, 1e3);
  EXPECT_NEAR(sr.latency_s, 3e-6, 1e-12);
  EXPECT_EQ(sr.small_message_latency_s, 0);  // no split on the link: the one latency
  // A send/recv whose protocol changes at 4 KiB on a link split at 8 KiB: its own split.
  std::vector<Measurement> p2p;
  for (double S = 1024; S <= 16 * 1048576.0; S *= 2)
    p2p.push_back({"p2p", "", S, (S < 4096 ? 0.7e-6 : 2.5e-6) + S / 9e9, 0});
  LineFit p2p_line;
  const CollectiveRates own = fit_collective_rates(p2p, "p2p", CollectiveOp::kSendRecv, 2, 8192, p2p_line);
  EXPECT_EQ(own.small_message_bytes, 4096);
  EXPECT_NEAR(own.small_message_latency_s, 0.7e-6, 1e-12);
  EXPECT_NEAR(own.latency_s, 2.5e-6, 1e-12);
  EXPECT_NEAR(own.bandwidth, 9e9, 1e3);
  for (const Measurement& m : c.points) {
    if (m.kind == "reduce_scatter") continue;
    EXPECT_NEAR(m.fitted_s, m.seconds, 1e-9 * m.seconds) << m.kind << " " << m.work;
  }
  EXPECT_TRUE(
      fit_collective_rates(c.points, "reduce_scatter", CollectiveOp::kReduceScatter, 4, 0, rs_line).empty());
  // The profile.
  const ClusterSpec base = testing::preset_cluster("cpu-local", 2);
  c.device = base.node.accelerator();
  c.fabric = base.node.fabric;
  c.fabric_measured = true;
  c.fabric.bandwidth = 6e9;
  c.fabric.latency_s = 2e-6;
  c.fabric.small_message_bytes = 8192;
  c.fabric.small_message_latency_s = 0.5e-6;
  c.fabric.all_gather = ag;
  c.all_gather = ag_line;
  c.fabric.reduce_scatter.bandwidth = 2e9;
  c.fabric.reduce_scatter.cold_bandwidth = 0.8e9;
  const nlohmann::json j = calibrated_cluster_json(c, base, "test", "a test");
  const nlohmann::json& sources = j["node"]["sources"];
  EXPECT_TRUE(sources.contains("fabric.collectives.all_gather")) << sources.dump();
  EXPECT_TRUE(sources.contains("fabric.collectives.reduce_scatter.cold_bandwidth")) << sources.dump();
  EXPECT_FALSE(j["node"]["fabric"]["collectives"].contains("send_recv"));
  auto back = cluster_from_json(j, "profile.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  const LinkSpec& f = back->node.fabric;
  EXPECT_NEAR(f.all_gather.bandwidth, 20e9, 20e9 * 1e-5);
  EXPECT_NEAR(f.all_gather.small_message_latency_s, 0.4e-6, 1e-11);
  EXPECT_NEAR(f.reduce_scatter.cold_bandwidth, 0.8e9, 1e3);
  EXPECT_TRUE(f.send_recv.empty());
  EXPECT_TRUE(f.measured.empty());  // none measured here
}

// The measured times (LinkSpec::measured): each collective's sizes in order, the faster of a size
// measured twice, none from the cold points or with one size; written into the profile with
// their source, read back as they were.
TEST(Calibration, CollectivesKeepTheirMeasuredTimes) {
  std::vector<Measurement> pts;
  for (double S : {4096.0, 1024.0, 2048.0}) pts.push_back({"all_reduce", "", S, S * 1e-9, 0});
  pts.push_back({"all_reduce", "", 2048, 3e-6, 0});  // measured again, slower: the first stands
  pts.push_back({"all_reduce_cold", "", 8192, 1e-3, 0});
  pts.push_back({"reduce_scatter", "", 1024, 1e-6, 0});      // one size: none
  pts.push_back({"all_reduce_in_step", "", 4096, 5e-6, 0});  // as a step calls it: that time, slower or not
  for (double S = 1024; S <= 65536; S *= 4) pts.push_back({"send_recv", "", S, 1e-6 + S / 1e10, 0});
  const MeasuredTimes m = measured_collective_times(pts, 2);
  EXPECT_EQ(m.ranks, 2);
  ASSERT_EQ(m.all_reduce.size(), 3u);
  EXPECT_EQ(m.all_reduce[0].bytes, 1024);
  EXPECT_DOUBLE_EQ(m.all_reduce[1].seconds, 2048e-9);
  EXPECT_EQ(m.all_reduce[2].bytes, 4096);
  EXPECT_DOUBLE_EQ(m.all_reduce[2].seconds, 5e-6);
  EXPECT_TRUE(m.reduce_scatter.empty());
  EXPECT_TRUE(m.all_gather.empty());
  EXPECT_EQ(m.send_recv.size(), 4u);
  // Interpolation: exact for a power law, off by the middle point's own deviation otherwise.
  EXPECT_NEAR(interpolation_rms_error({{1024, 1e-6}, {2048, 2e-6}, {4096, 4e-6}}), 0.0, 1e-12);
  EXPECT_NEAR(interpolation_rms_error({{1024, 1e-6}, {2048, 4e-6}, {4096, 4e-6}}), 0.5, 1e-12);
  EXPECT_EQ(interpolation_rms_error({{1024, 1e-6}, {2048, 4e-6}}), 0.0);
  const std::string summary = measured_times_summary(m);
  EXPECT_EQ(summary.rfind("all_reduce 1 KiB-4 KiB (", 0), 0u) << summary;
  EXPECT_NE(summary.find("%), send_recv 1 KiB-64 KiB ("), std::string::npos) << summary;

  Calibration c;
  const ClusterSpec base = testing::preset_cluster("cpu-local", 2);
  c.device = base.node.accelerator();
  c.fabric = base.node.fabric;
  c.fabric_measured = true;
  c.ranks = 2;
  c.fabric.bandwidth = 6e9;
  c.fabric.latency_s = 2e-6;
  c.fabric.measured = m;
  const nlohmann::json j = calibrated_cluster_json(c, base, "test", "a test");
  EXPECT_TRUE(j["node"]["sources"].contains("fabric.measured")) << j["node"]["sources"].dump();
  auto back = cluster_from_json(j, "profile.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  const MeasuredTimes& b = back->node.fabric.measured;
  ASSERT_EQ(b.all_reduce.size(), 3u);
  ASSERT_EQ(b.send_recv.size(), 4u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(b.all_reduce[i].bytes, m.all_reduce[i].bytes);
    EXPECT_NEAR(b.all_reduce[i].seconds, m.all_reduce[i].seconds, 1e-5 * m.all_reduce[i].seconds);
  }
  // A calibration on one rank measures no fabric: the base's times, if any, stay as they were.
  c.fabric_measured = false;
  EXPECT_FALSE(calibrated_cluster_json(c, base, "test", "a test")["node"]["fabric"].contains("measured"));
}

}  // namespace
}  // namespace foresight::runtime

// Under mpirun (localhost, up to 4 ranks oversubscribed): every layout and schedule against the
// serial run, compressed data parallelism (loss, bytes, replicas), resumed runs continuing
// bit-identically, ranks agreeing on a checkpoint set, a dying rank ending the job.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
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

#include "tests/runtime/runtime_test_util.h"

#ifdef FORESIGHT_MPIEXEC
namespace foresight::runtime {
namespace {

struct Layout {
  const char* args;
  int ranks;
};

class ParallelMatchesSerial : public ::testing::TestWithParam<Layout> {};

TEST_P(ParallelMatchesSerial, GradientsLossAndUpdates) {
  const Layout& l = GetParam();
  const std::string cmd = mpirun(l.ranks) + FORESIGHT_PARALLEL_CHECK + " model=" + kTiny4 + " " + l.args;
  EXPECT_EQ(run_shell(cmd + " > /dev/null"), 0) << cmd;
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ParallelMatchesSerial,
    ::testing::Values(Layout{"tp=2", 2}, Layout{"pp=2", 2}, Layout{"dp=2", 2}, Layout{"tp=2 pp=2", 4},
                      Layout{"pp=2 dp=2", 4}, Layout{"pp=2 schedule=gpipe", 2},
                      Layout{"pp=2 schedule=1f1b gb=6", 2}, Layout{"pp=2 vp=2 schedule=interleaved-1f1b", 2},
                      Layout{"tp=2 pp=2 vp=2 schedule=interleaved-1f1b", 4}, Layout{"dp=2 zero=1", 2},
                      Layout{"pp=2 dp=2 zero=1 overlap_grad=1", 4}, Layout{"tp=2 recompute=full", 2},
                      Layout{"pp=2 recompute=selective flash=0", 2},
                      Layout{"tp=2 dp=2 mb=2 gb=8 overlap_tp=1", 4}, Layout{"tp=2 precision=fp16", 2},
                      Layout{"tp=2 sp=1", 2}, Layout{"tp=2 sp=1 pp=2 recompute=full", 4},
                      // TP overlap's pairs (TpOverlap): collectives added beside their GEMMs.
                      Layout{"tp=2 sp=1 overlap_tp=1 recompute=full", 2},
                      Layout{"tp=2 sp=1 dp=2 zero=1 overlap_grad=1", 4},
                      Layout{"tp=2 sp=1 recompute=full recompute_method=uniform recompute_layers=3", 2},
                      Layout{"pp=2 recompute=full recompute_layers=1", 2},
                      // The trainer's device-memory paths (a backend whose tensors are not Buffers).
                      Layout{"tp=2 sp=1 pp=2 recompute=full memory=separate", 4},
                      Layout{"pp=2 dp=2 zero=1 overlap_grad=1 memory=separate", 4}));

// After `calibrate` under mpirun, the profile holds what the plans need (the fitted optimizer
// rate, rank 0's memory rates alone, each collective's own rates and measured times, with their
// sources), and `run --predict` on it predicts and measures the tiny and small models under the
// five layouts, and the small model's two layouts whose collectives are not all-reduces (ZeRO-1;
// tp=2 with sequence parallelism). How close the predictions are is a timing, not a test:
// bench/predict_vs_measured.py --collectives reports each plan's error (median of three runs).
TEST(RuntimeMpi, CalibratedProfilePredictsEveryLayout) {
  const auto dir = test_temp_path("foresight-predict-loop");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string profile = (dir / "local.json").string();
  // One measurement, no re-measuring when the machine's speed drifts (--steady-retries 0): this
  // checks what the profile holds, not how steady its rates are (after_attempt's own test covers
  // the retries), and on a loaded CI machine, under ASan, each retry re-measured every kernel.
  ASSERT_EQ(run_shell(mpirun(2) + FORESIGHT_BINARY + " calibrate --steady-retries 0 --out " + profile +
                      " > /dev/null"),
            0)
      << "calibrate failed";
  {  // the fitted optimizer rate and the collectives' own rates are in the profile, with their sources
    const auto node = nlohmann::json::parse(std::ifstream(profile))["node"];
    const auto& dev = node["devices"][0]["device"];
    EXPECT_TRUE(dev["sources"].contains("efficiency.optimizer")) << dev.dump();
    // under mpirun: rank 0's memory rates alone too, for the serial plans
    EXPECT_EQ(dev["shared_memory"]["shared_by"], 2) << dev.dump();
    EXPECT_TRUE(dev["sources"].contains("shared_memory")) << dev["sources"].dump();
    for (const char* c : {"all_gather", "reduce_scatter", "send_recv"}) {
      EXPECT_TRUE(node["fabric"]["collectives"].contains(c)) << node["fabric"].dump();
      EXPECT_TRUE(node["sources"].contains(std::string("fabric.collectives.") + c)) << node["sources"].dump();
    }
    // and the measured times, every collective from 1 KiB, for plans of two ranks
    EXPECT_EQ(node["fabric"]["measured"]["ranks"], 2) << node["fabric"].dump();
    for (const char* c : {"all_reduce", "all_gather", "reduce_scatter", "send_recv"})
      EXPECT_EQ(node["fabric"]["measured"][c][0]["size"], "1 KiB") << c;
    EXPECT_TRUE(node["sources"].contains("fabric.measured")) << node["sources"].dump();
  }
  struct Plan {
    const char* model;
    const char* args;
    int ranks;
  };
  const Plan plans[] = {{"tiny", "", 1},
                        {"tiny", "--dp 2", 2},
                        {"tiny", "--tp 2", 2},
                        {"tiny", "--pp 2 --schedule 1f1b", 2},
                        {"tiny", "--pp 2 --schedule gpipe", 2},
                        {"small", "", 1},
                        {"small", "--dp 2", 2},
                        {"small", "--tp 2", 2},
                        {"small", "--pp 2 --schedule 1f1b", 2},
                        {"small", "--pp 2 --schedule gpipe", 2},
                        {"small", "--dp 2 --zero 1", 2},
                        {"small", "--tp 2 --sp true", 2}};
  const std::string summary = (dir / "s.json").string();
  for (const Plan& p : plans) {
    const std::string cmd = (p.ranks > 1 ? mpirun(p.ranks) : std::string()) + FORESIGHT_BINARY +
                            " run --model " + p.model + " --cluster " + profile +
                            " --gb 8 --steps 3 --predict --summary " + summary + " " + p.args +
                            " > /dev/null";
    ASSERT_EQ(run_shell(cmd), 0) << cmd;
    const auto s = nlohmann::json::parse(std::ifstream(summary));
    const auto& c = s["comparison"];
    ASSERT_TRUE(c.is_object()) << cmd << "\n" << s.dump();
    EXPECT_GT(c["predicted_step_s"].get<double>(), 0) << cmd;
    EXPECT_GT(c["measured_step_s"].get<double>(), 0) << cmd;
    EXPECT_TRUE(std::isfinite(c["step_time_error_pct"].get<double>())) << cmd;
  }
  std::filesystem::remove_all(dir);
}

TEST(RuntimeMpi, ResumedRunContinuesBitIdentically) {
  const auto dir = test_temp_path("foresight-mpi-ckpt");
  std::filesystem::remove_all(dir);
  const std::string base = mpirun(2) + FORESIGHT_BINARY + " run --model " + kTiny4 + " --pp 2 --gb 4 ";
  const std::string a = (dir / "a.json").string(), b = (dir / "b.json").string();
  std::filesystem::create_directories(dir);
  ASSERT_EQ(run_shell(base + "--steps 4 --summary " + a + " > /dev/null"), 0);
  ASSERT_EQ(run_shell(base + "--steps 2 --checkpoint-dir " + (dir / "ck").string() + " > /dev/null"), 0);
  ASSERT_EQ(run_shell(base + "--steps 4 --resume --checkpoint-dir " + (dir / "ck").string() + " --summary " +
                      b + " > /dev/null"),
            0);
  auto steps = [](const std::string& f) { return nlohmann::json::parse(std::ifstream(f))["steps"]; };
  const auto sa = steps(a), sb = steps(b);
  ASSERT_EQ(sb.size(), 2u);
  EXPECT_EQ(sb[0]["loss"].get<double>(), sa[2]["loss"].get<double>());  // bit-identical doubles
  EXPECT_EQ(sb[1]["loss"].get<double>(), sa[3]["loss"].get<double>());
  std::filesystem::remove_all(dir);
}

// Compressed data parallelism: the replicas stay bit-identical (DP ranks, and the TP-replicated
// tensors across TP ranks), and int8's reduced gradients match the serial ones within its rounding.
class CompressedReplicas : public ::testing::TestWithParam<Layout> {};

TEST_P(CompressedReplicas, StayBitIdentical) {
  const Layout& l = GetParam();
  const std::string cmd = mpirun(l.ranks) + FORESIGHT_PARALLEL_CHECK + " model=" + kTiny4 + " " + l.args;
  EXPECT_EQ(run_shell(cmd + " > /dev/null"), 0) << cmd;
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, CompressedReplicas,
    ::testing::Values(Layout{"dp=2 compression=int8 steps=3", 2}, Layout{"dp=2 compression=topk steps=3", 2},
                      Layout{"dp=2 zero=1 compression=int8 steps=3", 2},
                      Layout{"tp=2 dp=2 compression=topk steps=3", 4},
                      Layout{"tp=2 dp=2 sp=1 zero=1 overlap_grad=1 compression=int8 steps=3", 4},
                      Layout{"pp=2 dp=2 overlap_grad=1 compression=topk steps=3", 4}));

// `foresight run` with dp = 2 and a compression scheme for `steps` steps: its summary.
nlohmann::json compressed_run(const std::string& compression, int steps, const std::string& name) {
  const auto dir = test_temp_path("foresight-mpi-compression");
  std::filesystem::create_directories(dir);
  const std::string summary = (dir / (name + ".json")).string();
  const std::string cmd = mpirun(2) + FORESIGHT_BINARY + " run --model " + kTiny4 +
                          " --dp 2 --gb 8 --lr 3e-3 --steps " + std::to_string(steps) + " " + compression +
                          " --summary " + summary + " > /dev/null";
  EXPECT_EQ(run_shell(cmd), 0) << cmd;
  std::ifstream f(summary);
  return f ? nlohmann::json::parse(f) : nlohmann::json::object();
}

double loss_at(const nlohmann::json& s, int step) { return s["steps"][step - 1]["loss"].get<double>(); }

TEST(RuntimeMpi, Int8DataParallelTracksTheUncompressedRun) {
  const auto dense = compressed_run("", 30, "dense");
  const auto int8 = compressed_run("--grad-compression int8", 30, "int8");
  ASSERT_EQ(dense["steps"].size(), 30u);
  ASSERT_EQ(int8["steps"].size(), 30u);
  // Step 1 computes on the same parameters: the same loss to the last bit.
  EXPECT_EQ(loss_at(int8, 1), loss_at(dense, 1));
  // int8 rounds each gradient by at most 1/254 of its block's largest. Measured (tiny4, this
  // build): the losses differ by 7e-4 at step 5 and 1.4e-3 at step 30, while the run itself falls
  // 2 nats; the bounds leave about 7x and 14x of that, far below what a lost update costs.
  EXPECT_NEAR(loss_at(int8, 5), loss_at(dense, 5), 0.005);
  EXPECT_NEAR(loss_at(int8, 30), loss_at(dense, 30), 0.02);
  EXPECT_LT(loss_at(int8, 30), loss_at(int8, 1) - 1.0);
  // Bytes of the gradient collectives: the dense all-reduce moves 4 bytes per element, int8 one
  // byte and a 4-byte scale per (at most) 256 elements of a tensor -- a ratio just under 4.
  const double dense_bytes = dense["steps"][0]["dp_grad_bytes"].get<double>();
  const double int8_bytes = int8["steps"][0]["dp_grad_bytes"].get<double>();
  EXPECT_GT(dense_bytes, 0);
  EXPECT_GT(dense_bytes / int8_bytes, 3.8);
  EXPECT_LT(dense_bytes / int8_bytes, 4.0);
}

TEST(RuntimeMpi, TopKDataParallelLossFalls) {
  const auto dense = compressed_run("", 1, "dense1");
  const auto topk = compressed_run("--grad-compression topk --compression-topk 0.1", 30, "topk");
  ASSERT_EQ(topk["steps"].size(), 30u);
  EXPECT_EQ(loss_at(topk, 1), loss_at(dense, 1));
  EXPECT_LT(loss_at(topk, 30), loss_at(topk, 1) - 0.5);
  // Each of 2 ranks sends 10% of the elements (rounded up per tensor) as 4-byte index + 4-byte
  // value, all-gathered: 2 x 0.1 x 8 = 1.6 bytes per element against the dense 4, a ratio of 0.4.
  const double ratio =
      topk["steps"][0]["dp_grad_bytes"].get<double>() / dense["steps"][0]["dp_grad_bytes"].get<double>();
  EXPECT_GT(ratio, 0.4);
  EXPECT_LT(ratio, 0.42);
}

TEST(RuntimeMpi, CompressedTracesAlignOpByOp) {
  // int8 with per-layer (overlapped) reductions: grad_compress, the collective and the deferred
  // grad_decompress of every layer, and the step-end ones, all carry the simulator's op ids.
  const auto dir = test_temp_path("foresight-mpi-compressed-trace");
  std::filesystem::create_directories(dir);
  const std::string pred = (dir / "pred.json").string(), meas = (dir / "meas.json").string(),
                    cmp = (dir / "cmp.json").string();
  const std::string args = " --model " + kTiny4 +
                           " --cluster cpu-local --gpus 2 --dp 2 --gb 4 --precision fp32" +
                           " --grad-compression int8 --overlap-grad-reduce true";
  const std::string bin = FORESIGHT_BINARY;
  ASSERT_EQ(run_shell(bin + " simulate" + args + " --full --trace " + pred + " > /dev/null"), 0);
  ASSERT_EQ(run_shell(mpirun(2) + bin + " run" + args + " --steps 2 --trace " + meas + " > /dev/null"), 0);
  ASSERT_EQ(run_shell(bin + " compare " + pred + " " + meas + " --out " + cmp + " > /dev/null"), 0);
  const auto report = nlohmann::json::parse(std::ifstream(cmp));
  auto m = load_model_file(kTiny4);
  auto c = load_cluster("cpu-local");
  ASSERT_TRUE(resize_cluster(*c, 2, "gpus"));
  Plan p = plan(4);
  p.dp = 2;
  p.grad_compression = GradCompression::kInt8;
  p.overlap_grad_reduce = true;
  auto w = lower(*m, *c, p);
  ASSERT_TRUE(w) << w.error().message();
  int compress = 0, decompress = 0;
  const OpGraph& g = w->stages[0].graph();
  for (auto v : boost::make_iterator_range(boost::vertices(g))) {
    compress += std::string_view(g[v].name) == "grad_compress";
    decompress += std::string_view(g[v].name) == "grad_decompress";
  }
  EXPECT_EQ(compress, 5);  // four layers and the embedding/head region
  EXPECT_EQ(decompress, 5);
  EXPECT_EQ(report["matched_ops"].get<std::size_t>(), 2 * w->op_count());  // both ranks run stage 0's graph
  std::filesystem::remove_all(dir);
}

TEST(RuntimeMpi, RanksTracesShareOneClock) {
  // Each rank times its ops from its own start of the step; the trace puts them on rank 0's clock
  // by the collectives both ran (align_rank_clocks), and says how in its metadata.
  const auto dir = test_temp_path("foresight-mpi-clocks");
  std::filesystem::create_directories(dir);
  const std::string meas = (dir / "meas.json").string();
  const std::string bin = FORESIGHT_BINARY;
  ASSERT_EQ(run_shell(mpirun(2) + bin + " run --model " + kTiny4 +
                      " --cluster cpu-local --gpus 2 --tp 2 --gb 4 --precision fp32 --steps 2 --trace " +
                      meas + " > /dev/null"),
            0);
  const auto trace = nlohmann::json::parse(std::ifstream(meas));
  const auto& clocks = trace["metadata"]["clocks"];
  ASSERT_EQ(clocks.size(), 2u);
  EXPECT_EQ(clocks[0]["by"], "reference");
  EXPECT_EQ(clocks[1]["by"], "collectives");
  std::map<std::string, std::array<double, 2>> ends;  // collective id (rank prefix dropped) -> ends
  std::map<std::string, int> seen;
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("ph", "") != "X" || e.value("cat", "") != "collective") continue;
    const std::string id = e["args"]["id"].get<std::string>();
    if (id.find("tp_") == std::string::npos) continue;  // the TP group's (dp 1: a gradient reduce of one)
    const int rank = e["pid"].get<int>();
    const std::string key = id.substr(id.find('/') + 1);
    ends[key][static_cast<std::size_t>(rank)] = (e["ts"].get<double>() + e["dur"].get<double>()) * 1e-6;
    ++seen[key];
  }
  std::vector<double> d;
  for (const auto& [key, e] : ends)
    if (seen[key] == 2) d.push_back(e[0] - e[1]);
  ASSERT_FALSE(d.empty());
  EXPECT_EQ(clocks[1]["pairs"].get<std::size_t>(), d.size());
  // The offset is the median of these differences: on one clock, the median is 0 (to the trace's
  // microsecond rounding).
  std::nth_element(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(d.size() / 2), d.end());
  EXPECT_NEAR(d[d.size() / 2], 0.0, 2e-6);
  std::filesystem::remove_all(dir);
}

TEST(RuntimeMpi, TopKResumedRunContinuesBitIdentically) {
  const auto dir = test_temp_path("foresight-mpi-ckpt-topk");
  std::filesystem::remove_all(dir);
  const std::string base = mpirun(2) + FORESIGHT_BINARY + " run --model " + kTiny4 +
                           " --dp 2 --gb 4 --grad-compression topk --compression-topk 0.1 ";
  const std::string a = (dir / "a.json").string(), b = (dir / "b.json").string();
  std::filesystem::create_directories(dir);
  ASSERT_EQ(run_shell(base + "--steps 5 --summary " + a + " > /dev/null"), 0);
  ASSERT_EQ(run_shell(base + "--steps 3 --checkpoint-dir " + (dir / "ck").string() + " > /dev/null"), 0);
  ASSERT_EQ(run_shell(base + "--steps 5 --resume --checkpoint-dir " + (dir / "ck").string() + " --summary " +
                      b + " > /dev/null"),
            0);
  auto steps = [](const std::string& f) { return nlohmann::json::parse(std::ifstream(f))["steps"]; };
  const auto sa = steps(a), sb = steps(b);
  ASSERT_EQ(sb.size(), 2u);
  EXPECT_EQ(sb[0]["loss"].get<double>(), sa[3]["loss"].get<double>());  // bit-identical doubles
  EXPECT_EQ(sb[1]["loss"].get<double>(), sa[4]["loss"].get<double>());
  std::filesystem::remove_all(dir);
}

std::string file_text(const std::string& f) {
  std::ifstream in(f);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Two ranks of a pipeline: rank 1's file of the newest set is gone while rank 0's is intact, so
// rank 0 alone could resume from step 3. Both must take step 2 (the newest set every rank can
// load), say why step 3 was passed over, and continue bit-identically.
TEST(RuntimeMpi, RanksAgreeOnTheNewestSetEveryRankCanLoad) {
  const auto dir = test_temp_path("foresight-mpi-ckpt-agree");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string base = mpirun(2) + FORESIGHT_BINARY + " run --model " + kTiny4 + " --pp 2 --gb 4 ";
  const std::string ck = (dir / "ck").string(), a = (dir / "a.json").string(), b = (dir / "b.json").string();
  const std::string out = (dir / "out.txt").string(), err = (dir / "err.txt").string();
  ASSERT_EQ(run_shell(base + "--steps 4 --summary " + a + " > /dev/null"), 0);
  ASSERT_EQ(run_shell(base + "--steps 2 --checkpoint-dir " + ck + " > /dev/null"), 0);
  std::filesystem::copy(dir / "ck" / "step-00000002", dir / "step2");
  ASSERT_EQ(run_shell(base + "--steps 3 --resume --checkpoint-dir " + ck + " > /dev/null"), 0);
  EXPECT_FALSE(std::filesystem::exists(dir / "ck" / "step-00000002"));  // superseded by step 3's
  std::filesystem::copy(dir / "step2", dir / "ck" / "step-00000002");
  std::filesystem::remove(dir / "ck" / "step-00000003" / "rank-00001.ckpt");
  ASSERT_EQ(run_shell("timeout 120 env " + base + "--steps 4 --resume --checkpoint-dir " + ck +
                      " --summary " + b + " > " + out + " 2> " + err),
            0)
      << file_text(err);
  const std::string text = file_text(out);
  EXPECT_NE(text.find("checkpoint set skipped: " + ck + "/step-00000003 (step 3): incomplete: rank 1: " + ck +
                      "/step-00000003/rank-00001.ckpt: missing"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("resumed from " + ck + "/step-00000002 at step 2"), std::string::npos) << text;
  auto steps = [](const std::string& f) { return nlohmann::json::parse(std::ifstream(f)); };
  const auto sa = steps(a)["steps"], jb = steps(b), sb = jb["steps"];
  EXPECT_EQ(jb["resumed_from_step"], 2);
  ASSERT_EQ(sb.size(), 2u);
  EXPECT_EQ(sb[0]["loss"].get<double>(), sa[2]["loss"].get<double>());  // bit-identical doubles
  EXPECT_EQ(sb[1]["loss"].get<double>(), sa[3]["loss"].get<double>());

  // A rank whose file cannot be written: no rank goes on, no manifest is written for the step,
  // and the previous set stays the one to resume from.
  std::filesystem::remove_all(dir / "ck");
  ASSERT_EQ(run_shell(base + "--steps 1 --checkpoint-dir " + ck + " > /dev/null"), 0);
  std::filesystem::create_directories(dir / "ck" / "step-00000002" /
                                      "rank-00001.ckpt");  // a folder in the way
  const int rc =
      run_shell("timeout 120 env " + base + "--steps 4 --resume --checkpoint-every 1 --checkpoint-dir " + ck +
                " > /dev/null 2> " + err);
  EXPECT_EQ(rc, 1) << file_text(err);
  EXPECT_NE(file_text(err).find("rank 1: " + ck + "/step-00000002/rank-00001.ckpt: is a folder"),
            std::string::npos)
      << file_text(err);
  EXPECT_FALSE(std::filesystem::exists(dir / "ck" / "step-00000002" / "MANIFEST.json"));
  EXPECT_TRUE(std::filesystem::exists(dir / "ck" / "step-00000001" / "MANIFEST.json"));
  std::filesystem::remove_all(dir);
}

TEST(RuntimeMpi, NoCompleteSetOrAnotherLaunchsSetIsAClearErrorNotAHang) {
  const auto dir = test_temp_path("foresight-mpi-ckpt-errors");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string run = std::string(FORESIGHT_BINARY) + " run --model " + kTiny4 + " --gb 4 ";
  const std::string ck = (dir / "ck").string(), err = (dir / "err.txt").string();
  ASSERT_EQ(run_shell(mpirun(2) + run + "--pp 2 --steps 2 --checkpoint-dir " + ck + " > /dev/null"), 0);
  // Another plan on the same rank count, and another rank count.
  EXPECT_EQ(run_shell("timeout 120 env " + mpirun(2) + run + "--dp 2 --steps 3 --resume --checkpoint-dir " +
                      ck + " > /dev/null 2> " + err),
            2);
  EXPECT_NE(file_text(err).find(
                ck + "/step-00000002/MANIFEST.json: /plan: the set was written under a different plan"),
            std::string::npos)
      << file_text(err);
  EXPECT_EQ(run_shell("timeout 120 " + run + "--steps 3 --resume --checkpoint-dir " + ck +
                      " > /dev/null 2> " + err),
            2);
  EXPECT_NE(
      file_text(err).find(
          ck + "/step-00000002/MANIFEST.json: /ranks: the set was written by 2 ranks, this launch has 1"),
      std::string::npos)
      << file_text(err);
  // The only set incomplete: exit 2 naming the folder, on every rank, without a hang.
  std::filesystem::remove(dir / "ck" / "step-00000002" / "MANIFEST.json");
  EXPECT_EQ(run_shell("timeout 120 env " + mpirun(2) + run + "--pp 2 --steps 3 --resume --checkpoint-dir " +
                      ck + " > /dev/null 2> " + err),
            2);
  EXPECT_NE(file_text(err).find(ck + ": no complete checkpoint set to resume from: " + ck +
                                "/step-00000002 (step 2): incomplete: no MANIFEST.json"),
            std::string::npos)
      << file_text(err);
  std::filesystem::remove_all(dir);
}

// SIGKILL of a random rank at a random moment of a run that checkpoints every step, then
// --resume: the losses after it are bit-identical to an uninterrupted run's (bench/checkpoint_kill.sh,
// which runs this 100 times, with a few tries here; its seed from the clock, printed on failure).
TEST(RuntimeMpi, AKilledRankResumesBitIdentically) {
  const auto seed = std::chrono::steady_clock::now().time_since_epoch().count() % 100000;
  const std::string log = test_temp_path("foresight-ckpt-kill.txt").string();
  // Open MPI's own allocations look leaked to LeakSanitizer (as in mpirun() above).
  const std::string cmd =
      "ASAN_OPTIONS=detect_leaks=0 timeout 300 bash " + std::string(FORESIGHT_SOURCE_DIR) +
      "/bench/checkpoint_kill.sh --tries 4 --steps 12 --seed " + std::to_string(seed) + " --foresight " +
      FORESIGHT_BINARY + " --mpirun " + FORESIGHT_MPIEXEC + " --model " + kTiny4 + " > " + log + " 2>&1";
  const int rc = run_shell(cmd);
  const std::string text = file_text(log);
  EXPECT_EQ(rc, 0) << cmd << "\n" << text;
  EXPECT_NE(text.find("4 passed, 0 failed"), std::string::npos) << text;
  EXPECT_NE(text.find("killed rank"), std::string::npos) << "no try killed a rank:\n" << text;
}

TEST(RuntimeMpi, ADyingRankEndsTheJobQuickly) {
  // Rank 1 is killed when step 3 begins; rank 0 then waits on it in a pipeline receive. mpirun
  // must notice and end the job: well within the 60 s limit `timeout` puts on it.
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = run_shell("FORESIGHT_FAULT_INJECT=1:3 timeout 60 env " + mpirun(2) + FORESIGHT_BINARY +
                           " run --model " + kTiny4 + " --pp 2 --gb 4 --steps 1000 > /dev/null 2>&1");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(rc, 0);
  EXPECT_NE(rc, 124) << "the job hung until timeout killed it";
  EXPECT_LT(s, 30.0);
}

TEST(RuntimeMpi, WrongRankCountIsAClearError) {
  const std::string out = test_temp_path("foresight-ranks.txt").string();
  const int rc = run_shell(mpirun(2) + FORESIGHT_BINARY + " run --model " + kTiny4 +
                           " --tp 2 --pp 2 --steps 1 2> " + out);
  EXPECT_EQ(rc, 2);
  std::ifstream f(out);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("were launched"), std::string::npos) << text;
}

}  // namespace
}  // namespace foresight::runtime
#endif

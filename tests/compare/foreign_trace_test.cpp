// PyTorch profiler traces: the kind table, Kineto's GPU format and the CPU-only export (nested
// aten:: ops under "CPU functions"), steps, unmapped names, damaged files, and the comparison
// with a prediction.
#include "sim/compare/foreign_trace.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>

#include "foresight/config.h"
#include "sim/spec/hardware.h"
#include "tests/test_util.h"

#if FORESIGHT_HAVE_SQLITE
#include <sqlite3.h>
#endif

namespace foresight {
namespace {

KindTable table() {
  auto t = default_kind_table();
  EXPECT_TRUE(static_cast<bool>(t)) << (t ? "" : t.error().message());
  return t ? *t : KindTable{};
}

TEST(KindTable, MapsTheNamesTheToolsWrite) {
  const KindTable t = table();
  EXPECT_EQ(t.kind_of("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"),
            "gemm");
  EXPECT_EQ(t.kind_of("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN"), "gemm");
  EXPECT_EQ(t.kind_of("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>"), "attention");
  EXPECT_EQ(t.kind_of("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
            "communication");
  EXPECT_EQ(t.kind_of("void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>>"),
            "optimizer");
  EXPECT_EQ(t.kind_of("Memcpy HtoD (Pageable -> Device)"), "memcpy");
  EXPECT_EQ(t.kind_of("aten::addmm"), "gemm");
  EXPECT_EQ(t.kind_of("aten::bmm"), "attention");  // a transformer's batched matmuls: scores and context
  EXPECT_EQ(t.kind_of("autograd::engine::evaluate_function: MmBackward0"), "gemm");
  EXPECT_EQ(t.kind_of("aten::_softmax"), "attention");
  EXPECT_EQ(t.kind_of("aten::_log_softmax"), "elementwise");
  EXPECT_EQ(t.kind_of("aten::add_"), "elementwise");
  EXPECT_EQ(t.kind_of("ProfilerStep#7"), "step");
  EXPECT_EQ(t.kind_of("Optimizer.step#AdamW.step"), "optimizer");
  EXPECT_EQ(t.kind_of("my_custom_kernel"), "");
  EXPECT_EQ(t.kind_of("layers.3"), "layer");
  EXPECT_EQ(t.kind_of("nn.Module: TransformerBlock_12"), "layer");
  EXPECT_EQ(t.kind_of("nn.Module: LlamaDecoderLayer_7"), "layer");
  EXPECT_EQ(t.kind_of("nn.Module: Linear_0"), "");
  // A user's rules come first.
  auto extra = kind_table_from_json(
      nlohmann::json::parse(R"({"rules": [{"pattern": "my_custom", "kind": "gemm"}]})"), "mine.json");
  ASSERT_TRUE(extra) << extra.error().message();
  EXPECT_EQ(extend_kind_table(t, *extra).kind_of("my_custom_kernel"), "gemm");
  auto bad = kind_table_from_json(nlohmann::json::parse(R"({"rules": [{"pattern": "x", "kind": "gemmm"}]})"),
                                  "mine.json");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("mine.json: /rules/0/kind: \"gemmm\" is not a kind"),
            std::string::npos);
}

// The CPU-only export: nested ops on one thread. A moment goes to the innermost op that maps;
// the step's own time is idle; a user range that maps claims what is inside it.
TEST(ForeignTrace, CpuOpsTakeTheirSelfTime) {
  const std::string text = R"([
    {"name": "ProfilerStep#0", "ph": "X", "ts": 0, "dur": 100, "tid": 1, "pid": "CPU functions", "args": {}},
    {"name": "aten::linear", "ph": "X", "ts": 10, "dur": 40, "tid": 1, "pid": "CPU functions", "args": {}},
    {"name": "aten::t", "ph": "X", "ts": 10, "dur": 5, "tid": 1, "pid": "CPU functions", "args": {}},
    {"name": "aten::addmm", "ph": "X", "ts": 15, "dur": 30, "tid": 1, "pid": "CPU functions", "args": {}},
    {"name": "all_reduce", "ph": "X", "ts": 60, "dur": 20, "tid": 1, "pid": "CPU functions", "args": {}},
    {"name": "aten::cat", "ph": "X", "ts": 60, "dur": 4, "tid": 1, "pid": "CPU functions", "args": {}},
    {"name": "mystery", "ph": "X", "ts": 85, "dur": 5, "tid": 1, "pid": "CPU functions", "args": {}},
    {"name": "ProfilerStep#1", "ph": "X", "ts": 200, "dur": 50, "tid": 1, "pid": "CPU functions", "args": {}},
    {"name": "aten::mm", "ph": "X", "ts": 210, "dur": 30, "tid": 1, "pid": "CPU functions", "args": {}}
  ])";
  auto t = foreign_trace_from_text(text, "cpu.json", table());
  ASSERT_TRUE(t) << t.error().message();
  EXPECT_EQ(t->format, "chrome-cpu");
  EXPECT_FALSE(t->device);
  ASSERT_EQ(t->steps.size(), 2u);
  const ForeignStep& s = t->steps[0];
  EXPECT_DOUBLE_EQ(s.dur_s, 100e-6);
  // linear's own 5 us (40 - 5 - 30) and addmm's 30: gemm; aten::t inside linear maps itself.
  EXPECT_NEAR(s.kind_s.at("gemm"), 35e-6, 1e-12);
  EXPECT_NEAR(s.kind_s.at("elementwise"), 5e-6, 1e-12);
  // The "all_reduce" range claims the cat inside it.
  EXPECT_NEAR(s.kind_s.at("communication"), 20e-6, 1e-12);
  EXPECT_NEAR(s.exposed_communication_s, 20e-6, 1e-12);
  EXPECT_NEAR(s.idle_s, 100e-6 - 40e-6 - 20e-6 - 5e-6, 1e-12);
  ASSERT_EQ(t->unmapped.size(), 1u);
  EXPECT_EQ(t->unmapped[0].first, "mystery");
  EXPECT_NEAR(t->steps[1].kind_s.at("gemm"), 30e-6, 1e-12);
}

// Layer ranges on the host: each outermost range's time to its layer (the number after the
// pattern), a sub-module's range inside it not counted again; a layer claims nothing (the ops
// inside keep their kinds) and its own time between ops is the host's, idle.
TEST(ForeignTrace, LayerRangesOnTheHost) {
  const std::string text = R"([
    {"name": "ProfilerStep#0", "ph": "X", "ts": 0, "dur": 100, "tid": 1, "pid": "CPU functions", "args": {}},
    {"name": "layers.0", "ph": "X", "ts": 5, "dur": 40, "tid": 1, "pid": "CPU functions", "args": {}},
    {"name": "aten::mm", "ph": "X", "ts": 10, "dur": 20, "tid": 1, "pid": "CPU functions", "args": {}},
    {"name": "layers.0.mlp", "ph": "X", "ts": 32, "dur": 10, "tid": 1, "pid": "CPU functions", "args": {}},
    {"name": "aten::add", "ph": "X", "ts": 33, "dur": 8, "tid": 1, "pid": "CPU functions", "args": {}},
    {"name": "layers.1", "ph": "X", "ts": 50, "dur": 30, "tid": 1, "pid": "CPU functions", "args": {}},
    {"name": "aten::mm", "ph": "X", "ts": 52, "dur": 25, "tid": 1, "pid": "CPU functions", "args": {}},
    {"name": "ProfilerStep#1", "ph": "X", "ts": 200, "dur": 50, "tid": 1, "pid": "CPU functions", "args": {}},
    {"name": "layers.0", "ph": "X", "ts": 210, "dur": 12, "tid": 1, "pid": "CPU functions", "args": {}},
    {"name": "layers.1", "ph": "X", "ts": 230, "dur": 14, "tid": 1, "pid": "CPU functions", "args": {}}
  ])";
  auto t = foreign_trace_from_text(text, "cpu.json", table());
  ASSERT_TRUE(t) << t.error().message();
  ASSERT_EQ(t->steps.size(), 2u);
  const ForeignStep& s = t->steps[0];
  ASSERT_EQ(s.layer_s.size(), 2u);
  EXPECT_NEAR(s.layer_s.at(0), 40e-6, 1e-12);
  EXPECT_NEAR(s.layer_s.at(1), 30e-6, 1e-12);
  EXPECT_NEAR(s.kind_s.at("gemm"), 45e-6, 1e-12);
  EXPECT_NEAR(s.kind_s.at("elementwise"), 8e-6, 1e-12);
  EXPECT_NEAR(s.idle_s, 100e-6 - 45e-6 - 8e-6, 1e-12);  // the ranges' own time is the host's
  EXPECT_TRUE(t->unmapped.empty());
  EXPECT_NEAR(t->steps[1].layer_s.at(0), 12e-6, 1e-12);
  EXPECT_NEAR(t->steps[1].layer_s.at(1), 14e-6, 1e-12);
}

// A Kineto GPU trace: the layers are the device-side spans of the host's ranges
// (gpu_user_annotation); the profiler's module ranges on the host do not count there, and they
// take no time from the host's ops.
TEST(ForeignTrace, LayerRangesOnTheDevice) {
  const std::string text = R"J({"traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 100, "tid": 100, "ts": 1000, "dur": 500},
    {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#1", "pid": 0, "tid": 7, "ts": 1090, "dur": 400},
    {"ph": "X", "cat": "python_function", "name": "nn.Module: TransformerBlock_0", "pid": 100, "tid": 100, "ts": 1005, "dur": 30},
    {"ph": "X", "cat": "user_annotation", "name": "layers.0", "pid": 100, "tid": 100, "ts": 1006, "dur": 28},
    {"ph": "X", "cat": "gpu_user_annotation", "name": "layers.0", "pid": 0, "tid": 7, "ts": 1100, "dur": 210},
    {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16", "pid": 0, "tid": 7, "ts": 1100, "dur": 200},
    {"ph": "X", "cat": "gpu_user_annotation", "name": "layers.1", "pid": 0, "tid": 7, "ts": 1320, "dur": 90},
    {"ph": "X", "cat": "kernel", "name": "flash_fwd_kernel", "pid": 0, "tid": 7, "ts": 1320, "dur": 90}
  ]})J";
  auto t = foreign_trace_from_text(text, "gpu.json", table());
  ASSERT_TRUE(t) << t.error().message();
  ASSERT_EQ(t->steps.size(), 1u);  // the step's device-side span is not a second step
  const ForeignStep& s = t->steps[0];
  ASSERT_EQ(s.layer_s.size(), 2u);
  EXPECT_NEAR(s.layer_s.at(0), 210e-6, 1e-12);
  EXPECT_NEAR(s.layer_s.at(1), 90e-6, 1e-12);
  EXPECT_NEAR(s.kind_s.at("gemm"), 200e-6, 1e-12);
  EXPECT_TRUE(t->unmapped.empty());
  // The same module ranges in a CPU-only trace are its layers.
  const std::string cpu = R"J({"traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
    {"ph": "X", "cat": "python_function", "name": "nn.Module: TransformerBlock_0", "pid": 1, "tid": 1, "ts": 10, "dur": 30},
    {"ph": "X", "cat": "python_function", "name": "nn.Module: Linear_3", "pid": 1, "tid": 1, "ts": 12, "dur": 20},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 12, "dur": 20},
    {"ph": "X", "cat": "python_function", "name": "nn.Module: TransformerBlock_1", "pid": 1, "tid": 1, "ts": 50, "dur": 40}
  ]})J";
  auto c = foreign_trace_from_text(cpu, "cpu.json", table());
  ASSERT_TRUE(c) << c.error().message();
  ASSERT_EQ(c->steps[0].layer_s.size(), 2u);
  EXPECT_NEAR(c->steps[0].layer_s.at(1), 40e-6, 1e-12);
  EXPECT_NEAR(c->steps[0].kind_s.at("gemm"), 20e-6, 1e-12);
  EXPECT_NEAR(c->steps[0].idle_s, 80e-6, 1e-12);
  EXPECT_TRUE(c->unmapped.empty());
}

// The device trace of the Kineto and Nsight tests (microseconds): step 1 from 1000 to 1500 with a
// GEMM 1100-1300, an all-reduce 1250-1400, a copy and an unmapped kernel of 10 each; step 2 with a
// flash-attention kernel of 100.
void expect_example_device_steps(const ForeignTrace& t) {
  EXPECT_TRUE(t.device);
  ASSERT_EQ(t.steps.size(), 2u);
  const ForeignStep& s = t.steps[0];
  EXPECT_NEAR(s.kind_s.at("gemm"), 200e-6, 1e-12);
  EXPECT_NEAR(s.kind_s.at("communication"), 150e-6, 1e-12);
  EXPECT_NEAR(s.kind_s.at("memcpy"), 10e-6, 1e-12);
  EXPECT_NEAR(s.exposed_communication_s, 100e-6, 1e-12);  // 1300-1400: the GEMM ended at 1300
  EXPECT_NEAR(s.idle_s, 500e-6 - 300e-6 - 10e-6 - 10e-6, 1e-12);
  ASSERT_EQ(t.unmapped.size(), 1u);
  EXPECT_EQ(t.unmapped[0].first, "my_custom_kernel");
  EXPECT_NEAR(t.steps[1].kind_s.at("attention"), 100e-6, 1e-12);
}

// Kineto's GPU trace: kernels on streams, each in the step whose CPU range last began before it;
// communication that no compute kernel overlaps is exposed.
TEST(ForeignTrace, KinetoKernelsByStep) {
  const std::string text = R"J({"schemaVersion": 1, "traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 100, "tid": 100, "ts": 1000, "dur": 500},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 100, "tid": 100, "ts": 1010, "dur": 20},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 100, "ts": 1015, "dur": 5},
    {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16", "pid": 0, "tid": 7, "ts": 1100, "dur": 200},
    {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "pid": 0, "tid": 20, "ts": 1250, "dur": 150},
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "pid": 0, "tid": 7, "ts": 1420, "dur": 10},
    {"ph": "X", "cat": "kernel", "name": "my_custom_kernel", "pid": 0, "tid": 7, "ts": 1440, "dur": 10},
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": 100, "tid": 100, "ts": 1500, "dur": 500},
    {"ph": "X", "cat": "kernel", "name": "flash_fwd_kernel", "pid": 0, "tid": 7, "ts": 1600, "dur": 100},
    {"ph": "i", "cat": "Trace", "name": "instant", "pid": 0, "tid": 7, "ts": 1600}
  ]})J";
  auto t = foreign_trace_from_text(text, "gpu.json", table());
  ASSERT_TRUE(t) << t.error().message();
  EXPECT_EQ(t->format, "kineto");
  expect_example_device_steps(*t);
  EXPECT_EQ(t->steps[0].kind_s.count("elementwise"), 0u);  // the CPU's aten::mm is not the device's time
}

// The host's issue in a Kineto GPU trace: the kernels the threads launch (the Python thread's and
// autograd's), and those threads' busy time -- their top-level events less the calls that wait for
// the device, and the short pauses between them; not a thread that launches nothing.
TEST(ForeignTrace, HostIssuePerOp) {
  const std::string text = R"J({"traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 1000, "dur": 1000},
    {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": 1010, "dur": 40},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1020, "dur": 20},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1030, "dur": 5},
    {"ph": "X", "cat": "cpu_op", "name": "aten::item", "pid": 1, "tid": 1, "ts": 1060, "dur": 330},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": 1065, "dur": 5},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 1, "ts": 1070, "dur": 300},
    {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1400, "dur": 260},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1402, "dur": 250},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1700, "dur": 6},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1, "ts": 3000, "dur": 10},
    {"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: MmBackward0", "pid": 1, "tid": 2, "ts": 1500, "dur": 30},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": 1510, "dur": 5},
    {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 1, "tid": 3, "ts": 1500, "dur": 100},
    {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16", "pid": 0, "tid": 7, "ts": 1100, "dur": 200}
  ]})J";
  auto t = foreign_trace_from_text(text, "host.json", table());
  ASSERT_TRUE(t) << t.error().message();
  ASSERT_TRUE(t->device);
  ASSERT_EQ(t->steps.size(), 1u);
  const ForeignStep& s = t->steps[0];
  // Launches: thread 1's three (one inside aten::linear, the blocked one, one made outside any op,
  // as a library's own extension makes them) and thread 2's one; thread 3 launches nothing.
  EXPECT_EQ(s.host_kernels, 4);
  // Thread 1 busy: linear (40, aten::mm inside it), item (330 less the 300 us sync), add (260 less
  // the 250 us launch that waited for a slot), the bare launch (6), and the pauses between them
  // (10, 10, 40); aten::mul falls after the step. Thread 2: the backward node (30).
  EXPECT_NEAR(s.host_busy_s, (40 + 30 + 10 + 6 + 10 + 10 + 40 + 30) * 1e-6, 1e-12);
  // A CPU trace shows no host issue of its own (its ops are the work).
  const std::string cpu = R"J([
    {"ph": "X", "name": "ProfilerStep#1", "pid": "CPU functions", "tid": 1, "ts": 0, "dur": 100},
    {"ph": "X", "name": "aten::mm", "pid": "CPU functions", "tid": 1, "ts": 10, "dur": 50}
  ])J";
  auto c = foreign_trace_from_text(cpu, "cpu.json", table());
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->steps[0].host_kernels, 0);
}

// Two ranks' clocks aligned on the collectives both ran: rank 1's clock reads 5 ms later, its
// all-reduces and all-gathers end 5 ms after rank 0's (one 20 us late), its sends and receives
// (another pair's) do not count; aligned, its steps start 0.1 ms after rank 0's.
TEST(ForeignCompare, ClocksAlignedOnCollectives) {
  auto rank = [](double shift_us, double late_step_us) {
    std::string ev;
    for (int s = 0; s < 3; ++s) {
      const double t0 = 1000.0 + 1000.0 * s + shift_us + late_step_us;
      auto x = [&](const char* cat, const std::string& name, int tid, double ts, double dur) {
        ev += (ev.empty() ? "" : ",\n") + std::string(R"({"ph": "X", "cat": ")") + cat + R"(", "name": ")" +
              name + R"(", "pid": 0, "tid": )" + std::to_string(tid) + R"(, "ts": )" + std::to_string(ts) +
              R"(, "dur": )" + std::to_string(dur) + "}";
      };
      x("user_annotation", "ProfilerStep#" + std::to_string(s), 1, t0, 900);
      x("kernel", "sm90_xmma_gemm_bf16", 7, t0 + 100, 300);
      // The collectives end together on both ranks, whenever each began.
      const double end = 1000.0 + 1000.0 * s + shift_us + 700;
      x("kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 20, end - 200 + late_step_us,
        200 - late_step_us + (s == 1 && shift_us > 0 ? 20 : 0));
      x("kernel", "ncclDevKernel_AllGather_RING_LL", 20, end + 50, 50);
      x("kernel", "ncclDevKernel_SendRecv", 21, t0 + 300 + 3 * shift_us, 10);
    }
    return R"({"traceEvents": [)" + ev + "]}";
  };
  auto r0 = foreign_trace_from_text(rank(0, 0), "rank0.json", table());
  auto r1 = foreign_trace_from_text(rank(5000, 100), "rank1.json", table());
  ASSERT_TRUE(r0 && r1);
  EXPECT_EQ(r0->collectives.size(), 6u);  // the sends and receives left out
  Trace pred;
  pred.file = "pred.json";
  pred.metadata = {{"plan", {{"dp", 2}, {"tp", 1}, {"pp", 1}}}};
  pred.step_s = 900e-6;
  pred.ops = {{"r0/L0/mb0/fwd/qkv", "qkv", "compute", 0, 0, 300e-6}};
  auto r = compare_foreign(pred, {*r0, *r1});
  ASSERT_TRUE(r) << r.error().message();
  ASSERT_EQ(r->clocks.size(), 1u);
  EXPECT_EQ(r->clocks[0].file, "rank1.json");
  EXPECT_EQ(r->clocks[0].collectives, 6);
  EXPECT_NEAR(r->clocks[0].offset_s, -5e-3, 1e-12);  // the median ignores the late one
  EXPECT_NEAR(r->clocks[0].spread_s, 0, 1e-12);
  EXPECT_NEAR(r->step_start_skew_s, 100e-6, 1e-12);
  auto noted = [](const ForeignCompareReport& rep, const std::string& text) {
    return std::any_of(rep.notes.begin(), rep.notes.end(),
                       [&](const std::string& n) { return n.find(text) != std::string::npos; });
  };
  EXPECT_TRUE(noted(*r, "rank1.json's clock -5 ms against the first trace's (the median over 6 collectives"));
  const nlohmann::json j = foreign_report_to_json(*r);
  EXPECT_NEAR(j.at("clocks").at(0).at("offset_s").get<double>(), -5e-3, 1e-12);
  // A trace with no collective in common is said to be unaligned, and no skew is claimed.
  std::string quiet = rank(5000, 100);
  for (const char* c : {"AllReduce", "AllGather"})
    for (std::size_t at = quiet.find(c); at != std::string::npos; at = quiet.find(c))
      quiet.replace(at, 9, "Broadcast");
  auto r2 = foreign_trace_from_text(quiet, "rank2.json", table());
  ASSERT_TRUE(r2);
  auto none = compare_foreign(pred, {*r0, *r2});
  ASSERT_TRUE(none);
  EXPECT_EQ(none->clocks[0].collectives, 0);
  EXPECT_EQ(none->step_start_skew_s, 0);
  EXPECT_TRUE(noted(*none, "rank2.json ran no collective the first trace ran: its clock is not aligned"));
}

TEST(ForeignTrace, DamagedTracesGetAReason) {
  auto error_of = [](const std::string& text) {
    auto t = foreign_trace_from_text(text, "t.json", table());
    return t ? std::string("(read)") : t.error().message();
  };
  EXPECT_NE(error_of("[{\"name\": \"ProfilerStep#0\", \"ph\": \"X\", \"ts\": 0, \"dur\": 5")
                .find("t.json: not JSON at byte"),
            std::string::npos);
  EXPECT_NE(error_of("{\"model\": \"llama\"}").find("no trace events"), std::string::npos);
  EXPECT_NE(error_of("[]").find("no complete events"), std::string::npos);
  EXPECT_NE(error_of(R"([{"name": "aten::mm", "ph": "X", "ts": 0, "dur": 5}])")
                .find("no step ranges (ProfilerStep#N)"),
            std::string::npos);
  EXPECT_NE(error_of(R"([{"name": "aten::mm", "ph": "X", "ts": "0", "dur": 5}])")
                .find("event 0: \"ts\": expected a number"),
            std::string::npos);
  EXPECT_NE(error_of(R"([{"ph": "X", "ts": 0, "dur": 5}])").find("needs a name"), std::string::npos);
  ForeignOptions few;
  few.max_events = 1;
  auto t = foreign_trace_from_text(
      R"([{"name": "ProfilerStep#0", "ph": "X", "ts": 0, "dur": 5}, {"name": "aten::mm", "ph": "X", "ts": 1, "dur": 2}])",
      "t.json", table(), few);
  ASSERT_FALSE(t);
  EXPECT_NE(t.error().message().find("more than 1 complete events"), std::string::npos);
}

#if FORESIGHT_HAVE_SQLITE
// A synthetic Nsight Systems export: the tables and columns `nsys export --type sqlite` writes (its
// SQLite schema reference) that the reader uses, with the rows given as SQL.
std::string synthetic_nsys_report(const std::string& name, const std::string& rows) {
  const std::string path = testing::test_temp_path(name).string();
  std::remove(path.c_str());
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const std::string schema =
      "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);"
      "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, "
      "deviceId INTEGER NOT NULL, contextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, "
      "globalPid INTEGER, demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL);"
      "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, "
      "deviceId INTEGER NOT NULL, streamId INTEGER NOT NULL, bytes INTEGER NOT NULL, copyKind INTEGER NOT "
      "NULL);"
      "CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, "
      "text TEXT, globalTid INTEGER, textId INTEGER);";
  char* err = nullptr;
  EXPECT_EQ(sqlite3_exec(db, (schema + rows).c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(db);
  return path;
}

// The Kineto test's trace as Nsight Systems records it (nanoseconds; NVTX ranges for the steps,
// one text inline and one by id; a mark, eventType 34, left out): the same steps and kinds.
TEST(ForeignTrace, NsightSystemsReportByStep) {
  const std::string path = synthetic_nsys_report(
      "nsys_synthetic.sqlite",
      "INSERT INTO StringIds VALUES (1, 'sm90_xmma_gemm_bf16'), (2, "
      "'ncclDevKernel_AllReduce_Sum_bf16_RING_LL'), "
      "(3, 'my_custom_kernel'), (4, 'flash_fwd_kernel'), (5, 'ProfilerStep#2');"
      "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, streamId, demangledName, shortName) "
      "VALUES "
      "(1100000, 1300000, 0, 7, 1, 1), (1250000, 1400000, 0, 20, 2, 2), (1440000, 1450000, 0, 7, 3, 3), "
      "(1600000, 1700000, 0, 7, 4, 4);"
      "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (1420000, 1430000, 0, 7, 4096, 8);"
      "INSERT INTO NVTX_EVENTS VALUES (1000000, 1500000, 59, 'ProfilerStep#1', 100, NULL), "
      "(1500000, 2000000, 59, NULL, 100, 5), (1200000, NULL, 34, 'a mark', 100, NULL);");
  auto t = load_foreign_trace(path, table());
  ASSERT_TRUE(t) << t.error().message();
  EXPECT_EQ(t->format, "nsys-sqlite");
  expect_example_device_steps(*t);
  ASSERT_EQ(t->steps.size(), 2u);
  EXPECT_EQ(t->steps[1].name, "ProfilerStep#2");  // its text by id in StringIds
}

// Reports that cannot be compared say why: not an Nsight export, several GPUs, no step ranges.
TEST(ForeignTrace, NsightSystemsReportsThatCannotBeRead) {
  auto error_of = [](const std::string& path) {
    auto t = load_foreign_trace(path, table());
    return t ? std::string("(read)") : t.error().message();
  };
  const std::string other = testing::test_temp_path("other.sqlite").string();
  std::remove(other.c_str());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(other.c_str(), &db), SQLITE_OK);
  sqlite3_exec(db, "CREATE TABLE t (x INTEGER);", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  EXPECT_NE(error_of(other).find("not an Nsight Systems export"), std::string::npos) << error_of(other);
  const std::string two = synthetic_nsys_report("two_gpus.sqlite",
                                                "INSERT INTO StringIds VALUES (1, 'gemm');"
                                                "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, "
                                                "deviceId, streamId, demangledName, shortName) VALUES "
                                                "(0, 10, 0, 7, 1, 1), (0, 10, 1, 7, 1, 1);");
  EXPECT_NE(error_of(two).find("kernels of 2 GPUs in one report"), std::string::npos) << error_of(two);
  const std::string no_steps = synthetic_nsys_report("no_steps.sqlite",
                                                     "INSERT INTO StringIds VALUES (1, 'gemm');"
                                                     "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, "
                                                     "deviceId, streamId, demangledName, shortName) VALUES "
                                                     "(0, 10, 0, 7, 1, 1);");
  EXPECT_NE(error_of(no_steps).find("mark each step with an NVTX range"), std::string::npos)
      << error_of(no_steps);
}
#endif

// A file that starts as SQLite but is not a database is refused with its name, with or without
// SQLite in the build.
TEST(ForeignTrace, DamagedSqliteFileGetsAReason) {
  const std::string path = testing::test_temp_path("damaged.sqlite").string();
  {
    std::ofstream out(path, std::ios::binary);
    out << std::string("SQLite format 3\0", 16) << std::string(200, 'x');
  }
  auto t = load_foreign_trace(path, table());
  ASSERT_FALSE(t);
  EXPECT_NE(t.error().message().find(path), std::string::npos) << t.error().message();
  EXPECT_NE(t.error().message().find("SQLite"), std::string::npos) << t.error().message();
}

// The prediction's kinds against the measured steps after warm-up.
TEST(ForeignCompare, PredictedKindsAgainstMeasuredSteps) {
  Trace pred;
  pred.file = "pred.json";
  pred.metadata = {{"plan", {{"dp", 1}, {"tp", 1}, {"pp", 1}}}};
  pred.step_s = 100e-6;
  pred.ops = {{"r0/L0/mb0/fwd/qkv", "qkv", "compute", 0, 0, 30e-6},
              {"r0/L0/mb0/fwd/softmax", "softmax", "compute", 0, 30e-6, 10e-6},
              {"r0/mb0/fwd/lm_head_loss", "lm_head_loss", "compute", 0, 40e-6, 20e-6},
              {"r0/step/optimizer", "optimizer", "compute", 0, 60e-6, 30e-6}};
  ForeignTrace m;
  m.file = "rank0.json";
  for (int s = 0; s < 3; ++s) {
    ForeignStep st;
    st.dur_s = s == 0 ? 500e-6 : 110e-6;  // a slow first step: warm-up
    st.kind_s = {{"gemm", 55e-6}, {"attention", 10e-6}, {"optimizer", 30e-6}};
    st.idle_s = 15e-6;
    st.host_kernels = s == 0 ? 900 : 100 * s;  // the warm-up's are not counted
    st.host_busy_s = st.host_kernels * 20e-6 * s;
    m.steps.push_back(st);
  }
  m.unmapped = {{"mystery", 3e-6}};
  auto r = compare_foreign(pred, {m});
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->warmup_steps, 1);
  EXPECT_EQ(r->steps_compared, 2);
  EXPECT_NEAR(r->measured_step_s, 110e-6, 1e-12);
  EXPECT_NEAR(r->step_time_error_pct, (100.0 - 110.0) / 110.0 * 100, 1e-9);
  ASSERT_FALSE(r->kinds.empty());
  EXPECT_EQ(r->kinds[0].kind, "gemm");
  EXPECT_NEAR(r->kinds[0].predicted_s, 50e-6, 1e-12);  // qkv + lm_head_loss
  EXPECT_NEAR(r->kinds[0].measured_s, 55e-6, 1e-12);
  ASSERT_EQ(r->unmapped.size(), 1u);
  EXPECT_NEAR(r->unmapped[0].second, 1e-6, 1e-12);  // per step over the 3 steps read
  EXPECT_TRUE(r->layers.empty());                   // no layer ranges measured
  // The host: (100 + 200) / 2 kernels per step, (100 x 20 + 200 x 40 us) over the 300 launches.
  EXPECT_NEAR(r->host_kernels_per_step, 150, 1e-9);
  EXPECT_NEAR(r->host_op_s, (100 * 20e-6 + 200 * 40e-6) / 300, 1e-15);
  auto none_left = compare_foreign(pred, {m}, 3);
  ASSERT_FALSE(none_left);
  EXPECT_NE(none_left.error().message().find("none left to compare"), std::string::npos);
}

// The k-th measured layer of each rank against the k-th predicted there, forward only; a trace
// whose layer count differs from the plan's is noted, not compared.
TEST(ForeignCompare, LayersByPosition) {
  Trace pred;
  pred.file = "pred.json";
  pred.metadata = {{"plan", {{"dp", 1}, {"tp", 1}, {"pp", 1}}}};
  pred.step_s = 200e-6;
  pred.ops = {{"r0/mb0/fwd/embedding", "embedding", "compute", 0, 0, 5e-6},
              {"r0/L0/mb0/fwd/qkv", "qkv", "compute", 0, 5e-6, 30e-6},
              {"r0/L0/mb0/fwd/mlp_up", "mlp_up", "compute", 0, 35e-6, 20e-6},
              {"r0/L1/mb0/fwd/qkv", "qkv", "compute", 0, 55e-6, 40e-6},
              {"r0/L1/mb0/bwd/qkv", "qkv", "compute", 0, 95e-6, 80e-6}};
  ForeignTrace m;
  m.file = "rank0.json";
  for (int s = 0; s < 3; ++s) {
    ForeignStep st;
    st.dur_s = 210e-6;
    st.kind_s = {{"gemm", 170e-6}};
    st.layer_s = {{4, 50e-6 + s * 10e-6}, {5, 40e-6}};
    m.steps.push_back(st);
  }
  auto r = compare_foreign(pred, {m});
  ASSERT_TRUE(r) << r.error().message();
  ASSERT_EQ(r->layers.size(), 2u);
  EXPECT_EQ(r->layers[0].measured_layer, 4);
  EXPECT_EQ(r->layers[0].predicted_layer, 0);
  EXPECT_NEAR(r->layers[0].predicted_s, 50e-6, 1e-12);  // qkv + mlp_up; the embedding is no layer's
  EXPECT_NEAR(r->layers[0].measured_s, 65e-6, 1e-12);   // steps 1 and 2 after the warm-up
  EXPECT_NEAR(r->layers[0].error_pct, (50.0 - 65.0) / 65.0 * 100, 1e-9);
  EXPECT_NEAR(r->layers[1].predicted_s, 40e-6, 1e-12);  // the backward is not in a layer's range
  const auto json = foreign_report_to_json(*r);
  EXPECT_EQ(json["layers"][1]["measured_layer"], 5);
  m.steps[2].layer_s[6] = 1e-6;
  auto uneven = compare_foreign(pred, {m});
  ASSERT_TRUE(uneven) << uneven.error().message();
  EXPECT_TRUE(uneven->layers.empty());
  ASSERT_FALSE(uneven->notes.empty());
  EXPECT_NE(uneven->notes.back().find("different numbers of layer ranges"), std::string::npos);
  for (auto& st : m.steps) st.layer_s = {{0, 1e-6}, {1, 1e-6}, {2, 1e-6}};
  auto other = compare_foreign(pred, {m});
  ASSERT_TRUE(other) << other.error().message();
  EXPECT_TRUE(other->layers.empty());
  EXPECT_NE(other->notes.back().find("show 3 layers per rank and step, the plan puts 2 on rank 0"),
            std::string::npos);
}

// Each kind's measured over predicted time scales the rates it is priced with; an efficiency that
// passes 1 moves into the peak; a kind not measured stays.
TEST(TraceCalibration, ScalesEachKindsRates) {
  auto base = load_cluster("dgx-h100-ndr");
  ASSERT_TRUE(base) << base.error().message();
  const DeviceSpec& d0 = base->node.accelerator();
  ForeignCompareReport r;
  r.predicted_file = "pred.json";
  r.measured_files = {"rank0.json"};
  r.kinds = {{"gemm", 1.0, 2.0, 0},      {"attention", 1.0, 0.25, 0},    {"elementwise", 1.0, 4.0, 0},
             {"optimizer", 1.0, 1.0, 0}, {"communication", 1.0, 0.0, 0}, {"idle", 0.1, 0.3, 0}};
  auto cal = calibrate_from_trace(*base, r);
  ASSERT_TRUE(cal) << cal.error().message();
  const DeviceSpec& d = cal->cluster.node.accelerator();
  // attention 4x faster: its efficiency 4x, past 1, so the peak rises by it and every efficiency falls.
  const double m = d0.attention_efficiency * 4;
  ASSERT_GT(m, 1.0);
  EXPECT_NEAR(d.peak(DType::kBf16), d0.peak(DType::kBf16) * m, 1e3);
  EXPECT_NEAR(d.attention_efficiency, 1.0, 1e-12);
  EXPECT_NEAR(d.gemm_efficiency, d0.gemm_efficiency / 2 / m, 1e-12);
  EXPECT_NEAR(d.memory_bandwidth, d0.memory_bandwidth / 4, 1.0);
  // The optimizer's time unchanged: its efficiency makes up for the slower streaming rate.
  EXPECT_NEAR(d.optimizer_efficiency, d0.optimizer_efficiency * 4, 1e-12);
  EXPECT_EQ(cal->cluster.node.fabric, base->node.fabric);  // communication not measured
  EXPECT_EQ(cal->fitted.size(), 5u);                       // 4 kinds and the peak
  EXPECT_TRUE(cal->sources.contains("efficiency.gemm"));
  // The profile it makes loads back.
  nlohmann::json j = cluster_to_json(cal->cluster);
  EXPECT_TRUE(static_cast<bool>(cluster_from_json(j, "cal.json")));
  EXPECT_EQ(d.host_op_s, d0.host_op_s);  // the traces showed no host issue
  // Where they do, the host's time per op is the device's host_op.
  ForeignCompareReport with_host = r;
  with_host.host_kernels_per_step = 1200;
  with_host.host_op_s = 31e-6;
  auto host = calibrate_from_trace(*base, with_host);
  ASSERT_TRUE(host) << host.error().message();
  EXPECT_DOUBLE_EQ(host->cluster.node.accelerator().host_op_s, 31e-6);
  EXPECT_TRUE(host->sources.contains("efficiency.host_op"));
  EXPECT_EQ(host->fitted.size(), 6u);
  // Nothing both predicted and measured: refused.
  ForeignCompareReport empty = r;
  empty.kinds = {{"gemm", 1.0, 0.0, 0}};
  EXPECT_FALSE(calibrate_from_trace(*base, empty));
}

// A GEMM time that moves as the square root of the efficiency (as if half of it were memory-bound):
// one fit leaves it 29% off, each further pass halves what is left in the exponent, and the passes
// stop once it is within the tolerance.
TEST(TraceCalibration, PassesUntilTheKindsAgree) {
  auto base = load_cluster("dgx-h100-ndr");
  ASSERT_TRUE(base) << base.error().message();
  const double e0 = base->node.accelerator().gemm_efficiency;
  auto report = [](double predicted) {
    ForeignCompareReport r;
    r.predicted_file = "pred.json";
    r.measured_files = {"rank0.json"};
    r.kinds = {{"gemm", predicted, 2.0, (predicted - 2.0) / 2.0 * 100}, {"attention", 1.0, 1.0, 0}};
    return r;
  };
  int calls = 0;
  const TraceRepredict sqrt_gemm = [&](const ClusterSpec& c) -> Result<ForeignCompareReport> {
    ++calls;
    return report(std::sqrt(e0 / c.node.accelerator().gemm_efficiency));
  };
  auto cal = calibrate_from_trace_passes(*base, report(1.0), sqrt_gemm, 10, 1.0);
  ASSERT_TRUE(cal) << cal.error().message();
  ASSERT_FALSE(cal->residuals.empty());
  EXPECT_NEAR(cal->residuals.front().kinds.front().error_pct, (std::sqrt(2.0) - 2) / 2 * 100, 1e-9);
  // After n fits the GEMM time is 2^(1 - 2^-n): within 1% of 2 from n = 7.
  EXPECT_EQ(cal->passes, 7);
  EXPECT_EQ(calls, 7);
  EXPECT_LE(cal->residuals.back().max_abs_pct, 1.0);
  EXPECT_NEAR(cal->cluster.node.accelerator().gemm_efficiency, e0 / std::pow(2.0, 2 - std::pow(2.0, -6)),
              1e-9);
  EXPECT_NE(cal->sources["efficiency.gemm"].get<std::string>().find("then pass 7"), std::string::npos);
  // Only the kinds still off are listed after the first pass (attention was right).
  for (const auto& line : cal->fitted) {
    if (line.rfind("pass ", 0) == 0) {
      EXPECT_EQ(line.find("attention"), std::string::npos) << line;
    }
  }
  // Capped at max_passes.
  calls = 0;
  auto three = calibrate_from_trace_passes(*base, report(1.0), sqrt_gemm, 3, 1.0);
  ASSERT_TRUE(three);
  EXPECT_EQ(three->passes, 3);
  EXPECT_EQ(calls, 3);
  // A re-prediction that does not move (a kind held at a bound): the first fit is kept.
  const TraceRepredict stuck = [&](const ClusterSpec&) -> Result<ForeignCompareReport> {
    return report(1.5);
  };
  auto kept = calibrate_from_trace_passes(*base, report(1.0), stuck, 10, 1.0);
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->passes, 1);
  EXPECT_EQ(kept->residuals.size(), 1u);
  EXPECT_NEAR(kept->cluster.node.accelerator().gemm_efficiency, e0 / 2, 1e-12);
  // A failed re-prediction is an error.
  const TraceRepredict fails = [](const ClusterSpec&) -> Result<ForeignCompareReport> {
    return Error("model small: not found");
  };
  EXPECT_FALSE(calibrate_from_trace_passes(*base, report(1.0), fails, 4, 1.0));
}

}  // namespace
}  // namespace foresight

// Trace comparison: alignment by op id, per-kind sums, idle time, and the errors for traces that
// cannot be compared.
#include "sim/compare/compare.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include "tests/test_util.h"

namespace foresight {
namespace {

std::string write(const std::string& name, const nlohmann::json& j) {
  const auto path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path) << j.dump();
  return path;
}

nlohmann::json event(const std::string& id, const std::string& name, const std::string& cat, int rank,
                     double ts_us, double dur_us) {
  return {{"ph", "X"}, {"name", name}, {"cat", cat},    {"pid", rank},
          {"tid", 0},  {"ts", ts_us},  {"dur", dur_us}, {"args", {{"id", id}}}};
}

nlohmann::json trace(double step_s, double gemm_us, double ar_us, const nlohmann::json& plan = {{"tp", 2}}) {
  nlohmann::json ev = nlohmann::json::array();
  ev.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", 0}});
  for (int r = 0; r < 2; ++r) {
    std::string p = "r";  // appends: GCC 12 warns falsely (-Wrestrict) on "x" + std::string chains
    p.append(std::to_string(r)).append("/L0/mb0/fwd/");
    ev.push_back(event(p + "qkv", "qkv", "compute", r, 0, gemm_us));
    ev.push_back(event(p + "attn.tp_all_reduce", "attn.tp_all_reduce", "collective", r, gemm_us, ar_us));
    ev.push_back(event(p + "norm2", "norm2", "compute", r, gemm_us + ar_us, 10));
  }
  return {{"metadata", {{"model", "tiny"}, {"plan", plan}, {"step_time_s", step_s}}}, {"traceEvents", ev}};
}

// A receive counts from the end of its rank's previous op to its own end on both sides: the runtime
// times its blocking receive so, the simulator issues its receive once the data is there (a
// zero-length op after a gap).
TEST(Compare, AReceiveCountsItsWaitOnBothSides) {
  auto pipeline = [](double recv_start_us, double recv_dur_us) {
    nlohmann::json ev = nlohmann::json::array();
    ev.push_back(event("r1/L1/mb0/fwd/qkv", "qkv", "compute", 1, 0, 10));
    ev.push_back(
        event("r1/mb1/fwd/recv_activation", "recv_activation", "p2p", 1, recv_start_us, recv_dur_us));
    ev.push_back(event("r1/L1/mb1/fwd/qkv", "qkv", "compute", 1, recv_start_us + recv_dur_us, 10));
    ev.push_back(
        event("r1/mb0/bwd/send_gradient", "send_gradient", "p2p", 1, recv_start_us + recv_dur_us + 10, 3));
    return nlohmann::json{{"metadata", {{"model", "tiny"}, {"plan", {{"pp", 2}}}, {"step_time_s", 60e-6}}},
                          {"traceEvents", ev}};
  };
  // Predicted: the data arrives at 30 us, the receive issued then (0 us); measured: the receive
  // blocks from 11 us (1 us after qkv) to 35 us.
  auto p = load_trace(write("fs-cmp-recv-p.json", pipeline(30, 0)));
  auto m = load_trace(write("fs-cmp-recv-m.json", pipeline(11, 24)));
  ASSERT_TRUE(p && m);
  auto r = compare_traces(*p, *m);
  ASSERT_TRUE(r) << r.error().message();
  const auto p2p =
      std::find_if(r->kinds.begin(), r->kinds.end(), [](const KindComparison& k) { return k.kind == "p2p"; });
  ASSERT_NE(p2p, r->kinds.end());
  EXPECT_NEAR(p2p->predicted_s, 20e-6 + 3e-6, 1e-12);  // 10 -> 30 us, and the send
  EXPECT_NEAR(p2p->measured_s, 25e-6 + 3e-6, 1e-12);   // 10 -> 35 us, and the send
}

TEST(Compare, SumsPerKindAndStepErrorFromFirstPrinciples) {
  // Predicted: GEMM 100 us, all-reduce 50 us, norm 10 us, step 200 us; measured: 80, 100, 10, 250.
  auto p = load_trace(write("fs-cmp-p.json", trace(200e-6, 100, 50)));
  auto m = load_trace(write("fs-cmp-m.json", trace(250e-6, 80, 100)));
  ASSERT_TRUE(p && m);
  auto r = compare_traces(*p, *m);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->matched_ops, 6);
  EXPECT_EQ(r->ranks, (std::vector<int>{0, 1}));
  EXPECT_NEAR(r->step_time_error_pct, (200.0 - 250.0) / 250.0 * 100, 1e-9);
  auto kind = [&](const std::string& k) {
    for (const auto& x : r->kinds)
      if (x.kind == k) return x;
    ADD_FAILURE() << "no kind " << k;
    return KindComparison{};
  };
  EXPECT_NEAR(kind("gemm").predicted_s, 100e-6, 1e-12);  // per rank
  EXPECT_NEAR(kind("gemm").error_pct, 25.0, 1e-9);
  EXPECT_NEAR(kind("tp_all_reduce").error_pct, -50.0, 1e-9);  // attn. prefix folded into the kind
  // idle = step - compute busy: predicted 200 - 110 = 90 us, measured 250 - 90 = 160 us.
  EXPECT_NEAR(kind("idle").predicted_s, 90e-6, 1e-12);
  EXPECT_NEAR(kind("idle").measured_s, 160e-6, 1e-12);
  EXPECT_EQ(r->worst.front().kind, "tp_all_reduce");
  const auto j = compare_report_to_json(*r);
  EXPECT_NEAR(j["step_time_error_pct"].get<double>(), -20.0, 1e-9);
}

TEST(Compare, RefusesTracesThatCannotBeCompared) {
  auto p = load_trace(write("fs-cmp-p2.json", trace(200e-6, 100, 50)));
  auto other = load_trace(write("fs-cmp-o.json", trace(200e-6, 100, 50, {{"tp", 4}})));
  auto r = compare_traces(*p, *other);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("different plans"), std::string::npos);
  // The error names the field that differs, with both values, not both plans whole.
  EXPECT_NE(r.error().message().find("tp: 2 in the predicted trace, 4 in the measured one"),
            std::string::npos)
      << r.error().message();
  auto more = load_trace(
      write("fs-cmp-m.json", trace(200e-6, 100, 50, {{"tp", 2}, {"precision", "fp32"}, {"micro_batch", 2}})));
  auto two = load_trace(write("fs-cmp-b.json", trace(200e-6, 100, 50, {{"tp", 2}, {"precision", "bf16"}})));
  r = compare_traces(*two, *more);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("(micro_batch: (unset) in the predicted trace, 2 in the measured one; "
                                     "precision: bf16, fp32)"),
            std::string::npos)
      << r.error().message();
  EXPECT_EQ(r.error().message().find("{\""), std::string::npos) << "no plan JSON in the message";

  nlohmann::json fewer = trace(200e-6, 100, 50);
  fewer["traceEvents"].erase(fewer["traceEvents"].begin() + 2);  // r0's all-reduce
  auto f = load_trace(write("fs-cmp-f.json", fewer));
  r = compare_traces(*p, *f);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("predicted only: r0/L0/mb0/fwd/attn.tp_all_reduce"), std::string::npos)
      << r.error().message();

  const auto empty = testing::test_temp_path("cmp-empty.json").string();
  std::ofstream(empty).close();
  auto e = load_trace(empty);
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message().find("empty file"), std::string::npos);
  auto none = load_trace(write("fs-cmp-none.json", nlohmann::json{{"traceEvents", nlohmann::json::array()}}));
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message().find("no ops"), std::string::npos);
  auto bad = load_trace(
      write("fs-cmp-bad.json", nlohmann::json{{"traceEvents", {{{"ph", "X"}, {"ts", 0}, {"dur", 1}}}}}));
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("/traceEvents/0/args/id"), std::string::npos);
}

// Hostile traces: every nonsense a loader could take for a time is refused with the file and the
// JSON pointer of the field (a negative duration used to shrink the kind's sum and the step).
TEST(Compare, RefusesNonsenseEventsNamingTheField) {
  struct Case {
    const char* name;
    std::function<void(nlohmann::json&)> edit;
    const char* message;
  };
  const Case cases[] = {
      {"neg-dur", [](auto& t) { t["traceEvents"][3]["dur"] = -5; }, "/traceEvents/3/dur: -5 is negative"},
      {"neg-ts", [](auto& t) { t["traceEvents"][1]["ts"] = -0.5; }, "/traceEvents/1/ts: -0.5 is negative"},
      {"nan-ts", [](auto& t) { t["traceEvents"][1]["ts"] = std::nan(""); },
       "/traceEvents/1/ts: nan is not a finite"},
      {"inf-dur", [](auto& t) { t["traceEvents"][2]["dur"] = HUGE_VAL; },
       "/traceEvents/2/dur: inf is not a finite"},
      {"str-dur", [](auto& t) { t["traceEvents"][2]["dur"] = "5"; },
       "/traceEvents/2/dur: expected a number of microseconds, got string"},
      {"no-ts", [](auto& t) { t["traceEvents"][2].erase("ts"); }, "/traceEvents/2/ts: missing"},
      {"no-ph", [](auto& t) { t["traceEvents"][2].erase("ph"); }, "/traceEvents/2/ph: missing"},
      {"num-ph", [](auto& t) { t["traceEvents"][2]["ph"] = 88; }, "/traceEvents/2/ph: expected a string"},
      {"not-object", [](auto& t) { t["traceEvents"][4] = 7; },
       "/traceEvents/4: expected an event object, got number 7"},
      {"str-pid", [](auto& t) { t["traceEvents"][1]["pid"] = "0"; }, "/traceEvents/1/pid: expected a rank"},
      {"neg-pid", [](auto& t) { t["traceEvents"][1]["pid"] = -1; }, "/traceEvents/1/pid: expected a rank"},
      {"num-name", [](auto& t) { t["traceEvents"][1]["name"] = 1; },
       "/traceEvents/1/name: expected a string"},
      {"arr-cat", [](auto& t) { t["traceEvents"][1]["cat"] = nlohmann::json::array(); },
       "/traceEvents/1/cat: expected a string"},
      {"args-array", [](auto& t) { t["traceEvents"][1]["args"] = nlohmann::json::array({"id"}); },
       "/traceEvents/1/args/id: missing"},
      {"events-object", [](auto& t) { t["traceEvents"] = nlohmann::json::object(); },
       "/traceEvents: expected an array"},
      {"meta-array", [](auto& t) { t["metadata"] = nlohmann::json::array(); },
       "/metadata: expected an object"},
      {"meta-model", [](auto& t) { t["metadata"]["model"] = 3; }, "/metadata/model: expected a string"},
      {"meta-step", [](auto& t) { t["metadata"]["step_time_s"] = -1; },
       "/metadata/step_time_s: expected seconds >= 0"},
  };
  for (const auto& c : cases) {
    nlohmann::json t = trace(200e-6, 100, 50);
    c.edit(t);
    auto r = trace_from_json(t, "t.json");
    ASSERT_FALSE(r) << c.name;
    EXPECT_EQ(r.error().message().rfind("t.json: ", 0), 0u) << c.name << ": " << r.error().message();
    EXPECT_NE(r.error().message().find(c.message), std::string::npos)
        << c.name << ": " << r.error().message();
  }
  // Through a file: the negative duration is refused before any comparison; inf cannot be written
  // in JSON, and 1e999 is refused by the parser, which names the number.
  nlohmann::json neg = trace(200e-6, 100, 50);
  neg["traceEvents"][3]["dur"] = -5;
  const std::string path = write("fs-cmp-neg.json", neg);
  auto n = load_trace(path);
  ASSERT_FALSE(n);
  EXPECT_EQ(n.error().message(), path + ": /traceEvents/3/dur: -5 is negative; expected microseconds >= 0");
  auto huge = trace_from_text(R"({"traceEvents": [{"ph": "X", "ts": 1e999, "dur": 1, "args": {"id": "a"}}]})",
                              "h.json");
  ASSERT_FALSE(huge);
  EXPECT_NE(huge.error().message().find("h.json: malformed JSON: "), std::string::npos)
      << huge.error().message();
  EXPECT_NE(huge.error().message().find("number overflow parsing '1e999'"), std::string::npos)
      << huge.error().message();
  // Events other than complete ones (metadata, instants) are still skipped.
  auto ok = trace_from_json(trace(200e-6, 100, 50), "t.json");
  ASSERT_TRUE(ok) << ok.error().message();
  EXPECT_EQ(ok->ops.size(), 6u);
}

}  // namespace
}  // namespace foresight

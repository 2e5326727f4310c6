// Memory over a simulated step: from the static part back to it, and a peak that agrees with the
// analytic model's closed-form in-flight counts where those are exact (GPipe, 1F1B).
#include "sim/des/memory_timeline.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "sim/des/trace.h"
#include "sim/spec/json_reader.h"
#include "tests/test_util.h"

namespace foresight {
namespace {

std::vector<MemoryTrack> tracks_of(Schedule schedule, Recompute recompute, bool full,
                                   Workload* keep = nullptr, SimResult* keep_r = nullptr, int chunks = 1) {
  const ModelSpec m = testing::preset_model("llama3-8b");
  const ClusterSpec c = testing::preset_cluster("dgx-h100-ndr", 16);
  Plan p = testing::make_plan(2, 4, 2, 1, 32);
  p.schedule = schedule;
  p.virtual_stages = chunks;
  p.recompute = recompute;
  auto w = lower(m, c, p);
  EXPECT_TRUE(w.ok()) << w.error().message();
  Simulator sim(*w, SimOptions{.full = full, .record = true});
  auto r = sim.run();
  EXPECT_TRUE(r.ok()) << r.error().message();
  auto t = memory_tracks(*w, *r);
  if (keep) *keep = std::move(*w);
  if (keep_r) *keep_r = std::move(*r);
  return t;
}

TEST(MemoryTimeline, PeaksAgreeWithTheClosedFormsWhereTheyAreExact) {
  for (Schedule s : {Schedule::k1F1B, Schedule::kGpipe})
    for (Recompute rc : {Recompute::kNone, Recompute::kSelective}) {
      const auto tracks = tracks_of(s, rc, false);
      ASSERT_EQ(tracks.size(), 4u);  // one rank per stage
      for (const MemoryTrack& t : tracks) {
        EXPECT_NEAR(t.peak_bytes, t.analytic_bytes, 1e-6 * t.analytic_bytes) << "stage " << t.stage;
        // From the static part, back to it when every micro-batch's backward is done.
        ASSERT_GE(t.samples.size(), 3u);
        EXPECT_DOUBLE_EQ(t.samples.front().second, t.static_bytes);
        EXPECT_NEAR(t.samples.back().second, t.static_bytes, 1e-6 * t.static_bytes);
        EXPECT_GT(t.peak_bytes, t.static_bytes);
        for (std::size_t i = 1; i < t.samples.size(); ++i)
          EXPECT_GE(t.samples[i].first, t.samples[i - 1].first);
      }
      // 1F1B: the first stage holds the most (pp micro-batches); GPipe: every stage all of them.
      if (s == Schedule::k1F1B) {
        EXPECT_GT(tracks[0].peak_bytes - tracks[0].static_bytes,
                  tracks[3].peak_bytes - tracks[3].static_bytes);
      }
    }
  // Full recompute: a layer's rebuilt activations on top of what the stage keeps, within what the
  // analytic model adds for it (a whole layer).
  for (const MemoryTrack& t : tracks_of(Schedule::k1F1B, Recompute::kFull, false)) {
    EXPECT_LE(t.peak_bytes, t.analytic_bytes * (1 + 1e-9));
    EXPECT_GT(t.peak_bytes, 0.97 * t.analytic_bytes);
  }
}

// Interleaved 1F1B: Megatron's warm-up keeps 2(pp-1-stage) + (vp-1) pp + 1 chunks live, so the
// last stage holds (vp-1) pp + 1 chunks, the more of the first stage's the more chunks (the
// analytic model once counted a little over one micro-batch there). Within 0.5%: the embedding's
// output lives with the first chunk, whose count the closed form takes as the stage's mean.
TEST(MemoryTimeline, InterleavedWarmUpFillsEveryStage) {
  for (int chunks : {2, 4}) {
    const auto tracks =
        tracks_of(Schedule::kInterleaved1F1B, Recompute::kNone, false, nullptr, nullptr, chunks);
    ASSERT_EQ(tracks.size(), 4u);
    for (const MemoryTrack& t : tracks)
      EXPECT_NEAR(t.peak_bytes, t.analytic_bytes, 0.005 * t.analytic_bytes)
          << chunks << " chunks, stage " << t.stage;
    const double first = tracks[0].peak_bytes - tracks[0].static_bytes,
                 last = tracks[3].peak_bytes - tracks[3].static_bytes;
    // 5 of 11 chunks (vp 2), 13 of 19 (vp 4).
    EXPECT_GT(last, (chunks == 2 ? 0.4 : 0.6) * first) << chunks << " chunks";
  }
}

// Every simulated rank has a track; the trace carries them as counter events.
TEST(MemoryTimeline, EveryRankAndTheTrace) {
  Workload w;
  SimResult r;
  const auto tracks = tracks_of(Schedule::k1F1B, Recompute::kNone, true, &w, &r);
  EXPECT_EQ(tracks.size(), 16u);
  const std::string path = testing::test_temp_path("memory.json").string();
  ASSERT_TRUE(write_chrome_trace(path, w, r, "predicted").ok());
  auto doc = read_json_file(path);
  ASSERT_TRUE(doc.ok()) << doc.error().message();
  std::size_t counters = 0, expected = 0;
  for (const auto& t : tracks) expected += t.samples.size();
  double peak_gib = 0;
  for (const auto& e : (*doc)["traceEvents"])
    if (e["ph"] == "C" && e["name"] == "memory") {
      ++counters;
      peak_gib = std::max(peak_gib, e["args"]["GiB"].get<double>());
    }
  EXPECT_EQ(counters, expected);
  EXPECT_NEAR(peak_gib, tracks[0].peak_bytes / (1024.0 * 1024 * 1024), 1e-3);
  // A measured run's trace: no memory track (its bytes would be the model's, not measured).
  ASSERT_TRUE(write_chrome_trace(path, w, r, "measured").ok());
  auto measured = read_json_file(path);
  ASSERT_TRUE(measured.ok()) << measured.error().message();
  for (const auto& e : (*measured)["traceEvents"]) EXPECT_NE(e["ph"], "C");
  std::remove(path.c_str());
  r.ops.clear();
  EXPECT_TRUE(memory_tracks(w, r).empty());
}

}  // namespace
}  // namespace foresight

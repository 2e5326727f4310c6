// What-if sweeps: a base (model, cluster, GPUs, a plan or "search") and axes that set any field by
// JSON pointer; the cross product of the axes is the set of points, each predicted and written as
// one JSONL line (and, at the end, a CSV sorted by point).
//
//   {"base": {"model": "llama3-70b", "cluster": "dgx-h100-ndr", "gpus": 64,
//             "plan": {"tp": 8, "pp": 2, "global_batch": 256, "zero_stage": 1}},
//    "axes": {"/cluster/tiers/1/bandwidth_per_node": ["100Gbps", "400Gbps"], "/gpus": [64, 128]}}
//
// Presets named in the base are expanded to their full JSON first, so pointers reach every field
// ("/cluster/node/nic/bandwidth", "/model/layers"). A plan without "dp" gets dp = gpus/(tp*pp*cp).
// Every point is parsed and checked before any work starts; a run killed at any moment and started
// again skips the points already written and loses none; shards (index % N == i) can share one
// output folder, and the results are the same however the work was split.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim/core/status.h"

namespace foresight {

struct SweepPoint {
  std::size_t index = 0;
  nlohmann::json axes;  // pointer -> value for this point
  nlohmann::json doc;   // the resolved document: model, cluster, gpus, plan (or search)
};

struct SweepSpec {
  std::string file;
  nlohmann::json base;
  std::vector<std::pair<std::string, nlohmann::json>> axes;  // pointer, values (array)
  std::string engine = "analytic";                           // or "des"
  std::vector<SweepPoint> points;
  // A hash of the resolved base, axes and engine: every result row carries it, so a run never
  // resumes from (or mixes in) the results of a different spec in the same folder.
  std::string id;
};

// The expansion's budget. Every point holds its own copy of the resolved base (presets expanded:
// a cluster's and a model's full JSON, a few KB of text), and all of them are built and checked
// before any work, so a 40 KB spec whose axes multiply to 10 million points would take about
// 15 GB before computing anything. A spec over either limit is refused before any point is
// built, with every axis and its size: a million points is hours of analytic work (or days of
// DES), and 4 GiB fits a laptop.
inline constexpr std::size_t kSweepMaxPoints = 1'000'000;
inline constexpr double kSweepMaxBytes = 4.0 * 1024 * 1024 * 1024;
// Memory of a parsed document per byte of its JSON text (nlohmann::json nodes, std::map entries
// and strings): measured 7.5 (llama3-8b on dgx-h100-ndr: 2.1 KB of text, 15.7 KB more peak RSS
// per point over 20,000 points); 8 leaves a margin. That base reaches 4 GiB at about 250,000 points.
inline constexpr double kJsonBytesPerTextByte = 8;
// The estimated memory of one expanded point of this resolved base.
double sweep_point_bytes(const nlohmann::json& base);

// Parses the spec and expands every point; errors name the file, the pointer and the reason.
// An axis value of another kind than the base's at its pointer (a string where the base has a
// number) is an error naming the file and the value's pointer ("/axes/~1plan~1tp/1").
Result<SweepSpec> load_sweep(const std::string& path);
Result<SweepSpec> sweep_from_json(const nlohmann::json& doc, const std::string& file);

struct SweepOptions {
  std::string out_dir = "sweep-out";
  int shard = 0, shards = 1;
  unsigned threads = 0;   // 0: all cores
  bool write_csv = true;  // false: leave the CSV to whoever runs last (MPI rank 0)
};

struct SweepStatus {
  std::size_t total = 0;    // points in this shard
  std::size_t skipped = 0;  // already in the output (resumed)
  std::size_t computed = 0;
  std::size_t failed = 0;  // points whose layout is invalid or does not fit (recorded, not lost)
  std::string jsonl, csv;  // output paths
};

// Runs the points of this shard that are not yet in out_dir/results.jsonl. `done` counts finished
// points as they complete (for progress reports from another thread).
//
// While it writes, a sweep holds a lock on out_dir/.foresight-sweep.lock (flock: released when the
// process ends, killed or not, so a killed sweep resumes): an unsharded run holds it exclusively,
// shards share it and each also holds out_dir/.foresight-sweep.lock.<i>-of-<N> exclusively; a
// second writer of the same points gets an error naming the folder. When the lock is held
// exclusively, lines a kill left torn are removed from results.jsonl (rewritten atomically)
// before the new rows are appended.
inline constexpr const char* kSweepLockFile = ".foresight-sweep.lock";
Result<SweepStatus> run_sweep(const SweepSpec& spec, const SweepOptions& options,
                              std::atomic<std::size_t>* done = nullptr);

// One point's result line (without writing it): what run_sweep appends.
nlohmann::json evaluate_point(const SweepSpec& spec, const SweepPoint& point);

// Rewrites out_dir/results.csv from the JSONL, sorted by point index.
Status write_sweep_csv(const SweepSpec& spec, const std::string& out_dir);

}  // namespace foresight

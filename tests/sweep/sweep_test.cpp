// Sweeps: bad specs fail before any work, sharding and resuming after a kill give the same results.
#include "sim/sweep/sweep.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "tests/test_util.h"

namespace foresight {
namespace {

namespace fs = std::filesystem;

nlohmann::json spec_json() {
  return nlohmann::json::parse(R"({
    "base": {"model": "llama3-8b", "cluster": "dgx-h100-ndr", "gpus": 16,
             "plan": {"tp": 2, "pp": 2, "global_batch": 64, "zero_stage": 1, "recompute": "full"}},
    "axes": {"/gpus": [16, 32, 64], "/cluster/node/nic/bandwidth": ["100Gbps", "400Gbps"],
             "/plan/micro_batch": [1, 2]}})");
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("foresight_sweep_" + name);
  fs::remove_all(d);
  return d;
}

// Every sweep spec shipped under scenarios/ (the reference-claims checks included) still parses
// and expands: a renamed field or preset shows up here, not in a user's run.
TEST(Sweep, ShippedScenariosParse) {
  int specs = 0;
  for (const auto& e : fs::recursive_directory_iterator(FORESIGHT_SCENARIOS_DIR)) {
    if (e.path().extension() != ".json") continue;
    auto spec = load_sweep(e.path().string());
    ASSERT_TRUE(spec.ok()) << spec.error().message();
    EXPECT_FALSE(spec->points.empty()) << e.path();
    ++specs;
  }
  EXPECT_GE(specs, 17);
}

TEST(Sweep, CrossProductOfAxes) {
  auto s = sweep_from_json(spec_json(), "s.json");
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(s->points.size(), 12u);
  EXPECT_EQ(s->points[0].doc["gpus"], 16);
  EXPECT_EQ(s->points[11].doc["gpus"], 64);
}

TEST(Sweep, BadSpecsFailBeforeAnyWork) {
  auto doc = spec_json();
  doc["axes"]["/cluster/node/nic/bandwdth"] = {"100Gbps"};
  auto a = sweep_from_json(doc, "s.json");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().message().find("/cluster/node/nic/bandwdth"), std::string::npos) << a.error().message();

  doc = spec_json();
  doc["axes"]["/cluster/node/nic/bandwidth"] = {"100Gbits"};
  auto b = sweep_from_json(doc, "s.json");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().message().find("unknown unit 'Gbits'"), std::string::npos) << b.error().message();
  EXPECT_NE(b.error().message().find("point 0"), std::string::npos);

  doc = spec_json();
  doc["axes"]["/gpus"] = nlohmann::json::array();
  auto c = sweep_from_json(doc, "s.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("empty axis"), std::string::npos);

  doc = spec_json();
  doc["axes"]["/gpus"] = {12};  // not a multiple of the 8 GPUs per node
  auto d = sweep_from_json(doc, "s.json");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message().find("/gpus"), std::string::npos);

  // The empty pointer names the whole base: a string there left no object to read (found by
  // fuzz_sweep_json: it threw out of sweep_from_json).
  doc = spec_json();
  doc["axes"][""] = {"dgx-h100-ndr"};
  auto e = sweep_from_json(doc, "s.json");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message().find("s.json: /axes/: \"\" names the whole base"), std::string::npos)
      << e.error().message();

  // A searched base: the search's memory margin is a share of the device, read with the rest.
  doc = spec_json();
  doc["base"]["plan"] = "search";
  doc["base"]["search"] = {{"global_batch", 64}, {"min_headroom", 0.2}};
  doc["axes"].erase("/plan/micro_batch");
  auto f = sweep_from_json(doc, "s.json");
  ASSERT_TRUE(f.ok()) << f.error().message();
  doc["base"]["search"]["min_headroom"] = 5;  // a percentage where a share belongs
  auto g = sweep_from_json(doc, "s.json");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.error().message().find("/search/min_headroom"), std::string::npos) << g.error().message();
}

// A spec whose axes multiply past the budget is refused before any point is built (the old
// limit, 10 million points, let 2 million points take minutes and gigabytes), naming the file and
// every axis with its size.
TEST(Sweep, ExpansionOverTheBudgetIsRefusedFirst) {
  auto doc = spec_json();
  auto values = [](int n, int from) {
    nlohmann::json a = nlohmann::json::array();
    for (int i = 0; i < n; ++i) a.push_back(from + i);
    return a;
  };
  doc["axes"] = {{"/gpus", values(100, 1)},
                 {"/plan/micro_batch", values(100, 1)},
                 {"/plan/global_batch", values(200, 1)}};
  auto s = sweep_from_json(doc, "big.json");
  ASSERT_FALSE(s.ok());
  const std::string m = s.error().message();
  EXPECT_NE(
      m.find("big.json: /axes: /gpus (100) x /plan/global_batch (200) x /plan/micro_batch (100) expand to "
             "2000000 points"),
      std::string::npos)
      << m;
  EXPECT_NE(m.find("the budget is 1000000 points"), std::string::npos) << m;
  // Axes so long their product overflows 64 bits: still refused, not wrapped around.
  doc["axes"] = nlohmann::json::object();
  for (int i = 0; i < 8; ++i) doc["axes"]["/plan/x" + std::to_string(i)] = values(1000, 1);
  auto huge = sweep_from_json(doc, "huge.json");
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.error().message().find("expand to more than"), std::string::npos) << huge.error().message();
  // The memory estimate binds too: within the point budget, over 4 GiB of expanded documents.
  auto base = sweep_from_json(spec_json(), "s.json");
  ASSERT_TRUE(base.ok());
  const double per_point = sweep_point_bytes(base->base);
  EXPECT_GT(per_point, 1000);
  const int n = static_cast<int>(kSweepMaxBytes / per_point) + 1;
  ASSERT_LT(n, static_cast<int>(kSweepMaxPoints));
  doc = spec_json();
  doc["axes"] = {{"/plan/global_batch", values(n, 1)}};
  auto heavy = sweep_from_json(doc, "heavy.json");
  ASSERT_FALSE(heavy.ok());
  EXPECT_NE(heavy.error().message().find("GiB of point documents"), std::string::npos)
      << heavy.error().message();
}

// An axis value of the wrong kind is an error naming the file and the value's JSON pointer (it
// used to escape as nlohmann's type_error, naming neither).
TEST(Sweep, WrongTypeAxisValueNamesItsPointer) {
  auto doc = spec_json();
  doc["axes"] = {{"/plan/tp", {2, "eight"}}};
  Result<SweepSpec> a = Error("not run");
  ASSERT_NO_THROW(a = sweep_from_json(doc, "s.json"));
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().message(),
            "s.json: /axes/~1plan~1tp/1: expected a number like the base's /plan/tp, got a string \"eight\"");
  // A field the base does not set (dp is derived from tp*pp*cp): the point's field is named.
  doc = spec_json();
  doc["axes"] = {{"/plan/cp", {1, "two"}}};
  Result<SweepSpec> b = Error("not run");
  ASSERT_NO_THROW(b = sweep_from_json(doc, "s.json"));
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().message().find("s.json: point 1 (/plan/cp=\"two\")"), std::string::npos)
      << b.error().message();
  EXPECT_NE(b.error().message().find("/plan/cp: expected an integer"), std::string::npos)
      << b.error().message();
  // An axis inside another axis's value would be overwritten by it.
  doc = spec_json();
  doc["axes"] = {{"/model", {"llama3-8b", "llama3-70b"}}, {"/model/layers", {16, 32}}};
  auto c = sweep_from_json(doc, "s.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("s.json: /axes/~1model~1layers: lies under axis /model"),
            std::string::npos)
      << c.error().message();
  // Preset names and inline objects stay interchangeable.
  auto plain = sweep_from_json(spec_json(), "s.json");
  ASSERT_TRUE(plain.ok());
  doc = spec_json();
  doc["axes"] = {{"/model", {"llama3-70b", plain->base["model"]}}};
  auto d = sweep_from_json(doc, "s.json");
  EXPECT_TRUE(d.ok()) << d.error().message();
}

// A second writer of the same folder is refused while the first holds the lock; the lock goes
// with its holder.
TEST(Sweep, OneWriterPerFolder) {
  auto s = sweep_from_json(spec_json(), "s.json");
  ASSERT_TRUE(s.ok());
  const fs::path d = fresh_dir("locked");
  fs::create_directories(d);
  const std::string lock = (d / kSweepLockFile).string();
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);  // another sweep writing (a separate open file)
  SweepOptions o;
  o.out_dir = d.string();
  auto r = run_sweep(*s, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(), d.string() + ": another sweep is writing this folder (it holds " + lock +
                                     "); wait for it to finish or give another --out");
  EXPECT_FALSE(fs::exists(d / "results.jsonl"));
  // Another shard holds it shared: shards may join, an unsharded run may not.
  ASSERT_EQ(::flock(fd, LOCK_SH | LOCK_NB), 0);
  EXPECT_FALSE(run_sweep(*s, o).ok());
  SweepOptions shard = o;
  shard.shards = 2;
  shard.shard = 1;
  const std::string shard_lock = lock + ".1-of-2";
  const int sfd = ::open(shard_lock.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_EQ(::flock(sfd, LOCK_EX | LOCK_NB), 0);  // shard 1/2 is being written
  auto same = run_sweep(*s, shard);
  ASSERT_FALSE(same.ok());
  EXPECT_NE(same.error().message().find("another sweep is writing shard 1/2 of this folder"),
            std::string::npos)
      << same.error().message();
  shard.shard = 0;
  auto other = run_sweep(*s, shard);
  ASSERT_TRUE(other.ok()) << other.error().message();
  EXPECT_EQ(other->computed, 6u);
  ::close(sfd);
  ::close(fd);  // released: the folder is free again
  auto after = run_sweep(*s, o);
  ASSERT_TRUE(after.ok()) << after.error().message();
  EXPECT_EQ(after->skipped, 6u);
  EXPECT_EQ(after->computed, 6u);
}

// Two sweeps into the same folder at once (the command line): one runs, the other is refused with
// exit 2; no index is written twice.
TEST(Sweep, ConcurrentCommandLinesDoNotInterleave) {
  const fs::path d = fresh_dir("concurrent");
  const fs::path spec = testing::test_temp_path("sweep_concurrent.json");
  std::ofstream(spec.string()) << spec_json().dump();
  const std::string cmd =
      std::string(FORESIGHT_BINARY) + " sweep " + spec.string() + " -j 1 --out " + d.string();
  fs::create_directories(d);
  const std::string lock = (d / kSweepLockFile).string();
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  FILE* pipe = popen((cmd + " 2>&1").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, pipe)) out += buf;
  const int st = pclose(pipe);
  ::close(fd);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 2) << out;
  EXPECT_NE(out.find("error: " + d.string() + ": another sweep is writing this folder"), std::string::npos)
      << out;
  // Both at once, unlocked: every index exactly once in the results.
  const std::string both = "(" + cmd + " > /dev/null 2>&1 & " + cmd + " > /dev/null 2>&1; wait)";
  ASSERT_EQ(std::system(both.c_str()), 0);
  ASSERT_EQ(std::system((cmd + " > /dev/null 2>&1").c_str()), 0);  // whichever was refused
  std::istringstream lines(slurp((d / "results.jsonl").string()));
  std::set<std::size_t> seen;
  int rows = 0;
  for (std::string line; std::getline(lines, line); ++rows) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_TRUE(seen.insert(j.at("index").get<std::size_t>()).second) << line;
  }
  EXPECT_EQ(rows, 12);
}

TEST(Sweep, ShardsGiveTheSameResultsAsOneRun) {
  auto s = sweep_from_json(spec_json(), "s.json");
  ASSERT_TRUE(s.ok());
  const fs::path one = fresh_dir("one"), split = fresh_dir("split");
  SweepOptions o;
  o.out_dir = one.string();
  ASSERT_TRUE(run_sweep(*s, o).ok());
  for (int i = 0; i < 3; ++i) {
    SweepOptions so;
    so.out_dir = split.string();
    so.shard = i;
    so.shards = 3;
    so.threads = 1;
    auto st = run_sweep(*s, so);
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(st->total, 4u);
  }
  EXPECT_EQ(slurp((one / "results.csv").string()), slurp((split / "results.csv").string()));
}

TEST(Sweep, ResumeSkipsFinishedPointsAndLosesNone) {
  auto s = sweep_from_json(spec_json(), "s.json");
  ASSERT_TRUE(s.ok());
  const fs::path d = fresh_dir("resume");
  SweepOptions o;
  o.out_dir = d.string();
  ASSERT_TRUE(run_sweep(*s, o).ok());
  const std::string full = slurp((d / "results.csv").string());
  // Keep 5 complete lines and half of the sixth, as a kill in the middle of a write leaves it.
  std::istringstream lines(slurp((d / "results.jsonl").string()));
  std::string kept, line;
  for (int i = 0; i < 5 && std::getline(lines, line); ++i) kept += line + "\n";
  std::getline(lines, line);
  kept += line.substr(0, line.size() / 2);
  std::ofstream((d / "results.jsonl").string()) << kept;
  auto again = run_sweep(*s, o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->skipped, 5u);
  EXPECT_EQ(again->computed, 7u);
  EXPECT_EQ(slurp((d / "results.csv").string()), full);
  // The torn line is gone from the file, not only skipped: 12 whole rows.
  std::istringstream after(slurp((d / "results.jsonl").string()));
  int rows = 0;
  for (std::string l; std::getline(after, l); ++rows)
    EXPECT_FALSE(nlohmann::json::parse(l, nullptr, false).is_discarded()) << l;
  EXPECT_EQ(rows, 12);
}

// Results of another spec in the same folder are never resumed from or mixed in.
TEST(Sweep, RefusesToResumeAnotherSpecsResults) {
  auto s = sweep_from_json(spec_json(), "s.json");
  ASSERT_TRUE(s.ok());
  const fs::path d = fresh_dir("other_spec");
  SweepOptions o;
  o.out_dir = d.string();
  ASSERT_TRUE(run_sweep(*s, o).ok());
  nlohmann::json changed = spec_json();
  changed["base"]["plan"]["zero_stage"] = 0;
  auto t = sweep_from_json(changed, "t.json");
  ASSERT_TRUE(t.ok());
  EXPECT_NE(t->id, s->id);
  auto r = run_sweep(*t, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("holds results of a different sweep spec"), std::string::npos)
      << r.error().message();
  // The same spec resumes as before.
  auto same = run_sweep(*s, o);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->skipped, 12u);
}

// The command line, killed with SIGKILL at an arbitrary moment and run again.
TEST(Sweep, SurvivesSigkill) {
  const fs::path d = fresh_dir("kill"), clean = fresh_dir("clean");
  const fs::path spec = testing::test_temp_path("sweep_kill.json");
  std::ofstream(spec.string()) << spec_json().dump();
  const std::string bin = FORESIGHT_BINARY;
  const std::string base = bin + " sweep " + spec.string() + " -j 1 --out ";
  ASSERT_EQ(std::system((base + clean.string() + " > /dev/null 2>&1").c_str()), 0);
  const int killed = std::system(("timeout -s KILL 0.15 " + base + d.string() + " > /dev/null 2>&1").c_str());
  (void)killed;  // killed or finished: either way nothing may be lost
  ASSERT_EQ(std::system((base + d.string() + " > /dev/null 2>&1").c_str()), 0);
  EXPECT_EQ(slurp((d / "results.csv").string()), slurp((clean / "results.csv").string()));
}

// mpirun -np 2 foresight sweep: ranks share the points, rank 0 writes the CSV; same results.
TEST(Sweep, MpiRanksGiveTheSameResults) {
#ifndef FORESIGHT_MPIEXEC
  GTEST_SKIP() << "built without MPI";
#else
  const fs::path d = fresh_dir("mpi"), clean = fresh_dir("mpi_clean");
  const fs::path spec = testing::test_temp_path("sweep_mpi.json");
  std::ofstream(spec.string()) << spec_json().dump();
  const std::string bin = FORESIGHT_BINARY;
  ASSERT_EQ(std::system(
                (bin + " sweep " + spec.string() + " --out " + clean.string() + " > /dev/null 2>&1").c_str()),
            0);
  const std::string mpi = std::string(FORESIGHT_MPIEXEC) + " --allow-run-as-root --oversubscribe -np 2 " +
                          bin + " sweep " + spec.string() + " -j 1 --out " + d.string() + " > /dev/null 2>&1";
  if (std::system(mpi.c_str()) != 0) GTEST_SKIP() << "mpirun could not start 2 ranks here";
  EXPECT_EQ(slurp((d / "results.csv").string()), slurp((clean / "results.csv").string()));
#endif
}

}  // namespace
}  // namespace foresight

// resolve_job: the one step from a request (model, cluster, plan file, overrides, device count) to
// a complete, valid job, and how its errors name their sources.
#include "sim/spec/job.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace foresight {
namespace {

std::string error_of(const JobRequest& r) {
  auto job = resolve_job(r);
  return job.ok() ? "" : job.error().message();
}

JobRequest tiny_request() {
  JobRequest r;
  r.model = "tiny";
  r.cluster = "dgx-a100-hdr";
  r.overrides = nlohmann::json::object();
  r.gpus.reset();
  return r;
}

// A plan file in a fresh temporary folder, removed with the fixture.
class JobFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("job_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& text) {
    const std::string path = (dir_ / "plan.json").string();
    std::ofstream(path) << text;
    return path;
  }
  std::filesystem::path dir_;
};

TEST(Job, DefaultRequestIsTheBuiltInExample) {
  auto job = resolve_job(default_job_request());
  ASSERT_TRUE(job.ok()) << job.error().message();
  EXPECT_EQ(job->model.name, "llama3-70b");
  EXPECT_EQ(job->plan.tp, 8);
  EXPECT_EQ(job->plan.pp, 2);
  EXPECT_EQ(job->plan.dp, 4);  // 64 / (8 * 2)
  EXPECT_TRUE(job->plan.sequence_parallel);
  EXPECT_EQ(job->plan.zero_stage, 1);
  EXPECT_EQ(job->plan.global_batch, 256);  // at least 4 micro-batches per stage, never below 256
  EXPECT_EQ(job->cluster.total_accelerators(), 64);
  EXPECT_EQ(job->plan_source, "command line");
}

TEST(Job, DerivesDpDevicesAndTheGlobalBatch) {
  JobRequest r = tiny_request();
  r.gpus = 16;
  r.overrides = {{"tp", 2}};
  auto job = resolve_job(r);
  ASSERT_TRUE(job.ok()) << job.error().message();
  EXPECT_EQ(job->plan.dp, 8);
  EXPECT_EQ(job->cluster.nodes, 2);
  EXPECT_EQ(job->plan.global_batch, 256);

  // Without a device count: the degrees when dp is given, the whole cluster otherwise.
  r.gpus.reset();
  r.overrides = {{"tp", 2}, {"dp", 4}, {"pp", 2}, {"global_batch", 64}};
  job = resolve_job(r);
  ASSERT_TRUE(job.ok()) << job.error().message();
  EXPECT_EQ(job->cluster.total_accelerators(), 16);
  EXPECT_EQ(job->plan.global_batch, 64);
  // Many micro-batches per stage: the default global batch grows past 256 (4 per stage).
  r.gpus = 1024;
  r.overrides = {{"pp", 2}, {"micro_batch", 2}};
  job = resolve_job(r);
  ASSERT_TRUE(job.ok()) << job.error().message();
  EXPECT_EQ(job->plan.dp, 512);
  EXPECT_EQ(job->plan.global_batch, 4LL * 2 * 512 * 2);
}

TEST(Job, InterleavedWhenVirtualStagesAndNoSchedule) {
  JobRequest r = tiny_request();
  r.model = "small";  // 4 layers: 2 stages of 2 chunks
  r.gpus = 8;
  r.overrides = {{"pp", 2}, {"virtual_stages", 2}, {"global_batch", 16}};
  auto job = resolve_job(r);
  ASSERT_TRUE(job.ok()) << job.error().message();
  EXPECT_EQ(job->plan.schedule, Schedule::kInterleaved1F1B);
  // A schedule given is kept, and checked.
  r.overrides["schedule"] = "1f1b";
  EXPECT_EQ(error_of(r), "command line: /virtual_stages: 2 needs schedule \"interleaved-1f1b\"");
}

TEST(Job, ErrorsNameTheSourceThatHoldsTheValue) {
  JobRequest r = tiny_request();
  r.overrides = {{"tp", 0}};
  EXPECT_EQ(error_of(r), "command line: /tp: 0 is out of range; expected an integer in [1, 1048576]");
  r.overrides = {{"data", {{"prefetch", -1}}}};
  EXPECT_EQ(error_of(r).rfind("command line: /data/prefetch: ", 0), 0u) << error_of(r);
  r.overrides = {{"tpp", 2}};
  EXPECT_NE(error_of(r).find("command line: /tpp"), std::string::npos) << error_of(r);
  r.overrides = nlohmann::json::array();
  EXPECT_EQ(error_of(r), "command line: expected plan fields (a JSON object)");
  r = tiny_request();
  r.model = "no-such-model";
  r.model_label = "--model";
  EXPECT_EQ(error_of(r).rfind("--model: ", 0), 0u) << error_of(r);
  r = tiny_request();
  r.gpus = 12;
  r.gpus_label = "--gpus";
  EXPECT_EQ(error_of(r).rfind("--gpus: ", 0), 0u) << error_of(r);
}

TEST_F(JobFile, OverridesGoOverTheFileAndErrorsNameEach) {
  JobRequest r = tiny_request();
  r.plan_file = write(R"({"tp": 2, "pp": 2, "dp": 2, "global_batch": 32, "data": {"prefetch": 4}})");
  r.overrides = {{"pp", 1}, {"dp", 4}, {"data", {{"loader_cores", 2}}}};
  auto job = resolve_job(r);
  ASSERT_TRUE(job.ok()) << job.error().message();
  EXPECT_EQ(job->plan.tp, 2);
  EXPECT_EQ(job->plan.pp, 1);
  EXPECT_EQ(job->plan.dp, 4);
  EXPECT_EQ(job->plan.data.prefetch, 4);  // objects merge field by field
  EXPECT_EQ(job->plan.data.loader_cores, 2);
  EXPECT_EQ(job->plan_source, r.plan_file);
  EXPECT_EQ(job->cluster.total_accelerators(), 8);

  // A bad file value is the file's error; a bad override the command line's.
  r.plan_file = write(R"({"tp": -2, "global_batch": 32})");
  r.overrides = nlohmann::json::object();
  EXPECT_EQ(error_of(r).rfind(r.plan_file + ": /tp: ", 0), 0u) << error_of(r);
  r.plan_file = write(R"({"tp": 2, "global_batch": 32})");
  r.overrides = {{"tp", "two"}};
  EXPECT_EQ(error_of(r).rfind("command line: /tp: ", 0), 0u) << error_of(r);
  // A plan file needs its global batch; overrides alone do not.
  r.plan_file = write(R"({"tp": 2})");
  r.overrides = nlohmann::json::object();
  EXPECT_NE(error_of(r).find("/global_batch: missing required field"), std::string::npos) << error_of(r);
}

TEST_F(JobFile, AFileWithoutDpTakesTheDeviceCount) {
  JobRequest r = tiny_request();
  r.plan_file = write(R"({"tp": 2, "global_batch": 64})");
  r.gpus = 16;
  auto job = resolve_job(r);
  ASSERT_TRUE(job.ok()) << job.error().message();
  EXPECT_EQ(job->plan.dp, 8);
  r.gpus.reset();  // and without one, dp 1: the plan's own degrees
  job = resolve_job(r);
  ASSERT_TRUE(job.ok()) << job.error().message();
  EXPECT_EQ(job->plan.dp, 1);
  EXPECT_EQ(job->cluster.total_accelerators(), 2);
}

TEST(Job, RecomputeLayersAutoTakesTheFewestThatFit) {
  JobRequest r = tiny_request();
  r.gpus = 8;
  r.overrides = {{"recompute_layers", "auto"}, {"global_batch", 8}};
  EXPECT_NE(error_of(r).find("/recompute_layers: auto needs the analytic model"), std::string::npos);
  int asked = 0;
  r.fit_recompute_layers = [&asked](const ModelSpec&, const ClusterSpec&, const Plan& p) {
    ++asked;
    EXPECT_EQ(p.recompute, Recompute::kFull);  // none becomes full: auto chooses how many
    return 1;
  };
  auto job = resolve_job(r);
  ASSERT_TRUE(job.ok()) << job.error().message();
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(job->plan.recompute_layers, 1);
  r.fit_recompute_layers = [](const ModelSpec&, const ClusterSpec&, const Plan&) { return -1; };
  EXPECT_NE(error_of(r).find("does not fit even when every layer recomputes"), std::string::npos);
}

TEST(Job, APlanAlreadyBuiltIsCheckedTheSameWay) {
  JobRequest r = tiny_request();
  r.overrides_source = "plan";
  Plan p;
  p.tp = 2;
  p.dp = 4;
  p.global_batch = 16;
  r.plan = p;
  auto job = resolve_job(r);
  ASSERT_TRUE(job.ok()) << job.error().message();
  EXPECT_EQ(job->cluster.total_accelerators(), 8);
  p.dp = 0;
  r.plan = p;
  EXPECT_EQ(error_of(r), "plan: tp, pp, dp and cp must be >= 1");
  p.dp = 4;
  p.global_batch = 15;
  r.plan = p;
  EXPECT_EQ(error_of(r).rfind("plan: /global_batch: 15 is not a multiple", 0), 0u) << error_of(r);
}

}  // namespace
}  // namespace foresight

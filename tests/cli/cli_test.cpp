// The command-line tool on good and bad input: a clear message and a non-zero exit, never a crash.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

namespace {

struct CliRun {
  int status = -1;  // exit code, or 128+signal
  std::string output;
};

CliRun run(const std::string& args) {
  const std::string cmd = std::string(FORESIGHT_BINARY) + " " + args + " 2>&1";
  CliRun r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), buf.size(), pipe)) r.output += buf.data();
  const int st = pclose(pipe);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

const std::string kBad = std::string(FORESIGHT_TEST_DATA) + "/bad/";

TEST(Cli, DefaultJobPrintsATable) {
  const CliRun r = run("");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("step time"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("memory per device"), std::string::npos);
}

TEST(Cli, PredictJsonHasThePrediction) {
  const CliRun r = run("predict --model llama3-8b --cluster dgx-h100-ndr --gpus 8 --tp 2 --zero 1 --json");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("\"step_time_s\""), std::string::npos);
  EXPECT_NE(r.output.find("\"mfu\""), std::string::npos);
}

// What a step costs, and with --tokens the whole run: steps = tokens / tokens per step, the cost
// of each step at the given price per device-hour.
TEST(Cli, PredictCostsTheStepAndTheRun) {
  const CliRun r =
      run("predict --model llama3-8b --cluster dgx-h100-ndr --gpus 8 --tp 2 --zero 1 --gb 64 --price 2 "
          "--tokens 1T --json");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  const auto& e = j.at("economics");
  const double step = j.at("step_time_s").get<double>();
  EXPECT_NEAR(e.at("cost_per_step_usd").get<double>(), 8 * 2.0 * step / 3600, 1e-9);
  EXPECT_NEAR(e.at("steps").get<double>(), std::ceil(1e12 / (64.0 * 8192)), 0.5);
  EXPECT_NEAR(e.at("cost_to_train_usd").get<double>(),
              e.at("steps").get<double>() * e.at("cost_per_step_usd").get<double>(), 1e-6);
  const CliRun table =
      run("simulate --model llama3-8b --cluster dgx-h100-ndr --gpus 8 --tp 2 --zero 1 --gb 64 --tokens 1T");
  ASSERT_EQ(table.status, 0) << table.output;
  EXPECT_NE(table.output.find("per million tokens"), std::string::npos) << table.output;
  EXPECT_NE(table.output.find("to train on 1T tokens"), std::string::npos) << table.output;
}

TEST(Cli, HuggingFaceConfigAsModel) {
  const CliRun r = run(
      "predict --model " + std::string(FORESIGHT_TEST_DATA) +
      "/hf/llama3-8b-config.json --cluster dgx-h100-ndr --gpus 8 --tp 2 --sp true --zero 1 --recompute full");
  EXPECT_EQ(r.status, 0) << r.output;
}

// Bad input of every kind lives in tests/corpus/ (one file per case, run by corpus_test.cpp).

// reliability on the default job: the Monte-Carlo run within its event budget, in text and JSON.
TEST(Cli, ReliabilityNormalRun) {
  const CliRun text = run("reliability");
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("job MTBF"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("by Monte-Carlo (200 runs"), std::string::npos) << text.output;
  const CliRun r = run("reliability --json --tokens 1T");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j.at("effective_time_method"), "monte-carlo");
  EXPECT_EQ(j.at("effective_time"), j.at("effective_time_mc"));
  EXPECT_GT(j.at("effective_time").get<double>(), 0.9);
  EXPECT_LE(j.at("monte_carlo_events").get<double>(), j.at("monte_carlo_event_budget").get<double>());
  EXPECT_NEAR(j.at("time_to_train_s").get<double>(),
              j.at("time_to_train_without_failures_s").get<double>() / j.at("effective_time").get<double>(),
              1e-6);
}

// A run too long for the Monte-Carlo budget (it used to run without end): the closed form, said in
// the text and the JSON.
TEST(Cli, ReliabilityBeyondTheBudgetUsesTheClosedForm) {
  const CliRun text = run("reliability --run 1e12d");
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("closed form, no Monte-Carlo: 200 trials would simulate about"),
            std::string::npos)
      << text.output;
  const CliRun r = run("reliability --run 1e12d --json");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j.at("effective_time_method"), "closed-form");
  EXPECT_TRUE(j.at("effective_time_mc").is_null());
  EXPECT_GT(j.at("monte_carlo_events").get<double>(), j.at("monte_carlo_event_budget").get<double>());
  EXPECT_NEAR(j.at("effective_time").get<double>(), j.at("effective_time_model").get<double>(), 1e-9);
  EXPECT_NE(j.at("note").get<std::string>().find("over the budget"), std::string::npos);
  // The highest failure rate taken (a failure a minute for 64 devices): the closed form too, at once.
  const CliRun hopeless = run("reliability --failure-rate 1 --json");
  ASSERT_EQ(hopeless.status, 0) << hopeless.output;
  const auto h = nlohmann::json::parse(hopeless.output);
  EXPECT_EQ(h.at("effective_time_method"), "closed-form");
  EXPECT_LT(h.at("effective_time").get<double>(), 1e-3);
}

// capacity with tensor and pipeline parallelism finds a model at least as large as the one predict
// fits (it used to say that not even the smallest fits, and exit 0).
TEST(Cli, CapacityNormalRun) {
  const std::string plan =
      "--model llama3-8b --cluster dgx-h100-ndr --gpus 8 --tp 2 --pp 2 --zero 1 --recompute full --gb 64";
  ASSERT_EQ(run("predict " + plan).status, 0);
  const CliRun text = run("capacity " + plan);
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("on the device"), std::string::npos) << text.output;
  EXPECT_EQ(text.output.find("not even"), std::string::npos) << text.output;
  const CliRun r = run("capacity " + plan + " --json");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  ASSERT_EQ(j.at("results").size(), 3u);
  for (const auto& row : j.at("results")) {
    ASSERT_TRUE(row.contains("params")) << row.dump();
    EXPECT_GT(row.at("params").get<double>(), 8e9);
    EXPECT_EQ(row.at("model").at("heads").get<int>() % 2, 0);
  }
  // One device, the default: the same answer as before the fix.
  const CliRun one =
      run("capacity --model llama3-8b --cluster dgx-a100-40gb-hdr --recompute full --seq-len 2048 --gb 8");
  EXPECT_EQ(one.status, 0) << one.output;
}

// Nothing of the family fits at any offload level: each level's reason, and exit 1 (a check
// failed), not 0.
TEST(Cli, CapacityNothingFitsExitsOne) {
  const CliRun r =
      run("capacity --model llama3-8b --cluster dgx-h100-ndr --gpus 8 --tp 2 --mb 512 --gb 2048");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("not even the smallest model of llama3-8b's family (hidden 256, 1 layers, 2 heads"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("error: capacity: no model of llama3-8b's family fits this plan"),
            std::string::npos)
      << r.output;
}

TEST(Cli, ValidateReportsFailedCases) {
  const CliRun r = run("validate " + kBad + "does-not-fit.json");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("FAILED"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("gate failed: 1 of 1 cases could not be predicted"), std::string::npos) << r.output;
}

// The case's error is near -100% (a tiny model measured at 1 s): a 100% gate passes it, a 5% gate
// fails it and says which measure exceeded which limit, in the table and in JSON mode alike.
TEST(Cli, ValidateGateSaysWhyItFailed) {
  const std::string c = std::string(FORESIGHT_TEST_DATA) + "/validate/tiny-a100.json";
  const CliRun pass = run("validate " + c + " --max-mape 100 --max-error 100");
  EXPECT_EQ(pass.status, 0) << pass.output;
  EXPECT_EQ(pass.output.find("gate failed"), std::string::npos) << pass.output;
  const CliRun mape = run("validate " + c + " --max-mape 5");
  EXPECT_EQ(mape.status, 1) << mape.output;
  EXPECT_NE(mape.output.find("gate failed: MAPE 99."), std::string::npos) << mape.output;
  EXPECT_NE(mape.output.find("% > --max-mape 5%"), std::string::npos) << mape.output;
  const CliRun worst = run("validate " + c + " --json --max-error 2.5");
  EXPECT_EQ(worst.status, 1) << worst.output;
  EXPECT_NE(worst.output.find("gate failed: worst case tiny-a100 error 99."), std::string::npos)
      << worst.output;
  EXPECT_NE(worst.output.find("% > --max-error 2.5%"), std::string::npos) << worst.output;
}

}  // namespace

// The command-line tool on good and bad input: a clear message and a non-zero exit, never a crash.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
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
  const CliRun r = run("predict --model llama3-8b --cluster dgx-h100-ndr --gpus 8 --tp 2 --zero 1 --gb 64 --price 2 --tokens 1T --json");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  const auto& e = j.at("economics");
  const double step = j.at("step_time_s").get<double>();
  EXPECT_NEAR(e.at("cost_per_step_usd").get<double>(), 8 * 2.0 * step / 3600, 1e-9);
  EXPECT_NEAR(e.at("steps").get<double>(), std::ceil(1e12 / (64.0 * 8192)), 0.5);
  EXPECT_NEAR(e.at("cost_to_train_usd").get<double>(), e.at("steps").get<double>() * e.at("cost_per_step_usd").get<double>(), 1e-6);
  const CliRun table = run("simulate --model llama3-8b --cluster dgx-h100-ndr --gpus 8 --tp 2 --zero 1 --gb 64 --tokens 1T");
  ASSERT_EQ(table.status, 0) << table.output;
  EXPECT_NE(table.output.find("per million tokens"), std::string::npos) << table.output;
  EXPECT_NE(table.output.find("to train on 1T tokens"), std::string::npos) << table.output;
}

TEST(Cli, HuggingFaceConfigAsModel) {
  const CliRun r = run("predict --model " + std::string(FORESIGHT_TEST_DATA) +
                    "/hf/llama3-8b-config.json --cluster dgx-h100-ndr --gpus 8 --tp 2 --sp true --zero 1 --recompute full");
  EXPECT_EQ(r.status, 0) << r.output;
}

// Bad input of every kind lives in tests/corpus/ (one file per case, run by corpus_test.cpp).

TEST(Cli, ValidateReportsFailedCases) {
  const CliRun r = run("validate " + kBad + "does-not-fit.json");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("FAILED"), std::string::npos) << r.output;
}

}  // namespace

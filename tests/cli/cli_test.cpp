// The command-line tool on good and bad input: a clear message and a non-zero exit, never a crash.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct CliRun {
  int status = -1;  // exit code, or 128+signal
  std::string output;
};

// Runs `foresight ARGS`; the output holds stdout and stderr together, or stdout alone with
// stdout_only (for JSON that must parse whole).
CliRun run(const std::string& args, bool stdout_only = false) {
  const std::string cmd =
      std::string(FORESIGHT_BINARY) + " " + args + (stdout_only ? " 2>/dev/null" : " 2>&1");
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

// `foresight ARGS` run for its JSON on stdout: exit 0 and an object that parses.
nlohmann::json run_json(const std::string& args) {
  const CliRun r = run(args, /*stdout_only=*/true);
  EXPECT_EQ(r.status, 0) << args << "\n" << r.output;
  auto j = nlohmann::json::parse(r.output, nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(j.is_object()) << args << "\n" << r.output;
  return j.is_object() ? j : nlohmann::json::object();
}

// Bad input: exit 2 and "error: " with the message, on stderr.
void expect_input_error(const std::string& args, const std::string& message) {
  const CliRun r = run(args);
  EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
  EXPECT_NE(r.output.find("error: " + message), std::string::npos) << args << "\n" << r.output;
}

void expect_keys(const nlohmann::json& j, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    EXPECT_TRUE(j.contains(k)) << "no \"" << k << "\" in " << j.dump().substr(0, 400);
}

// A fresh folder under the system's temporary one, removed at the end of the test.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() /
             ("foresight-cli-" + std::to_string(::getpid()) + "-" + name)) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& file) const { return (path / file).string(); }
};

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

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

// --repeat-kv reaches the plan and its summary line; a plan file's value that is not a boolean is
// refused with the field named.
TEST(Cli, RepeatedKvInThePlanLine) {
  const CliRun r =
      run("predict --model llama3-8b --cluster dgx-h100-ndr --gpus 8 --tp 1 --zero 3 --gb 8 "
          "--repeat-kv true");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("| K/V repeated per head"), std::string::npos) << r.output;
  const CliRun plain =
      run("predict --model llama3-8b --cluster dgx-h100-ndr --gpus 8 --tp 1 --zero 3 --gb 8");
  EXPECT_EQ(plain.output.find("K/V repeated"), std::string::npos) << plain.output;
  TempDir dir("repeat-kv");
  write_file(dir / "plan.json", R"({"global_batch": 8, "dp": 8, "repeat_kv": "yes"})");
  const CliRun bad = run("predict --model llama3-8b --gpus 8 --plan " + (dir / "plan.json"));
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_NE(bad.output.find("/repeat_kv: expected true or false"), std::string::npos) << bad.output;
}

// --expert-gemm per_expert (Transformer Engine's GroupedLinear) shows in an MoE plan's line, costs
// the host an issue per expert and so a host-bound MoE step time; a bad value names the option.
TEST(Cli, PerExpertGemmsInThePlanLine) {
  const std::string layout =
      "predict --model mixtral-8x7b --cluster dgx-h100-ndr --gpus 32 --tp 2 --ep 8 --zero 1 --gb 32";
  const std::string base = layout + " --json";
  const CliRun grouped = run(base);
  ASSERT_EQ(grouped.status, 0) << grouped.output;
  const CliRun each = run(base + " --expert-gemm per_expert");
  ASSERT_EQ(each.status, 0) << each.output;
  // One expert per rank: the same launches; the dropless synchronisation is there either way.
  EXPECT_NEAR(nlohmann::json::parse(each.output).at("step_time_s").get<double>(),
              nlohmann::json::parse(grouped.output).at("step_time_s").get<double>(), 1e-9);
  const CliRun line = run(layout + " --expert-gemm per_expert");
  EXPECT_NE(line.output.find("| a GEMM per expert"), std::string::npos) << line.output;
  const CliRun bad = run(base + " --expert-gemm each");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_NE(bad.output.find("--expert-gemm"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("per_expert"), std::string::npos) << bad.output;
}

// --moe-capacity-factor: token drop with padding in the plan line; at factor 1 it drops the
// dropless synchronisation, so the step is no slower; a negative factor is refused by name.
TEST(Cli, TokenDropInThePlanLine) {
  const std::string layout =
      "predict --model mixtral-8x7b --cluster dgx-h100-ndr --gpus 32 --tp 2 --ep 8 --zero 1 --gb 32";
  const CliRun dropless = run(layout + " --json");
  ASSERT_EQ(dropless.status, 0) << dropless.output;
  const CliRun padded = run(layout + " --moe-capacity-factor 1 --json");
  ASSERT_EQ(padded.status, 0) << padded.output;
  EXPECT_LE(nlohmann::json::parse(padded.output).at("step_time_s").get<double>(),
            nlohmann::json::parse(dropless.output).at("step_time_s").get<double>());
  const CliRun line = run(layout + " --moe-capacity-factor 1.25");
  EXPECT_NE(line.output.find("| token drop, capacity factor 1.25"), std::string::npos) << line.output;
  const CliRun bad = run(layout + " --moe-capacity-factor -1");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_NE(bad.output.find("capacity"), std::string::npos) << bad.output;
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

// ---- Every subcommand: a normal run checked on its content, --json with its keys, bad input. ----

const std::string k8b = "--model llama3-8b --cluster dgx-h100-ndr --gpus 8";

// predict: the time breakdown adds up to the step (recompute is "of which", inside compute), the
// throughput is the batch's tokens over the step, and the memory fits.
TEST(CliPredict, BreakdownAddsUpToTheStep) {
  const std::string plan =
      "--model llama3-8b --cluster dgx-h100-ndr --gpus 16 --tp 2 --pp 2 --zero 1 --gb 64 --recompute full";
  const auto j = run_json("predict " + plan + " --json");
  expect_keys(j, {"step_time_s", "tokens_per_s", "mfu", "breakdown_s", "memory_bytes", "economics", "model",
                  "cluster", "plan", "fits"});
  const double step = j.at("step_time_s").get<double>();
  double sum = 0;
  for (const auto& [k, v] : j.at("breakdown_s").items())
    if (k != "recompute") sum += v.get<double>();
  EXPECT_GT(j.at("breakdown_s").at("recompute").get<double>(), 0);
  EXPECT_NEAR(sum, step, 1e-9 * step);
  EXPECT_NEAR(j.at("tokens_per_s").get<double>() * step, 64.0 * 8192, 1e-6 * 64 * 8192);
  EXPECT_GT(j.at("mfu").get<double>(), 0.05);
  EXPECT_LT(j.at("mfu").get<double>(), 1.0);
  EXPECT_TRUE(j.at("fits").get<bool>());
  EXPECT_LE(j.at("memory_bytes").at("total").get<double>(),
            j.at("memory_bytes").at("capacity").get<double>());
  EXPECT_EQ(j.at("plan").at("pp").get<int>(), 2);
  EXPECT_EQ(j.at("plan").at("dp").get<int>(), 4);  // derived: 16 / (tp 2 x pp 2)
  // The table says the same step time and the stage the memory is for, and where published runs
  // of the plan's class measured against such a prediction.
  const CliRun text = run("predict " + plan);
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("likely "), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("published runs of its class (sharding ZeRO-1/2, "), std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("plan (command line): tp 2 pp 2 dp 4 cp 1 ep 1"), std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("memory per device (pipeline stage "), std::string::npos) << text.output;
  expect_input_error("predict " + k8b + " --tp 3", "--gpus: 8 is not a multiple of tp*pp*cp = 3");
}

// simulate: one simulated rank per pipeline stage (all of them with --full), a step close to the
// analytic model's, link utilisations that are shares, and a trace that parses.
TEST(CliSimulate, RanksLinksAndTrace) {
  const TempDir tmp("simulate");
  const std::string plan = k8b + " --tp 2 --pp 2 --zero 1 --gb 64";
  const auto j = run_json("simulate " + plan + " --json --trace " + tmp / "t.json");
  expect_keys(j, {"step_time_s", "engine", "symmetric", "simulated_ranks", "events", "busiest_links",
                  "economics", "plan"});
  EXPECT_EQ(j.at("engine"), "des");
  EXPECT_TRUE(j.at("symmetric").get<bool>());
  EXPECT_EQ(j.at("simulated_ranks").get<int>(), 2);
  EXPECT_GT(j.at("events").get<double>(), 0);
  ASSERT_FALSE(j.at("busiest_links").empty());
  for (const auto& l : j.at("busiest_links")) {
    EXPECT_GT(l.at("utilisation").get<double>(), 0) << l.dump();
    EXPECT_LE(l.at("utilisation").get<double>(), 1) << l.dump();
  }
  const double analytic = run_json("predict " + plan + " --json").at("step_time_s").get<double>();
  EXPECT_NEAR(j.at("step_time_s").get<double>(), analytic, 0.2 * analytic);
  std::ifstream trace(tmp / "t.json");
  const auto t = nlohmann::json::parse(trace, nullptr, false);
  ASSERT_TRUE(t.is_object());
  EXPECT_FALSE(t.at("traceEvents").empty());
  const auto full = run_json("simulate " + plan + " --full --network alpha-beta --json");
  EXPECT_FALSE(full.at("symmetric").get<bool>());
  EXPECT_EQ(full.at("simulated_ranks").get<int>(), 8);
  const CliRun text = run("simulate " + plan);
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("simulated 2 ranks (one per pipeline stage; siblings by symmetry)"),
            std::string::npos)
      << text.output;
  expect_input_error(
      "simulate " + plan + " --algorithm bogus",
      "--algorithm: \"bogus\" is not one of: ring, tree, hierarchical, halving_doubling, in_switch");
}

// search: every candidate is either timed or rejected for a counted reason, the plans come ranked by
// step time, and the plan written by --out predicts to the best plan's step time.
TEST(CliSearch, RankedPlansAndTheBestPlanFile) {
  const TempDir tmp("search");
  const auto j = run_json("search --model llama3-8b --gpus 8 --gb 64 --top 5 --resimulate 0 --json --out " +
                          tmp / "best.json");
  expect_keys(j, {"model", "cluster", "objective", "candidates", "evaluated", "rejected", "plans", "pareto"});
  long long rejected = 0;
  for (const auto& [reason, n] : j.at("rejected").items()) rejected += n.get<long long>();
  EXPECT_EQ(j.at("evaluated").get<long long>() + rejected, j.at("candidates").get<long long>());
  const auto& plans = j.at("plans");
  ASSERT_EQ(plans.size(), 5u);
  for (std::size_t i = 1; i < plans.size(); ++i)
    EXPECT_LE(plans[i - 1].at("prediction").at("step_time_s").get<double>(),
              plans[i].at("prediction").at("step_time_s").get<double>());
  EXPECT_FALSE(j.at("pareto").empty());
  const auto best = run_json("predict --model llama3-8b --gpus 8 --plan " + tmp / "best.json" + " --json");
  EXPECT_DOUBLE_EQ(best.at("step_time_s").get<double>(),
                   plans[0].at("prediction").at("step_time_s").get<double>());
  // CSV: a header and one row per ranked plan.
  const CliRun csv = run("search --model llama3-8b --gpus 8 --gb 64 --top 5 --resimulate 0 --csv", true);
  ASSERT_EQ(csv.status, 0) << csv.output;
  std::istringstream rows(csv.output);
  std::vector<std::string> lines;
  for (std::string l; std::getline(rows, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 6u) << csv.output;
  EXPECT_EQ(lines[0].rfind("rank,tp,pp,dp,", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind("1,", 0), 0u) << lines[1];
  expect_input_error("search --model llama3-8b --objective speed",
                     "--objective: speed not in {time,cost,energy}");
}

// search --min-headroom: every listed plan leaves that share of its fullest device free, the JSON
// says which margin was applied, and the rejected plans are counted under it.
TEST(CliSearch, MinimumHeadroom) {
  const auto j = run_json("search --model llama3-8b --gpus 8 --gb 64 --top 50 --resimulate 0 --json");
  EXPECT_DOUBLE_EQ(j.at("min_headroom").get<double>(), 0.05);
  const auto k =
      run_json("search --model llama3-8b --gpus 8 --gb 64 --top 50 --resimulate 0 --min-headroom 40 --json");
  EXPECT_DOUBLE_EQ(k.at("min_headroom").get<double>(), 0.40);
  ASSERT_FALSE(k.at("plans").empty());
  for (const auto& p : k.at("plans"))
    EXPECT_GE(p.at("memory_headroom_bytes").get<double>(),
              0.40 * p.at("prediction").at("memory_bytes").at("capacity").get<double>());
  EXPECT_TRUE(k.at("rejected").contains("under 40% of memory free (allocator margin)")) << k.at("rejected");
  EXPECT_LT(k.at("evaluated").get<long long>(), j.at("evaluated").get<long long>());
  expect_input_error("search --model llama3-8b --min-headroom 120",
                     "--min-headroom: \"120\" is not a number in [0, 99]");
}

// sweep: one result per point, each the step time predict gives for that point's plan; a second
// run resumes and computes nothing.
TEST(CliSweep, OneResultPerPointAndResume) {
  const TempDir tmp("sweep");
  write_file(tmp / "spec.json", R"({"base": {"model": "llama3-8b", "cluster": "dgx-h100-ndr", "gpus": 8,
    "plan": {"global_batch": 64, "zero_stage": 1}}, "axes": {"/plan/tp": [2, 4, 8]}})");
  const std::string cmd = "sweep " + tmp / "spec.json" + " -o " + tmp / "out" + " -j 1";
  const CliRun first = run(cmd);
  ASSERT_EQ(first.status, 0) << first.output;
  EXPECT_NE(first.output.find("3 points in this shard: 3 computed, 0 already done"), std::string::npos)
      << first.output;
  const auto rows = read_lines(tmp / "out/results.jsonl");
  ASSERT_EQ(rows.size(), 3u);
  for (const std::string& line : rows) {
    const auto row = nlohmann::json::parse(line);
    ASSERT_TRUE(row.at("ok").get<bool>()) << line;
    const int tp = row.at("axes").at("/plan/tp").get<int>();
    const auto p = run_json("predict " + k8b + " --gb 64 --zero 1 --tp " + std::to_string(tp) + " --json");
    EXPECT_NEAR(row.at("step_time_s").get<double>(), p.at("step_time_s").get<double>(),
                1e-9 * p.at("step_time_s").get<double>())
        << line;
  }
  EXPECT_EQ(read_lines(tmp / "out/results.csv").size(), 4u);
  const CliRun again = run(cmd);
  ASSERT_EQ(again.status, 0) << again.output;
  EXPECT_NE(again.output.find("3 points in this shard: 0 computed, 3 already done (resumed)"),
            std::string::npos)
      << again.output;
  expect_input_error(cmd + " --shard 3/2", "--shard: \"3/2\" is not i/N with 0 <= i < N, e.g. 0/4");
}

// validate: the error is (predicted - measured) / measured; a case measured at exactly the
// predicted step has no error and passes the tightest gate.
TEST(CliValidate, ErrorIsAgainstTheMeasuredStep) {
  const std::string c = std::string(FORESIGHT_TEST_DATA) + "/validate/tiny-a100.json";
  const CliRun failing = run("validate " + c + " --json", true);
  ASSERT_EQ(failing.status, 0) << failing.output;
  const auto j = nlohmann::json::parse(failing.output);
  expect_keys(j, {"engine", "cases", "failed", "mape_pct", "max_abs_error_pct", "worst_id"});
  const auto& r = j.at("cases").at(0);
  const double predicted = r.at("predicted_step_s").get<double>();
  EXPECT_DOUBLE_EQ(r.at("measured_step_s").get<double>(), 1.0);
  EXPECT_NEAR(r.at("error_pct").get<double>(), 100 * (predicted - 1.0), 1e-9);
  EXPECT_NEAR(j.at("mape_pct").get<double>(), std::abs(r.at("error_pct").get<double>()), 1e-9);
  // The same case measured at the predicted step.
  const TempDir tmp("validate");
  std::ifstream in(c);
  auto exact = nlohmann::json::parse(in);
  exact["id"] = "tiny-exact";
  exact["measured"]["step_time_s"] = predicted;
  write_file(tmp / "exact.json", exact.dump());
  const CliRun pass = run("validate " + tmp / "exact.json" + " --max-mape 1e-6 --max-error 1e-6");
  EXPECT_EQ(pass.status, 0) << pass.output;
  EXPECT_NE(pass.output.find("tiny-exact"), std::string::npos) << pass.output;
  EXPECT_NE(pass.output.find("Mean absolute error 0.00%"), std::string::npos) << pass.output;
  expect_input_error("validate " + c + " --max-mape -1",
                     "--max-mape: -1 is not a gate; expected a finite percentage >= 0");
}

// run (the CPU runtime) on the tiny model: every step's loss is finite and training lowers it,
// and the throughput is the batch's tokens over the median step.
TEST(CliRun, TrainsTheTinyModel) {
  const TempDir tmp("run");
  const CliRun r = run("run --model tiny --backend cpu --steps 4 --summary " + tmp / "s.json");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("median step"), std::string::npos) << r.output;
  std::ifstream in(tmp / "s.json");
  const auto s = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(s.is_object());
  expect_keys(s, {"steps", "median_step_s", "tokens_per_s", "predicted_step_s", "plan", "model"});
  const auto& steps = s.at("steps");
  ASSERT_EQ(steps.size(), 4u);
  for (const auto& st : steps) EXPECT_TRUE(std::isfinite(st.at("loss").get<double>())) << st.dump();
  EXPECT_LT(steps.back().at("loss").get<double>(), steps.front().at("loss").get<double>());
  const double tokens = s.at("plan").at("global_batch").get<double>() * 32;  // tiny's sequence
  EXPECT_NEAR(s.at("tokens_per_s").get<double>() * s.at("median_step_s").get<double>(), tokens,
              1e-6 * tokens);
  expect_input_error("run --model tiny --tp 3 --steps 1",
                     "--tp x --pp x --cp = 3 needs a multiple of 3 ranks, but 1 was launched");
}

// compare: a run's measured trace against the simulated trace of the same plan; the step times are
// those of the two traces and the error is their relative difference.
TEST(CliCompare, StepTimesComeFromTheTwoTraces) {
  const TempDir tmp("compare");
  ASSERT_EQ(run("run --model tiny --backend cpu --steps 3 --trace " + tmp / "m.json" + " --summary " +
                tmp / "s.json")
                .status,
            0);
  const auto sim = run_json(
      "simulate --model tiny --cluster cpu-local --gpus 1 --gb 4 --precision fp32 --full "
      "--json --trace " +
      tmp / "p.json");
  const auto j = run_json("compare " + tmp / "p.json" + " " + tmp / "m.json" + " --json");
  expect_keys(
      j, {"predicted_step_s", "measured_step_s", "step_time_error_pct", "matched_ops", "kinds", "ranks"});
  std::ifstream in(tmp / "s.json");
  const auto summary = nlohmann::json::parse(in);
  const double predicted = j.at("predicted_step_s").get<double>(),
               measured = j.at("measured_step_s").get<double>();
  EXPECT_NEAR(predicted, sim.at("step_time_s").get<double>(), 1e-9 * predicted);
  EXPECT_NEAR(measured, summary.at("median_step_s").get<double>(), 1e-6 * measured);
  EXPECT_NEAR(j.at("step_time_error_pct").get<double>(), 100 * (predicted - measured) / measured, 1e-6);
  EXPECT_GT(j.at("matched_ops").get<int>(), 0);
  const CliRun text = run("compare " + tmp / "p.json" + " " + tmp / "m.json");
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("ops matched on 1 rank)"), std::string::npos) << text.output;
  expect_input_error("compare " + tmp / "none.json" + " " + tmp / "m.json",
                     tmp / "none.json" + ": cannot open trace (no such file)");
}

// compare and calibrate --from-trace on a Kineto GPU trace (synthetic, in Kineto's event format):
// the host's time per kernel launched is reported, and becomes the calibrated profile's host_op; a
// second rank's clock is aligned on the collectives both ran.
TEST(CliCompare, KinetoTraceGivesTheHostsTimePerKernel) {
  const TempDir tmp("compare-kineto");
  run_json("simulate --model tiny --cluster dgx-h100-ndr --gpus 1 --gb 4 --json --full --trace " +
           tmp / "p.json");
  // Three steps of 1 ms: two GEMM kernels, each launched inside an aten::mm of 20 us, 5 us apart;
  // then a 600 us cudaStreamSynchronize inside an aten::item of 610 us.
  // A second rank's trace is the same with its clock 3 ms later; an all-reduce ends each step.
  nlohmann::json events = nlohmann::json::array(), shifted = nlohmann::json::array();
  auto x = [&](const char* cat, const char* name, int pid, int tid, double ts, double dur) {
    events.push_back(
        {{"ph", "X"}, {"cat", cat}, {"name", name}, {"pid", pid}, {"tid", tid}, {"ts", ts}, {"dur", dur}});
    shifted.push_back({{"ph", "X"},
                       {"cat", cat},
                       {"name", name},
                       {"pid", pid},
                       {"tid", tid},
                       {"ts", ts + 3000},
                       {"dur", dur}});
  };
  for (int s = 0; s < 3; ++s) {
    const double t0 = 1000.0 + 1000.0 * s;
    x("kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 0, 20, t0 + 800, 100);
    x("user_annotation", ("ProfilerStep#" + std::to_string(s)).c_str(), 1, 1, t0, 1000);
    for (int k = 0; k < 2; ++k) {
      x("cpu_op", "aten::mm", 1, 1, t0 + 10 + 25 * k, 20);
      x("cuda_runtime", "cudaLaunchKernel", 1, 1, t0 + 15 + 25 * k, 5);
      x("kernel", "sm90_xmma_gemm_bf16bf16_bf16f32", 0, 7, t0 + 100 + 150 * k, 100);
    }
    x("cpu_op", "aten::item", 1, 1, t0 + 65, 610);
    x("cuda_runtime", "cudaStreamSynchronize", 1, 1, t0 + 70, 600);
  }
  {
    std::ofstream out(tmp / "k.json");
    out << nlohmann::json{{"traceEvents", events}}.dump();
    std::ofstream(tmp / "k1.json") << nlohmann::json{{"traceEvents", shifted}}.dump();
  }
  // The second rank's clock aligned on the all-reduces, 3 ms back: their steps then start together.
  const auto two =
      run_json("compare " + tmp / "p.json" + " " + tmp / "k.json" + " " + tmp / "k1.json" + " --json");
  ASSERT_EQ(two.at("clocks").size(), 1u);
  EXPECT_NEAR(two.at("clocks").at(0).at("offset_s").get<double>(), -3e-3, 1e-12);
  EXPECT_NEAR(two.at("step_start_skew_s").get<double>(), 0, 1e-12);
  const auto j = run_json("compare " + tmp / "p.json" + " " + tmp / "k.json" + " --json");
  // Busy per step: 20 + 20 (the aten::mm, their launches inside) + 5 (the pause between them) + 10
  // (aten::item less its wait) + 10 (the pause before it) = 65 us over 2 launches.
  EXPECT_NEAR(j.at("host").at("kernels_per_step").get<double>(), 2, 1e-9);
  EXPECT_NEAR(j.at("host").at("per_kernel_s").get<double>(), 32.5e-6, 1e-12);
  const CliRun text = run("compare " + tmp / "p.json" + " " + tmp / "k.json");
  EXPECT_NE(text.output.find("host: 2 kernels launched per rank and step, 32.5 us of host time each"),
            std::string::npos)
      << text.output;
  const CliRun cal = run("calibrate --from-trace " + tmp / "k.json" + " --predicted " + tmp / "p.json" +
                         " --cluster dgx-h100-ndr --trace-passes 1 --out " + tmp / "cal.json");
  ASSERT_EQ(cal.status, 0) << cal.output;
  EXPECT_NE(cal.output.find("host_op: 45 us -> 32.5 us"), std::string::npos) << cal.output;
  const auto h = run_json("predict --model tiny --cluster " + tmp / "cal.json" + " --gpus 1 --gb 4 --json");
  std::ifstream in(tmp / "cal.json");
  const std::string profile((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(profile.find("\"host_op\": \"32.5us\""), std::string::npos);
  EXPECT_TRUE(h.contains("step_time_s"));
}

// run --trace: the measured trace carries the runtime's own memory track, the bytes its tensors
// held after each op: at least the parameters and their gradients (as the prediction of the same
// plan counts them), and rising and falling with the micro-batches' activations.
TEST(CliRun, MeasuredTraceHasTheRuntimesMemoryTrack) {
  const TempDir tmp("memory-track");
  const CliRun r = run("run --model tiny --backend cpu --steps 2 --trace " + tmp / "m.json");
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream in(tmp / "m.json");
  const auto doc = nlohmann::json::parse(in);
  std::vector<double> gib;
  for (const auto& e : doc.at("traceEvents"))
    if (e.value("ph", "") == "C" && e.value("name", "") == "memory")
      gib.push_back(e["args"]["GiB"].get<double>());
  ASSERT_GT(gib.size(), 10u);
  const auto sim =
      run_json("simulate --model tiny --cluster cpu-local --gpus 1 --gb 4 --precision fp32 --json");
  const auto& mem = sim.at("memory_bytes");
  const double state = mem.at("weights").get<double>() + mem.at("gradients").get<double>();
  const auto [lo, hi] = std::minmax_element(gib.begin(), gib.end());
  EXPECT_GE(*lo * (1 << 30), state);
  EXPECT_GT(*hi, *lo);
}

// reliability: Daly's inputs and outputs agree with each other, and the effective time lies below
// the ideal less the downtime every failure costs at least (restart and restore), and above the
// ideal less the checkpoint overhead and the most a failure can cost (an interval, a write, the
// restart and the restore).
TEST(CliReliability, EffectiveTimeWithinItsBounds) {
  for (const std::string extra : {"", " --failure-rate 1e-4", " --failure-rate 1e-3 --restart 30min",
                                  " --failure-rate 1e-3 --checkpoint-every 10"}) {
    const auto j = run_json("reliability --json" + extra);
    expect_keys(j, {"devices", "mtbf_s", "checkpoint_write_s", "restore_s", "restart_s", "interval_s",
                    "interval_steps", "young_interval_s", "daly_interval_s", "effective_time",
                    "effective_time_model", "effective_time_method", "failures_per_run"});
    const double m = j.at("mtbf_s").get<double>(), write = j.at("checkpoint_write_s").get<double>();
    const double down = j.at("restart_s").get<double>() + j.at("restore_s").get<double>();
    const double interval = j.at("interval_s").get<double>(), eff = j.at("effective_time").get<double>();
    EXPECT_NEAR(m, 3600 / (j.at("devices").get<double>() * j.at("failures_per_device_hour").get<double>()),
                1e-9 * m);
    EXPECT_NEAR(j.at("young_interval_s").get<double>(), std::sqrt(2 * write * m),
                1e-6 * std::sqrt(2 * write * m));
    EXPECT_NEAR(j.at("interval_steps").get<double>() * j.at("step_time_s").get<double>(), interval,
                1e-9 * interval);
    EXPECT_LT(eff, 1 - down / m) << extra;
    EXPECT_GT(eff, 1 - write / interval - (interval + write + down) / m) << extra;
    EXPECT_NEAR(j.at("failures_per_run").get<double>(), j.at("run_s").get<double>() / m,
                0.2 * j.at("run_s").get<double>() / m)
        << extra;
  }
  const auto every = run_json("reliability --json --checkpoint-every 10");
  EXPECT_NEAR(every.at("interval_s").get<double>(), 10 * every.at("step_time_s").get<double>(), 1e-9);
  expect_input_error("reliability --soft-fraction 2", "--soft-fraction: 2 is not within 0..1");
  expect_input_error("reliability --run 0", "--run: \"0\" has no unit");
}

// capacity: offloading the optimizer fits a larger model, offloading everything a larger one
// still; each level's model fits the plan by predict, and the optimizer-offloaded one does not
// fit without its offload.
TEST(CliCapacity, OffloadFitsALargerModel) {
  const TempDir tmp("capacity");
  const std::string layout = "--cluster dgx-h100-ndr --gpus 8 --tp 2 --zero 1 --gb 64";
  const auto j = run_json("capacity --model llama3-8b " + layout + " --json");
  expect_keys(j, {"base", "cluster", "plan", "results"});
  const auto& rows = j.at("results");
  ASSERT_EQ(rows.size(), 3u);
  for (const auto& row : rows)
    expect_keys(row, {"offload", "params", "model", "memory_bytes", "capacity_bytes"});
  EXPECT_EQ(rows[0].at("offload"), "none");
  EXPECT_GT(rows[1].at("params").get<double>(), rows[0].at("params").get<double>());
  EXPECT_GT(rows[2].at("params").get<double>(), rows[1].at("params").get<double>());
  EXPECT_GT(rows[1].at("host_bytes").get<double>(), 0);
  EXPECT_LE(rows[2].at("host_bytes").get<double>(), rows[2].at("host_capacity_bytes").get<double>());
  for (int level = 0; level < 2; ++level) {
    const auto& row = rows[static_cast<std::size_t>(level)];
    const std::string model = tmp / ("model" + std::to_string(level) + ".json");
    write_file(model, row.at("model").dump());
    const std::string offload = level == 0 ? "false" : "true";
    const auto p =
        run_json("predict --model " + model + " " + layout + " --offload-optimizer " + offload + " --json");
    EXPECT_DOUBLE_EQ(p.at("memory_bytes").at("total").get<double>(), row.at("memory_bytes").get<double>());
    EXPECT_LE(row.at("memory_bytes").get<double>(), row.at("capacity_bytes").get<double>());
  }
  const CliRun without = run("predict --model " + tmp / "model1.json" + " " + layout);
  EXPECT_EQ(without.status, 2) << without.output;
  EXPECT_NE(without.output.find("plan does not fit in memory"), std::string::npos) << without.output;
  expect_input_error("capacity --model nope", "--model: unknown model 'nope'");
}

// presets: the four kinds, and every model and cluster listed is one that predict loads.
TEST(CliPresets, ListsWhatPredictLoads) {
  const CliRun r = run("presets");
  ASSERT_EQ(r.status, 0) << r.output;
  std::istringstream lines(r.output);
  std::vector<std::pair<std::string, std::vector<std::string>>> kinds;
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string kind, name;
    words >> kind;
    std::vector<std::string> names;
    while (words >> name) names.push_back(name.back() == ',' ? name.substr(0, name.size() - 1) : name);
    kinds.emplace_back(kind, names);
  }
  ASSERT_EQ(kinds.size(), 4u) << r.output;
  EXPECT_EQ(kinds[0].first, "models");
  EXPECT_EQ(kinds[3].first, "clusters");
  for (const std::string& m : kinds[0].second) {
    const CliRun p = run("predict --model " + m + " --cluster dgx-h100-ndr --gpus 8 --json", true);
    EXPECT_EQ(p.output.find("unknown"), std::string::npos) << m;
  }
  for (const std::string& c : kinds[3].second) {
    const CliRun p = run("predict --model tiny --cluster " + c + " --gpus 1 --gb 8 --json");
    EXPECT_EQ(p.status, 0) << c << "\n" << p.output;
  }
  const CliRun bad = run("presets models");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_NE(bad.output.find("error: "), std::string::npos) << bad.output;
}

// calibrate measures the machine for about half a minute: its run is tested with the runtime
// (tests/runtime); here its options are checked before any measurement.
TEST(CliCalibrate, OptionsAreCheckedFirst) {
  expect_input_error("calibrate --passes 0", "--passes: Value 0 not in range 1 to 20");
  expect_input_error("calibrate --backend tpu", "--backend: tpu not in {cpu,cuda}");
}

}  // namespace

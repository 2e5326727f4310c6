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

struct BadCase {
  const char* args;
  const char* message;
};
void PrintTo(const BadCase& c, std::ostream* os) { *os << c.args; }

class BadInput : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadInput, ClearErrorAndExitCodeTwo) {
  const BadCase& c = GetParam();
  std::string args = c.args;
  for (std::size_t pos; (pos = args.find("@BAD@")) != std::string::npos;) args.replace(pos, 5, kBad);
  const CliRun r = run(args);
  EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
  EXPECT_NE(r.output.find(c.message), std::string::npos) << args << "\n" << r.output;
  EXPECT_NE(r.output.find("error: "), std::string::npos);
}

const BadCase kBadCases[] = {
    {"predict --model tiny --cluster dgx-a100-hdr --plan @BAD@malformed.json", "malformed.json:2:"},
    {"predict --model tiny --cluster dgx-a100-hdr --gpus 3 --plan @BAD@tp-not-dividing.json",
     "tp-not-dividing.json: /tp: 3 does not divide model heads (4)"},
    {"predict --model tiny --cluster dgx-a100-hdr --plan @BAD@unknown-schedule.json",
     "unknown-schedule.json: /schedule: \"2f2b\" is not one of"},
    {"predict --model tiny --cluster dgx-a100-hdr --plan @BAD@unknown-field.json",
     "unknown-field.json: /tpp: unknown field"},
    {"predict --model tiny --cluster dgx-a100-hdr --plan @BAD@missing-global-batch.json",
     "missing-global-batch.json: /global_batch: missing required field"},
    {"predict --model tiny --cluster dgx-a100-hdr --plan @BAD@wrong-type.json",
     "wrong-type.json: /tp: expected an integer, got string \"eight\""},
    {"predict --model tiny --cluster dgx-a100-hdr --plan @BAD@batch-not-divisible.json",
     "/global_batch: 12 is not a multiple of dp*micro_batch"},
    {"predict --model llama3-70b --cluster dgx-a100-hdr --plan @BAD@does-not-fit.json",
     "does-not-fit.json: plan does not fit in memory: needs"},
    {"predict --model tiny --cluster dgx-a100-hdr --plan @BAD@not-an-object.json", "expected an object"},
    {"predict --model tiny --cluster @BAD@cluster-unknown-unit.json --gpus 8",
     "cluster-unknown-unit.json: /node/nic/bandwidth: \"200Gbits\": unknown unit 'Gbits'"},
    {"predict --model tiny --cluster @BAD@cluster-bare-number.json --gpus 8",
     "cluster-bare-number.json: /node/nic/bandwidth: expected a bandwidth with its unit"},
    {"predict --model @BAD@model-kv-heads.json --gpus 8", "model-kv-heads.json: /kv_heads: 3 does not divide heads (4)"},
    {"predict --model @BAD@model-missing-seq.json --gpus 8", "model-missing-seq.json: /seq_len: missing required field"},
    {"predict --model gpt5 --gpus 8", "unknown model 'gpt5'"},
    {"predict --model tiny --cluster nowhere", "unknown cluster 'nowhere'"},
    {"predict --model tiny --cluster dgx-a100-hdr --plan @BAD@no-such-file.json", "no-such-file.json: no such file"},
    {"predict --model tiny --gpus 12", "--gpus: 12 is not a multiple of the 8 accelerators per node"},
    {"predict --model tiny --gpus 8 --schedule 2f2b", "--schedule: \"2f2b\" is not one of"},
    {"predict --model tiny --gpus 8 --tp 0", "--tp: must be >= 1"},
    {"validate @BAD@no-such-dir", "no-such-dir: no such file or directory"},
    {"predict --model llama3-8b --tp 65536 --pp 65536 --gb 64", "tp*pp*dp*cp exceeds 1048576 devices"},
    {"predict --model tiny --gpus 8 --gb 0", "--global-batch: must be >= 1"},
    {"simulate --model tiny --gpus 8 --pp 2 --gb 12 --schedule dualpipe",
     "/schedule: dualpipe needs an even pp and an even number of micro-batches, at least 2*pp (here pp 2, 3 micro-batches)"},
    {"search --model tiny --gpus 8 --tokens 12X", "--tokens: \"12X\" is not a token count"},
    {"predict --model tiny --gpus 8 --tokens 12X", "--tokens: \"12X\" is not a token count"},
    {"simulate --model tiny --gpus 8 --pue 0.9", "--pue: 0.9 is below 1"},
    {"predict --model tiny --gpus 8 --price -2", "--price: a price cannot be negative"},
    {"predict --model llama3-8b --cluster hetero-node --tp 4 --pp 2 --stage-devices h100-sxm5-80gb,tpu-v5",
     "command line: /stage_devices: \"tpu-v5\" (stage 1) is not an accelerator of node 'hetero-cpu-gpu-npu'"},
    {"sweep @BAD@no-such-sweep.json", "no-such-sweep.json: no such file"},
    {"run --steps 1 --zero 3", "command line: /zero_stage: ZeRO-3 (0 and 1 run) (the runtime does not execute this yet)"},
    {"run --steps 1 --schedule zero-bubble", "/schedule: zero-bubble"},
    {"run --steps 1 --backend cuda", "--backend cuda: "},
    {"run --steps 1 --resume", "--resume needs --checkpoint-dir"},
    {"run --steps 1 --resume --checkpoint-dir @BAD@no-such-dir", "no-such-dir/rank-00000.ckpt: cannot open checkpoint"},
    {"run --steps 1 --model llama3-405b", "plan does not fit in memory"},
    {"run --steps 1 --tp 3", "--tp x --pp x --cp = 3 needs a multiple of 3 ranks, but 1 was launched"},
    {"run --steps 1 --plan @BAD@malformed.json", "malformed.json:2:"},
    {"compare @BAD@trace-plan-a.json @BAD@no-such-trace.json", "no-such-trace.json: cannot open trace"},
    {"compare @BAD@trace-plan-a.json @BAD@trace-plan-b.json", "the traces are of different plans"},
    {"compare @BAD@trace-empty.json @BAD@trace-plan-a.json", "trace-empty.json: empty file"},
    {"calibrate --backend cuda", "--backend cuda: name the GPU's profile to start from with --cluster"},
};
INSTANTIATE_TEST_SUITE_P(Corpus, BadInput, ::testing::ValuesIn(kBadCases),
                         [](const auto& param_info) { return "case" + std::to_string(param_info.index); });

TEST(Cli, ValidateReportsFailedCases) {
  const CliRun r = run("validate " + kBad + "does-not-fit.json");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("FAILED"), std::string::npos) << r.output;
}

}  // namespace

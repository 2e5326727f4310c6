// Accuracy against published training runs (../shared/validation/training): the foundation
// targets are a mean absolute error <= 10% and no case beyond 25%.
#include <gtest/gtest.h>

#include <filesystem>

#include "sim/validate/validation_case.h"

namespace foresight {
namespace {

const std::string kTraining = std::string(FORESIGHT_SHARED_DIR) + "/validation/training";

TEST(Validation, PublishedRunsWithinTargets) {
  if (!std::filesystem::is_directory(kTraining)) GTEST_SKIP() << "no validation data at " << kTraining;
  auto files = collect_case_files({kTraining});
  ASSERT_TRUE(files.ok()) << files.error().message();
  ASSERT_GE(files->size(), 20u);
  const ValidationSummary s = run_validation(*files);
  for (const auto& c : s.cases) EXPECT_TRUE(c.ok) << c.id << ": " << c.failure;
  EXPECT_EQ(s.failed, 0);
  EXPECT_LE(s.mape_pct, 10.0);
  EXPECT_LE(s.max_abs_error_pct, 25.0) << "worst: " << s.worst_id;
}

TEST(Validation, NullFieldsAreChosenAndReported) {
  const std::string sc21 = kTraining + "/sc21-t1-39.1b.json";
  if (!std::filesystem::exists(sc21)) GTEST_SKIP() << "no validation data at " << sc21;
  auto c = load_validation_case(sc21);
  ASSERT_TRUE(c.ok()) << c.error().message();
  const CaseResult r = run_validation_case(*c);
  ASSERT_TRUE(r.ok) << r.failure;
  EXPECT_TRUE(r.chosen.contains("micro_batch"));
  EXPECT_TRUE(r.chosen.contains("virtual_stages"));
  EXPECT_EQ(r.assumed["software"], "Megatron-LM 2021");
  EXPECT_EQ(r.plan.micro_batch, r.chosen["micro_batch"].get<int>());
}

TEST(Validation, BrokenCasesFailWithAReason) {
  auto doc = nlohmann::json::parse(R"({"schema": "foresight-validation-case/1", "id": "x",
    "model": {"layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 64, "ffn_hidden": 256, "mlp": "gelu"},
    "hardware": {"gpu": "z100", "gpus": 8},
    "parallel": {"tp": 1, "pp": 1, "dp": 8, "global_batch": 8},
    "measured": {"step_time_s": 1.0}})");
  auto c = validation_case_from_json(doc, "x.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("x.json: /hardware/gpu: unknown GPU \"z100\""), std::string::npos);
  doc["hardware"]["gpu"] = "a100-sxm4-80gb";
  doc["parallel"]["dp"] = 4;
  auto c2 = validation_case_from_json(doc, "x.json");
  ASSERT_TRUE(c2.ok()) << c2.error().message();
  const CaseResult r = run_validation_case(*c2);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.failure.find("does not equal the 8 accelerators"), std::string::npos) << r.failure;
}

}  // namespace
}  // namespace foresight

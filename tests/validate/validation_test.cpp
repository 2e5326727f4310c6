// Accuracy against published training runs (validation/training, in the repository), and the
// reading of schema versions 1 and 2.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <tuple>

#include "sim/spec/json_reader.h"
#include "sim/validate/validation_case.h"

namespace foresight {
namespace {

const std::string kTraining = std::string(FORESIGHT_VALIDATION_DIR) + "/training";

// The foundation cases (schema version 1: Narayanan et al., Korthikanti et al., BLOOM, MPT) stay
// within a mean absolute error of 10% and no case beyond 25%.
TEST(Validation, FoundationRunsWithinTargets) {
  auto files = collect_case_files({kTraining});
  ASSERT_TRUE(files.ok()) << files.error().message();
  std::vector<std::string> v1;
  for (const auto& f : *files) {
    auto doc = read_json_file(f);
    ASSERT_TRUE(doc.ok()) << doc.error().message();
    if (doc->value("schema", "") == "foresight-validation-case/1") v1.push_back(f);
  }
  ASSERT_GE(v1.size(), 20u);
  const ValidationSummary s = run_validation(v1);
  for (const auto& c : s.cases) EXPECT_TRUE(c.ok) << c.id << ": " << c.failure;
  EXPECT_EQ(s.failed, 0);
  EXPECT_LE(s.mape_pct, 10.0);
  EXPECT_LE(s.max_abs_error_pct, 25.0) << "worst: " << s.worst_id;
}

// Every case in the repository reads (schema, fields, GPU), cites its source and says how its
// step time was derived; the set spans at least 8 independent sources. Their errors are reported
// by bench/accuracy_table.sh, not gated here.
TEST(Validation, EveryCaseReadsAndCitesItsSource) {
  auto files = collect_case_files({kTraining});
  ASSERT_TRUE(files.ok()) << files.error().message();
  EXPECT_GE(files->size(), 100u);
  std::set<std::string> sources;
  for (const auto& f : *files) {
    auto doc = read_json_file(f);
    ASSERT_TRUE(doc.ok()) << doc.error().message();
    auto c = validation_case_from_json(*doc, f);
    ASSERT_TRUE(c.ok()) << c.error().message();
    EXPECT_FALSE(c->source.empty()) << f;
    EXPECT_TRUE((*doc)["measured"].contains("derived_from")) << f;
    sources.insert(short_source(c->source));
    // Rotary positions are the architecture's: every Llama, Mixtral, Qwen, DeepSeek and Nemotron
    // case says so (GPT-3, BLOOM and MPT learn or ALiBi their positions).
    const std::string name = c->model.name;
    bool rotary = false;
    for (const char* family : {"Llama", "Mixtral", "Qwen", "DeepSeek", "Nemotron"})
      rotary = rotary || name.find(family) != std::string::npos;
    EXPECT_EQ(c->model.rope, rotary) << f;
    EXPECT_EQ(c->model.mla.enabled(), name.find("DeepSeek") != std::string::npos) << f;
  }
  EXPECT_GE(sources.size(), 8u);
}

TEST(Validation, NullFieldsAreChosenAndReported) {
  const std::string sc21 = kTraining + "/sc21-t1-39.1b.json";
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

// A published peak memory is read (with what it measured, or the case fails naming the field)
// and reported against the prediction's fullest stage; the step-time error is unaffected.
TEST(Validation, PeakMemoryIsReportedWhereTheSourceGivesIt) {
  const std::string file = kTraining + "/titan-llama31-405b-512gpu-1f1b.json";
  auto doc = read_json_file(file);
  ASSERT_TRUE(doc.ok()) << doc.error().message();
  ASSERT_GT((*doc)["measured"].value("peak_memory_gib", 0.0), 0.0);
  auto c = validation_case_from_json(*doc, file);
  ASSERT_TRUE(c.ok()) << c.error().message();
  const CaseResult r = run_validation_case(*c);
  ASSERT_TRUE(r.ok) << r.failure;
  EXPECT_DOUBLE_EQ(r.measured_memory_gib, 82.5);
  EXPECT_NEAR(r.predicted_memory_gib, r.prediction.memory.total / (1024.0 * 1024 * 1024), 1e-9);
  EXPECT_NEAR(r.memory_error_pct, (r.predicted_memory_gib / 82.5 - 1) * 100, 1e-9);
  // ZeRO-3 across 8 stages holds each stage whole: well above sharded layers' 36 GiB.
  EXPECT_GT(r.predicted_memory_gib, 60.0);
  const ValidationSummary s = run_validation({file});
  EXPECT_EQ(s.memory_cases, 1);
  EXPECT_DOUBLE_EQ(s.memory_mape_pct, std::fabs(r.memory_error_pct));
  const nlohmann::json j = validation_to_json(s);
  EXPECT_DOUBLE_EQ(j["cases"][0]["memory"]["measured_gib"].get<double>(), 82.5);
  EXPECT_EQ(j["memory"]["cases"].get<int>(), 1);
  nlohmann::json bad = *doc;
  bad["measured"].erase("memory_from");
  auto no_source = validation_case_from_json(bad, "m.json");
  ASSERT_FALSE(no_source.ok());
  EXPECT_NE(no_source.error().message().find("memory_from"), std::string::npos)
      << no_source.error().message();
  bad["measured"]["peak_memory_gib"] = -3;
  auto negative = validation_case_from_json(bad, "m.json");
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.error().message().find("peak_memory_gib"), std::string::npos)
      << negative.error().message();
}

// A small version-2 case; `parallel` and `software` are merged into it.
nlohmann::json v2_case(const nlohmann::json& parallel, const nlohmann::json& software) {
  auto doc = nlohmann::json::parse(R"({"schema": "foresight-validation-case/2", "id": "v2",
    "source": "Somebody et al., arXiv:0000.00000, Table 9",
    "model": {"layers": 8, "hidden": 1024, "heads": 16, "vocab": 32000, "seq_len": 2048, "ffn_hidden": 4096,
              "mlp": "swiglu", "norm": "rmsnorm", "tied_embeddings": false},
    "hardware": {"gpu": "h100-sxm5-80gb", "gpus": 16},
    "parallel": {"tp": 2, "pp": 4, "dp": 2, "cp": 1, "ep": 1, "global_batch": 64, "micro_batch": 1,
                 "recompute": "none", "precision": "bf16", "schedule": "1f1b", "zero_stage": 1,
                 "sequence_parallel": true},
    "measured": {"step_time_s": 1.0, "derived_from": "made up for the test"}})");
  doc["parallel"].merge_patch(parallel);
  if (!software.is_null()) doc["software"] = software;
  return doc;
}

CaseResult run_doc(const nlohmann::json& doc) {
  auto c = validation_case_from_json(doc, "v2.json");
  EXPECT_TRUE(c.ok()) << c.error().message();
  if (!c.ok()) return {};
  return run_validation_case(*c);
}

// A pipelined run that reports no schedule: the Megatron family ran 1F1B or interleaved 1F1B,
// whichever its virtual stages made it, so both are offered (8 layers on 4 stages: 1 or 2 chunks
// a rank); DeepSpeed's pipeline engine runs 1F1B only.
TEST(Validation, UnreportedScheduleIsChosenAmongTheStacks) {
  const nlohmann::json layout = {{"schedule", nullptr}, {"global_batch", 16}};
  const CaseResult core = run_doc(v2_case(layout, {{"name", "megatron-core"}, {"version", "2024-07"}}));
  ASSERT_TRUE(core.ok) << core.failure;
  ASSERT_TRUE(core.chosen.contains("virtual_stages"));
  EXPECT_EQ(core.plan.virtual_stages, core.chosen["virtual_stages"].get<int>());
  EXPECT_EQ(core.plan.schedule, core.plan.virtual_stages > 1 ? Schedule::kInterleaved1F1B : Schedule::k1F1B);
  EXPECT_EQ(core.plan.virtual_stages, 2);  // 4 micro-batches on 4 stages: interleaving halves the bubble
  const CaseResult ds = run_doc(v2_case(layout, {{"name", "megatron-deepspeed"}, {"version", "2022"}}));
  ASSERT_TRUE(ds.ok) << ds.failure;
  EXPECT_FALSE(ds.chosen.contains("virtual_stages"));
  EXPECT_EQ(ds.plan.schedule, Schedule::k1F1B);
  EXPECT_EQ(ds.plan.virtual_stages, 1);
}

// The loss's kernels are the stack's: Megatron's unfused vocab_parallel_cross_entropy unless
// --cross-entropy-loss-fusion (opt-in), NeMo 2's native fusion, Megatron-Bridge's performance
// scripts' Transformer Engine kernel from 2025-11, PyTorch's own where eager.
TEST(Validation, CrossEntropyIsTheStacks) {
  const nlohmann::json layout = {{"pp", 1}, {"dp", 8}, {"schedule", nullptr}};
  auto run = [&](const nlohmann::json& software) {
    const CaseResult r = run_doc(v2_case(layout, software));
    EXPECT_TRUE(r.ok) << r.failure;
    return r;
  };
  auto loss = [&](const nlohmann::json& software) { return run(software).plan.cross_entropy; };
  const CaseResult core = run({{"name", "megatron-core"}, {"version", "2024-07"}});
  EXPECT_EQ(core.plan.cross_entropy, CrossEntropy::kUnfused);
  EXPECT_EQ(core.assumed["cross_entropy"], "unfused");
  EXPECT_EQ(loss({{"name", "megatron-lm"}, {"version", "2021-04"}}), CrossEntropy::kUnfused);
  EXPECT_EQ(loss({{"name", "nemo"}, {"version", "25.02"}}), CrossEntropy::kJitFused);
  EXPECT_EQ(loss({{"name", "megatron-bridge"}, {"version", "25.09"}}), CrossEntropy::kJitFused);
  EXPECT_EQ(loss({{"name", "megatron-bridge"}, {"version", "25.11"}}), CrossEntropy::kOnePass);
  EXPECT_EQ(loss({{"name", "llm-foundry"}, {"version", "2023-10"}}), CrossEntropy::kOnePass);
}

TEST(Validation, VersionTwoStackFixesWhatItAlwaysDid) {
  // torchtitan: FSDP (ZeRO-3) with prefetch and overlapped reduce-scatter by design.
  auto doc = v2_case({{"zero_stage", nullptr}, {"pp", 1}, {"dp", 8}, {"schedule", nullptr}},
                     {{"name", "torchtitan"}, {"version", "2024-10"}});
  const CaseResult r = run_doc(doc);
  ASSERT_TRUE(r.ok) << r.failure;
  EXPECT_EQ(r.assumed["software"], "torchtitan");
  EXPECT_EQ(r.assumed["zero_stage"], 3);
  EXPECT_EQ(r.plan.zero_stage, 3);
  EXPECT_TRUE(r.plan.overlap_grad_reduce);
  // Async TP is an opt-in there (experimental.enable_async_tensor_parallel): off unless reported.
  EXPECT_FALSE(r.chosen.contains("overlap_tp_comm"));
  EXPECT_EQ(r.assumed["overlap_tp_comm"], false);
  EXPECT_FALSE(r.plan.overlap_tp_comm);
  EXPECT_EQ(r.classes.at("sharding"), "ZeRO-3/FSDP");
  EXPECT_EQ(r.source, "Somebody et al.");
  EXPECT_EQ(r.plan.precision, Precision::kBf16);
}

// "selective" is what the stack calls selective: torchtitan's op-level policy, Megatron's
// attention core; an unreported recompute is chosen among the stack's own three.
TEST(Validation, SelectiveRecomputeIsTheStacks) {
  const nlohmann::json titan = {{"name", "torchtitan"}, {"version", "2024-12"}};
  const CaseResult op = run_doc(v2_case({{"recompute", "selective"}, {"pp", 1}, {"dp", 8}}, titan));
  ASSERT_TRUE(op.ok) << op.failure;
  EXPECT_EQ(op.plan.recompute, Recompute::kSelectiveOp);
  const CaseResult chosen = run_doc(v2_case({{"recompute", nullptr}, {"pp", 1}, {"dp", 8}}, titan));
  ASSERT_TRUE(chosen.ok) << chosen.failure;
  ASSERT_TRUE(chosen.chosen.contains("recompute"));
  EXPECT_NE(chosen.plan.recompute, Recompute::kSelective);
  const CaseResult mcore =
      run_doc(v2_case({{"recompute", "selective"}}, {{"name", "megatron-core"}, {"version", "0.9"}}));
  ASSERT_TRUE(mcore.ok) << mcore.failure;
  EXPECT_EQ(mcore.plan.recompute, Recompute::kSelective);
}

// The modules a selective recompute drops, as Megatron-Core's --recompute-modules names them.
TEST(Validation, RecomputeModulesAreThePlans) {
  const nlohmann::json mcore = {{"name", "megatron-core"}, {"version", "0.12"}};
  nlohmann::json doc = v2_case({{"recompute", "selective"}}, mcore);
  doc["parallel"]["recompute_modules"] = {"layernorm", "moe_act"};
  const CaseResult r = run_doc(doc);
  ASSERT_TRUE(r.ok) << r.failure;
  EXPECT_EQ(r.plan.recompute, Recompute::kSelective);
  EXPECT_EQ(r.plan.recompute_modules, (std::vector<std::string>{"layernorm", "moe_act"}));
  doc["parallel"]["recompute"] = "full";
  const CaseResult full = run_doc(doc);
  EXPECT_FALSE(full.ok);
  EXPECT_NE(full.failure.find("recompute_modules"), std::string::npos) << full.failure;
  doc["parallel"]["recompute"] = "selective";
  doc["parallel"]["recompute_modules"] = {"mla_up_proj"};  // the test model has no MLA
  const CaseResult mla = run_doc(doc);
  EXPECT_FALSE(mla.ok);
  EXPECT_NE(mla.failure.find("multi-head latent attention"), std::string::npos) << mla.failure;
}

// An unreported recompute in the Megatron family may also be full recompute of the fewest
// layers per stage that fit (--recompute-num-layers, block method), as its recipes run it.
TEST(Validation, PartialFullRecomputeIsAStacksOption) {
  auto doc = v2_case({{"recompute", nullptr},
                      {"tp", 1},
                      {"pp", 1},
                      {"dp", 16},
                      {"global_batch", 16},
                      {"schedule", nullptr},
                      {"sequence_parallel", false}},
                     {{"name", "megatron-core"}, {"version", "0.12"}});
  doc["model"] = {{"layers", 32},      {"hidden", 4096},          {"heads", 32},         {"kv_heads", 8},
                  {"vocab", 128256},   {"seq_len", 8192},         {"ffn_hidden", 14336}, {"mlp", "swiglu"},
                  {"norm", "rmsnorm"}, {"tied_embeddings", false}};
  const CaseResult r = run_doc(doc);
  ASSERT_TRUE(r.ok) << r.failure;
  EXPECT_EQ(r.plan.recompute, Recompute::kFull);
  ASSERT_TRUE(r.chosen.contains("recompute_layers")) << r.chosen.dump();
  EXPECT_GT(r.plan.recompute_layers, 0);
  EXPECT_LT(r.plan.recompute_layers, 32);
  // torchtitan has no such option: whole-model full recompute (or its op policy) only.
  doc["software"] = {{"name", "torchtitan"}, {"version", "2024-12"}};
  const CaseResult t = run_doc(doc);
  ASSERT_TRUE(t.ok) << t.failure;
  EXPECT_FALSE(t.chosen.contains("recompute_layers"));
  EXPECT_LT(t.plan.recompute_layers, 0);
}

// An EP the data-parallel ranks cannot hold but the stage's ranks can implies Megatron-Core's
// MoE parallel folding (expert tensor parallelism 1), and says so.
TEST(Validation, FoldedExpertParallelismIsImpliedByTheDegrees) {
  auto doc = v2_case({{"tp", 2}, {"pp", 1}, {"dp", 8}, {"ep", 16}, {"schedule", nullptr}},
                     {{"name", "megatron-bridge"}, {"version", "25.11"}});
  doc["model"]["moe"] = {{"experts", 64}, {"top_k", 8}, {"expert_ffn_hidden", 512}};
  const CaseResult r = run_doc(doc);
  ASSERT_TRUE(r.ok) << r.failure;
  EXPECT_EQ(r.assumed["expert_tp"], 1);
  EXPECT_EQ(r.plan.expert_tp, 1);
  EXPECT_EQ(r.plan.ep, 16);
}

// overlap_ep_comm (merged forward/backward pairs) is an opt-in everywhere: off unless the case
// reports it, taken when it does, and not mentioned for a case without expert parallelism.
TEST(Validation, ExpertAllToAllOverlapIsAnOptIn) {
  const nlohmann::json mcore = {{"name", "megatron-core"}, {"version", "0.14"}};
  auto moe = [&](const nlohmann::json& parallel) {
    auto doc = v2_case(parallel, mcore);
    doc["parallel"].merge_patch({{"tp", 1},
                                 {"pp", 2},
                                 {"dp", 8},
                                 {"ep", 8},
                                 {"virtual_stages", 2},
                                 {"schedule", "interleaved-1f1b"},
                                 {"sequence_parallel", false}});
    doc["model"]["moe"] = {{"experts", 64}, {"top_k", 8}, {"expert_ffn_hidden", 512}};
    return doc;
  };
  const CaseResult unsaid = run_doc(moe(nlohmann::json::object()));
  ASSERT_TRUE(unsaid.ok) << unsaid.failure;
  EXPECT_EQ(unsaid.assumed["overlap_ep_comm"], false);
  EXPECT_FALSE(unsaid.plan.overlap_ep_comm);
  const CaseResult said = run_doc(moe({{"overlap_ep_comm", true}}));
  ASSERT_TRUE(said.ok) << said.failure;
  EXPECT_TRUE(said.plan.overlap_ep_comm);
  EXPECT_LT(said.prediction.step_time_s, unsaid.prediction.step_time_s);
  const CaseResult dense = run_doc(v2_case(nlohmann::json::object(), mcore));
  ASSERT_TRUE(dense.ok) << dense.failure;
  EXPECT_FALSE(dense.assumed.contains("overlap_ep_comm"));
}

TEST(Validation, VersionTwoChoosesOnlyAmongTheStacksOptions) {
  // Megatron-Core: the overlaps are options; reported ones are taken as they are.
  auto doc = v2_case({{"overlap_grad_reduce", true}, {"overlap_param_gather", nullptr}},
                     {{"name", "megatron-core"}, {"version", "0.9"}});
  const CaseResult r = run_doc(doc);
  ASSERT_TRUE(r.ok) << r.failure;
  EXPECT_TRUE(r.plan.overlap_grad_reduce);
  EXPECT_FALSE(r.chosen.contains("overlap_grad_reduce"));
  EXPECT_TRUE(r.chosen.contains("overlap_param_gather"));
  // --tp-comm-overlap is an opt-in with its own setup: off unless reported, taken when reported;
  // NeMo's and Megatron-Bridge's performance recipes set it, so there it is chosen.
  EXPECT_FALSE(r.chosen.contains("overlap_tp_comm"));
  EXPECT_EQ(r.assumed["overlap_tp_comm"], false);
  EXPECT_FALSE(r.plan.overlap_tp_comm);
  const CaseResult asked =
      run_doc(v2_case({{"overlap_tp_comm", true}}, {{"name", "megatron-core"}, {"version", "0.9"}}));
  ASSERT_TRUE(asked.ok) << asked.failure;
  EXPECT_TRUE(asked.plan.overlap_tp_comm);
  const CaseResult nemo =
      run_doc(v2_case(nlohmann::json::object(), {{"name", "nemo"}, {"version", "24.07"}}));
  ASSERT_TRUE(nemo.ok) << nemo.failure;
  EXPECT_TRUE(nemo.chosen.contains("overlap_tp_comm"));
  // A stack that is not named: TP overlap only where the case says so.
  const CaseResult unnamed =
      run_doc(v2_case(nlohmann::json::object(), {{"name", "other"}, {"version", "2024-06"}}));
  ASSERT_TRUE(unnamed.ok) << unnamed.failure;
  EXPECT_FALSE(unnamed.chosen.contains("overlap_tp_comm"));
  EXPECT_FALSE(unnamed.plan.overlap_tp_comm);
  EXPECT_TRUE(unnamed.chosen.contains("overlap_grad_reduce"));
  // DeepSpeed had no TP overlap: it is fixed off and said so.
  const CaseResult ds =
      run_doc(v2_case({{"sequence_parallel", false}}, {{"name", "deepspeed"}, {"version", "0.14"}}));
  ASSERT_TRUE(ds.ok) << ds.failure;
  EXPECT_FALSE(ds.plan.overlap_tp_comm);
  EXPECT_EQ(ds.assumed["overlap_tp_comm"], false);
}

// Megatron-LM's options by the date each was merged: a January 2023 commit could choose flash
// attention but overlapped nothing; a 2024 one overlaps. A bare year is that year's middle.
TEST(Validation, MegatronLmOptionsFollowTheRelease) {
  const CaseResult early =
      run_doc(v2_case(nlohmann::json::object(), {{"name", "megatron-lm"}, {"version", "2023-01"}}));
  ASSERT_TRUE(early.ok) << early.failure;
  EXPECT_TRUE(early.chosen.contains("flash_attention"));
  EXPECT_FALSE(early.plan.overlap_grad_reduce);
  EXPECT_FALSE(early.plan.overlap_tp_comm);
  EXPECT_EQ(early.assumed["overlap_tp_comm"], false);
  const CaseResult later =
      run_doc(v2_case(nlohmann::json::object(), {{"name", "megatron-lm"}, {"version", "2024-03"}}));
  ASSERT_TRUE(later.ok) << later.failure;
  EXPECT_FALSE(later.chosen.contains("flash_attention"));
  EXPECT_TRUE(later.plan.flash_attention);
  EXPECT_TRUE(later.chosen.contains("overlap_grad_reduce"));
  EXPECT_EQ(later.assumed["overlap_tp_comm"], false);  // merged 2023-10, but an opt-in
  // "2021": before FlashAttention existed.
  const CaseResult ds =
      run_doc(v2_case(nlohmann::json::object(), {{"name", "megatron-deepspeed"}, {"version", "2021"}}));
  ASSERT_TRUE(ds.ok) << ds.failure;
  EXPECT_FALSE(ds.plan.flash_attention);
  EXPECT_EQ(ds.assumed["flash_attention"], false);
}

// PyTorch stacks run eager (one kernel per operator) unless software.compile says the run compiled;
// the Megatron family fuses its chains either way.
TEST(Validation, PyTorchStacksAreEagerUnlessCompiled) {
  const nlohmann::json layout = {{"pp", 1}, {"dp", 8}, {"schedule", nullptr}};
  const CaseResult eager = run_doc(v2_case(layout, {{"name", "torchtitan"}, {"version", "2024-12"}}));
  ASSERT_TRUE(eager.ok) << eager.failure;
  EXPECT_FALSE(eager.plan.kernel_fusion);
  EXPECT_EQ(eager.assumed["kernel_fusion"], false);
  const CaseResult compiled =
      run_doc(v2_case(layout, {{"name", "torchtitan"}, {"version", "2024-12"}, {"compile", true}}));
  ASSERT_TRUE(compiled.ok) << compiled.failure;
  EXPECT_TRUE(compiled.plan.kernel_fusion);
  EXPECT_LT(compiled.predicted_step_s, eager.predicted_step_s);
  const CaseResult megatron = run_doc(v2_case(layout, {{"name", "megatron-core"}, {"version", "0.9"}}));
  ASSERT_TRUE(megatron.ok) << megatron.failure;
  EXPECT_TRUE(megatron.plan.kernel_fusion);
  EXPECT_FALSE(megatron.assumed.contains("kernel_fusion"));
  auto bad = v2_case(layout, {{"name", "torchtitan"}, {"compile", "yes"}});
  EXPECT_FALSE(validation_case_from_json(bad, "v2.json").ok());
}

// Token drop (parallel.moe_capacity_factor) and CUDA graphs (software.cuda_graphs) reach the plan;
// a capacity factor on a dense model is refused by name.
TEST(Validation, TokenDropAndCudaGraphsReachThePlan) {
  const nlohmann::json layout = {
      {"pp", 1}, {"dp", 8}, {"ep", 8}, {"schedule", nullptr}, {"moe_capacity_factor", 1.0}};
  auto doc = v2_case(layout, {{"name", "megatron-bridge"}, {"version", "25.09"}, {"cuda_graphs", true}});
  doc["model"]["moe"] = {{"experts", 64}, {"top_k", 4}, {"expert_ffn_hidden", 512}};
  const CaseResult r = run_doc(doc);
  ASSERT_TRUE(r.ok) << r.failure;
  EXPECT_EQ(r.plan.moe_capacity_factor, 1.0);
  EXPECT_TRUE(r.plan.cuda_graphs);
  auto dropless = doc;
  dropless["parallel"].erase("moe_capacity_factor");
  dropless["software"].erase("cuda_graphs");
  const CaseResult d = run_doc(dropless);
  ASSERT_TRUE(d.ok) << d.failure;
  EXPECT_EQ(d.plan.moe_capacity_factor, 0.0);
  EXPECT_FALSE(d.plan.cuda_graphs);
  EXPECT_LT(r.predicted_step_s, d.predicted_step_s);  // no synchronisation, and the graph
  const CaseResult dense = run_doc(v2_case({{"moe_capacity_factor", 1.0}}, nullptr));
  EXPECT_FALSE(dense.ok);
  EXPECT_NE(dense.failure.find("moe_capacity_factor"), std::string::npos) << dense.failure;
}

// Context parallelism's exchange: reported, else torchtitan's all-gather (its default rotate
// method), else Megatron's ring.
TEST(Validation, ContextParallelExchangeIsTheStacks) {
  const nlohmann::json layout = {{"pp", 1}, {"dp", 4}, {"cp", 2}, {"schedule", nullptr}};
  const CaseResult titan = run_doc(v2_case(layout, {{"name", "torchtitan"}, {"version", "2025-06"}}));
  ASSERT_TRUE(titan.ok) << titan.failure;
  EXPECT_EQ(titan.plan.cp_comm, CpComm::kAllGather);
  EXPECT_EQ(titan.assumed["cp_comm"], "all-gather");
  const CaseResult mcore = run_doc(v2_case(layout, {{"name", "megatron-core"}, {"version", "0.9"}}));
  ASSERT_TRUE(mcore.ok) << mcore.failure;
  EXPECT_EQ(mcore.plan.cp_comm, CpComm::kRing);
  nlohmann::json said = layout;
  said["cp_comm"] = "all-gather";
  const CaseResult other = run_doc(v2_case(said, nullptr));
  ASSERT_TRUE(other.ok) << other.failure;
  EXPECT_EQ(other.plan.cp_comm, CpComm::kAllGather);
  said["cp_comm"] = "rotate";
  const CaseResult bad = run_doc(v2_case(said, nullptr));
  EXPECT_FALSE(bad.ok);
  EXPECT_NE(bad.failure.find("cp_comm"), std::string::npos) << bad.failure;
}

// The stack's kernels and gradient type: PyTorch SDPA stacks run FlashAttention-2-class attention;
// NeMo and Megatron-Bridge recipes reduce bf16 gradients (a reported type wins); Megatron-Core
// keeps both defaults.
TEST(Validation, AttentionKernelAndGradientTypeAreTheStacks) {
  const nlohmann::json layout = {{"pp", 1}, {"dp", 8}, {"schedule", nullptr}};
  const CaseResult titan = run_doc(v2_case(layout, {{"name", "torchtitan"}, {"version", "2024-12"}}));
  ASSERT_TRUE(titan.ok) << titan.failure;
  EXPECT_EQ(titan.plan.attention_kernel, AttentionKernel::kFlash2);
  EXPECT_EQ(titan.assumed["attention_kernel"], "flash2");
  EXPECT_FALSE(titan.plan.grad_reduce_precision.has_value());
  // llm-foundry ran FlashAttention's Triton port (attn_impl "triton") until it removed it in
  // 2024-03, flash-attn 2 after.
  const CaseResult foundry = run_doc(v2_case(layout, {{"name", "llm-foundry"}, {"version", "2023-10"}}));
  ASSERT_TRUE(foundry.ok) << foundry.failure;
  EXPECT_EQ(foundry.plan.attention_kernel, AttentionKernel::kFlash1);
  EXPECT_EQ(foundry.assumed["attention_kernel"], "flash1");
  const CaseResult foundry24 = run_doc(v2_case(layout, {{"name", "llm-foundry"}, {"version", "2024-06"}}));
  ASSERT_TRUE(foundry24.ok) << foundry24.failure;
  EXPECT_EQ(foundry24.plan.attention_kernel, AttentionKernel::kFlash2);
  const CaseResult nemo = run_doc(v2_case(layout, {{"name", "nemo"}, {"version", "24.07"}}));
  ASSERT_TRUE(nemo.ok) << nemo.failure;
  EXPECT_EQ(nemo.plan.attention_kernel, AttentionKernel::kBest);
  ASSERT_TRUE(nemo.plan.grad_reduce_precision.has_value());
  EXPECT_EQ(*nemo.plan.grad_reduce_precision, Precision::kBf16);
  EXPECT_EQ(nemo.assumed["grad_reduce_precision"], "bf16");
  nlohmann::json said = layout;
  said["grad_reduce_precision"] = "fp32";
  const CaseResult reported = run_doc(v2_case(said, {{"name", "nemo"}, {"version", "24.07"}}));
  ASSERT_TRUE(reported.ok) << reported.failure;
  EXPECT_EQ(*reported.plan.grad_reduce_precision, Precision::kFp32);
  EXPECT_FALSE(reported.assumed.contains("grad_reduce_precision"));
  // Half the gradient bytes: a faster step than the same plan reducing in fp32.
  EXPECT_LT(nemo.predicted_step_s, reported.predicted_step_s);
  const CaseResult mcore = run_doc(v2_case(layout, {{"name", "megatron-core"}, {"version", "0.9"}}));
  ASSERT_TRUE(mcore.ok) << mcore.failure;
  EXPECT_EQ(mcore.plan.attention_kernel, AttentionKernel::kBest);
  // Megatron-LM's --use-flash-attn ran FlashAttention 1 until 2023-07 (FlashAttention 2's API
  // from 2023-07-19); flash attention is an option there, and chosen.
  const CaseResult mlm23 = run_doc(v2_case(layout, {{"name", "megatron-lm"}, {"version", "2023-01"}}));
  ASSERT_TRUE(mlm23.ok) << mlm23.failure;
  EXPECT_EQ(mlm23.assumed["attention_kernel"], "flash1");
  EXPECT_TRUE(mlm23.plan.flash_attention);  // FlashAttention 1 still beats unfused attention
  EXPECT_EQ(mlm23.plan.attention_kernel, AttentionKernel::kFlash1);
  const CaseResult mlm24 = run_doc(v2_case(layout, {{"name", "megatron-lm"}, {"version", "2024-01"}}));
  ASSERT_TRUE(mlm24.ok) << mlm24.failure;
  EXPECT_EQ(mlm24.plan.attention_kernel, AttentionKernel::kBest);
  EXPECT_FALSE(mcore.plan.grad_reduce_precision.has_value());
  // PyTorch's checkpoint stops its re-run early from 2.1 (torchtitan; llm-foundry's 2023-10
  // tables ran PyTorch 2.1.0); Megatron's re-runs the whole forward, and so did PyTorch before.
  EXPECT_TRUE(titan.plan.recompute_early_stop);
  EXPECT_EQ(titan.assumed["recompute_early_stop"], true);
  EXPECT_TRUE(foundry.plan.recompute_early_stop);
  EXPECT_FALSE(mcore.plan.recompute_early_stop);
  EXPECT_FALSE(nemo.plan.recompute_early_stop);
  const CaseResult foundry23 = run_doc(v2_case(layout, {{"name", "llm-foundry"}, {"version", "2023-06"}}));
  ASSERT_TRUE(foundry23.ok) << foundry23.failure;
  EXPECT_FALSE(foundry23.plan.recompute_early_stop);
  const CaseResult fsdp = run_doc(v2_case(layout, {{"name", "pytorch-fsdp"}, {"version", "2023-03"}}));
  ASSERT_TRUE(fsdp.ok) << fsdp.failure;
  EXPECT_FALSE(fsdp.plan.recompute_early_stop);
}

// The input gradients' TP collectives run beside their weight gradients in Megatron-LM from
// 2021-09 and in every Transformer Engine stack; Megatron-DeepSpeed and torchtitan's DTensor TP
// wait for them. A plan without TP has nothing to overlap and is left alone.
TEST(Validation, AsyncTpDgradIsTheStacks) {
  const nlohmann::json layout = {
      {"pp", 1}, {"dp", 8}, {"schedule", nullptr}, {"sequence_parallel", nullptr}, {"zero_stage", nullptr}};
  for (const auto& [name, version, on] : {std::tuple{"megatron-core", "0.9", true},
                                          {"nemo", "24.07", true},
                                          {"megatron-bridge", "25.11", true},
                                          {"megatron-lm", "2023-06", true},
                                          {"megatron-lm", "2021-12", true},
                                          {"megatron-lm", "2021-06", false},
                                          {"megatron-deepspeed", "2023-06", false},
                                          {"torchtitan", "2025-06", false}}) {
    const CaseResult r = run_doc(v2_case(layout, {{"name", name}, {"version", version}}));
    ASSERT_TRUE(r.ok) << name << " " << version << ": " << r.failure;
    EXPECT_EQ(r.plan.overlap_tp_dgrad, on) << name << " " << version;
    EXPECT_EQ(r.assumed.contains("overlap_tp_dgrad"), on) << name << " " << version;
  }
  nlohmann::json no_tp = layout;
  no_tp["tp"] = 1;
  no_tp["dp"] = 16;
  const CaseResult mcore = run_doc(v2_case(no_tp, {{"name", "megatron-core"}, {"version", "0.9"}}));
  ASSERT_TRUE(mcore.ok) << mcore.failure;
  EXPECT_FALSE(mcore.plan.overlap_tp_dgrad);
  // Korthikanti et al. ran Megatron-LM 2022 (version 1 cases know it by their source); SC'21's
  // runs predate it.
  for (const auto& [file, on] :
       {std::pair{"/sar22-175b-selective.json", true}, {"/sc21-t1-39.1b.json", false}}) {
    auto c = load_validation_case(kTraining + file);
    ASSERT_TRUE(c.ok()) << c.error().message();
    const CaseResult r = run_validation_case(*c);
    ASSERT_TRUE(r.ok) << r.failure;
    EXPECT_EQ(r.plan.overlap_tp_dgrad, on) << file;
  }
}

// The FP8 scaling recipe: reported, else the stack's (Megatron-Bridge's performance scripts offer
// current scaling and no delayed; torchtitan scales with torchao's dynamic Float8; NeMo and
// Megatron-LM default to delayed scaling), and none for a bf16 run.
TEST(Validation, Fp8RecipeReportedElseTheStacks) {
  const nlohmann::json fp8 = {{"precision", "fp8"}};
  for (const auto& [name, version, recipe] : {std::tuple{"nemo", "24.07", Fp8Recipe::kDelayed},
                                              {"megatron-core", "0.9", Fp8Recipe::kDelayed},
                                              {"megatron-bridge", "25.11", Fp8Recipe::kCurrent},
                                              {"torchtitan", "2024-12", Fp8Recipe::kCurrent}}) {
    const CaseResult r = run_doc(v2_case(fp8, {{"name", name}, {"version", version}}));
    ASSERT_TRUE(r.ok) << name << ": " << r.failure;
    EXPECT_EQ(r.plan.fp8_recipe, recipe) << name;
    EXPECT_EQ(r.assumed.value("fp8_recipe", ""), to_string(recipe)) << name;
  }
  const nlohmann::json bridge = {{"name", "megatron-bridge"}, {"version", "25.11"}};
  nlohmann::json said = fp8;
  said["fp8_recipe"] = "mxfp8";
  const CaseResult mx = run_doc(v2_case(said, bridge));
  ASSERT_TRUE(mx.ok) << mx.failure;
  EXPECT_EQ(mx.plan.fp8_recipe, Fp8Recipe::kMxfp8);
  EXPECT_FALSE(mx.assumed.contains("fp8_recipe"));
  const CaseResult bf16 = run_doc(v2_case(nlohmann::json::object(), bridge));
  ASSERT_TRUE(bf16.ok) << bf16.failure;
  EXPECT_FALSE(bf16.assumed.contains("fp8_recipe"));
  // The plan file carries it, and a wrong value is named.
  Plan p;
  p.fp8_recipe = Fp8Recipe::kBlockwise;
  auto back = plan_from_json(plan_to_json(p), "p.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->fp8_recipe, Fp8Recipe::kBlockwise);
  nlohmann::json bad = plan_to_json(p);
  bad["fp8_recipe"] = "dynamic";
  auto err = plan_from_json(bad, "p.json");
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.error().message().find("fp8_recipe"), std::string::npos) << err.error().message();
}

// torchao's Float8Linear casts each weight at every use (Plan::fp8_weight_recast): torchtitan's
// fp8 runs do, unless the case reports FSDP2's float8 all-gather (fp8_param_gather); Transformer
// Engine stacks cache their FP8 weights; a bf16 run has none. The rowwise recipe is read, and
// fp8_param_gather without fp8 is an error naming the field.
TEST(Validation, Fp8WeightRecastIsTorchaosUnlessGatheredInFp8) {
  const nlohmann::json titan = {{"name", "torchtitan"}, {"version", "2024-12"}};
  const nlohmann::json fsdp = {{"tp", 1}, {"pp", 1}, {"dp", 16}, {"zero_stage", 3}, {"precision", "fp8"}};
  const CaseResult r = run_doc(v2_case(fsdp, titan));
  ASSERT_TRUE(r.ok) << r.failure;
  EXPECT_TRUE(r.plan.fp8_weight_recast);
  EXPECT_TRUE(r.assumed.value("fp8_weight_recast", false));
  nlohmann::json gathered = fsdp;
  gathered["fp8_param_gather"] = true;
  gathered["fp8_recipe"] = "rowwise";
  const CaseResult g = run_doc(v2_case(gathered, titan));
  ASSERT_TRUE(g.ok) << g.failure;
  EXPECT_FALSE(g.plan.fp8_weight_recast);
  EXPECT_FALSE(g.assumed.contains("fp8_weight_recast"));
  EXPECT_EQ(g.plan.fp8_recipe, Fp8Recipe::kRowwise);
  nlohmann::json te = fsdp;
  te["zero_stage"] = 1;
  const CaseResult bridge = run_doc(v2_case(te, {{"name", "megatron-bridge"}, {"version", "25.11"}}));
  ASSERT_TRUE(bridge.ok) << bridge.failure;
  EXPECT_FALSE(bridge.plan.fp8_weight_recast);
  nlohmann::json bf16 = fsdp;
  bf16["precision"] = "bf16";
  const CaseResult plain = run_doc(v2_case(bf16, titan));
  ASSERT_TRUE(plain.ok) << plain.failure;
  EXPECT_FALSE(plain.plan.fp8_weight_recast);
  bf16["fp8_param_gather"] = true;
  const CaseResult wrong = run_doc(v2_case(bf16, titan));
  ASSERT_FALSE(wrong.ok);
  EXPECT_NE(wrong.failure.find("fp8_param_gather"), std::string::npos) << wrong.failure;
}

// The gradient buckets a stack's overlapped reduction runs (Plan::grad_bucket_params):
// Megatron-Core's max(40M, 1M x dp) (40M before 2024-04), NeMo 2's and Megatron-Bridge's 128Mi,
// none for a stack whose buckets are not known; Megatron-Bridge's scripts from 2025-10 turn them
// off with dp, pp and vp above 1 (one bucket a chunk), from 2026-01 not with MXFP8.
TEST(Validation, GradientBucketsAreTheStacks) {
  const nlohmann::json wide = {{"tp", 1}, {"pp", 1}, {"dp", 64}, {"global_batch", 128}};
  auto bucket = [](const nlohmann::json& parallel, const char* name, const char* version) {
    nlohmann::json doc = v2_case(parallel, {{"name", name}, {"version", version}});
    const auto& l = doc["parallel"];
    doc["hardware"]["gpus"] = l["tp"].get<int>() * l["pp"].get<int>() * l["dp"].get<int>();
    const CaseResult r = run_doc(doc);
    EXPECT_TRUE(r.ok) << name << ": " << r.failure;
    EXPECT_EQ(r.assumed.value("grad_bucket_params", std::int64_t{0}), r.plan.grad_bucket_params) << name;
    return r.plan.grad_bucket_params;
  };
  EXPECT_EQ(bucket(wide, "megatron-lm", "2024-06"), 64'000'000);
  EXPECT_EQ(bucket(wide, "megatron-lm", "2023-12"), 40'000'000);
  EXPECT_EQ(bucket(nlohmann::json::object(), "megatron-core", "0.9"), 40'000'000);  // dp 2
  EXPECT_EQ(bucket(wide, "nemo", "25.02"), 128 * 1024 * 1024);
  EXPECT_EQ(bucket(wide, "nemo", "24.07"), 0);
  EXPECT_EQ(bucket(wide, "torchtitan", "2024-12"), 0);
  const nlohmann::json interleaved = {{"virtual_stages", 2}, {"schedule", "interleaved-1f1b"}};
  EXPECT_EQ(bucket(interleaved, "megatron-bridge", "25.09"), 128 * 1024 * 1024);
  EXPECT_EQ(bucket(interleaved, "megatron-bridge", "25.11"), plan_range::kGradBucketParams.max);
  nlohmann::json mx = interleaved;
  mx["precision"] = "fp8";
  mx["fp8_recipe"] = "mxfp8";
  EXPECT_EQ(bucket(mx, "megatron-bridge", "26.04"), 128 * 1024 * 1024);
  EXPECT_EQ(bucket(mx, "megatron-bridge", "25.11"), plan_range::kGradBucketParams.max);
  // The plan file carries it; a negative size is named.
  Plan p;
  p.grad_bucket_params = 40'000'000;
  auto back = plan_from_json(plan_to_json(p), "p.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->grad_bucket_params, 40'000'000);
  nlohmann::json bad = plan_to_json(p);
  bad["grad_bucket_params"] = -1;
  auto err = plan_from_json(bad, "p.json");
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.error().message().find("grad_bucket_params"), std::string::npos) << err.error().message();
}

// A recipe's optimizer state type and p2p overlap, reported: bf16 state halves the optimizer's
// memory and traffic; a reported overlap_p2p_comm replaces the stack's default.
TEST(Validation, OptimizerStateAndP2pOverlapAsReported) {
  const nlohmann::json layout = {
      {"tp", 2},        {"pp", 4}, {"dp", 2}, {"virtual_stages", 2}, {"schedule", "interleaved-1f1b"},
      {"zero_stage", 1}};
  const nlohmann::json nemo = {{"name", "nemo"}, {"version", "24.07"}};
  const CaseResult fp32 = run_doc(v2_case(layout, nemo));
  ASSERT_TRUE(fp32.ok) << fp32.failure;
  EXPECT_EQ(fp32.plan.optimizer_state_precision, Precision::kFp32);
  EXPECT_TRUE(fp32.plan.overlap_p2p_comm);  // NeMo's default with virtual stages
  nlohmann::json said = layout;
  said["optimizer_state_precision"] = "bf16";
  said["overlap_p2p_comm"] = false;
  const CaseResult bf16 = run_doc(v2_case(said, nemo));
  ASSERT_TRUE(bf16.ok) << bf16.failure;
  EXPECT_EQ(bf16.plan.optimizer_state_precision, Precision::kBf16);
  EXPECT_FALSE(bf16.plan.overlap_p2p_comm);
  EXPECT_FALSE(bf16.assumed.contains("overlap_p2p_comm"));
  EXPECT_NEAR(bf16.prediction.memory.optimizer, fp32.prediction.memory.optimizer / 2,
              1e-9 * fp32.prediction.memory.optimizer);
  EXPECT_LT(bf16.prediction.time.optimizer, fp32.prediction.time.optimizer);
  said["optimizer_state_precision"] = "fp8";
  const CaseResult bad = run_doc(v2_case(said, nemo));
  EXPECT_FALSE(bad.ok);
  EXPECT_NE(bad.failure.find("optimizer_state_precision"), std::string::npos) << bad.failure;
}

// torchtitan's pipelines as its 2024 code ran them: as many micro-batches as pipeline ranks, and an
// interleaved schedule with 2 stages per rank split by generate_split_points (the middle stages
// take the remainder's extra layers). Megatron-Core's uneven interleaving is chosen among the
// layouts when the layers do not divide.
TEST(Validation, PipelinesAreLaidOutAsTheStackDid) {
  auto doc = v2_case({{"pp", 4},
                      {"dp", 4},
                      {"tp", 1},
                      {"sequence_parallel", nullptr},
                      {"zero_stage", nullptr},
                      {"micro_batch", nullptr},
                      {"schedule", "interleaved-1f1b"}},
                     {{"name", "torchtitan"}, {"version", "2024-12"}});
  doc["model"]["layers"] = 14;
  const CaseResult titan = run_doc(doc);
  ASSERT_TRUE(titan.ok) << titan.failure;
  EXPECT_EQ(titan.plan.micro_batch, 64 / 4 / 4);
  EXPECT_EQ(titan.assumed["micro_batch"], 4);
  EXPECT_EQ(titan.plan.virtual_stages, 2);
  EXPECT_EQ(titan.plan.layer_split, (std::vector<int>{1, 2, 2, 2, 2, 2, 2, 1}));
  // Megatron-Core: the micro-batch is chosen; 14 layers on 4 stages interleave as 16 chunks with
  // the first and last one short.
  doc["software"] = {{"name", "megatron-core"}, {"version", "0.9"}};
  doc["parallel"]["sequence_parallel"] = false;
  const CaseResult mcore = run_doc(doc);
  ASSERT_TRUE(mcore.ok) << mcore.failure;
  EXPECT_TRUE(mcore.chosen.contains("micro_batch"));
  ASSERT_TRUE(mcore.chosen.contains("virtual_stages"));
  EXPECT_EQ(mcore.plan.virtual_stages, 4);
  EXPECT_EQ(mcore.plan.layer_split.front() + 1, mcore.plan.layer_split[1]);
}

// A case's GPU is the GPU of its cluster, also for a variant that borrows its reference's system
// (torchtitan's 96 GB, 500 W H100s in a DGX H100-like node).
TEST(Validation, CaseGpuVariantIsTheClustersGpu) {
  auto doc = v2_case(nlohmann::json::object(), nullptr);
  doc["hardware"]["gpu"] = "h100-sxm5-96gb-500w";
  auto c = validation_case_from_json(doc, "v2.json");
  ASSERT_TRUE(c.ok()) << c.error().message();
  const DeviceSpec& gpu = c->cluster.node.devices.front().device;
  EXPECT_EQ(gpu.name, "h100-sxm5-96gb-500w");
  EXPECT_DOUBLE_EQ(gpu.memory_bytes, 95.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(gpu.memory_bandwidth, 2400e9);
  const CaseResult variant = run_validation_case(*c);
  const CaseResult stock = run_doc(v2_case(nlohmann::json::object(), nullptr));
  ASSERT_TRUE(variant.ok && stock.ok) << variant.failure << stock.failure;
  EXPECT_GT(variant.predicted_step_s, stock.predicted_step_s);  // a lower peak and HBM2e
}

// pytorch/ao's B200s limited to 750 W: the B100's dense peaks (the same die at 700 W), the
// B200's memory and efficiencies. A step is slower by at most the ratio of the peaks (what the
// clock does not slow, the memory-bound kernels and the links, stays).
TEST(Validation, PowerLimitedB200RunsAtTheLowerPartsPeak) {
  auto doc = v2_case(nlohmann::json::object(), nullptr);
  doc["model"].merge_patch({{"hidden", 8192}, {"heads", 64}, {"ffn_hidden", 28672}, {"seq_len", 8192}});
  doc["hardware"]["gpu"] = "b200";
  const CaseResult stock = run_doc(doc);
  doc["hardware"]["gpu"] = "b200-750w";
  auto c = validation_case_from_json(doc, "v2.json");
  ASSERT_TRUE(c.ok()) << c.error().message();
  const DeviceSpec& gpu = c->cluster.node.devices.front().device;
  EXPECT_DOUBLE_EQ(gpu.peak(DType::kBf16), 1750e12);
  EXPECT_DOUBLE_EQ(gpu.peak(DType::kFp8), 3500e12);
  EXPECT_DOUBLE_EQ(gpu.memory_bandwidth, 7700e9);
  const CaseResult limited = run_validation_case(*c);
  ASSERT_TRUE(limited.ok && stock.ok) << limited.failure << stock.failure;
  EXPECT_GT(limited.predicted_step_s, 1.15 * stock.predicted_step_s);
  EXPECT_LT(limited.predicted_step_s, 2250.0 / 1750 * stock.predicted_step_s);
}

// DeepSpeed's pipeline engine reduces the gradients after the last backward: with pp > 1 the
// overlap is fixed off, without it it stays an option.
TEST(Validation, DeepSpeedPipelinesReduceAtTheEnd) {
  const nlohmann::json ds = {{"name", "deepspeed"}, {"version", "0.14"}};
  const CaseResult piped = run_doc(v2_case({{"sequence_parallel", false}}, ds));
  ASSERT_TRUE(piped.ok) << piped.failure;
  EXPECT_FALSE(piped.plan.overlap_grad_reduce);
  EXPECT_EQ(piped.assumed["overlap_grad_reduce"], false);
  const CaseResult flat = run_doc(v2_case({{"sequence_parallel", false}, {"pp", 1}, {"dp", 8}}, ds));
  ASSERT_TRUE(flat.ok) << flat.failure;
  EXPECT_TRUE(flat.chosen.contains("overlap_grad_reduce"));
}

TEST(Validation, VersionTwoUnevenStagesBecomeTheLayerSplit) {
  auto doc = v2_case({{"first_stage_layers", 1}, {"last_stage_layers", 1}}, {{"name", "megatron-core"}});
  CaseResult r = run_doc(doc);
  ASSERT_TRUE(r.ok) << r.failure;
  EXPECT_EQ(r.plan.layer_split, (std::vector<int>{1, 3, 3, 1}));
  // The embedding and the loss counted as layers: (8 + 2) / 4 does not divide.
  r = run_doc(
      v2_case({{"account_for_embedding", true}, {"account_for_loss", true}}, {{"name", "megatron-core"}}));
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.failure.find("/parallel/account_for_embedding"), std::string::npos) << r.failure;
  r = run_doc(v2_case({{"account_for_embedding", true}, {"account_for_loss", true}, {"pp", 2}, {"dp", 4}},
                      {{"name", "megatron-core"}}));
  ASSERT_TRUE(r.ok) << r.failure;
  EXPECT_EQ(r.plan.layer_split, (std::vector<int>{4, 4}));
  // A stack without uneven stages refuses them.
  r = run_doc(v2_case({{"first_stage_layers", 2}}, {{"name", "deepspeed"}}));
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.failure.find("could not split pipeline stages unevenly"), std::string::npos) << r.failure;
  // Megatron-Core refuses first/last stage layers together with the embedding/loss accounting.
  r = run_doc(v2_case({{"first_stage_layers", 1}, {"account_for_loss", true}}, {{"name", "megatron-core"}}));
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.failure.find("cannot be combined"), std::string::npos) << r.failure;
}

// With virtual stages each stage's layers divide evenly over its chunks (Megatron-Core's
// get_num_layers_to_build); the layer_split has one entry per model chunk, chunk c of stage s at
// c*pp + s.
TEST(Validation, VersionTwoUnevenStagesWithVirtualStages) {
  auto interleaved = [](nlohmann::json fields) {
    fields["virtual_stages"] = 2;
    fields["schedule"] = "interleaved-1f1b";
    return v2_case(fields, {{"name", "megatron-core"}});
  };
  // 8 layers, pp 2, vp 2: the first stage 2 layers (1 a chunk), the last the other 6 (3 a chunk).
  CaseResult r = run_doc(interleaved({{"first_stage_layers", 2}, {"pp", 2}, {"dp", 4}}));
  ASSERT_TRUE(r.ok) << r.failure;
  EXPECT_EQ(r.plan.layer_split, (std::vector<int>{1, 3, 1, 3}));
  // pp 4: the first stage's 3 layers do not divide over 2 chunks.
  r = run_doc(interleaved({{"first_stage_layers", 3}, {"last_stage_layers", 1}}));
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.failure.find("the first stage's layers (3 layers) do not divide over virtual_stages = 2"),
            std::string::npos)
      << r.failure;
  // The embedding and the loss counted: (8 + 2) / 2 = 5 a stage does not divide over 2 chunks.
  r = run_doc(
      interleaved({{"account_for_embedding", true}, {"account_for_loss", true}, {"pp", 2}, {"dp", 4}}));
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.failure.find("/parallel/account_for_embedding"), std::string::npos) << r.failure;
  // With 6 layers: (6 + 2) / 2 = 4 a stage, 2 a chunk, the first and the last chunk one fewer.
  nlohmann::json six =
      interleaved({{"account_for_embedding", true}, {"account_for_loss", true}, {"pp", 2}, {"dp", 4}});
  six["model"]["layers"] = 6;
  r = run_doc(six);
  ASSERT_TRUE(r.ok) << r.failure;
  EXPECT_EQ(r.plan.layer_split, (std::vector<int>{1, 2, 2, 1}));
  EXPECT_EQ(r.plan.virtual_stages, 2);
  // An interleaved schedule whose chunk count is not reported stays a failure.
  r = run_doc(v2_case({{"first_stage_layers", 2}, {"pp", 2}, {"dp", 4}, {"schedule", "interleaved-1f1b"}},
                      {{"name", "megatron-core"}}));
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.failure.find("need virtual_stages"), std::string::npos) << r.failure;
  // Without the flags, chunks that do not divide the layers fail as before (8 over 2*3).
  r = run_doc(v2_case({{"virtual_stages", 3}, {"schedule", "interleaved-1f1b"}, {"pp", 2}, {"dp", 4}},
                      {{"name", "megatron-core"}}));
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.failure.find("does not divide the model's 8 layers"), std::string::npos) << r.failure;
}

TEST(Validation, VersionTwoBadFieldsNameTheField) {
  auto doc = v2_case({}, {{"name", "jax"}});
  auto c = validation_case_from_json(doc, "v2.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("/software/name"), std::string::npos) << c.error().message();
  CaseResult r = run_doc(v2_case({{"fp8_recipe", "delayed"}}, {{"name", "nemo"}}));
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.failure.find("/parallel/fp8_recipe: needs precision fp8"), std::string::npos) << r.failure;
  // Version-2 fields in a version-1 file are unknown keys.
  doc = v2_case({{"overlap_tp_comm", true}}, nullptr);
  doc["schema"] = "foresight-validation-case/1";
  doc["model"].erase("norm");
  doc["model"].erase("tied_embeddings");
  r = run_doc(doc);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.failure.find("overlap_tp_comm"), std::string::npos) << r.failure;
}

TEST(Validation, ErrorsGroupBySourceAndClass) {
  ValidationSummary s;
  auto add = [&](std::string id, std::string source, std::string stack, double err) {
    CaseResult r;
    r.ok = true;
    r.id = std::move(id);
    r.source = std::move(source);
    r.classes = {
        {"stack", stack}, {"precision", "bf16"}, {"sharding", "ZeRO-1/2"}, {"scale", "up to 64 GPUs"}};
    r.error_pct = err;
    s.cases.push_back(r);
  };
  add("a", "A et al.", "NeMo", -10);
  add("b", "A et al.", "NeMo", 20);
  add("c", "B et al.", "torchtitan", 4);
  const std::vector<GroupError> g = errors_by_group(s);
  ASSERT_FALSE(g.empty());
  EXPECT_EQ(g[0].group, "source");
  EXPECT_EQ(g[0].name, "A et al.");
  EXPECT_EQ(g[0].cases, 2);
  EXPECT_DOUBLE_EQ(g[0].mape_pct, 15.0);
  EXPECT_DOUBLE_EQ(g[0].max_abs_error_pct, 20.0);
  EXPECT_EQ(g[0].worst_id, "b");
  int precision_groups = 0;
  for (const auto& e : g) precision_groups += e.group == "precision" ? 1 : 0;
  EXPECT_EQ(precision_groups, 1);
  EXPECT_EQ(short_source("Narayanan et al., SC'21, arXiv:2104.04473, Table 1"), "Narayanan et al., SC'21");
  EXPECT_EQ(short_source("mosaicml/llm-foundry scripts/train/benchmarking/README.md"),
            "mosaicml/llm-foundry");
}

}  // namespace
}  // namespace foresight

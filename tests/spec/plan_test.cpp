// Plan: JSON round trip and layout checks that name the offending field.
#include "sim/spec/plan.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace foresight {
namespace {

ModelSpec small_model() {
  ModelSpec m;
  m.name.assign(1, 'm');  // (assigning "m" trips GCC 12's -Wrestrict false positive here)
  m.layers = 32;
  m.hidden = 4096;
  m.heads = 32;
  m.kv_heads = 8;
  m.head_dim = 128;
  m.ffn_hidden = 14336;
  m.vocab = 32000;
  m.seq_len = 4096;
  return m;
}

std::string error_of(const Plan& p, int gpus = 0) {
  const Status s = validate_plan(p, small_model(), gpus, "plan.json");
  return s.ok() ? "" : s.error().message();
}

TEST(Plan, JsonRoundTrip) {
  Plan p;
  p.tp = 4;
  p.pp = 4;
  p.dp = 8;
  p.cp = 2;
  p.virtual_stages = 2;
  p.schedule = Schedule::kInterleaved1F1B;
  p.global_batch = 512;
  p.micro_batch = 2;
  p.recompute = Recompute::kSelective;
  p.zero_stage = 1;
  p.precision = Precision::kFp8;
  auto back = plan_from_json(plan_to_json(p), "p.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, p);
}

TEST(Plan, LayoutErrorsNameTheField) {
  Plan p;
  p.global_batch = 64;
  p.tp = 3;
  EXPECT_EQ(error_of(p), "plan.json: /tp: 3 does not divide model heads (32)");
  p.tp = 2;
  p.pp = 64;
  EXPECT_EQ(error_of(p), "plan.json: /pp: 64 exceeds the model's 32 layers");
  p.pp = 1;
  p.dp = 2;
  EXPECT_EQ(error_of(p, 8), "plan.json: /dp: tp*pp*dp*cp = 2*1*2*1 = 4 does not equal the 8 accelerators");
  p.dp = 4;
  p.ep = 2;
  EXPECT_EQ(error_of(p), "plan.json: /ep: 2 needs a mixture-of-experts model");
  p.ep = 1;
  p.micro_batch = 3;
  EXPECT_EQ(error_of(p), "plan.json: /global_batch: 64 is not a multiple of dp*micro_batch = 4*3");
  p.micro_batch = 1;
  p.pp = 4;
  p.virtual_stages = 3;
  EXPECT_EQ(error_of(p), "plan.json: /virtual_stages: 3 needs schedule \"interleaved-1f1b\"");
  p.schedule = Schedule::kInterleaved1F1B;
  EXPECT_EQ(error_of(p),
            "plan.json: /virtual_stages: pp*virtual_stages = 12 does not divide the model's 32 layers");
  p.virtual_stages = 2;
  p.global_batch = 40;  // 10 micro-batches, not a multiple of pp=4
  EXPECT_EQ(error_of(p),
            "plan.json: /global_batch: interleaved 1F1B needs the micro-batch count (10) to be a multiple of "
            "pp (4)");
  p.global_batch = 64;
  p.cp = 3;
  EXPECT_EQ(error_of(p), "plan.json: /cp: 3 does not divide the sequence length (4096)");
  p.cp = 2;
  EXPECT_EQ(error_of(p), "");
}

// Merged forward/backward pairs (overlap_ep_comm) exist where Megatron-Core or DualPipe pair
// them: interleaved 1F1B with virtual stages (plain 1F1B over several stages would wait on its
// neighbours), DualPipe, one stage; not with full recompute, and not without experts to hide.
// Apex DistributedFusedAdam's dtype (Plan::optimizer_state_precision): round-trips, and bf16 is
// refused where the host keeps the state or the model itself is fp32, naming the field.
TEST(Plan, OptimizerStateInBf16) {
  Plan p;
  p.dp = 8;
  p.global_batch = 64;
  p.optimizer_state_precision = Precision::kBf16;
  auto back = plan_from_json(plan_to_json(p), "p.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->optimizer_state_precision, Precision::kBf16);
  EXPECT_FALSE(plan_to_json(Plan{}).contains("optimizer_state_precision"));
  EXPECT_EQ(error_of(p), "");
  Plan host = p;
  host.offload_optimizer = true;
  EXPECT_NE(error_of(host).find("plan.json: /optimizer_state_precision: bf16 cannot be combined with "
                                "offload_optimizer"),
            std::string::npos)
      << error_of(host);
  Plan fp32 = p;
  fp32.precision = Precision::kFp32;
  EXPECT_NE(error_of(fp32).find("/optimizer_state_precision"), std::string::npos) << error_of(fp32);
  Plan fp16 = p;
  fp16.optimizer_state_precision = Precision::kFp16;
  EXPECT_NE(error_of(fp16).find("must be fp32 or bf16"), std::string::npos) << error_of(fp16);
}

TEST(Plan, MergedPairsNeedAScheduleThatPairs) {
  ModelSpec moe = small_model();
  moe.moe.experts = 16;
  moe.moe.top_k = 2;
  moe.moe.expert_ffn_hidden = 1536;
  Plan p;
  p.pp = 4;
  p.dp = 16;
  p.ep = 16;
  p.global_batch = 256;
  p.overlap_ep_comm = true;
  auto check = [&](const ModelSpec& m) {
    const Status s = validate_plan(p, m, 0, "plan.json");
    return s.ok() ? std::string() : s.error().message();
  };
  EXPECT_NE(check(moe).find("plan.json: /overlap_ep_comm: needs interleaved-1f1b with virtual_stages > 1"),
            std::string::npos)
      << check(moe);
  p.schedule = Schedule::kInterleaved1F1B;
  p.virtual_stages = 2;
  EXPECT_EQ(check(moe), "");
  p.recompute = Recompute::kFull;
  EXPECT_NE(check(moe).find("/overlap_ep_comm: cannot be combined with recompute full"), std::string::npos)
      << check(moe);
  p.recompute = Recompute::kSelective;
  EXPECT_EQ(check(moe), "");
  p.schedule = Schedule::kDualPipe;
  p.virtual_stages = 1;
  EXPECT_EQ(check(moe), "");
  p.pp = 1;
  p.dp = 64;
  p.schedule = Schedule::k1F1B;
  EXPECT_EQ(check(moe), "");
  // The JSON round trip keeps it.
  const auto back = plan_from_json(plan_to_json(p), "plan.json");
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->overlap_ep_comm);
  p.ep = 1;
  EXPECT_NE(check(moe).find("/overlap_ep_comm: needs a MoE model with expert parallelism"), std::string::npos)
      << check(moe);
}

// Expert tensor parallelism 1 below tp (MoE parallel folding): EP is carved out of tp*cp*dp;
// other degrees, a dense model or no SP are refused with the field named.
TEST(Plan, ExpertTensorParallelFolding) {
  ModelSpec moe = small_model();
  moe.moe.experts = 128;
  moe.moe.top_k = 8;
  moe.moe.expert_ffn_hidden = 1536;
  ASSERT_TRUE(moe.is_moe());
  Plan p;
  p.tp = 2;
  p.dp = 16;
  p.ep = 32;
  p.global_batch = 64;
  p.sequence_parallel = true;
  auto check = [&](const ModelSpec& m) {
    const Status s = validate_plan(p, m, 0, "plan.json");
    return s.ok() ? std::string() : s.error().message();
  };
  EXPECT_NE(check(moe).find("/ep: 32 does not divide dp*cp = 16"), std::string::npos) << check(moe);
  p.expert_tp = 1;
  EXPECT_EQ(check(moe), "");
  EXPECT_EQ(p.etp(), 1);
  EXPECT_EQ(p.edp(), 1);
  p.ep = 64;
  EXPECT_NE(check(moe).find("/ep: 64 does not divide tp*cp*dp = 32"), std::string::npos) << check(moe);
  p.ep = 32;
  p.sequence_parallel = false;
  EXPECT_NE(check(moe).find("/expert_tp: 1 below tp 2 needs sequence_parallel"), std::string::npos)
      << check(moe);
  p.sequence_parallel = true;
  p.tp = 4;
  p.dp = 8;
  p.expert_tp = 2;
  EXPECT_NE(check(moe).find("/expert_tp: 2 is neither 1 nor tp (4)"), std::string::npos) << check(moe);
  p.expert_tp = 1;
  EXPECT_EQ(check(moe), "");
  auto back = plan_from_json(plan_to_json(p), "p.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->expert_tp, 1);
  EXPECT_EQ(*back, p);
}

TEST(Plan, UnevenLayerSplit) {
  Plan p;
  p.global_batch = 64;
  p.pp = 4;
  p.layer_split = {7, 9, 9, 7};
  EXPECT_EQ(error_of(p), "");
  EXPECT_EQ(p.stage_layer_range(32, 1), (std::pair<int, int>{7, 16}));
  EXPECT_EQ(p.stage_layer_range(32, 3), (std::pair<int, int>{25, 32}));
  auto back = plan_from_json(plan_to_json(p), "p.json");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->layer_split, p.layer_split);
  p.layer_split = {8, 8, 8, 9};
  EXPECT_EQ(error_of(p), "plan.json: /layer_split: adds up to 33 layers, the model has 32");
  p.layer_split = {16, 16};
  EXPECT_EQ(error_of(p), "plan.json: /layer_split: has 2 entries, needs pp = 4 (one per stage)");
  // Without a split: as even as possible, extra layers first.
  Plan even;
  even.pp = 3;
  EXPECT_EQ(even.stage_layer_range(32, 0), (std::pair<int, int>{0, 11}));
  EXPECT_EQ(even.stage_layer_range(32, 2), (std::pair<int, int>{22, 32}));
}

// With virtual stages layer_split gives each model chunk's layers, in model order: chunk c of
// stage s is entry c*pp + s (Megatron-Core's interleaving); pp*vp need not divide the layers then.
TEST(Plan, LayerSplitPerModelChunk) {
  Plan p;
  p.global_batch = 64;
  p.pp = 4;
  p.virtual_stages = 2;
  p.schedule = Schedule::kInterleaved1F1B;
  // 32 layers over 8 chunks, the first short and the last long.
  p.layer_split = {3, 4, 4, 4, 4, 4, 4, 5};
  EXPECT_EQ(error_of(p), "");
  EXPECT_EQ(p.chunks(), 2);
  EXPECT_EQ(p.chunk_layer_range(32, 0, 0), (std::pair<int, int>{0, 3}));
  EXPECT_EQ(p.chunk_layer_range(32, 3, 0), (std::pair<int, int>{11, 15}));
  EXPECT_EQ(p.chunk_layer_range(32, 0, 1), (std::pair<int, int>{15, 19}));
  EXPECT_EQ(p.chunk_layer_range(32, 3, 1), (std::pair<int, int>{27, 32}));
  EXPECT_EQ(p.stage_layer_count(32, 0), 7);
  EXPECT_EQ(p.stage_layer_count(32, 3), 9);
  // A chunk may hold no layer (Megatron-Core builds it empty when the embedding takes its place).
  p.layer_split = {0, 4, 4, 4, 4, 4, 4, 8};
  EXPECT_EQ(error_of(p), "");
  EXPECT_EQ(p.chunk_layer_range(32, 0, 0), (std::pair<int, int>{0, 0}));
  auto back = plan_from_json(plan_to_json(p), "p.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->layer_split, p.layer_split);
  p.layer_split = {8, 8, 8, 8};
  EXPECT_EQ(
      error_of(p),
      "plan.json: /layer_split: has 4 entries, needs pp*virtual_stages = 4*2 = 8 (one per model chunk, in "
      "model order)");
  p.layer_split = {4, 4, 4, 4, 4, 4, 4, 5};
  EXPECT_EQ(error_of(p), "plan.json: /layer_split: adds up to 33 layers, the model has 32");
  p.layer_split = {-1, 5, 4, 4, 4, 4, 4, 8};
  EXPECT_EQ(error_of(p), "plan.json: /layer_split: has a negative entry (-1)");
  // A file cannot give a negative entry either.
  auto doc = nlohmann::json::parse(R"({"pp": 2, "global_batch": 8, "layer_split": [-1, 33]})");
  auto bad = plan_from_json(doc, "plan.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("/layer_split/0: expected a number of layers (0 or more)"),
            std::string::npos)
      << bad.error().message();
  // Without a split, 12 chunks still must divide the 32 layers.
  p.layer_split.clear();
  p.virtual_stages = 3;
  EXPECT_EQ(error_of(p),
            "plan.json: /virtual_stages: pp*virtual_stages = 12 does not divide the model's 32 layers");
  // Even chunks without a split: chunk c of stage s holds layers [(c*pp + s)*per, ...).
  p.virtual_stages = 2;
  EXPECT_EQ(p.chunk_layer_range(32, 1, 1), (std::pair<int, int>{20, 24}));
  // Without virtual stages a chunk is the whole stage.
  Plan flat;
  flat.pp = 3;
  EXPECT_EQ(flat.chunk_layer_range(32, 2, 0), flat.stage_layer_range(32, 2));
}

TEST(Plan, FileErrors) {
  auto doc = nlohmann::json::parse(R"({"tp": 2, "schedule": "2f2b", "global_batch": 8})");
  auto p = plan_from_json(doc, "plan.json");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(
      p.error().message(),
      "plan.json: /schedule: \"2f2b\" is not one of: gpipe, 1f1b, interleaved-1f1b, zero-bubble, dualpipe");
  auto missing = plan_from_json(nlohmann::json::parse(R"({"tp": 2})"), "plan.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message(), "plan.json: /global_batch: missing required field");
  auto zero = plan_from_json(nlohmann::json::parse(R"({"global_batch": 8, "zero_stage": 4})"), "plan.json");
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.error().message().find("/zero_stage: 4 is out of range"), std::string::npos);
}

}  // namespace
}  // namespace foresight

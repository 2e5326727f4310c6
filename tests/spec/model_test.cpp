// ModelSpec: parameter counts against the published sizes, JSON round trip, HF import.
#include "sim/spec/model.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "sim/spec/presets.h"

namespace foresight {
namespace {

ModelSpec preset(const std::string& name) {
  auto src = resolve_spec(PresetKind::kModel, name);
  EXPECT_TRUE(src.ok());
  auto m = model_from_text(src->text, src->file);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message());
  return m.ok() ? m.value() : ModelSpec{};
}

ModelSpec hf(const std::string& file) {
  auto m = load_model_file(std::string(FORESIGHT_TEST_DATA) + "/hf/" + file);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message());
  return m.ok() ? m.value() : ModelSpec{};
}

// Published totals: Llama 3 paper Table 3 / model cards (8.03B, 70.6B, 405.9B), Mixtral paper
// (46.7B total, 12.9B active), DeepSeek-V3 report (671B total, 37B active, MTP excluded),
// GPT-3 (175B).
TEST(ModelSpec, ParameterCountsMatchPublishedSizes) {
  struct Case {
    const char* name;
    double total, active, tolerance;
  };
  const Case cases[] = {
      {"llama3-8b", 8.03e9, 8.03e9, 0.005},     {"llama3-70b", 70.6e9, 70.6e9, 0.005},
      {"llama3-405b", 405.9e9, 405.9e9, 0.005}, {"mixtral-8x7b", 46.7e9, 12.9e9, 0.01},
      {"deepseek-v3", 671e9, 37e9, 0.02},       {"gpt3-175b", 175e9, 175e9, 0.01},
  };
  for (const auto& c : cases) {
    const ModelSpec m = preset(c.name);
    EXPECT_NEAR(m.total_params() / c.total, 1.0, c.tolerance) << c.name << " total " << m.total_params();
    EXPECT_NEAR(m.active_params() / c.active, 1.0, c.tolerance) << c.name << " active " << m.active_params();
  }
}

// The parameters outside the layers, stage by stage: with one stage both tables (one if tied),
// else the input on the first and the head on the last; the tables split over tp, the final norm not.
TEST(ModelSpec, EndParametersFollowTheStages) {
  ModelSpec m = preset("llama3-8b");  // untied, vocab 128256, hidden 4096, RMSNorm
  const double table = 128256.0 * 4096, norm = 4096;
  EXPECT_DOUBLE_EQ(m.end_params_on_stage(0, 1, false, 1), 2 * table + norm);
  EXPECT_DOUBLE_EQ(m.end_params_on_stage(0, 1, false, 2), table + norm);
  EXPECT_DOUBLE_EQ(m.end_params_on_stage(0, 4, false, 1), table);
  EXPECT_DOUBLE_EQ(m.end_params_on_stage(1, 4, false, 1), 0);
  EXPECT_DOUBLE_EQ(m.end_params_on_stage(3, 4, false, 1), table + norm);
  EXPECT_DOUBLE_EQ(m.end_params_on_stage(0, 4, true, 1), 2 * table + norm);  // DualPipe: both ends
  EXPECT_DOUBLE_EQ(m.end_params_on_stage(3, 4, true, 1), 2 * table + norm);
  // The whole model: the layers plus the end parameters of one stage is the published total.
  EXPECT_DOUBLE_EQ(
      m.layers * (m.attention_params() + m.dense_mlp_params()) + m.end_params_on_stage(0, 1, false, 1),
      m.total_params());
  m.tied_embeddings = true;
  EXPECT_DOUBLE_EQ(m.end_params_on_stage(0, 1, false, 1), table + norm);
  EXPECT_DOUBLE_EQ(m.end_params_on_stage(3, 4, false, 1), table + norm);  // the last stage's own copy
}

TEST(ModelSpec, JsonRoundTrip) {
  for (const auto& name : preset_names(PresetKind::kModel)) {
    const ModelSpec m = preset(name);
    auto back = model_from_json(model_to_json(m), "roundtrip.json");
    ASSERT_TRUE(back.ok()) << name << ": " << back.error().message();
    EXPECT_EQ(back.value(), m) << name;
  }
}

TEST(ModelSpec, ImportsLlamaConfig) {
  const ModelSpec m = hf("llama3-8b-config.json");
  const ModelSpec ref = preset("llama3-8b");
  EXPECT_EQ(m.layers, ref.layers);
  EXPECT_EQ(m.hidden, ref.hidden);
  EXPECT_EQ(m.heads, ref.heads);
  EXPECT_EQ(m.kv_heads, ref.kv_heads);
  EXPECT_EQ(m.ffn_hidden, ref.ffn_hidden);
  EXPECT_EQ(m.vocab, ref.vocab);
  EXPECT_EQ(m.seq_len, 8192);
  EXPECT_EQ(m.mlp, MlpKind::kSwiglu);
  EXPECT_EQ(m.norm, NormKind::kRmsNorm);
  EXPECT_TRUE(m.rope);  // rope_theta
  EXPECT_EQ(m.rope, ref.rope);
  EXPECT_DOUBLE_EQ(m.total_params(), ref.total_params());
}

TEST(ModelSpec, ImportsMixtralQwenAndDeepSeekConfigs) {
  const ModelSpec mixtral = hf("mixtral-8x7b-config.json");
  EXPECT_EQ(mixtral.moe.experts, 8);
  EXPECT_EQ(mixtral.moe.top_k, 2);
  EXPECT_EQ(mixtral.moe.expert_ffn_hidden, 14336);
  EXPECT_NEAR(mixtral.total_params() / 46.7e9, 1.0, 0.01);
  EXPECT_TRUE(mixtral.rope);

  const ModelSpec qwen = hf("qwen2-7b-config.json");
  EXPECT_EQ(qwen.kv_heads, 4);
  EXPECT_TRUE(qwen.bias);                               // Qwen2 has QKV biases
  EXPECT_NEAR(qwen.total_params() / 7.6e9, 1.0, 0.01);  // Qwen2-7B: 7.6B (model card)

  const ModelSpec ds = hf("deepseek-v3-config.json");
  EXPECT_TRUE(ds.mla.enabled());
  EXPECT_TRUE(ds.rope);
  EXPECT_EQ(ds.mla.kv_lora_rank, 512);
  EXPECT_EQ(ds.moe.experts, 256);
  EXPECT_EQ(ds.moe.shared_experts, 1);
  EXPECT_EQ(ds.moe.dense_layers, 3);
  EXPECT_EQ(ds.seq_len, 4096);  // rope_scaling.original_max_position_embeddings
  EXPECT_DOUBLE_EQ(ds.total_params(), preset("deepseek-v3").total_params());
}

// The older architectures, each against its parameter count from first principles (every weight
// of the Hugging Face checkpoint) minus what the model leaves out: GPT-2 small 124,439,808 less its
// 1024 x 768 learned positions; GPT-NeoX-20B 20,554,567,680 (paper, Table 1 code count); Falcon-7B
// 6,921,720,704 (one shared layer norm per parallel block, the model counts two: 32 x 9088 more);
// BLOOM-560m 559,214,592 less the 2048 of its embedding layer norm; Gemma-7B 8.54B (report, Table 1).
TEST(ModelSpec, ImportsOlderArchitecturesAsTheyAreBuilt) {
  auto gpt2 = model_from_text(R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 12,
      "n_embd": 768, "n_head": 12, "n_positions": 1024, "vocab_size": 50257, "activation_function": "gelu_new"})",
                              "config.json");
  ASSERT_TRUE(gpt2.ok()) << gpt2.error().message();
  EXPECT_EQ(gpt2->mlp, MlpKind::kGelu);
  EXPECT_EQ(gpt2->norm, NormKind::kLayerNorm);
  EXPECT_TRUE(gpt2->tied_embeddings);
  EXPECT_DOUBLE_EQ(gpt2->total_params(), 124439808.0 - 1024 * 768);

  const ModelSpec neox = hf("gpt-neox-20b-config.json");  // hidden_act gelu_fast, not gated
  EXPECT_EQ(neox.mlp, MlpKind::kGelu);
  EXPECT_TRUE(neox.bias);
  EXPECT_TRUE(neox.rope);  // rotary_pct 0.25
  EXPECT_FALSE(neox.tied_embeddings);
  EXPECT_DOUBLE_EQ(neox.total_params(), 20554567680.0);

  const ModelSpec falcon = hf("falcon-7b-config.json");
  EXPECT_EQ(falcon.kv_heads, 1);  // multi_query
  EXPECT_EQ(falcon.head_dim, 64);
  EXPECT_EQ(falcon.ffn_hidden, 4 * 4544);
  EXPECT_EQ(falcon.mlp, MlpKind::kGelu);
  EXPECT_FALSE(falcon.bias);
  EXPECT_TRUE(falcon.tied_embeddings);
  EXPECT_DOUBLE_EQ(falcon.total_params(), 6921720704.0 + 32 * 9088.0);

  const ModelSpec bloom = hf("bloom-560m-config.json");
  EXPECT_EQ(bloom.layers, 24);
  EXPECT_EQ(bloom.heads, 16);
  EXPECT_FALSE(bloom.rope);  // ALiBi
  EXPECT_EQ(bloom.seq_len, 2048);
  EXPECT_DOUBLE_EQ(bloom.total_params(), 559214592.0 - 2048);

  // Gemma: a gated GeGLU (gelu_pytorch_tanh) with three matrices, head_dim 256 over 16 heads
  // (4096 != hidden 3072), tied tables.
  const ModelSpec gemma = hf("gemma-7b-config.json");
  EXPECT_EQ(gemma.mlp, MlpKind::kSwiglu);
  EXPECT_EQ(gemma.norm, NormKind::kRmsNorm);
  EXPECT_EQ(gemma.q_dim(), 4096);
  EXPECT_TRUE(gemma.tied_embeddings);
  EXPECT_NEAR(gemma.total_params() / 8.54e9, 1.0, 0.001);
}

// Gating is the architecture's: a Llama with GeLU stays a three-matrix MLP (8.03B, not the 6.2B of
// a plain GeLU MLP), a GPT-NeoX with SiLU stays two matrices.
TEST(ModelSpec, TheArchitectureDecidesWhetherTheMlpIsGated) {
  auto llama =
      nlohmann::json::parse(std::ifstream(std::string(FORESIGHT_TEST_DATA) + "/hf/llama3-8b-config.json"));
  llama["hidden_act"] = "gelu_pytorch_tanh";
  auto m = model_from_hf_config(llama, "config.json");
  ASSERT_TRUE(m.ok()) << m.error().message();
  EXPECT_EQ(m->mlp, MlpKind::kSwiglu);
  EXPECT_NEAR(m->total_params() / 8.03e9, 1.0, 0.005);
  auto neox =
      nlohmann::json::parse(std::ifstream(std::string(FORESIGHT_TEST_DATA) + "/hf/gpt-neox-20b-config.json"));
  neox["hidden_act"] = "silu";
  auto n = model_from_hf_config(neox, "config.json");
  ASSERT_TRUE(n.ok()) << n.error().message();
  EXPECT_EQ(n->mlp, MlpKind::kGelu);
  neox["hidden_act"] = "relu2";
  n = model_from_hf_config(neox, "config.json");
  ASSERT_TRUE(n.ok()) << n.error().message();
  EXPECT_EQ(n->mlp, MlpKind::kSquaredRelu);
  // Every Llama-family config is rotary, rope_theta given or not (transformers' default 10000).
  auto bare = model_from_text(R"({"model_type": "mistral", "num_hidden_layers": 2, "hidden_size": 64,
      "num_attention_heads": 4, "vocab_size": 100})",
                              "config.json");
  ASSERT_TRUE(bare.ok()) << bare.error().message();
  EXPECT_TRUE(bare->rope);
  EXPECT_EQ(bare->mlp, MlpKind::kSwiglu);
}

// What transformers would refuse is refused, with the field and the known values: ACT2FN is a
// dict, so "SiLU" is not "silu"; an architecture the reader does not know is not read as Llama.
TEST(ModelSpec, UnknownArchitecturesAndActivationsAreErrors) {
  const std::string bad = std::string(FORESIGHT_TEST_DATA) + "/bad/";
  auto act = load_model_file(bad + "hf-unknown-activation.json");
  ASSERT_FALSE(act.ok());
  EXPECT_NE(
      act.error().message().find("hf-unknown-activation.json: /hidden_act: unknown activation \"SiLU\""),
      std::string::npos)
      << act.error().message();
  EXPECT_NE(act.error().message().find("gelu_pytorch_tanh"), std::string::npos);
  EXPECT_NE(act.error().message().find("silu"), std::string::npos);
  auto arch = load_model_file(bad + "hf-unknown-architecture.json");
  ASSERT_FALSE(arch.ok());
  EXPECT_NE(arch.error().message().find("hf-unknown-architecture.json: /architectures/0: unknown "
                                        "architecture \"Llama4ForCausalLM\" (known: "
                                        "LlamaForCausalLM"),
            std::string::npos)
      << arch.error().message();
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {R"({"model_type": "mamba", "num_hidden_layers": 2})",
       "config.json: /model_type: unknown model type \"mamba\" (known: llama"},
      {R"({"num_hidden_layers": 2, "hidden_size": 64})",
       "config.json: /architectures: missing, and no model_type"},
      {R"({"architectures": "LlamaForCausalLM"})", "config.json: /architectures: expected an array"},
      {R"({"architectures": []})", "config.json: /architectures: empty"},
      {R"({"architectures": ["LlamaForCausalLM", 7]})",
       "config.json: /architectures/1: expected a model class name"},
      {R"({"architectures": ["llamaforcausallm"]})", "config.json: /architectures/0: unknown architecture"},
      {R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 100, "activation_function": "swiglu"})",
       "config.json: /activation_function: unknown activation \"swiglu\""},
      {R"({"model_type": "gemma", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
           "vocab_size": 100, "hidden_act": "gelu", "hidden_activation": "GELU"})",
       "config.json: /hidden_activation: unknown activation \"GELU\""},
      {R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
           "vocab_size": 100, "hidden_act": 3})",
       "config.json: /hidden_act: expected a string"},
      // Found by fuzz_hf_config's round trip: 5000 shared experts, more than the model format holds.
      {R"({"model_type": "qwen2_moe", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
           "vocab_size": 100, "num_experts": 2, "moe_intermediate_size": 1, "shared_expert_intermediate_size": 5000})",
       "config.json: /shared_expert_intermediate_size: 5000 is 5000 experts of moe_intermediate_size 1; at "
       "most 1024"},
      // Found by fuzz_hf_config's round trip: a derived head size beyond the limit of a given one.
      {R"({"architectures": ["OPTForCausalLM"], "hidden_size": 3500034, "ffn_dim": 3072, "num_hidden_layers": 12,
           "num_attention_heads": 12, "vocab_size": 50272})",
       "config.json: /head_dim: hidden size 3500034 / 12 heads = 291669 is out of range; expected at most "
       "65536"},
  };
  for (const auto& c : cases) {
    auto m = model_from_text(c.text, "config.json");
    ASSERT_FALSE(m.ok()) << c.text;
    EXPECT_NE(m.error().message().find(c.message), std::string::npos) << c.text << "\n"
                                                                      << m.error().message();
  }
}

// Rotary positions: from the model file (false unless given), from a Hugging Face config's
// rope_theta; GPT-2's learned positions have none.
TEST(ModelSpec, RopeComesFromTheConfig) {
  EXPECT_TRUE(preset("tiny").rope);
  EXPECT_FALSE(preset("gpt3-175b").rope);
  auto gpt2 = model_from_text(
      R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 100})", "config.json");
  ASSERT_TRUE(gpt2.ok()) << gpt2.error().message();
  EXPECT_FALSE(gpt2->rope);
  auto back = model_from_json(model_to_json(preset("tiny")), "m.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_TRUE(back->rope);
}

// Parallel blocks and sliding windows: GPT-NeoX's use_parallel_residual and Falcon's
// parallel_attn (both default true), Mistral's sliding_window (null: none), Qwen2's only with
// use_sliding_window; the model file's own fields round-trip.
TEST(ModelSpec, ParallelBlocksAndSlidingWindowsComeFromTheConfig) {
  EXPECT_TRUE(hf("gpt-neox-20b-config.json").parallel_block);
  EXPECT_TRUE(hf("falcon-7b-config.json").parallel_block);
  EXPECT_FALSE(hf("llama3-8b-config.json").parallel_block);
  EXPECT_EQ(hf("mixtral-8x7b-config.json").sliding_window, 0);  // null
  EXPECT_EQ(hf("qwen2-7b-config.json").sliding_window, 0);      // use_sliding_window false
  auto mistral = model_from_text(R"({"model_type": "mistral", "num_hidden_layers": 2, "hidden_size": 64,
      "num_attention_heads": 4, "vocab_size": 100, "sliding_window": 4096})",
                                 "config.json");
  ASSERT_TRUE(mistral.ok()) << mistral.error().message();
  EXPECT_EQ(mistral->sliding_window, 4096);
  auto neox = model_from_text(R"({"model_type": "gpt_neox", "num_hidden_layers": 2, "hidden_size": 64,
      "num_attention_heads": 4, "vocab_size": 100, "use_parallel_residual": false})",
                              "config.json");
  ASSERT_TRUE(neox.ok()) << neox.error().message();
  EXPECT_FALSE(neox->parallel_block);

  ModelSpec m = preset("gpt3-175b");
  m.parallel_block = true;
  m.sliding_window = 512;
  auto back = model_from_json(model_to_json(m), "m.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back.value(), m);
  auto bad = model_from_text(R"({"layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 64,
      "sliding_window": -1})",
                             "m.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("m.json: /sliding_window"), std::string::npos)
      << bad.error().message();
}

TEST(ModelSpec, ErrorsNameTheField) {
  auto bad = model_from_text(R"({"name": "x", "layers": 4, "hidden": 64, "heads": 4, "kv_heads": 3,
                                 "vocab": 100, "seq_len": 64})",
                             "m.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message(), "m.json: /kv_heads: 3 does not divide heads (4)");
  auto missing =
      model_from_text(R"({"name": "x", "layers": 4, "hidden": 64, "heads": 4, "vocab": 100})", "m.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message(), "m.json: /seq_len: missing required field");
  auto hf_bad = model_from_text(R"({"model_type": "llama", "hidden_size": 64})", "config.json");
  ASSERT_FALSE(hf_bad.ok());
  EXPECT_NE(hf_bad.error().message().find("config.json: /num_hidden_layers: missing"), std::string::npos);
}

}  // namespace
}  // namespace foresight

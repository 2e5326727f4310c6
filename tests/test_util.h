// Helpers shared by the tests: presets by name, clusters sized to a device count.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "sim/spec/hardware.h"
#include "sim/spec/model.h"
#include "sim/spec/plan.h"
#include "sim/spec/presets.h"

namespace foresight::testing {

inline ModelSpec preset_model(const std::string& name) {
  auto src = resolve_spec(PresetKind::kModel, name);
  EXPECT_TRUE(src.ok()) << name;
  auto m = model_from_text(src->text, src->file);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message());
  return m.ok() ? *m : ModelSpec{};
}

// GPT-3 175B's layer shape as Korthikanti et al. (2022) count it (Brown et al. 2020: multi-head
// attention, a GeLU MLP of 4h, LayerNorm, dropout), without the preset's biases and tied
// embeddings, so that the published closed forms hold term by term.
inline ModelSpec gpt3_shape() {
  ModelSpec m;
  m.name = "gpt";
  m.layers = 96;
  m.hidden = 12288;
  m.heads = 96;
  m.kv_heads = 96;
  m.head_dim = 128;
  m.ffn_hidden = 4 * 12288;
  m.mlp = MlpKind::kGelu;
  m.norm = NormKind::kLayerNorm;
  m.vocab = 51200;
  m.seq_len = 2048;
  m.dropout = true;
  return m;
}

inline ClusterSpec preset_cluster(const std::string& name, int gpus) {
  auto c = load_cluster(name);
  EXPECT_TRUE(c.ok()) << name;
  if (!c.ok()) return ClusterSpec{};
  EXPECT_TRUE(resize_cluster(*c, gpus, "test").ok());
  return *c;
}

inline Plan make_plan(int tp, int pp, int dp, int mb, long long gb) {
  Plan p;
  p.tp = tp;
  p.pp = pp;
  p.dp = dp;
  p.micro_batch = mb;
  p.global_batch = gb;
  return p;
}

// A path under the temporary folder that is this test process's own (its pid in the name): test
// runs of other checkouts on the same machine use the same names at the same time.
inline std::filesystem::path test_temp_path(const std::string& name) {
  return std::filesystem::temp_directory_path() /
         ("foresight-test-" + std::to_string(::getpid()) + "-" + name);
}

}  // namespace foresight::testing

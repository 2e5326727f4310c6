// Fuzzes plan_from_json and validate_plan against a small dense and a small MoE model.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "sim/spec/json_reader.h"
#include "sim/spec/plan.h"

namespace {
foresight::ModelSpec small_model(bool moe) {
  foresight::ModelSpec m;
  m.name = moe ? "fuzz-moe" : "fuzz";
  m.layers = 4, m.hidden = 64, m.heads = 4, m.kv_heads = 2, m.head_dim = 16;
  m.ffn_hidden = 256, m.vocab = 256, m.seq_len = 64;
  if (moe) m.moe = {.experts = 8, .top_k = 2, .expert_ffn_hidden = 128, .dense_layers = 1};
  return m;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const foresight::ModelSpec kModels[] = {small_model(false), small_model(true)};
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto doc = foresight::parse_json_text(text, "fuzz.json");
  if (!doc) return 0;
  auto plan = foresight::plan_from_json(*doc, "fuzz.json");
  if (!plan) return 0;
  for (const auto& m : kModels) {
    (void)foresight::validate_plan(*plan, m, 0, "fuzz.json");
    (void)foresight::validate_plan(*plan, m, plan->gpus(), "fuzz.json");
  }
  return 0;
}

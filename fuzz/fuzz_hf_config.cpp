// Fuzzes model_from_hf_config (Hugging Face config.json import) on any parsed document. A config
// it accepts must give finite, positive parameter counts and a model our own JSON format reads
// back unchanged (model_to_json -> model_from_json).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "sim/spec/json_reader.h"
#include "sim/spec/model.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto doc = foresight::parse_json_text(text, "config.json");
  if (!doc) return 0;
  auto model = foresight::model_from_hf_config(*doc, "config.json");
  if (!model) return 0;
  const double total = model->total_params(), active = model->active_params();
  if (!std::isfinite(total) || !(total > 0) || !std::isfinite(active) || !(active > 0) || active > total)
    __builtin_trap();
  auto back = foresight::model_from_json(foresight::model_to_json(*model), "roundtrip.json");
  if (!back || !(*back == *model)) __builtin_trap();
  return 0;
}

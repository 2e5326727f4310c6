// Error bands per class of plan, from the embedded validation summary.
#include "sim/validate/error_band.h"

#include <nlohmann/json.hpp>

#include "sim/spec/presets.h"

namespace foresight {

std::map<std::string, std::string> plan_classes(const Plan& p, int gpus) {
  const int z = p.zero_stage;
  return {{"precision", to_string(p.precision)},
          {"sharding", z == 0   ? "replicated"
                       : z <= 2 ? "ZeRO-1/2"
                                : "ZeRO-3/FSDP"},
          {"scale", gpus <= 64    ? "up to 64 GPUs"
                    : gpus <= 512 ? "65 to 512 GPUs"
                                  : "more than 512 GPUs"}};
}

std::pair<double, double> ErrorBand::measured_range(double predicted_s) const {
  return {predicted_s / (1 + p90_pct / 100), predicted_s / (1 + p10_pct / 100)};
}

namespace {
// The built-in table, parsed once (a search asks for a band per listed plan); null when missing
// or not a table of classes.
const nlohmann::json* classes_table() {
  static const nlohmann::json doc = [] {
    const auto text = preset_text(PresetKind::kTable, "accuracy-classes");
    return text ? nlohmann::json::parse(*text, nullptr, false) : nlohmann::json();
  }();
  return doc.is_object() && doc.contains("classes") && doc["classes"].is_object() ? &doc : nullptr;
}
}  // namespace

Result<ErrorBand> error_band(const Plan& p, int gpus) {
  if (!preset_text(PresetKind::kTable, "accuracy-classes"))
    return Error("the built-in accuracy-classes table is missing from this build");
  const nlohmann::json* table = classes_table();
  if (!table) return Error("validation/accuracy-classes.json: not a table of classes");
  const nlohmann::json& doc = *table;
  const auto classes = plan_classes(p, gpus);
  for (const char* dimension : {"sharding", "precision", "scale"}) {
    const std::string& cls = classes.at(dimension);
    if (!doc["classes"].contains(dimension) || !doc["classes"][dimension].contains(cls)) continue;
    const auto& b = doc["classes"][dimension][cls];
    return ErrorBand{dimension,
                     cls,
                     b.value("cases", 0),
                     b.value("mape_pct", 0.0),
                     b.value("p10_pct", 0.0),
                     b.value("p90_pct", 0.0),
                     doc.value("generated", "")};
  }
  return Error("no published runs of this plan's classes in validation/accuracy-classes.json");
}

}  // namespace foresight

// Built-in presets: the JSON files under hwprofiles/ and models/, embedded into the library at
// build time so the tool works from any directory. Files given by path are read from disk.
//
//   auto text = preset_text(PresetKind::kModel, "llama3-8b");   // the JSON text, if known
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sim/core/status.h"

namespace foresight {

// kTable: the built-in tables that are not specs (compare/kernel-kinds.json).
enum class PresetKind { kDevice, kNode, kCluster, kModel, kTable };

std::string_view to_string(PresetKind k);
std::optional<std::string_view> preset_text(PresetKind kind, std::string_view name);
std::vector<std::string> preset_names(PresetKind kind);

// A source of JSON text: a preset's (file name "<preset:NAME>") or a file's.
struct SpecText {
  std::string text;
  std::string file;  // for error messages: the path, or "preset NAME"
};

// Resolves `name_or_path`: an existing file path wins; else a preset; else an error that lists
// the presets of that kind.
Result<SpecText> resolve_spec(PresetKind kind, const std::string& name_or_path);

}  // namespace foresight

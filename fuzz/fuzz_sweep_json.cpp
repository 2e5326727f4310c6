// Fuzzes sweep_from_json (the sweep spec reader: presets expanded, axes by JSON pointer, every
// point resolved and checked) on any parsed document. It only parses: no point is run.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "sim/spec/json_reader.h"
#include "sim/sweep/sweep.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto doc = foresight::parse_json_text(text, "sweep.json");
  if (!doc) return 0;
  // The reader resolves every point, in time linear in their count (about 0.4 ms a point under
  // ASan on an idle core), which check_sweep_budget bounds (tested in tests/sweep). Specs
  // expanding past kFuzzMaxPoints are left out here: every point goes through the same reader
  // code, so more points exercise nothing new and only slow the run (a 500-point cap let the
  // corpus drift toward the cap: 543 executions/s against 2,100). On a loaded machine (builds
  // beside the fuzzer run it 8x slower) a 14,157-point and then a 1,080-point input passed
  // libFuzzer's 10 s timeout; 48 points stay under a second even then.
  constexpr double kFuzzMaxPoints = 48;
  if (doc->is_object() && doc->contains("axes") && (*doc)["axes"].is_object()) {
    double points = 1;
    for (const auto& [pointer, values] : (*doc)["axes"].items())
      if (values.is_array()) points *= static_cast<double>(std::max<std::size_t>(1, values.size()));
    if (points > kFuzzMaxPoints) return 0;
  }
  auto spec = foresight::sweep_from_json(*doc, "sweep.json");
  if (!spec) return 0;
  std::size_t expected = 1;
  for (const auto& axis : spec->axes) expected *= axis.second.size();
  if (spec->points.size() != expected || spec->id.size() != 16) __builtin_trap();
  return 0;
}

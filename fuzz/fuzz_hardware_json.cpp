// Fuzzes device_from_json, node_from_json and cluster_from_json on one parsed document, and a
// cluster's measured collective times at odd sizes.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "sim/spec/hardware.h"
#include "sim/spec/json_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto doc = foresight::parse_json_text(text, "fuzz.json");
  if (!doc) return 0;
  (void)foresight::device_from_json(*doc, "fuzz.json");
  auto node = foresight::node_from_json(*doc, "fuzz.json");
  if (node && !node->devices.empty()) (void)node->nic_bandwidth_per_device();
  auto cluster = foresight::cluster_from_json(*doc, "fuzz.json");
  if (cluster) {
    (void)cluster->total_accelerators();
    const foresight::MeasuredTimes& m = cluster->node.fabric.measured;  // interpolation at odd sizes
    for (foresight::CollectiveOp op : foresight::kMeasuredOps)
      for (double bytes : {0.0, 1.0, 1000.0, 1024.0, 3000.0, 1e9, 1e300}) (void)m.time(op, m.ranks, bytes);
  }
  return 0;
}

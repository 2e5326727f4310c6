// Fuzzes device_from_json, node_from_json and cluster_from_json on one parsed document.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
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
  if (cluster) (void)cluster->total_accelerators();
  return 0;
}

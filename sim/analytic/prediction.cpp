// Prediction: JSON form and the memory description used in errors and tables.
#include "sim/analytic/prediction.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <utility>

#include "sim/core/units.h"

namespace foresight {

using nlohmann::json;

Status check_finite(const Prediction& p, const std::string& source) {
  const TimeBreakdown& t = p.time;
  const std::pair<const char*, double> figures[] = {{"step time", p.step_time_s},
                                                    {"compute", t.compute},
                                                    {"tp communication", t.tp_comm},
                                                    {"cp communication", t.cp_comm},
                                                    {"ep communication", t.ep_comm},
                                                    {"pp communication", t.pp_comm},
                                                    {"bubble", t.bubble},
                                                    {"dp communication", t.dp_comm},
                                                    {"optimizer", t.optimizer},
                                                    {"tokens/s", p.tokens_per_s},
                                                    {"memory", p.memory.total}};
  for (const auto& [name, v] : figures)
    if (!std::isfinite(v))
      return Error(
          source + ": the prediction's " + name + " is " + (std::isnan(v) ? "not a number" : "infinite") +
          ": a rate this plan needs (a link, a device's peak or memory bandwidth) is zero or out of range");
  return Status::Ok();
}

std::array<NamedAmount, 10> time_parts(const TimeBreakdown& t) {
  return {{{"compute", t.compute},
           {"tensor-parallel comm", t.tp_comm},
           {"context-parallel comm", t.cp_comm},
           {"expert-parallel comm", t.ep_comm},
           {"pipeline send/recv", t.pp_comm},
           {"pipeline bubble", t.bubble},
           {"data-parallel comm", t.dp_comm},
           {"optimizer", t.optimizer},
           {"offload", t.offload},
           {"input (data loading) stall", t.data}}};
}

std::array<NamedAmount, 6> memory_parts(const MemoryBreakdown& m) {
  return {{{"weights", m.weights},
           {"gradients", m.gradients},
           {"optimizer state", m.optimizer},
           {"activations", m.activations},
           {"buffers", m.buffers},
           {"reserved", m.reserved}}};
}

std::string describe_memory(const MemoryBreakdown& m) {
  auto b = [](double v) { return pretty_quantity(v, Dimension::kBytes); };
  return "needs " + b(m.total) + " of " + b(m.capacity) + " on pipeline stage " + std::to_string(m.stage) +
         " (weights " + b(m.weights) + ", gradients " + b(m.gradients) + ", optimizer " + b(m.optimizer) +
         ", activations " + b(m.activations) + ", buffers " + b(m.buffers) + ", reserved " + b(m.reserved) +
         ")" +
         (m.host_capacity > 0 && m.host > m.host_capacity
              ? "; offloaded state needs " + b(m.host) + " of host memory, the device's share is " +
                    b(m.host_capacity)
              : std::string());
}

json prediction_to_json(const Prediction& p) {
  const TimeBreakdown& t = p.time;
  const MemoryBreakdown& m = p.memory;
  return json{
      {"step_time_s", p.step_time_s},
      {"breakdown_s",
       {{"compute", t.compute},
        {"recompute", t.recompute},
        {"host_wait", t.host_wait},
        {"tp_comm", t.tp_comm},
        {"cp_comm", t.cp_comm},
        {"ep_comm", t.ep_comm},
        {"pp_comm", t.pp_comm},
        {"bubble", t.bubble},
        {"dp_comm", t.dp_comm},
        {"optimizer", t.optimizer},
        {"offload", t.offload},
        {"data", t.data}}},
      {"memory_bytes",
       {{"weights", m.weights},
        {"gradients", m.gradients},
        {"optimizer", m.optimizer},
        {"activations", m.activations},
        {"buffers", m.buffers},
        {"reserved", m.reserved},
        {"total", m.total},
        {"capacity", m.capacity},
        {"stage", m.stage},
        {"host", m.host},
        {"host_capacity", m.host_capacity}}},
      {"fits", p.fits()},
      {"model_flops_per_step", p.model_flops},
      {"hardware_flops_per_step", p.hardware_flops},
      {"mfu", p.mfu},
      {"hfu", p.hfu},
      {"tokens_per_s", p.tokens_per_s},
      {"data_load_s", p.data_load_s},
      {"tflops_per_device", p.tflops_per_device},
      {"micro_batches", p.micro_batches},
      {"devices", p.devices},
  };
}

}  // namespace foresight

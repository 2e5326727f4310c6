// The parameters one rank holds: a flat fp32 buffer cut into regions (the embedding/head tensors,
// then one region per layer of the rank's pipeline stage) and tensors inside them, each with the
// map from its local (tensor-parallel shard) coordinates to the coordinates of the full tensor.
// Initial values are a pure function of (seed, layer, tensor, full coordinates), so every layout
// starts from the same model as the serial run, and tests can compare shards element by element.
//
//   ParamLayout L = ParamLayout::build(model, plan, stage_layers, stage, tp_rank);
//   std::vector<float> p(L.total());  L.initialise(p.data(), seed);
//   const TensorSlot* w = L.find("qkv", 3);
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sim/spec/model.h"
#include "sim/spec/plan.h"

namespace foresight::runtime {

// How a local tensor maps onto the full one.
enum class Shard : std::uint8_t {
  kReplicated,   // every TP rank holds all of it
  kRows,         // row-parallel weight: this rank's block of rows
  kQkvColumns,   // fused QKV weight: this rank's q heads, k heads and v heads
  kPartColumns,  // column-parallel weight of `parts` side-by-side matrices (SwiGLU: gate | up)
};
enum class Init : std::uint8_t { kOnes, kZeros, kUniform };

struct TensorSlot {
  std::string name;  // "qkv", "proj", "norm1.weight", "embedding", "lm_head", ...
  int layer = -1;    // model layer, -1 for the embedding and head
  int region = 0;
  int rows = 1, cols = 1;
  std::size_t offset = 0;  // into the flat buffer
  Shard shard = Shard::kReplicated;
  int parts = 1;  // kPartColumns
  Init init = Init::kUniform;
  float scale = 0;  // standard deviation of the uniform initialisation
  std::size_t size() const { return static_cast<std::size_t>(rows) * cols; }
};

struct Region {
  int layer = -1;          // -1: embedding and head
  std::size_t offset = 0;  // into the flat buffer
  std::size_t size = 0;    // elements used
  std::size_t padded = 0;  // size rounded up to a multiple of the data-parallel degree (ZeRO-1)
};

class ParamLayout {
 public:
  // Tensors of pipeline stage `stage` (its layers in `layers`, all chunks), for tensor-parallel
  // rank `tp_rank` of `plan.tp`. Regions are padded to multiples of `plan.dp`.
  static ParamLayout build(const ModelSpec& m, const Plan& plan, const std::vector<int>& layers,
                           bool first_stage, bool last_stage, int tp_rank);

  std::size_t total() const { return total_; }
  const std::vector<TensorSlot>& tensors() const { return tensors_; }
  const std::vector<Region>& regions() const { return regions_; }
  const TensorSlot* find(const std::string& name, int layer) const;
  int region_of_layer(int layer) const;
  // Full-tensor coordinates of local element (r, c).
  std::pair<int, int> global_coords(const TensorSlot& t, int r, int c) const;
  // Fills `params` with the initial values (padding with zeros).
  void initialise(float* params, std::uint64_t seed) const;
  // The initial value of element (r, c) of the full tensor `t` names.
  static float initial_value(const TensorSlot& t, std::uint64_t seed, int r, int c);

 private:
  std::vector<TensorSlot> tensors_;
  std::vector<Region> regions_;
  std::size_t total_ = 0;
  int tp_ = 1, tp_rank_ = 0;
  int q_local_ = 0, kv_local_ = 0, head_dim_ = 0, heads_ = 0, kv_heads_ = 0;
};

}  // namespace foresight::runtime

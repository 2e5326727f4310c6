// Parameter layout, shard maps and the layout-independent initialisation.
#include "runtime/training/params.h"

#include <cmath>

#include "runtime/training/hash.h"

namespace foresight::runtime {

ParamLayout ParamLayout::build(const ModelSpec& m, const Plan& plan, const std::vector<int>& layers,
                               bool first_stage, bool last_stage, int tp_rank) {
  ParamLayout L;
  L.tp_ = plan.tp;
  L.tp_rank_ = tp_rank;
  L.heads_ = m.heads;
  L.kv_heads_ = m.kv_heads;
  L.head_dim_ = static_cast<int>(m.q_dim() / m.heads);
  L.q_local_ = m.heads / plan.tp;
  L.kv_local_ = m.kv_heads / plan.tp;
  const int H = static_cast<int>(m.hidden), V = static_cast<int>(m.vocab), D = L.head_dim_;
  const int F = static_cast<int>(m.ffn_hidden / plan.tp);
  const int up_parts = m.mlp == MlpKind::kSwiglu ? 2 : 1;
  const bool layernorm = m.norm == NormKind::kLayerNorm;
  constexpr float kStd = 0.02f;  // GPT-2 / Megatron init_method_std
  // Output projections scaled by 1/sqrt(2 * layers) (GPT-2's residual scaling).
  const float out_std = kStd / std::sqrt(2.0f * static_cast<float>(m.layers));

  std::size_t offset = 0;
  auto open_region = [&](int layer) {
    Region r;
    r.layer = layer;
    r.offset = offset;
    L.regions_.push_back(r);
  };
  auto close_region = [&] {
    Region& r = L.regions_.back();
    r.size = offset - r.offset;
    const std::size_t dp = static_cast<std::size_t>(plan.dp);
    r.padded = (r.size + dp - 1) / dp * dp;
    offset = r.offset + r.padded;
  };
  auto add = [&](const char* name, int layer, int rows, int cols, Shard shard, Init init, float scale,
                 int parts = 1) {
    TensorSlot t;
    t.name = name;
    t.layer = layer;
    t.region = static_cast<int>(L.regions_.size()) - 1;
    t.rows = rows;
    t.cols = cols;
    t.offset = offset;
    t.shard = shard;
    t.parts = parts;
    t.init = init;
    t.scale = scale;
    offset += t.size();
    L.tensors_.push_back(std::move(t));
  };
  auto norm = [&](const char* weight, const char* bias, int layer) {
    add(weight, layer, 1, H, Shard::kReplicated, Init::kOnes, 0);
    if (layernorm) add(bias, layer, 1, H, Shard::kReplicated, Init::kZeros, 0);
  };

  open_region(-1);
  if (first_stage) add("embedding", -1, V, H, Shard::kReplicated, Init::kUniform, kStd);
  if (last_stage) {
    norm("final_norm.weight", "final_norm.bias", -1);
    // Vocabulary-parallel (Megatron): each TP rank holds V/tp output columns.
    add("lm_head", -1, H, V / plan.tp, Shard::kPartColumns, Init::kUniform, kStd);
  }
  close_region();
  for (int layer : layers) {
    open_region(layer);
    norm("norm1.weight", "norm1.bias", layer);
    add("qkv", layer, H, (L.q_local_ + 2 * L.kv_local_) * D, Shard::kQkvColumns, Init::kUniform, kStd);
    add("proj", layer, L.q_local_ * D, H, Shard::kRows, Init::kUniform, out_std);
    norm("norm2.weight", "norm2.bias", layer);
    add("mlp_up", layer, H, F * up_parts, Shard::kPartColumns, Init::kUniform, kStd, up_parts);
    add("mlp_down", layer, F, H, Shard::kRows, Init::kUniform, out_std);
    close_region();
  }
  L.total_ = offset;
  return L;
}

const TensorSlot* ParamLayout::find(const std::string& name, int layer) const {
  for (const auto& t : tensors_)
    if (t.layer == layer && t.name == name) return &t;
  return nullptr;
}

int ParamLayout::region_of_layer(int layer) const {
  for (std::size_t i = 0; i < regions_.size(); ++i)
    if (regions_[i].layer == layer) return static_cast<int>(i);
  return -1;
}

std::pair<int, int> ParamLayout::global_coords(const TensorSlot& t, int r, int c) const {
  switch (t.shard) {
    case Shard::kReplicated:
      return {r, c};
    case Shard::kRows:
      return {tp_rank_ * t.rows + r, c};
    case Shard::kPartColumns: {
      const int w = t.cols / t.parts;  // local width of one part
      return {r, (c / w) * w * tp_ + tp_rank_ * w + c % w};
    }
    case Shard::kQkvColumns: {
      const int D = head_dim_, q = q_local_ * D, kv = kv_local_ * D;
      if (c < q) return {r, tp_rank_ * q + c};
      if (c < q + kv) return {r, heads_ * D + tp_rank_ * kv + (c - q)};
      return {r, (heads_ + kv_heads_) * D + tp_rank_ * kv + (c - q - kv)};
    }
  }
  return {r, c};
}

float ParamLayout::initial_value(const TensorSlot& t, std::uint64_t seed, int r, int c) {
  switch (t.init) {
    case Init::kOnes:
      return 1.0f;
    case Init::kZeros:
      return 0.0f;
    case Init::kUniform:
      break;
  }
  const std::uint64_t key =
      splitmix64(seed ^ fnv1a(t.name) ^ splitmix64(static_cast<std::uint64_t>(t.layer + 1)));
  const std::uint64_t bits =
      splitmix64(key ^ (static_cast<std::uint64_t>(r) << 32 | static_cast<std::uint32_t>(c)));
  const double u = static_cast<double>(bits >> 11) * 0x1.0p-53;           // [0, 1)
  return static_cast<float>((2.0 * u - 1.0) * std::sqrt(3.0) * t.scale);  // uniform with std `scale`
}

void ParamLayout::initialise(float* params, std::uint64_t seed) const {
  for (std::size_t i = 0; i < total_; ++i) params[i] = 0;
  for (const auto& t : tensors_)
    for (int r = 0; r < t.rows; ++r)
      for (int c = 0; c < t.cols; ++c) {
        const auto [gr, gc] = global_coords(t, r, c);
        params[t.offset + static_cast<std::size_t>(r) * t.cols + c] = initial_value(t, seed, gr, gc);
      }
}

}  // namespace foresight::runtime

// The ways a pipeline of `pp` stages can interleave a model's layers in virtual stages, as
// Megatron-Core lays them out: every v > 1 whose pp * v chunks take the layers evenly, or take them
// with the last chunk, or the first and the last, one layer short (--account-for-loss-in-pipeline-
// split and --account-for-embedding-in-pipeline-split; Llama 3 405B's 126 layers on 16 stages of 8
// chunks). Each comes with its Plan::layer_split (per chunk, in model order; empty when even).
//
//   for (const auto& [v, split] : interleavings(126, 16)) ...   // v = 8: 128 chunks, 0 1 ... 1 0
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace foresight {

inline std::vector<std::pair<int, std::vector<int>>> interleavings(int layers, int pp, int max_chunks = 32) {
  std::vector<std::pair<int, std::vector<int>>> out;
  for (int v = 2; v <= max_chunks && pp * v <= layers + 2; ++v) {
    const int n = pp * v;
    if (layers % n == 0) {
      out.push_back({v, {}});
      continue;
    }
    for (int short_chunks : {1, 2}) {
      if ((layers + short_chunks) % n != 0) continue;
      std::vector<int> split(static_cast<std::size_t>(n), (layers + short_chunks) / n);
      split.back() -= 1;                          // the loss's chunk
      if (short_chunks == 2) split.front() -= 1;  // and the embedding's
      out.push_back({v, std::move(split)});
    }
  }
  return out;
}

}  // namespace foresight

// Data-parallel gradient compression as the runtime executes it: one region of the parameter
// buffer at a time, in the three ops the workload lowers for it (sim/workload: `grad_compress`, the
// compressed DP collective, `grad_decompress`; sizes and costs in sim/analytic/compression.h).
//
//   int8   compress: quantise the gradient (symmetric, an fp32 scale per block of
//          kInt8BlockElements) into the n chunks of a compressed all-reduce. The collective: an
//          all-to-all of the chunks -- rank j receives every rank's chunk j, dequantises the n
//          copies, sums them in fp32 in rank order and requantises the sum -- then an all-gather
//          of the summed chunks. Each phase moves (n-1)/n of the compressed buffer per rank, the
//          ring all-reduce's 2(n-1)/n, so the graph's all-reduce of the compressed bytes is what
//          crosses the wire (int8 sums would overflow if reduced in int8). Decompress: dequantise
//          the n summed chunks into the gradient. No error feedback: the cost model's int8
//          kernels (2g + 2 bytes per element) have no residual pass.
//   top-k  compress, with error feedback: acc = gradient + residual; per tensor, the
//          ceil(f x size) entries of largest |acc| are sent as (int32 index, fp32 value) and the
//          rest stays in the residual (kernels::topk_sparsify_cpu). The collective: an all-gather
//          of every rank's sets. Decompress: the region is zeroed and the n sets scatter-added,
//          in rank order.
// Quantisation blocks and top-k selections never straddle two tensors: a tensor replicated in the
// TP group (norms, the embedding) then compresses identically on every TP rank, and its copies
// stay equal. Every rank decompresses the same bytes in the same order, so the DP replicas hold
// bit-identical gradients. The reduction is a sum, like the dense all-reduce it replaces: each
// rank's gradient is already its share of the global batch's mean.
//
//   RegionCompressor c(GradCompression::kTopK, 0.1, tensor_segments, dp.size(), padded);
//   c.compress(grads + r.offset, residual + r.offset);  // grad_compress
//   c.exchange(dp);                                      // the DP collective
//   c.decompress(grads + r.offset);                      // grad_decompress
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/communication/comm.h"
#include "sim/spec/plan.h"

namespace foresight::runtime {

// A tensor's elements within its region: [begin, begin + size).
struct Segment {
  std::size_t begin = 0, size = 0;
};

class RegionCompressor {
 public:
  // `segments`: the region's tensors, in order, inside [0, padded); `ranks`: the DP group's size
  // (dividing `padded`); `topk_fraction` f in (0, 1]. Scheme kInt8 or kTopK.
  RegionCompressor(GradCompression scheme, double topk_fraction, const std::vector<Segment>& segments,
                   int ranks, std::size_t padded);

  // `grad` and `residual` (top-k only; may be null for int8) hold the region's `padded` elements.
  void compress(const float* grad, float* residual);
  // The collective on the DP group (its size must be `ranks`). Throws on a wrong group size.
  void exchange(const Comm& dp);
  // Writes the reduced (summed) gradient over the region's `padded` elements.
  void decompress(float* grad) const;

  // The collective's size as the op graph sizes it: int8 the compressed buffer all-reduced (int8
  // elements plus scales), top-k the gathered total (n sets of (index, value) pairs).
  std::size_t wire_bytes() const;
  // Elements each rank sends in top-k (sum over tensors of ceil(f x size)).
  std::size_t kept() const { return kept_; }

 private:
  struct Piece {            // int8: a tensor's part inside one chunk
    std::size_t begin = 0;  // region element
    std::size_t size = 0;
    std::size_t scale = 0;  // its first scale within the chunk's scales
  };
  void quantise_chunk(int chunk, const float* x, std::uint8_t* out) const;  // x: the chunk's elements
  void dequantise_chunk(int chunk, const std::uint8_t* in, float* x) const;

  GradCompression scheme_;
  int ranks_;
  std::size_t padded_;
  // int8
  std::size_t chunk_ = 0;                   // elements per chunk: padded / ranks
  std::vector<std::vector<Piece>> pieces_;  // per chunk
  std::vector<std::size_t> chunk_bytes_;    // per chunk: chunk_ int8 + 4 x its scales
  std::vector<std::size_t> chunk_offset_;   // per chunk: its offset in a full payload
  // top-k
  std::vector<Segment> segments_;
  std::vector<std::size_t> k_;  // per segment
  std::size_t kept_ = 0;
  // payloads
  std::vector<std::uint8_t> mine_;      // this rank's compressed region (int8: every chunk)
  std::vector<std::uint8_t> gathered_;  // after the collective: int8 the n summed chunks; top-k n sets
  bool exchanged_ = false;
};

}  // namespace foresight::runtime

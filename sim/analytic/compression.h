// What gradient compression does to the data-parallel reduction: bytes on the wire, the pattern
// (a dense all-reduce of smaller buffers, or an all-gather of sparse ones), and the device time of
// compressing and decompressing.
//
//   CompressionCost c = compression_cost(plan, model, params, grad_bytes(plan.precision), dp);
//   double t = (c.gather ? allgather_time(link, c.wire_bytes) : allreduce_time(link, c.wire_bytes)) +
//              c.kernel_seconds(dev);
//
// Per scheme (P parameters, g bytes per gradient element, n ranks, f the kept fraction):
//   int8        all-reduce of P (1 + 4 / 256) bytes: one byte per element and an fp32 scale per
//               block of kInt8BlockElements, ratio g / (1 + 4 / 256). The runtime executes it as
//               a compressed all-reduce (runtime/communication/grad_compression.h): an all-to-all of int8
//               chunks, each rank summing its chunk in fp32 and requantising it, then an
//               all-gather of the int8 sums -- the ring all-reduce's 2(n-1)/n of the buffer.
//   top-k       each rank sends f P (value g + 4-byte index); sparse sets do not add up in place,
//               so ranks all-gather them: n f P (g + 4) gathered. Error feedback keeps the rest.
//   PowerSGD    rank r: a weight matrix m x k sends (m + k) r values instead of m k; with the
//               model's hidden size h as both sides, 2 r / h of the dense bytes, all-reduced (P and
//               Q in turn). Its matmuls cost 4 r FLOPs per element.
//   four-stage  (the articles': sparsify -> int8 -> entropy coding -> local accumulation) f P values
//               of 8 bits, indices entropy-coded as geometric gaps, log2(1/f) + log2(e) bits each;
//               all-gathered like top-k.
// Device traffic (bytes per gradient element), memory-bound passes: int8 quantise + dequantise
// 2g + 2; top-k with error feedback 6g (add residual, select, keep residual) plus scattering the n
// gathered sets; PowerSGD 3g plus its matmuls; four-stage 7g plus decoding the gathered sets twice.
#pragma once

#include "sim/spec/hardware.h"
#include "sim/spec/model.h"
#include "sim/spec/plan.h"

namespace foresight {

// int8's quantisation block: one fp32 scale per 256 elements costs 4/256 = 1.6% on the wire, and a
// block this small keeps one large gradient from rounding the small ones beside it to zero
// (the runtime and kernels::quantize_int8 take it as their `block`).
inline constexpr int kInt8BlockElements = 256;

struct CompressionCost {
  bool gather = false;      // sparse sets: an all-gather (else a dense all-reduce)
  double wire_bytes = 0;    // the collective's size (all-gather: the gathered total)
  double ratio = 1;         // dense gradient bytes / what one rank puts on the wire
  double kernel_bytes = 0;  // device memory traffic of compression and decompression
  double kernel_flops = 0;  // PowerSGD's matmuls
  double kernel_seconds(const DeviceSpec& d) const;
};

// `params` gradients of `grad_bytes` each, reduced over `ranks` ranks, under the plan's scheme.
// GradCompression::kNone: a dense all-reduce of params * grad_bytes and no kernels.
CompressionCost compression_cost(const Plan& p, const ModelSpec& m, double params, double grad_bytes,
                                 int ranks);

}  // namespace foresight

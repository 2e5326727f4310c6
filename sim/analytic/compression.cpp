// Gradient compression: wire bytes, pattern and kernel cost per scheme (see the header).
#include "sim/analytic/compression.h"

#include <algorithm>
#include <cmath>

namespace foresight {

double CompressionCost::kernel_seconds(const DeviceSpec& d) const {
  const double flops = d.peak(DType::kFp32) > 0 ? d.peak(DType::kFp32) * d.gemm_efficiency : 0;
  return (d.stream_rate() > 0 ? d.stream_seconds(kernel_bytes) : 0) + (flops > 0 ? kernel_flops / flops : 0);
}

CompressionCost compression_cost(const Plan& p, const ModelSpec& m, double params, double grad_bytes,
                                 int ranks) {
  CompressionCost c;
  const double dense = params * grad_bytes;
  const double n = std::max(1, ranks);
  const double f = std::clamp(p.compression_topk, 1e-9, 1.0);
  double per_rank = dense;  // what one rank puts on the wire
  switch (p.grad_compression) {
    case GradCompression::kNone:
      c.wire_bytes = dense;
      return c;
    case GradCompression::kInt8:
      per_rank = params * (1.0 + 4.0 / kInt8BlockElements);  // int8 elements and fp32 block scales
      c.wire_bytes = per_rank;
      c.kernel_bytes = params * (2 * grad_bytes + 2);
      break;
    case GradCompression::kTopK:
      per_rank = f * params * (grad_bytes + 4);
      c.gather = true;
      c.wire_bytes = n * per_rank;
      c.kernel_bytes = params * 6 * grad_bytes + n * per_rank;
      break;
    case GradCompression::kPowerSgd: {
      const double share =
          std::min(1.0, 2.0 * p.compression_rank / std::max<double>(1.0, static_cast<double>(m.hidden)));
      per_rank = dense * share;
      c.wire_bytes = per_rank;
      c.kernel_bytes = params * 3 * grad_bytes;
      c.kernel_flops = 4.0 * p.compression_rank * params;
      break;
    }
    case GradCompression::kFourStage: {
      const double index_bits = std::log2(1.0 / f) + std::log2(std::exp(1.0));
      per_rank = f * params * (8.0 + index_bits) / 8.0;
      c.gather = true;
      c.wire_bytes = n * per_rank;
      c.kernel_bytes = params * 7 * grad_bytes + 2 * n * per_rank;
      break;
    }
  }
  c.ratio = per_rank > 0 ? dense / per_rank : 1;
  return c;
}

}  // namespace foresight

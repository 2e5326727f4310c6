// The reference articles' algorithmic training options (../shared/reference/000), as the runtime
// runs them. Each is off by default and changes only what it says:
//
//   variance-adaptive loss scale   scale = base * (1 - alpha * var(recent losses)), clamped to
//                                  [base / 64, base]: a noisier loss gets a smaller fp16 scale.
//   decayed gradient accumulation  the optimizer sees g_t = beta * g_{t-1} + (1 - beta) * grad_t
//                                  (an exponential average of the reduced gradients across steps,
//                                  bias-corrected like Adam's moments) instead of grad_t alone.
//   ARAdam                         AdamW with a per-parameter rate lr_i = lr * (1 + gamma * |theta_i|).
//
// The articles state the formulas without the details fixed here (the loss window, the clamp,
// applying the decay across optimizer steps rather than inside one step's micro-batches); these
// choices are documented in the README's runtime section.
#pragma once

#include <cstddef>
#include <deque>

#include "kernels/reference.h"

namespace foresight::runtime {

struct AlgorithmOptions {
  double loss_scale_alpha = 0;  // 0: off
  int loss_window = 20;         // recent losses whose variance sets the scale
  double grad_decay = 0;        // beta; 0: off
  double aradam_gamma = 0;      // 0: plain AdamW
};

// Population variance of the losses (0 with fewer than two).
double loss_variance(const std::deque<double>& losses);
// base * (1 - alpha * var), within [base / 64, base].
double variance_adjusted_scale(double base, double alpha, double variance);
// g = beta * g + (1 - beta) * fresh, element-wise; returns the bias correction 1 / (1 - beta^t)
// the caller applies (t counts updates from 1).
double decay_accumulate(float* g, const float* fresh, std::size_t n, double beta, int t);
// AdamW (as kernels::adamw_cpu) with lr_i = c.lr * (1 + gamma * |theta_i|) per parameter.
void aradam_cpu(float* params, float* m, float* v, const float* grads, std::size_t n,
                const kernels::AdamWConfig& c, int step, float grad_scale, double gamma);

}  // namespace foresight::runtime

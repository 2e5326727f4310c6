// The articles' algorithmic options: variance-adaptive loss scale, decayed accumulation, ARAdam.
#include "runtime/training/algorithms.h"

#include <algorithm>
#include <cmath>

namespace foresight::runtime {

double loss_variance(const std::deque<double>& losses) {
  if (losses.size() < 2) return 0;
  double mean = 0;
  for (double l : losses) mean += l;
  mean /= static_cast<double>(losses.size());
  double var = 0;
  for (double l : losses) var += (l - mean) * (l - mean);
  return var / static_cast<double>(losses.size());
}

double variance_adjusted_scale(double base, double alpha, double variance) {
  return base * std::clamp(1.0 - alpha * variance, 1.0 / 64, 1.0);
}

double decay_accumulate(float* g, const float* fresh, std::size_t n, double beta, int t) {
  const float b = static_cast<float>(beta), nb = static_cast<float>(1.0 - beta);
  for (std::size_t i = 0; i < n; ++i) g[i] = b * g[i] + nb * fresh[i];
  return 1.0 / (1.0 - std::pow(beta, t));
}

void aradam_cpu(float* params, float* m, float* v, const float* grads, std::size_t n,
                const kernels::AdamWConfig& c, int step, float grad_scale, double gamma) {
  const float bc1 = 1.0f - std::pow(c.beta1, static_cast<float>(step));
  const float bc2 = 1.0f - std::pow(c.beta2, static_cast<float>(step));
  const float gm = static_cast<float>(gamma);
  for (std::size_t i = 0; i < n; ++i) {
    const float g = grads[i] * grad_scale;
    m[i] = c.beta1 * m[i] + (1.0f - c.beta1) * g;
    v[i] = c.beta2 * v[i] + (1.0f - c.beta2) * g * g;
    const float mhat = m[i] / bc1, vhat = v[i] / bc2;
    const float lr = c.lr * (1.0f + gm * std::fabs(params[i]));
    params[i] -= lr * (mhat / (std::sqrt(vhat) + c.eps) + c.weight_decay * params[i]);
  }
}

}  // namespace foresight::runtime

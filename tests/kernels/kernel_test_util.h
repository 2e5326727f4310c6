// Helpers for the kernel tests: seeded random inputs, double-precision dot products, and an
// element-wise comparison `|got - ref| <= abs + |ref| * rel` that names the first mismatches.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace foresight::kernels::testing {

inline std::vector<float> random_vector(std::size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// How far apart two results may be: abs + |ref| * rel (llm.c style). Each use says how it was chosen.
struct Tolerance {
  double abs, rel;
};

template <typename Got, typename Ref>
::testing::AssertionResult all_close(const std::vector<Got>& got, const std::vector<Ref>& ref,
                                     Tolerance tol) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " != reference size " << ref.size();
  std::size_t bad = 0;
  double worst = 0;
  std::ostringstream first;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]), r = static_cast<double>(ref[i]);
    const double err = std::fabs(g - r), limit = tol.abs + std::fabs(r) * tol.rel;
    if (g == r || (std::isnan(g) && std::isnan(r))) continue;  // also equal infinities; NaN must match NaN
    if (err <= limit) continue;                                // false when either side is NaN
    if (bad < 5)
      first << "\n  [" << i << "] got " << g << ", reference " << r << " (|diff| " << err << " > " << limit
            << ")";
    ++bad;
    if (err > worst) worst = err;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " elements differ (abs " << tol.abs << ", rel " << tol.rel
         << ", worst |diff| " << worst << "):" << first.str();
}

}  // namespace foresight::kernels::testing

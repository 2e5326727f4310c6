// Small order statistics shared by the trace readers and the clock alignment.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace foresight {

// The median of `v`: its middle value, or the mean of the two middle values for an even count.
// `v` must not be empty.
inline double median(std::vector<double> v) {
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2 == 1) return *mid;
  return 0.5 * (*mid + *std::max_element(v.begin(), mid));
}

// A robust centre and spread of `v` (not empty): its median, and the median distance from it.
// Used for the offset between two ranks' clocks from the differences of events both ran.
struct MedianSpread {
  double median = 0, spread = 0;
};
inline MedianSpread median_and_spread(std::vector<double> v) {
  MedianSpread m;
  m.median = median(v);
  for (double& x : v) x = std::fabs(x - m.median);
  m.spread = median(std::move(v));
  return m;
}

}  // namespace foresight

// What the calibration (calibrate.cpp) and the profile it writes (profile_json.cpp) share: how sizes
// are labelled, and the collectives that get rates of their own.
#pragma once

#include <iterator>
#include <string>

#include "runtime/calibration/calibrate.h"

namespace foresight::runtime {

// "256 MiB", "8 KiB", "512 B".
std::string size_label(double bytes);

// The collectives that get rates of their own (kOwnRateOps; their points' kind is to_string(op)):
// the line's place in the Calibration, and its model for the profile's source.
struct OwnCollective {
  CollectiveOp op;
  LineFit Calibration::*fit;
  const char* model;
};
inline constexpr OwnCollective kOwnCollectives[] = {
    {CollectiveOp::kAllGather, &Calibration::all_gather, "(n-1)/n*S/B"},
    {CollectiveOp::kReduceScatter, &Calibration::reduce_scatter, "(n-1)/n*S/B"},
    {CollectiveOp::kSendRecv, &Calibration::send_recv, "S/B, half a ping-pong between two ranks"}};
static_assert(std::size(kOwnCollectives) == std::size(kOwnRateOps),
              "a line for each collective with own rates");

// The collectives' points of `c` over `n` ranks (kinds as Measurement's) read into c.fabric: the
// all-reduce's line (where it has points; else the fabric's own stands), each other collective's
// own rates, the cold variants, every point's time on the fitted fabric (fitted_s, bus_factor), and
// the measured times themselves (LinkSpec::measured).
void fit_collectives(Calibration& c, int n);

}  // namespace foresight::runtime

// The event-loop stall probe.
#include "gui/models/stall_probe.h"

#include <algorithm>

namespace foresight::gui {

StallProbe::StallProbe(std::chrono::milliseconds interval, QObject* parent) : QObject(parent) {
  timer_.setInterval(interval);
  // PreciseTimer: the default coarse timer may fire up to 5% late by design, which is not a stall.
  timer_.setTimerType(Qt::PreciseTimer);
  connect(&timer_, &QTimer::timeout, this, &StallProbe::tick);
}

void StallProbe::start() {
  ticks_ = 0;
  max_gap_ns_ = 0;
  elapsed_ns_ = 0;
  clock_.start();
  last_ns_ = 0;
  timer_.start();
}

void StallProbe::stop() {
  timer_.stop();
  // The time since the last tick counts too: a loop blocked until the end never ticked again.
  tick();
  --ticks_;
}

void StallProbe::tick() {
  const std::int64_t now = clock_.nsecsElapsed();
  max_gap_ns_ = std::max(max_gap_ns_, now - last_ns_);
  last_ns_ = now;
  elapsed_ns_ = now;
  ++ticks_;
}

}  // namespace foresight::gui

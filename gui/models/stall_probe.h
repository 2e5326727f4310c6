// Measures how responsive a thread's event loop is: a QTimer ticks every `interval` on the thread
// the probe lives on (the GUI thread), and the probe keeps the longest gap between two ticks. A
// gap much longer than the interval is a stall -- the loop was busy (a slot doing work on the GUI
// thread, or the worker threads starving it of a core) and the window could not repaint.
//
//   StallProbe probe(std::chrono::milliseconds(5));
//   probe.start();
//   ... run work, spin the event loop ...
//   probe.stop();
//   probe.max_gap_ms();   // e.g. 7.9 on an idle loop, 120 while a slot blocks for 0.1 s
#pragma once

#include <QElapsedTimer>
#include <QObject>
#include <QTimer>
#include <chrono>
#include <cstdint>

namespace foresight::gui {

class StallProbe : public QObject {
  Q_OBJECT
 public:
  explicit StallProbe(std::chrono::milliseconds interval, QObject* parent = nullptr);

  void start();
  void stop();
  std::int64_t ticks() const { return ticks_; }
  double max_gap_ms() const { return max_gap_ns_ / 1e6; }
  double interval_ms() const { return static_cast<double>(timer_.interval()); }
  double elapsed_ms() const { return elapsed_ns_ / 1e6; }

 private:
  void tick();

  QTimer timer_;
  QElapsedTimer clock_;
  std::int64_t last_ns_ = 0, max_gap_ns_ = 0, elapsed_ns_ = 0, ticks_ = 0;
};

}  // namespace foresight::gui

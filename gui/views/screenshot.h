// Off-screen rendering of one view, filled with the built-in example (example_inputs(): Llama 3 8B
// on 16 H100s) or with the user's files, to a PNG -- `foresight-gui --screenshot FILE --view NAME`
// and the render tests.
// Everything the view needs is computed in-process: the search and the sweep (example_sweep())
// run synchronously, the Timeline and Compare traces are simulated into a temporary directory
// (write_example_traces), the Topology's link utilisation comes from a simulation of the plan.
//
//   Status s = render_screenshot(View::kDetails, "details.png", QSize(1200, 800));
#pragma once

#include <QSize>
#include <QString>
#include <optional>

#include "gui/views/main_window.h"
#include "sim/core/status.h"

namespace foresight::gui {

// What to show instead of the example: a trace for Timeline, two traces for Compare, a sweep spec
// for Sweep, the Setup's inputs (from a session). Empty: the example.
struct ViewFiles {
  QString trace, predicted, measured, sweep;
  std::optional<PlanInputs> inputs;
};

// Fills `w` with the example (or `files`) for view `v`, synchronously, and shows that view.
Status load_example(MainWindow& w, View v, const ViewFiles& files = {});

// Needs a QApplication (QT_QPA_PLATFORM=offscreen works without a display).
Status render_screenshot(View v, const QString& png_path, QSize size, const ViewFiles& files = {});
// The same view, but only its plots, to a .png or .svg file (File > Export plot, off-screen).
Status render_plots(View v, const QString& path, QSize size, const ViewFiles& files = {});

}  // namespace foresight::gui

// The example job and off-screen rendering.
#include "gui/views/screenshot.h"

#include <QApplication>
#include <QPixmap>
#include <QTemporaryDir>

#include "gui/models/comparison.h"
#include "gui/models/format.h"
#include "gui/models/search_runner.h"
#include "gui/models/sweep_runner.h"
#include "gui/models/timeline.h"
#include "gui/models/traces.h"
#include "gui/views/compare_view.h"
#include "gui/views/search_view.h"
#include "gui/views/sweep_view.h"
#include "gui/views/timeline_view.h"
#include "gui/views/timeline_widget.h"
#include "gui/views/topology_view.h"

namespace foresight::gui {

Status load_example(MainWindow& w, View v, const ViewFiles& files) {
  const PlanInputs in = files.inputs.value_or(example_inputs());
  w.set_inputs(in);
  if (v == View::kTimeline && !files.trace.isEmpty()) {
    FS_ASSIGN_OR_RETURN(Timeline t, load_timeline(files.trace.toStdString()));
    w.timeline()->set_timeline(std::move(t));
    w.show_view(v);
    return Status::Ok();
  }
  if (v == View::kCompare && (!files.predicted.isEmpty() || !files.measured.isEmpty())) {
    if (files.predicted.isEmpty() || files.measured.isEmpty())
      return Error("compare: needs a predicted and a measured trace");
    FS_ASSIGN_OR_RETURN(Comparison c,
                        load_comparison(files.predicted.toStdString(), files.measured.toStdString()));
    w.compare()->set_comparison(std::move(c));
    w.show_view(v);
    return Status::Ok();
  }
  if (v == View::kSweep && !files.sweep.isEmpty()) {
    FS_ASSIGN_OR_RETURN(SweepSpec spec, load_sweep(files.sweep.toStdString()));
    w.sweep()->set_spec(spec);
    w.sweep()->show_outcome(run_sweep_points(spec));
    w.show_view(v);
    return Status::Ok();
  }
  switch (v) {
    case View::kSetup:
    case View::kDetails:
      break;
    case View::kSweep: {
      FS_ASSIGN_OR_RETURN(SweepSpec spec, example_sweep());
      w.sweep()->set_spec(spec);
      w.sweep()->show_outcome(run_sweep_points(spec));
      break;
    }
    case View::kTopology: {
      FS_ASSIGN_OR_RETURN(LinkReport links, simulate_link_use(in));
      w.topology()->set_link_report(std::move(links));
      w.topology()->draw_now();
      break;
    }
    case View::kSearch: {
      SearchOutcome out = run_search(w.search()->request());
      if (!out.ok()) return Error("search: " + out.error);
      w.search()->show_outcome(out);
      w.search()->select_row(0);
      break;
    }
    case View::kTimeline:
    case View::kCompare: {
      QTemporaryDir dir;
      if (!dir.isValid())
        return Error("cannot create a temporary directory: " + dir.errorString().toStdString());
      FS_ASSIGN_OR_RETURN(ExampleTraces traces, write_example_traces(in, dir.path().toStdString()));
      if (v == View::kTimeline) {
        FS_ASSIGN_OR_RETURN(Timeline t, load_timeline(traces.predicted));
        // Zoom into the steady state: 16 ms from the first QKV GEMM of rank 0 past 45% of the step,
        // where both pipeline stages are busy and op names fit inside their bars.
        const double from = t.begin_s + 0.45 * (t.end_s - t.begin_s);
        std::size_t focus = 0;
        for (std::size_t i = 0; i < t.bars.size(); ++i)
          if (t.bars[i].lane == 0 && t.bars[i].name == "qkv" && t.bars[i].start_s >= from) {
            focus = i;
            break;
          }
        const double start = t.bars[focus].start_s;
        w.timeline()->set_timeline(std::move(t));
        w.timeline()->focus_bar(focus);
        w.timeline()->gantt()->set_range(start - 2e-3, start + 14e-3);
        w.timeline()->refresh_range();  // the table and the sums follow the zoom at once
      } else {
        FS_ASSIGN_OR_RETURN(Comparison c, load_comparison(traces.predicted, traces.measured));
        w.compare()->set_comparison(std::move(c));
      }
      break;
    }
  }
  w.show_view(v);
  return Status::Ok();
}

Status render_screenshot(View v, const QString& png_path, QSize size, const ViewFiles& files) {
  MainWindow w;
  w.resize(size);
  FS_RETURN_IF_ERROR(load_example(w, v, files));
  w.show();
  // Let layouts and charts settle (resize and layout-request events are posted).
  for (int i = 0; i < 3; ++i) QApplication::processEvents();
  const QPixmap shot = w.grab();
  if (shot.isNull()) return Error("view " + view_name(v).toStdString() + ": rendered an empty image");
  if (!shot.save(png_path, "PNG")) return Error(png_path.toStdString() + ": cannot write the PNG");
  return Status::Ok();
}

Status render_plots(View v, const QString& path, QSize size, const ViewFiles& files) {
  MainWindow w;
  w.resize(size);
  FS_RETURN_IF_ERROR(load_example(w, v, files));
  w.show();
  for (int i = 0; i < 3; ++i) QApplication::processEvents();
  return w.export_current(path);
}

}  // namespace foresight::gui

// Trace comparison plus timelines.
#include "gui/models/comparison.h"

namespace foresight::gui {

Result<Comparison> load_comparison(const std::string& predicted_path, const std::string& measured_path) {
  FS_ASSIGN_OR_RETURN(Trace p, load_trace(predicted_path));
  FS_ASSIGN_OR_RETURN(Trace m, load_trace(measured_path));
  Comparison c;
  FS_ASSIGN_OR_RETURN(c.report, compare_traces(p, m));
  FS_ASSIGN_OR_RETURN(c.predicted, load_timeline(predicted_path));
  FS_ASSIGN_OR_RETURN(c.measured, load_timeline(measured_path));
  return c;
}

}  // namespace foresight::gui

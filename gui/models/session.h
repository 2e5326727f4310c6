// A GUI session: what the Setup holds (model and cluster presets, the plan), the files opened in
// Timeline, Compare and Sweep, and the view on screen -- saved as JSON and reopened with
// `foresight-gui SESSION.json` or File > Open session.
//
//   {"foresight_session": 1, "model": "llama3-8b", "cluster": "dgx-h100-ndr",
//    "plan": {"tp": 2, "pp": 2, "dp": 4, "global_batch": 64, ...},     // as in a plan file
//    "files": {"trace": "step.json", "predicted": "pred.json", "measured": "meas.json",
//              "sweep": "scenarios/scale.json"},                        // each optional
//    "view": "timeline"}
//
//   Status s = save_session(session, "run.session.json");
//   auto back = load_session("run.session.json");   // errors: "run.session.json: /plan/tp: ..."
//
// The plan is read and written by sim/spec's plan_from_json / plan_to_json. Relative file paths
// are relative to the session file's folder; every file must exist when the session is opened.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "gui/models/plan_inputs.h"
#include "gui/models/view_names.h"
#include "sim/core/status.h"

namespace foresight::gui {

struct Session {
  PlanInputs inputs;
  std::string trace;                // Timeline; empty: none
  std::string predicted, measured;  // Compare; both or neither
  std::string sweep;                // Sweep spec
  View view = View::kSetup;
  bool operator==(const Session&) const = default;
};

inline constexpr int kSessionVersion = 1;

nlohmann::json session_to_json(const Session& s);
// `file` names the session in errors and anchors relative paths (its folder).
Result<Session> session_from_json(const nlohmann::json& doc, const std::string& file);

// Whether `path` holds a session rather than a trace (the command line takes either): a JSON
// object of at most 1 MiB with a "foresight_session" field.
bool is_session_file(const std::string& path);

Status save_session(const Session& s, const std::string& path);
Result<Session> load_session(const std::string& path);

}  // namespace foresight::gui

// Session files.
#include "gui/models/session.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <utility>

#include "sim/core/output_file.h"
#include "sim/spec/json_reader.h"
#include "sim/spec/presets.h"

namespace foresight::gui {

namespace {

namespace fs = std::filesystem;

constexpr std::pair<const char*, std::string Session::*> kFiles[] = {{"trace", &Session::trace},
                                                                     {"predicted", &Session::predicted},
                                                                     {"measured", &Session::measured},
                                                                     {"sweep", &Session::sweep}};

// The Setup offers presets only, so a session names presets.
// A built-in preset's name, or a spec file (relative paths from the session's folder).
void read_preset(JsonReader& r, std::string_view key, PresetKind kind, std::string& out,
                 const fs::path& base) {
  out = r.required_string(key);
  if (!r.ok()) return;
  const auto names = preset_names(kind);
  if (std::find(names.begin(), names.end(), out) != names.end()) return;
  fs::path p(out);
  if (p.is_relative() && !base.empty()) p = base / p;
  std::error_code ec;
  if (fs::is_regular_file(p, ec)) {
    out = p.string();
    return;
  }
  r.fail(key, "\"" + out + "\" is neither a built-in " + std::string(to_string(kind)) +
                  " preset (`foresight presets` prints them) nor a file");
}

}  // namespace

nlohmann::json session_to_json(const Session& s) {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& [key, member] : kFiles)
    if (!(s.*member).empty()) files[key] = s.*member;
  nlohmann::json j = {{"foresight_session", kSessionVersion},
                      {"model", s.inputs.model},
                      {"cluster", s.inputs.cluster},
                      {"plan", plan_to_json(s.inputs.plan)},
                      {"view", view_name(s.view).toStdString()}};
  if (!files.empty()) j["files"] = files;
  return j;
}

Result<Session> session_from_json(const nlohmann::json& doc, const std::string& file) {
  JsonReader r(doc, file);
  r.reject_unknown_keys({"foresight_session", "model", "cluster", "plan", "files", "view"});
  Session s;
  if (r.ok() && r.required_integer("foresight_session", 1) != kSessionVersion && r.ok())
    r.fail("foresight_session", "version " + doc.at("foresight_session").dump() +
                                    " is not supported (this build reads " + std::to_string(kSessionVersion) +
                                    ")");
  read_preset(r, "model", PresetKind::kModel, s.inputs.model, fs::path(file).parent_path());
  read_preset(r, "cluster", PresetKind::kCluster, s.inputs.cluster, fs::path(file).parent_path());
  if (r.ok() && !r.has("plan")) r.fail("plan", "missing required field");
  if (r.ok() && !doc["plan"].is_object()) r.fail("plan", "expected an object (a plan as in plan.json)");
  if (!r.ok()) return r.error();
  auto plan = plan_from_json(doc["plan"], file);
  if (!plan) {
    // plan_from_json points into the plan object ("file: /tp: ..."); point into the session.
    std::string m = plan.error().message();
    const std::string prefix = file + ": /";
    if (m.rfind(prefix, 0) == 0) m = file + ": /plan/" + m.substr(prefix.size());
    return Error(m);
  }
  s.inputs.plan = *plan;

  const std::string view =
      r.choice("view", {"setup", "details", "search", "timeline", "compare", "sweep", "topology"}, "setup");
  if (auto v = parse_view(QString::fromStdString(view))) s.view = *v;

  JsonReader files = r.object("files");
  if (r.ok()) files.reject_unknown_keys({"trace", "predicted", "measured", "sweep"});
  const fs::path base = fs::path(file).parent_path();
  for (const auto& [key, member] : kFiles) {
    if (!r.ok()) break;
    std::string path = files.string(key);
    if (path.empty() || !r.ok()) continue;
    fs::path p(path);
    if (p.is_relative() && !base.empty()) p = base / p;
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) {
      files.fail(key, "no such file: " + p.string());
      break;
    }
    s.*member = p.string();
  }
  if (r.ok() && s.predicted.empty() != s.measured.empty())
    files.fail(s.predicted.empty() ? "predicted" : "measured",
               "missing: Compare needs both a predicted and a measured trace");
  if (!r.ok()) return r.error();
  return s;
}

Status save_session(const Session& s, const std::string& path) {
  return write_file_atomically(path, session_to_json(s).dump(2) + "\n");
}

bool is_session_file(const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec || size > (1u << 20)) return false;
  auto doc = read_json_file(path);
  return doc.ok() && doc->is_object() && doc->contains("foresight_session");
}

Result<Session> load_session(const std::string& path) {
  FS_ASSIGN_OR_RETURN(nlohmann::json doc, read_json_file(path));
  return session_from_json(doc, path);
}

}  // namespace foresight::gui

#include "runtime/training/checkpoint.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "runtime/training/hash.h"
#include "sim/core/output_file.h"
#include "sim/spec/json_reader.h"

namespace foresight::runtime {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kFormat = "foresight-checkpoint-set";
constexpr int kVersion = 1;

std::string hex64(std::uint64_t v) { return fmt::format("{:016x}", v); }

// The rename of a file into a folder is durable once the folder itself is synced.
Status sync_folder(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return Error(dir + ": cannot open the folder to sync it: " + std::strerror(errno));
  const int rc = ::fsync(fd), err = errno;
  ::close(fd);
  if (rc != 0) return Error(dir + ": cannot sync the folder: " + std::strerror(err));
  return Status::Ok();
}

// The step of a set folder's name (step-NNNNNNNN), or -1.
int set_step(const std::string& name) {
  static const std::regex re("step-([0-9]{8})");
  std::smatch m;
  return std::regex_match(name, m, re) ? std::stoi(m[1].str()) : -1;
}

bool read_whole(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return false;
  out = ss.str();
  return true;
}

// Removes a set folder: its manifest first, so that a crash half-way leaves a folder that is
// plainly incomplete, never one whose manifest names files that are gone.
Status remove_set(const fs::path& set) {
  std::error_code ec;
  fs::remove(set / kCheckpointManifest, ec);
  if (!ec) fs::remove_all(set, ec);
  if (ec) return Error(set.string() + ": cannot remove the superseded checkpoint set: " + ec.message());
  return Status::Ok();
}

// Rank 0's reading of DIR: {"error": "..."} or {"skipped": [...], "candidates": [...]}, the
// candidates newest first, each {"step", "set_dir", "files": [{"file", "bytes", "fnv1a"}] by rank}.
json scan_sets(const std::string& dir, const CheckpointIdentity& id) {
  std::error_code ec;
  if (!fs::exists(dir, ec))
    return {{"error", dir + ": no such checkpoint folder (--resume needs the folder an earlier run's "
                            "--checkpoint-dir wrote)"}};
  if (!fs::is_directory(dir, ec))
    return {{"error", dir + ": not a folder (--checkpoint-dir names a folder of checkpoint sets)"}};
  std::vector<int> steps;
  bool old_format = false;
  static const std::regex old_file("rank-[0-9]{5}\\.ckpt");
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && set_step(name) >= 0) steps.push_back(set_step(name));
    if (e.is_regular_file() && std::regex_match(name, old_file)) old_format = true;
  }
  if (ec) return {{"error", dir + ": cannot list the checkpoint folder: " + ec.message()}};
  if (steps.empty()) {
    if (old_format)
      return {{"error",
               dir +
                   ": holds checkpoint files of the previous format (rank-NNNNN.ckpt without a manifest), "
                   "which cannot show that every rank's file is of the same step; they are not resumed: run "
                   "without --resume (new sets go into step-NNNNNNNN folders), or resume with the Foresight "
                   "that wrote them"}};
    return {
        {"error", dir + ": no checkpoint set in the folder (no step-NNNNNNNN folder with a MANIFEST.json)"}};
  }
  std::sort(steps.rbegin(), steps.rend());
  json skipped = json::array(), candidates = json::array();
  for (int step : steps) {
    const std::string set = checkpoint_set_dir(dir, step);
    const std::string manifest_path = (fs::path(set) / kCheckpointManifest).string();
    const auto skip = [&](const std::string& why) {
      skipped.push_back({{"step", step}, {"why", fmt::format("{} (step {}): {}", set, step, why)}});
    };
    std::string text;
    if (!fs::exists(manifest_path, ec)) {
      skip(std::string("incomplete: no ") + kCheckpointManifest + " (the save did not finish on every rank)");
      continue;
    }
    if (!read_whole(manifest_path, text)) {
      skip(std::string(kCheckpointManifest) + ": cannot be read");
      continue;
    }
    bool other_launch = false;
    auto files = parse_checkpoint_manifest(text, manifest_path, step, id, other_launch);
    if (!files && other_launch) return {{"error", files.error().message()}};
    if (!files) {
      skip(files.error().message());
      continue;
    }
    json entries = json::array();
    for (const CheckpointManifestEntry& e : *files)
      entries.push_back({{"file", e.file}, {"bytes", e.bytes}, {"fnv1a", e.fnv1a}});
    candidates.push_back({{"step", step}, {"set_dir", set}, {"files", entries}});
  }
  return {{"skipped", skipped}, {"candidates", candidates}};
}

// This rank's check of its file in a candidate set: "" when it is there as the manifest says
// (its bytes in `bytes`), else the reason.
std::string check_own_file(const json& candidate, int rank, std::string& bytes, std::string& path) {
  const json& e = candidate["files"][static_cast<std::size_t>(rank)];
  path = (fs::path(candidate["set_dir"].get<std::string>()) / e["file"].get<std::string>()).string();
  const std::string who = fmt::format("rank {}: {}: ", rank, path);
  std::error_code ec;
  if (!fs::exists(path, ec)) return who + "missing (the manifest names it)";
  if (!read_whole(path, bytes)) return who + "cannot be read";
  const auto want = e["bytes"].get<std::uint64_t>();
  if (bytes.size() != want) return who + fmt::format("{} bytes, the manifest says {}", bytes.size(), want);
  const std::string hash = hex64(fnv1a(bytes));
  if (hash != e["fnv1a"].get<std::string>())
    return who + "FNV-1a hash " + hash + ", the manifest says " + e["fnv1a"].get<std::string>() +
           " (damaged or rewritten)";
  return "";
}

}  // namespace

Result<std::vector<CheckpointManifestEntry>> parse_checkpoint_manifest(std::string_view text,
                                                                       const std::string& manifest_path,
                                                                       int step, const CheckpointIdentity& id,
                                                                       bool& other_launch) {
  other_launch = false;
  const auto damaged = [](const std::string& why) {
    return Error(std::string(kCheckpointManifest) + ": " + why);
  };
  const auto field = [&](const char* f) { return std::string("/") + f + ": "; };
  // A value as the manifest has it, shortened when long (a damaged field may be megabytes).
  const auto shown = [](const json& v) {
    const std::string d = v.dump();
    return d.size() <= 64 ? d : quote_excerpt(d);
  };
  // Nesting and size are bounded as for every JSON input (a deep one would overflow the stack).
  auto doc = parse_json_text(text, manifest_path);
  if (!doc || !doc->is_object()) return damaged("not JSON (truncated or damaged)");
  const json& m = *doc;
  const auto get = [&](const char* f) -> const json* {
    const auto it = m.find(f);
    return it == m.end() ? nullptr : &*it;
  };
  const json* format = get("format");
  if (!format || *format != kFormat) return damaged(field("format") + "not \"" + kFormat + "\"");
  const json* version = get("version");
  if (!version || *version != kVersion)
    return damaged(field("version") + (version ? shown(*version) : "missing") + ", this Foresight reads " +
                   std::to_string(kVersion));
  const json* stp = get("step");
  if (!stp || *stp != step)
    return damaged(field("step") + (stp ? shown(*stp) : "missing") + ", the folder is of step " +
                   std::to_string(step));
  // A complete set of another launch is the user's mistake, not damage: an error, not a skip.
  other_launch = true;
  const json* ranks = get("ranks");
  if (!ranks || *ranks != id.ranks)
    return Error(manifest_path + ": /ranks: the set was written by " + (ranks ? shown(*ranks) : "?") +
                 " ranks, this launch has " + std::to_string(id.ranks));
  const json* model = get("model");
  if (!model || *model != id.model)
    return Error(manifest_path + ": /model: the set is of model " +
                 (model && model->is_string() ? model->get<std::string>()
                  : model                     ? shown(*model)
                                              : "?") +
                 ", this run is " + id.model);
  const json plan = json::parse(id.plan_json);
  const json* set_plan = get("plan");
  if (!set_plan || *set_plan != plan)
    return Error(manifest_path + ": /plan: the set was written under a different plan: " +
                 (set_plan ? set_plan->dump() : "missing") + "; this run's: " + plan.dump());
  other_launch = false;
  const json* files = get("files");
  if (!files || !files->is_array() || files->size() != static_cast<std::size_t>(id.ranks))
    return damaged(field("files") + "not one entry per rank");
  std::vector<CheckpointManifestEntry> entries;
  for (std::size_t r = 0; r < files->size(); ++r) {
    const json& f = (*files)[r];
    const std::string at = field("files") + std::to_string(r) + ": ";
    const auto has = [&](const char* key) { return f.is_object() && f.contains(key); };
    if (!has("rank") || !f["rank"].is_number_integer() || f["rank"] != r)
      return damaged(at + "/rank is not " + std::to_string(r));
    if (!has("file") || !f["file"].is_string() ||
        f["file"].get<std::string>().find('/') != std::string::npos || f["file"].get<std::string>().empty())
      return damaged(at + "/file is not a file name in the set's folder");
    if (!has("bytes") || !f["bytes"].is_number_unsigned()) return damaged(at + "/bytes is not a size");
    if (!has("fnv1a") || !f["fnv1a"].is_string() || f["fnv1a"].get<std::string>().size() != 16)
      return damaged(at + "/fnv1a is not a 16-digit hash");
    entries.push_back(
        {f["file"].get<std::string>(), f["bytes"].get<std::uint64_t>(), f["fnv1a"].get<std::string>()});
  }
  return entries;
}

std::string checkpoint_set_dir(const std::string& dir, int step) {
  return (fs::path(dir) / fmt::format("step-{:08d}", step)).string();
}

std::string checkpoint_rank_file(const std::string& set_dir, int rank) {
  return (fs::path(set_dir) / fmt::format("rank-{:05d}.ckpt", rank)).string();
}

Status save_checkpoint_set(const Comm& world, const std::string& dir, const CheckpointIdentity& id, int step,
                           const std::string& bytes) {
  const std::string set = checkpoint_set_dir(dir, step);
  const std::string file = checkpoint_rank_file(set, world.rank());
  std::string mine;  // "E<reason>" or "O<bytes> <hash>"
  std::error_code ec;
  fs::create_directories(set, ec);
  if (ec) mine = "E" + set + ": cannot create the checkpoint set's folder: " + ec.message();
  // A manifest left in this step's folder by an earlier run goes before the new files do.
  if (mine.empty() && world.rank() == 0) {
    fs::remove(fs::path(set) / kCheckpointManifest, ec);
    if (ec)
      mine = "E" + set + "/" + kCheckpointManifest + ": cannot remove the earlier manifest: " + ec.message();
  }
  if (mine.empty())
    if (Status s = write_file_atomically(file, bytes); !s) mine = "E" + s.error().message();
  if (mine.empty())
    if (Status s = sync_folder(set); !s) mine = "E" + s.error().message();
  if (mine.empty()) mine = fmt::format("O{} {}", bytes.size(), hex64(fnv1a(bytes)));

  // Every rank's file is in place (or its failure known) before rank 0 writes the manifest.
  const std::vector<std::string> reports = world.gather_bytes(mine);
  std::string outcome;  // rank 0's verdict: "" or the error
  if (world.rank() == 0) {
    std::vector<std::string> errors;
    json files = json::array();
    for (std::size_t r = 0; r < reports.size(); ++r) {
      const std::string& rep = reports[r];
      if (rep.empty() || rep[0] != 'O') {
        errors.push_back(fmt::format("rank {}: {}", r, rep.empty() ? "no report" : rep.substr(1)));
        continue;
      }
      std::istringstream in(rep.substr(1));
      std::uint64_t size = 0;
      std::string hash;
      in >> size >> hash;
      files.push_back({{"rank", r},
                       {"file", fs::path(checkpoint_rank_file(set, static_cast<int>(r))).filename().string()},
                       {"bytes", size},
                       {"fnv1a", hash}});
    }
    if (!errors.empty()) {
      for (std::size_t i = 0; i < errors.size(); ++i) outcome += (i ? "; " : "") + errors[i];
      outcome += fmt::format(" (no manifest was written for step {}; the previous set is kept)", step);
    } else {
      const json manifest = {{"format", kFormat}, {"version", kVersion}, {"step", step},
                             {"ranks", id.ranks}, {"model", id.model},   {"plan", json::parse(id.plan_json)},
                             {"files", files}};
      const std::string manifest_path = (fs::path(set) / kCheckpointManifest).string();
      Status s = write_file_atomically(manifest_path, manifest.dump(2) + "\n");
      if (s) s = sync_folder(set);
      if (s) s = sync_folder(dir);
      if (!s) {
        outcome = s.error().message() +
                  fmt::format(" (the set of step {} is incomplete; the previous set is kept)", step);
      } else {
        // The new set is complete: every other one goes (older ones, and newer ones a run before
        // a resume left, which would otherwise be resumed from instead of this one).
        try {
          std::vector<fs::path> others;
          for (const auto& e : fs::directory_iterator(dir)) {
            const int other = set_step(e.path().filename().string());
            if (other >= 0 && other != step && e.is_directory()) others.push_back(e.path());
          }
          for (const fs::path& o : others)
            if (Status r = remove_set(o); !r && outcome.empty()) outcome = r.error().message();
        } catch (const std::exception& e) {
          outcome = dir + ": cannot list the checkpoint folder to remove superseded sets: " + e.what();
        }
      }
    }
  }
  outcome = world.broadcast_bytes(outcome);
  if (!outcome.empty()) return Error(outcome);
  return Status::Ok();
}

Result<CheckpointSetRead> read_checkpoint_set(const Comm& world, const std::string& dir,
                                              const CheckpointIdentity& id) {
  std::string scan;
  if (world.rank() == 0) {
    try {
      scan = scan_sets(dir, id).dump();
    } catch (const std::exception& e) {  // a filesystem error mid-listing: every rank must still hear
      scan = json{{"error", dir + ": cannot read the checkpoint folder: " + e.what()}}.dump();
    }
  }
  const json sets = json::parse(world.broadcast_bytes(scan));
  if (sets.contains("error")) return Error(sets["error"].get<std::string>());
  CheckpointSetRead out;
  // Folders that are not sets, newer or older than each candidate: only the newer ones are
  // reported once a set is taken (an older one is what a crash mid-removal of a superseded set
  // leaves, and is removed with the next save).
  const json& broken = sets["skipped"];
  const auto broken_above = [&](int step) {
    for (const json& b : broken)
      if (b["step"].get<int>() > step) out.skipped.push_back(b["why"].get<std::string>());
  };
  std::vector<std::pair<int, std::string>> passed;  // candidates whose files did not check out
  for (const json& c : sets["candidates"]) {
    std::string bytes, path;
    const std::string reason = check_own_file(c, world.rank(), bytes, path);
    // The set counts only if every rank's file is as its manifest says: rank 0 decides, all follow.
    const std::vector<std::string> reasons = world.gather_bytes(reason);
    std::string verdict;
    for (const std::string& r : reasons)
      if (!r.empty()) verdict += (verdict.empty() ? "" : "; ") + r;
    verdict = world.broadcast_bytes(verdict);
    const int step = c["step"].get<int>();
    if (verdict.empty()) {
      broken_above(step);
      for (auto& [p, why] : passed) out.skipped.push_back(std::move(why));
      std::stable_sort(out.skipped.begin(), out.skipped.end(),
                       [](const std::string& x, const std::string& y) { return x > y; });
      out.step = step;
      out.set_dir = c["set_dir"].get<std::string>();
      out.file = path;
      out.bytes = std::move(bytes);
      return out;
    }
    passed.emplace_back(
        step, fmt::format("{} (step {}): incomplete: {}", c["set_dir"].get<std::string>(), step, verdict));
  }
  broken_above(-1);
  for (auto& [p, why] : passed) out.skipped.push_back(std::move(why));
  std::stable_sort(out.skipped.begin(), out.skipped.end(),
                   [](const std::string& x, const std::string& y) { return x > y; });
  std::string why;
  for (std::size_t i = 0; i < out.skipped.size(); ++i) why += (i ? "; " : "") + out.skipped[i];
  return Error(dir + ": no complete checkpoint set to resume from: " + why);
}

}  // namespace foresight::runtime

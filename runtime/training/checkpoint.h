// Checkpoint sets: the training state of every rank at one step, written so that a crash at any
// moment (a rank killed mid-write, the job ended between two ranks' files) leaves at least one
// complete set, and read so that every rank resumes from the same one.
//
// On disk, one folder per step under the checkpoint folder:
//
//   DIR/step-00000012/rank-00000.ckpt   each rank's file (written atomically: temp file, fsync, rename)
//   DIR/step-00000012/rank-00001.ckpt
//   DIR/step-00000012/MANIFEST.json     written last, by rank 0, once every rank's file is in place
//
// MANIFEST.json names the format, the step, the rank count, the model, the plan and, per rank, its
// file's name, size and FNV-1a 64 hash of the whole file (runtime/training/hash.h). A set is complete when
// its manifest is readable and every file it names is there with that size and hash. Saving is
// collective: each rank writes its file, the results are gathered at rank 0, which writes the
// manifest and only then removes the other step folders; every rank gets the same outcome.
// Resuming is collective too: rank 0 reads the manifests, newest first, every rank checks its own
// file against the newest candidate, and all take the newest set that every rank can load; newer
// sets that could not be used are reported with the reason.
//
// Checkpoint folders of the previous format (DIR/rank-NNNNN.ckpt, no manifest) are refused with
// a message: nothing in them says whether the ranks' files are of the same step.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/communication/comm.h"
#include "sim/core/status.h"

namespace foresight::runtime {

// What a set must match to be resumed by this launch.
struct CheckpointIdentity {
  std::string model;      // the model's name
  std::string plan_json;  // plan_to_json(plan).dump()
  int ranks = 1;
};

// The set folder of `step` under `dir` (DIR/step-NNNNNNNN) and a rank's file in it.
std::string checkpoint_set_dir(const std::string& dir, int step);
std::string checkpoint_rank_file(const std::string& set_dir, int rank);
inline constexpr const char* kCheckpointManifest = "MANIFEST.json";

// Collective over `world`: writes this rank's `bytes` into the set of `step`, then (rank 0) the
// manifest, then removes every other set. On failure anywhere, every rank returns the same error,
// naming the file and the reason, and no manifest is written for the step.
Status save_checkpoint_set(const Comm& world, const std::string& dir, const CheckpointIdentity& id, int step,
                           const std::string& bytes);

// A manifest's entry for one rank's file: its name in the set's folder, size and FNV-1a 64 hash
// (16 hex digits).
struct CheckpointManifestEntry {
  std::string file;
  std::uint64_t bytes = 0;
  std::string fnv1a;
};

// Reads the text of a set's MANIFEST.json (at `manifest_path`, in the folder of `step`): its
// entries, one per rank, or the error. A damaged manifest (not JSON, another format or version,
// another step, bad entries) gives an error that starts "MANIFEST.json: " and sets
// `other_launch` false: the set is passed over. A sound one written by another rank count,
// model or plan gives an error naming `manifest_path` and sets `other_launch` true: the resume fails.
Result<std::vector<CheckpointManifestEntry>> parse_checkpoint_manifest(std::string_view text,
                                                                       const std::string& manifest_path,
                                                                       int step, const CheckpointIdentity& id,
                                                                       bool& other_launch);

struct CheckpointSetRead {
  int step = 0;
  std::string set_dir;               // DIR/step-NNNNNNNN
  std::string file;                  // this rank's file in it
  std::string bytes;                 // its content, checked against the manifest
  std::vector<std::string> skipped;  // newer sets passed over: "DIR/step-N (step N): reason", newest first
};

// Collective over `world`: the newest complete set under `dir` that every rank can load, agreed
// by all ranks. Every rank returns the same step, or the same error: no set folder or no complete
// set (naming the folder and each set's reason), the previous format, or a complete set written by
// another rank count, model or plan (naming the manifest and the field).
Result<CheckpointSetRead> read_checkpoint_set(const Comm& world, const std::string& dir,
                                              const CheckpointIdentity& id);

}  // namespace foresight::runtime

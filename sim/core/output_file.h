// Output files that are written whole or not at all.
//
// Every file Foresight writes for a user (plans, traces, reports, profiles, sweep tables,
// checkpoints) goes through here: the bytes go to a temporary file in the destination's folder,
// which is flushed, synced and checked, then renamed over the destination. A full disk, a
// read-only folder or a crash mid-write leaves the previous file (or none) under the final name,
// never a truncated one, and the failure is an error naming the path and the OS reason.
//
//   FS_ASSIGN_OR_RETURN(OutputFile out, OutputFile::open("step.json"));
//   std::fputs("{...}", out.stream());
//   FS_RETURN_IF_ERROR(out.commit());   // without commit() the temporary file is removed
//
// A destination that exists and is not a regular file (/dev/stdout, /dev/null, a pipe) is written
// in place -- renaming over a device would replace it -- and its write errors are reported all
// the same. A symbolic link is followed: the file it names is replaced, the link stays.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

#include "sim/core/status.h"

namespace foresight {

class OutputFile {
 public:
  // Opens a temporary file beside `path` (or `path` itself for a device or pipe).
  static Result<OutputFile> open(const std::string& path);

  OutputFile(OutputFile&& other) noexcept;
  OutputFile& operator=(OutputFile&& other) noexcept;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile();  // an uncommitted file is discarded

  std::FILE* stream() const { return file_; }
  const std::string& path() const { return path_; }
  // Flushes, syncs, checks and renames into place. Any failure is "path: cannot write: reason".
  Status commit();

 private:
  OutputFile() = default;
  void discard();

  std::FILE* file_ = nullptr;
  std::string path_;   // the destination as the user named it (for messages)
  std::string final_;  // the file renamed over (a symbolic link's target)
  std::string temp_;   // empty when written in place
};

// Writes `content` to `path` through an OutputFile.
Status write_file_atomically(const std::string& path, std::string_view content);

// Checks, before long work starts, that `path` can be written: not a folder, its folder exists
// and a file can be created there. `option` (e.g. "--trace") leads the message.
Status check_output_path(const std::string& path, const std::string& option);

}  // namespace foresight

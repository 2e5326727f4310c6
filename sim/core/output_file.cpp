// Output files written whole or not at all: a temporary file beside the destination, renamed.
#include "sim/core/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

namespace foresight {

namespace {

namespace fs = std::filesystem;

Error os_error(const std::string& path, const std::string& what, int err) {
  return Error(path + ": " + what + ": " + std::strerror(err));
}

// The folder a file of `path` would be created in ("." for a bare name).
std::string folder_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

mode_t new_file_mode() {
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return 0666 & ~mask;
}

}  // namespace

Result<OutputFile> OutputFile::open(const std::string& path) {
  if (path.empty()) return Error("an output path is empty");
  OutputFile out;
  out.path_ = path;
  out.final_ = path;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return Error(path + ": is a folder, not a file to write");
    if (!S_ISREG(st.st_mode)) {
      // A device or a pipe: written in place.
      out.file_ = std::fopen(path.c_str(), "wb");
      if (!out.file_) return os_error(path, "cannot open for writing", errno);
      return out;
    }
    std::error_code ec;
    const fs::path target = fs::canonical(path, ec);  // through symbolic links
    if (!ec) out.final_ = target.string();
  }
  const std::string folder = folder_of(out.final_);
  std::string name = fs::path(out.final_).filename().string();
  if (name.size() > 200) name.resize(200);
  std::string templ = folder + "/." + name + ".tmp-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  const int fd = ::mkstemp(buf.data());
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return Error(path + ": cannot write: the folder " + folder + " does not exist");
    return os_error(path, "cannot write", err);
  }
  out.temp_ = buf.data();
  const mode_t mode = ::stat(out.final_.c_str(), &st) == 0 ? (st.st_mode & 07777) : new_file_mode();
  (void)::fchmod(fd, mode);
  out.file_ = ::fdopen(fd, "wb");
  if (!out.file_) {
    const int err = errno;
    ::close(fd);
    ::unlink(out.temp_.c_str());
    return os_error(path, "cannot write", err);
  }
  return out;
}

OutputFile::OutputFile(OutputFile&& other) noexcept
    : file_(std::exchange(other.file_, nullptr)),
      path_(std::move(other.path_)),
      final_(std::move(other.final_)),
      temp_(std::exchange(other.temp_, {})) {}

OutputFile& OutputFile::operator=(OutputFile&& other) noexcept {
  if (this != &other) {
    discard();
    file_ = std::exchange(other.file_, nullptr);
    path_ = std::move(other.path_);
    final_ = std::move(other.final_);
    temp_ = std::exchange(other.temp_, {});
  }
  return *this;
}

OutputFile::~OutputFile() { discard(); }

void OutputFile::discard() {
  if (file_) std::fclose(file_);
  file_ = nullptr;
  if (!temp_.empty()) ::unlink(temp_.c_str());
  temp_.clear();
}

Status OutputFile::commit() {
  if (!file_) return Error(path_ + ": cannot write: the file was already closed");
  int err = 0;
  if (std::fflush(file_) != 0) err = errno;
  if (!err && std::ferror(file_)) err = EIO;
  // Devices and pipes cannot be synced (EINVAL); a regular file must reach the disk before the
  // rename makes it the destination.
  if (!err && !temp_.empty() && ::fsync(::fileno(file_)) != 0) err = errno;
  if (std::fclose(file_) != 0 && !err) err = errno;
  file_ = nullptr;
  if (!err && !temp_.empty() && std::rename(temp_.c_str(), final_.c_str()) != 0) err = errno;
  if (err) {
    discard();
    return os_error(path_, "cannot write", err);
  }
  temp_.clear();
  return Status::Ok();
}

Status write_file_atomically(const std::string& path, std::string_view content) {
  FS_ASSIGN_OR_RETURN(OutputFile out, OutputFile::open(path));
  if (!content.empty() && std::fwrite(content.data(), 1, content.size(), out.stream()) != content.size())
    return os_error(path, "cannot write", errno ? errno : EIO);
  return out.commit();
}

Status check_output_path(const std::string& path, const std::string& option) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
    // A device or pipe: opening a pipe would wait for its reader, so only the permission is asked.
    if (::access(path.c_str(), W_OK) != 0) return os_error(path, "cannot write", errno).with_context(option);
    return Status::Ok();
  }
  auto opened = OutputFile::open(path);
  if (!opened) return opened.error().with_context(option);
  // Nothing was written: the temporary file goes, and a device or pipe is left as it was.
  return Status::Ok();
}

}  // namespace foresight

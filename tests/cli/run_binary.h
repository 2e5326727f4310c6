// Runs the foresight binary (FORESIGHT_BINARY) in a child process for the CLI robustness tests:
// stdout and stderr into one file, stdin from /dev/null, killed past a time limit, with optional
// resource limits; returns its exit code (128 + signal when killed), time, peak RSS and output.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace foresight::test {

struct RunLimits {
  double seconds = 10;            // killed (SIGKILL) past it
  std::string cwd;                // "" : the test's own
  long long file_size_bytes = 0;  // RLIMIT_FSIZE (a full disk: writes past it fail); 0: none
  long long address_space = 0;    // RLIMIT_AS, a net for runaway allocations; 0: none
};

struct Outcome {
  int exit_code = -1;  // or 128 + signal
  bool timed_out = false;
  long max_rss_mib = 0;
  double seconds = 0;
  std::string output;
};

inline void set_limit(int resource, long long bytes) {
  if (bytes <= 0) return;
  struct rlimit r {};
  r.rlim_cur = r.rlim_max = static_cast<rlim_t>(bytes);
  ::setrlimit(resource, &r);
}

inline Outcome run_binary(const std::vector<std::string>& args, const std::string& out_file,
                          const RunLimits& limits) {
  Outcome o;
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    if (!limits.cwd.empty() && ::chdir(limits.cwd.c_str()) != 0) ::_exit(126);
    const int fd = ::open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    const int null_in = ::open("/dev/null", O_RDONLY);
    ::dup2(null_in, 0);
    set_limit(RLIMIT_FSIZE, limits.file_size_bytes);
    set_limit(RLIMIT_AS, limits.address_space);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(FORESIGHT_BINARY));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(FORESIGHT_BINARY, argv.data());
    ::_exit(127);
  }
  int status = 0;
  struct rusage usage {};
  for (;;) {
    if (::wait4(pid, &status, WNOHANG, &usage) == pid) break;
    o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (o.seconds > limits.seconds) {
      o.timed_out = true;
      ::kill(pid, SIGKILL);
      ::wait4(pid, &status, 0, &usage);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  o.max_rss_mib = usage.ru_maxrss / 1024;
  std::ifstream in(out_file);
  std::stringstream ss;
  ss << in.rdbuf();
  o.output = ss.str();
  return o;
}

}  // namespace foresight::test

// Helpers shared by the runtime's tests: the tiny4 model, a serial trainer on one rank, the plans
// the tests start from, and running shell commands (under mpirun where MPI is built).
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include "runtime/communication/comm.h"
#include "runtime/training/trainer.h"
#include "sim/spec/presets.h"
#include "tests/test_util.h"

namespace foresight::runtime {

inline const std::string kTiny4 = std::string(FORESIGHT_TEST_DATA) + "/runtime/tiny4.json";

struct Serial {
  Workload w;
  Comm self;
  std::unique_ptr<Trainer> t;
};

inline ModelSpec tiny4() {
  auto m = load_model_file(kTiny4);
  EXPECT_TRUE(m) << m.error().message();
  return m ? *m : ModelSpec{};
}

inline std::unique_ptr<Serial> serial(const ModelSpec& m, Plan p, RunOptions o = {},
                                      std::unique_ptr<Backend> be = nullptr) {
  auto c = load_cluster("cpu-local");
  EXPECT_TRUE(c);
  EXPECT_TRUE(resize_cluster(*c, 1, "gpus"));
  auto s = std::make_unique<Serial>();
  auto w = lower(m, *c, p);
  EXPECT_TRUE(w) << w.error().message();
  s->w = std::move(w).value();
  auto t = Trainer::create(s->w, s->self, o, std::move(be));
  EXPECT_TRUE(t) << t.error().message();
  s->t = std::move(t).value();
  return s;
}

// The plan the CLI builds from "--gpus 1 --gb 4 --recompute full --precision fp32".
inline Plan plan_from_defaults() {
  Plan p;
  p.global_batch = 4;
  p.recompute = Recompute::kFull;
  p.precision = Precision::kFp32;
  return p;
}

inline Plan plan(long long gb) {
  Plan p;
  p.global_batch = gb;
  p.precision = Precision::kFp32;
  return p;
}

using testing::test_temp_path;  // tests/test_util.h

// The exit status of a shell command (128 + the signal that ended it).
inline int run_shell(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}

#ifdef FORESIGHT_MPIEXEC
// Under AddressSanitizer, LeakSanitizer reports Open MPI's own allocations (MCA components it
// never frees) at every rank's exit; the ranks run with leak detection off. Our code's leaks are
// still checked by the in-process tests, which run the same executor on one rank.
inline std::string mpirun(int ranks) {
  return "ASAN_OPTIONS=detect_leaks=0 " + std::string(FORESIGHT_MPIEXEC) +
         " --allow-run-as-root --oversubscribe -np " + std::to_string(ranks) + " ";
}
#endif

}  // namespace foresight::runtime

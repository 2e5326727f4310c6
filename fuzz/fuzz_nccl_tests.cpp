// Fuzzes the nccl-tests log reader (runtime/calibration/nccl_tests.h) and, for a log of one host
// that it reads, the node fabric's fit from it. The seeds in fuzz/corpus/fuzz_nccl_tests/ are the
// synthetic logs of tests/data/nccl-tests/. Every outcome must be a value: an Error, or a log
// with rows and ranks whose fit is a profile or an Error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "runtime/calibration/nccl_tests.h"
#include "sim/spec/hardware.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto log = foresight::runtime::nccl_tests_log_from_text(text, "fuzz_perf.log");
  if (!log) return 0;
  if (log->rows.empty() || log->ranks <= 0) std::abort();
  if (log->hosts.size() != 1 || log->ranks > 8 || log->rows.size() > 64) return 0;
  static const foresight::ClusterSpec base = *foresight::load_cluster("dgx-h100-ndr");
  auto cal = foresight::runtime::calibrate_from_nccl_tests(base, {*log},
                                                           foresight::runtime::NcclTestsColumn::kOutOfPlace);
  (void)cal;
  return 0;
}

// Fuzzes the PyTorch profiler trace reader (sim/compare/foreign_trace.h): the streamed SAX
// reader, steps, and the attribution of CPU self time and device kernels. The seeds in
// fuzz/corpus/fuzz_pytorch_trace/ are a Kineto GPU trace and a CPU-only export in the shapes the
// unit tests use. Every outcome must be a value: an Error, or a trace with steps whose kinds'
// times are finite and not negative.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "sim/compare/foreign_trace.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const foresight::KindTable kinds = *foresight::default_kind_table();
  const std::string text(reinterpret_cast<const char*>(data), size);
  foresight::ForeignOptions options;
  options.max_events = 4096;
  auto t = foresight::foreign_trace_from_text(text, "fuzz.json", kinds, options);
  if (!t) return 0;
  if (t->steps.empty()) std::abort();
  for (const auto& s : t->steps) {
    if (!(s.idle_s >= 0) || !std::isfinite(s.idle_s) || !(s.exposed_communication_s >= 0)) std::abort();
    for (const auto& [kind, v] : s.kind_s)
      if (!(v >= 0) || !std::isfinite(v)) std::abort();
  }
  return 0;
}

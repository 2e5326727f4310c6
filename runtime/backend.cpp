// Choosing a backend by name (--backend auto|cpu|cuda).
#include "runtime/backend.h"

#if FORESIGHT_RUNTIME_CUDA
#include "runtime/cuda_backend.h"
#endif

namespace foresight::runtime {

bool cuda_backend_built() { return FORESIGHT_RUNTIME_CUDA != 0; }

Result<std::unique_ptr<Backend>> make_backend(const std::string& name, int local_rank) {
  if (name == "cpu") return make_cpu_backend();
  if (name != "cuda" && name != "auto") return Error("unknown backend '" + name + "' (auto, cpu or cuda)");
#if FORESIGHT_RUNTIME_CUDA
  const int gpus = cuda_device_count();
  if (gpus == 0) {
    if (name == "auto") return make_cpu_backend();
    return Error("no CUDA device is visible to this process (" + cuda_visibility() + ")");
  }
  return make_cuda_backend(local_rank % gpus);
#else
  (void)local_rank;
  if (name == "auto") return make_cpu_backend();
  return Error("this build has no CUDA backend (it is built when CMake finds the CUDA toolkit and NCCL)");
#endif
}

}  // namespace foresight::runtime

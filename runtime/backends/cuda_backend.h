// The CUDA backend of the runtime (runtime/backends/backend.h), one GPU per rank: tensors in device memory
// from CUDA's stream-ordered pool (kept between micro-batches, as PyTorch's caching allocator
// keeps them), cuBLAS GEMMs and the kernels of kernels/cuda_kernels.h on one compute stream,
// NCCL for the TP and DP groups' collectives (bootstrapped through their MPI twins at the first
// collective; a one-rank group makes no NCCL calls), pipeline transfers staged through host memory
// over MPI, CUDA events for per-op times. Built when CUDA and NCCL are found.
//
// What it runs so far: everything the CPU backend runs except the unfused (eager) norm and SwiGLU
// chains, gradient compression and the CPU-only optimizer variants; Trainer::create refuses those
// with the reason. Compute and communication share one stream (no overlap yet). Tensors are fp32; GEMMs take
// the plan's precision (set_gemm_precision): bf16 operands for bf16 plans, TF32 for fp16 plans, full fp32 for
// fp32 plans, always accumulating and writing fp32. fp8 plans are refused.
#pragma once

#include <memory>
#include <string>

#include "runtime/backends/backend.h"

namespace foresight::runtime {

// The backend is built as a plugin, libforesight_cuda_backend.so, which make_backend("cuda" or
// "auto") loads on first use (runtime/backends/backend.cpp): a CUDA build's `foresight` then starts without
// loading CUDA's libraries (cuBLAS alone costs a tenth of a second and hundreds of MB of resident
// memory at every start: `/usr/bin/time -v foresight --version` shows it) and runs its CPU work on
// a machine without them.
// The plugin resolves the runtime's own symbols (Comm, DeviceBuffer) in the executable that loads
// it, which exports them (-rdynamic).
struct CudaBackendPlugin {
  int (*device_count)();
  std::string (*visibility)();
  Result<std::unique_ptr<Backend>> (*make)(int device);
};

// CUDA devices visible to this process (0 when none, or when the driver cannot be reached).
int cuda_device_count();
// Why no device is visible, for an error message (CUDA_VISIBLE_DEVICES, the driver's answer).
std::string cuda_visibility();
Result<std::unique_ptr<Backend>> make_cuda_backend(int device);

}  // namespace foresight::runtime

// The plugin's one exported entry point (C linkage: looked up by name with dlsym).
extern "C" const foresight::runtime::CudaBackendPlugin* foresight_cuda_backend_plugin();

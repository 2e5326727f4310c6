// Check macros for CUDA runtime and cuBLAS calls (NCCL style): a failed call becomes a
// `foresight::kernels::CudaError` whose message keeps the expression, the file and the line.
// Library code never prints or exits; the caller (app/, tests, bench) decides what to do.
//
//   FS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
//   my_kernel<<<grid, block, 0, stream>>>(...);
//   FS_CUDA_CHECK_LAUNCH();   // launch-configuration errors, reported where the launch is
//   FS_CUBLAS_CHECK(cublasGemmEx(...));
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace foresight::kernels {

// A failed CUDA runtime or cuBLAS call. `code()` is the raw status (cudaError_t or
// cublasStatus_t converted to int) so callers can branch on it without parsing the message.
class CudaError : public std::runtime_error {
 public:
  CudaError(const std::string& message, int code) : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

namespace detail {
inline std::string where(const char* file, int line) {
  return std::string(file) + ":" + std::to_string(line);
}

inline void check_cuda(cudaError_t e, const char* expr, const char* file, int line) {
  if (e == cudaSuccess) return;
  throw CudaError(where(file, line) + ": " + expr + " failed: " + cudaGetErrorName(e) + " (" +
                      cudaGetErrorString(e) + ")",
                  static_cast<int>(e));
}

inline void check_cublas(cublasStatus_t s, const char* expr, const char* file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  throw CudaError(where(file, line) + ": " + expr + " failed: " + cublasGetStatusName(s) + " (" +
                      cublasGetStatusString(s) + ")",
                  static_cast<int>(s));
}
}  // namespace detail

}  // namespace foresight::kernels

#define FS_CUDA_CHECK(expr) ::foresight::kernels::detail::check_cuda((expr), #expr, __FILE__, __LINE__)
#define FS_CUBLAS_CHECK(expr) ::foresight::kernels::detail::check_cublas((expr), #expr, __FILE__, __LINE__)
// After a <<<...>>> launch: reports a bad launch configuration (or an earlier asynchronous error)
// at this line. It does not wait for the kernel.
#define FS_CUDA_CHECK_LAUNCH() FS_CUDA_CHECK(cudaGetLastError())

// Linear layers on cuBLAS (kernels/cuda_kernels.h): row-major GEMMs expressed in cuBLAS's
// column-major terms. A row-major X[r x c] is, read column-major, X^T with leading dimension c,
// so out = in * w becomes out^T = w^T in^T: no transposed copies are made.
#include <library_types.h>

#include "kernels/cuda_kernels.h"

namespace foresight::kernels {

namespace {

constexpr float kOne = 1.0f, kZero = 0.0f;

// fp32 operands on a handle whose math mode allows TF32 (cublasSetMathMode) get the TF32 compute
// type explicitly, so the choice does not rest on how cublasGemmEx reads the math mode; 16-bit
// operands always accumulate in fp32.
cublasComputeType_t compute_type(cudaDataType operands, cublasHandle_t h) {
  cublasMath_t mode = CUBLAS_DEFAULT_MATH;
  FS_CUBLAS_CHECK(cublasGetMathMode(h, &mode));
  const bool tf32 = (static_cast<int>(mode) & 0xf) == static_cast<int>(CUBLAS_TF32_TENSOR_OP_MATH);
  return operands == CUDA_R_32F && tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

// out[rows x n] = in[rows x k] * w[k x n]: out^T (n x rows) = w^T (n x k, ld n) * in^T (k x rows, ld k).
void forward(void* out, cudaDataType out_type, const void* in, const void* w, cudaDataType in_type, int rows,
             int k, int n, cublasHandle_t h) {
  FS_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, rows, k, &kOne, w, in_type, n, in, in_type, k,
                               &kZero, out, out_type, n, compute_type(in_type, h), CUBLAS_GEMM_DEFAULT));
}

// din[rows x k] = dout * w^T: din^T (k x rows, ld k) = w (the transpose of w's view) * dout^T.
// dw[k x n] += in^T * dout: dw^T (n x k, ld n) += dout^T (n x rows) * in (the transpose of in's view).
void backward(void* din, cudaDataType din_type, const void* dout, const void* in, const void* w,
              cudaDataType type, float* dw, int rows, int k, int n, cublasHandle_t h) {
  const cublasComputeType_t compute = compute_type(type, h);
  FS_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, k, rows, n, &kOne, w, type, n, dout, type, n,
                               &kZero, din, din_type, k, compute, CUBLAS_GEMM_DEFAULT));
  FS_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, n, k, rows, &kOne, dout, type, n, in, type, k,
                               &kOne, dw, CUDA_R_32F, n, compute, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void matmul_forward(float* out, const float* in, const float* w, int rows, int k, int n, cublasHandle_t h) {
  forward(out, CUDA_R_32F, in, w, CUDA_R_32F, rows, k, n, h);
}

void matmul_forward(__nv_bfloat16* out, const __nv_bfloat16* in, const __nv_bfloat16* w, int rows, int k,
                    int n, cublasHandle_t h) {
  forward(out, CUDA_R_16BF, in, w, CUDA_R_16BF, rows, k, n, h);
}

void matmul_backward(float* din, float* dw, const float* dout, const float* in, const float* w, int rows,
                     int k, int n, cublasHandle_t h) {
  backward(din, CUDA_R_32F, dout, in, w, CUDA_R_32F, dw, rows, k, n, h);
}

void matmul_backward(__nv_bfloat16* din, float* dw, const __nv_bfloat16* dout, const __nv_bfloat16* in,
                     const __nv_bfloat16* w, int rows, int k, int n, cublasHandle_t h) {
  backward(din, CUDA_R_16BF, dout, in, w, CUDA_R_16BF, dw, rows, k, n, h);
}

void matmul_forward(float* out, const __nv_bfloat16* in, const __nv_bfloat16* w, int rows, int k, int n,
                    cublasHandle_t h) {
  forward(out, CUDA_R_32F, in, w, CUDA_R_16BF, rows, k, n, h);
}

void matmul_backward(float* din, float* dw, const __nv_bfloat16* dout, const __nv_bfloat16* in,
                     const __nv_bfloat16* w, int rows, int k, int n, cublasHandle_t h) {
  backward(din, CUDA_R_32F, dout, in, w, CUDA_R_16BF, dw, rows, k, n, h);
}

}  // namespace foresight::kernels

// Every CUDA kernel of kernels/cuda_kernels.h against its CPU reference (kernels/reference.h) on
// random inputs, with tolerances by storage type. Without a CUDA device every test is skipped,
// visibly ("no CUDA device: ...").
//
// bf16 runs: the inputs are rounded to bf16 first and the reference gets those rounded values as
// fp32, so the only differences left are the kernel's fp32 arithmetic order and its final
// rounding to bf16.
#include "kernels/cuda_kernels.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/reference.h"
#include "tests/kernels/kernel_test_util.h"

namespace foresight::kernels {
namespace {

using bf16 = __nv_bfloat16;
using testing::all_close;
using testing::random_vector;
using testing::Tolerance;

// --- tolerances ----------------------------------------------------------------------------------
// fp32 kernel vs fp32 reference on the same inputs: only the order of additions (tree reductions,
// atomics, tiles) and FMA contraction differ. The reductions here run over at most a few thousand
// O(1) terms; observed-style error is ~log2(n) * eps relative. rel 1e-4 (~840 eps) is far above
// that and far below any real bug (a wrong term is O(1) relative); abs 1e-5 covers results that
// cancel to near 0, where the relative error of the inputs is what remains.
constexpr Tolerance kFp32{1e-5, 1e-4};
// bf16 outputs: the kernel rounds its fp32 result once, at most half a bf16 ulp (2^-9 relative);
// rel 2^-7 (two ulps) leaves room for the fp32 differences above, abs 1e-4 for values near 0
// whose fp32 terms cancel before the rounding.
constexpr Tolerance kBf16{1e-4, 1.0 / 128};
// Column sums (weight and bias gradients) of `rows` O(1) terms, added in another order with float
// atomics: error up to ~rows * eps * sum|terms| in the worst order, so the absolute part grows
// with the row count (2e-6 per row ~ 17 eps of an O(1) term).
Tolerance column_sum_tol(int rows) { return Tolerance{2e-6 * rows, 1e-4}; }
// Bit-identical arithmetic on both sides (one add, IEEE division, rint, conversions).
constexpr Tolerance kExact{0, 0};

template <typename T>
constexpr Tolerance storage_tol() {
  return std::is_same_v<T, float> ? kFp32 : kBf16;
}

// --- device buffers --------------------------------------------------------------------------------
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t n) : n_(n) {
    FS_CUDA_CHECK(cudaMalloc(&p_, std::max<std::size_t>(n, 1) * sizeof(T)));
  }
  explicit DeviceBuffer(const std::vector<T>& v) : DeviceBuffer(v.size()) { upload(v); }
  ~DeviceBuffer() { static_cast<void>(cudaFree(p_)); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return p_; }
  std::size_t size() const { return n_; }
  void upload(const std::vector<T>& v) {
    if (v.size() != n_) throw std::invalid_argument("DeviceBuffer::upload: size mismatch");
    FS_CUDA_CHECK(cudaMemcpy(p_, v.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  // Waits for all queued work first.
  std::vector<T> download() const {
    FS_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> v(n_);
    FS_CUDA_CHECK(cudaMemcpy(v.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }

 private:
  T* p_ = nullptr;
  std::size_t n_;
};

// Rounds `v` in place to T's precision (a no-op for float) and returns it on the device as T.
template <typename T>
DeviceBuffer<T> to_device(std::vector<float>& v) {
  std::vector<T> t(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    if constexpr (std::is_same_v<T, float>) {
      t[i] = v[i];
    } else {
      t[i] = __float2bfloat16_rn(v[i]);
      v[i] = __bfloat162float(t[i]);
    }
  }
  return DeviceBuffer<T>(t);
}

template <typename T>
std::vector<float> to_host_float(const DeviceBuffer<T>& b) {
  const std::vector<T> t = b.download();
  std::vector<float> v(t.size());
  for (std::size_t i = 0; i < t.size(); ++i) {
    if constexpr (std::is_same_v<T, float>)
      v[i] = t[i];
    else
      v[i] = __bfloat162float(t[i]);
  }
  return v;
}

std::vector<float> round_to_bf16(std::vector<float> v) {
  for (float& x : v) x = __bfloat162float(__float2bfloat16_rn(x));
  return v;
}

// --- fixtures ------------------------------------------------------------------------------------
class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
      static_cast<void>(cudaGetLastError());  // clear the error for whatever runs next
      GTEST_SKIP() << "no CUDA device: "
                   << (e != cudaSuccess
                           ? std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")"
                           : std::string("cudaGetDeviceCount returned 0"));
    }
    FS_CUDA_CHECK(cudaStreamCreate(&stream_));
  }
  void TearDown() override {
    if (stream_) static_cast<void>(cudaStreamDestroy(stream_));
  }
  cudaStream_t stream_ = nullptr;
};

template <typename T>
class CudaMixedPrecision : public CudaKernels {};
using StorageTypes = ::testing::Types<float, bf16>;
struct StorageName {
  template <typename T>
  static std::string GetName(int) {
    return std::is_same_v<T, float> ? "fp32" : "bf16";
  }
};
TYPED_TEST_SUITE(CudaMixedPrecision, StorageTypes, StorageName);

struct RowsCols {
  int rows, cols;
};
// One row, a row shorter than a warp, rows longer than the block, many rows with a partial
// 32-column tile, and GPT-2 XL's width.
const std::vector<RowsCols> kRowShapes = {{1, 7}, {5, 20}, {3, 1000}, {300, 33}, {64, 1600}};

std::string shape_name(RowsCols s) {
  std::ostringstream name;
  name << s.rows << "x" << s.cols;
  return name.str();
}

// --- embedding ---------------------------------------------------------------------------------------
// Ids repeat (a small vocabulary), so the backward's atomics add several rows into one.
TYPED_TEST(CudaMixedPrecision, Embedding) {
  using T = TypeParam;
  const int vocab = 11, hidden = 70, rows = 200;
  std::mt19937 rng(7);
  auto table = random_vector(static_cast<std::size_t>(vocab) * hidden, rng);
  auto dout = random_vector(static_cast<std::size_t>(rows) * hidden, rng),
       dtable0 = random_vector(table.size(), rng);
  std::vector<int> ids(rows);
  for (int& id : ids) id = static_cast<int>(rng() % vocab);
  auto table_d = to_device<T>(table), dout_d = to_device<T>(dout);
  DeviceBuffer<int> ids_d(ids);

  std::vector<float> out(dout.size());
  embedding_forward_cpu(out.data(), table.data(), ids.data(), rows, hidden);
  DeviceBuffer<T> out_d(out.size());
  embedding_forward(out_d.get(), table_d.get(), ids_d.get(), rows, hidden, this->stream_);
  EXPECT_TRUE(all_close(to_host_float(out_d), out, kExact)) << "a gather copies";

  std::vector<float> dtable(dtable0);
  embedding_backward_cpu(dtable.data(), dout.data(), ids.data(), rows, hidden);
  DeviceBuffer<float> dtable_d(dtable0);
  embedding_backward(dtable_d.get(), dout_d.get(), ids_d.get(), rows, hidden, this->stream_);
  EXPECT_TRUE(all_close(dtable_d.download(), dtable, column_sum_tol(rows))) << "dtable (accumulated)";
}

// --- linear layers -----------------------------------------------------------------------------------
// A cuBLAS handle on the test's stream.
class Blas {
 public:
  explicit Blas(cudaStream_t stream) {
    FS_CUBLAS_CHECK(cublasCreate(&h_));
    FS_CUBLAS_CHECK(cublasSetStream(h_, stream));
  }
  ~Blas() { static_cast<void>(cublasDestroy(h_)); }
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  cublasHandle_t get() const { return h_; }

 private:
  cublasHandle_t h_ = nullptr;
};

// Sums of `terms` O(1) products added in another order (cuBLAS blocks and splits them): the
// absolute error grows with the count, as for the column sums above. bf16 outputs add their one
// rounding.
template <typename T>
Tolerance product_sum_tol(int terms) {
  return std::is_same_v<T, float> ? Tolerance{2e-6 * terms, 1e-4} : Tolerance{2e-6 * terms + 1e-4, 1.0 / 128};
}

// A single row, sizes that are no multiple of 8 (cuBLAS's unaligned paths), and a GPT-2 XL QKV
// slice (1600 inputs).
TYPED_TEST(CudaMixedPrecision, Matmul) {
  using T = TypeParam;
  const Blas blas(this->stream_);
  struct Shape {
    int rows, k, n;
  };
  for (const Shape sh : {Shape{1, 5, 3}, Shape{37, 19, 23}, Shape{128, 1600, 192}}) {
    SCOPED_TRACE(std::to_string(sh.rows) + "x" + std::to_string(sh.k) + "x" + std::to_string(sh.n));
    const int rows = sh.rows, k = sh.k, n = sh.n;
    std::mt19937 rng(static_cast<unsigned>(rows * 7919 + k * 31 + n));
    auto in = random_vector(static_cast<std::size_t>(rows) * k, rng),
         w = random_vector(static_cast<std::size_t>(k) * n, rng);
    auto dout = random_vector(static_cast<std::size_t>(rows) * n, rng),
         dw0 = random_vector(static_cast<std::size_t>(k) * n, rng);
    auto in_d = to_device<T>(in), w_d = to_device<T>(w),
         dout_d = to_device<T>(dout);  // rounds the host copies too

    std::vector<float> out(static_cast<std::size_t>(rows) * n);
    matmul_forward_cpu(out.data(), in.data(), w.data(), rows, k, n);
    DeviceBuffer<T> out_d(out.size());
    matmul_forward(out_d.get(), in_d.get(), w_d.get(), rows, k, n, blas.get());
    EXPECT_TRUE(all_close(to_host_float(out_d), out, product_sum_tol<T>(k))) << "out";

    std::vector<float> din(in.size()), dw(dw0);
    matmul_backward_cpu(din.data(), dw.data(), dout.data(), in.data(), w.data(), rows, k, n);
    DeviceBuffer<T> din_d(din.size());
    DeviceBuffer<float> dw_d(dw0);
    matmul_backward(din_d.get(), dw_d.get(), dout_d.get(), in_d.get(), w_d.get(), rows, k, n, blas.get());
    EXPECT_TRUE(all_close(to_host_float(din_d), din, product_sum_tol<T>(n))) << "din";
    EXPECT_TRUE(all_close(dw_d.download(), dw, product_sum_tol<float>(rows))) << "dw (accumulated, fp32)";
  }
}

// bf16 operands with fp32 outputs: against the reference on the rounded operands, whose products
// are exact in fp32 (8-bit mantissas), so only the summation order differs.
TEST_F(CudaKernels, MatmulBf16OperandsFp32Outputs) {
  const Blas blas(stream_);
  const int rows = 67, k = 300, n = 45;
  std::mt19937 rng(31);
  auto in = random_vector(static_cast<std::size_t>(rows) * k, rng),
       w = random_vector(static_cast<std::size_t>(k) * n, rng);
  auto dout = random_vector(static_cast<std::size_t>(rows) * n, rng),
       dw0 = random_vector(static_cast<std::size_t>(k) * n, rng);
  auto in_d = to_device<__nv_bfloat16>(in), w_d = to_device<__nv_bfloat16>(w),
       dout_d = to_device<__nv_bfloat16>(dout);
  std::vector<float> out(static_cast<std::size_t>(rows) * n), din(in.size()), dw(dw0);
  matmul_forward_cpu(out.data(), in.data(), w.data(), rows, k, n);
  matmul_backward_cpu(din.data(), dw.data(), dout.data(), in.data(), w.data(), rows, k, n);
  DeviceBuffer<float> out_d(out.size()), din_d(din.size()), dw_d(dw0);
  matmul_forward(out_d.get(), in_d.get(), w_d.get(), rows, k, n, blas.get());
  matmul_backward(din_d.get(), dw_d.get(), dout_d.get(), in_d.get(), w_d.get(), rows, k, n, blas.get());
  EXPECT_TRUE(all_close(out_d.download(), out, product_sum_tol<float>(k))) << "out";
  EXPECT_TRUE(all_close(din_d.download(), din, product_sum_tol<float>(n))) << "din";
  EXPECT_TRUE(all_close(dw_d.download(), dw, product_sum_tol<float>(rows))) << "dw (accumulated)";
}

// --- normalisation -----------------------------------------------------------------------------------
TYPED_TEST(CudaMixedPrecision, Rmsnorm) {
  using T = TypeParam;
  const float eps = 1e-5f;
  for (const RowsCols sh : kRowShapes) {
    SCOPED_TRACE(shape_name(sh));
    const int rows = sh.rows, cols = sh.cols;
    const std::size_t n = static_cast<std::size_t>(rows) * cols;
    std::mt19937 rng(static_cast<unsigned>(n));
    auto x = random_vector(n, rng, -2.0f, 2.0f), w = random_vector(cols, rng, 0.5f, 1.5f);
    auto dout = random_vector(n, rng), dw0 = random_vector(cols, rng);
    auto x_d = to_device<T>(x), w_d = to_device<T>(w), dout_d = to_device<T>(dout);

    std::vector<float> out(n), rstd(rows);
    rmsnorm_forward_cpu(out.data(), rstd.data(), x.data(), w.data(), rows, cols, eps);
    DeviceBuffer<T> out_d(n);
    DeviceBuffer<float> rstd_d(rows);
    rmsnorm_forward(out_d.get(), rstd_d.get(), x_d.get(), w_d.get(), rows, cols, eps, this->stream_);
    EXPECT_TRUE(all_close(to_host_float(out_d), out, storage_tol<T>())) << "out";
    EXPECT_TRUE(all_close(rstd_d.download(), rstd, kFp32)) << "rstd";

    std::vector<float> dx(n), dw(dw0);
    rmsnorm_backward_cpu(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), rows, cols);
    DeviceBuffer<T> dx_d(n);
    DeviceBuffer<float> dw_d(dw0), rstd_ref_d(rstd);  // both sides use the reference's rstd
    rmsnorm_backward(dx_d.get(), dw_d.get(), dout_d.get(), x_d.get(), w_d.get(), rstd_ref_d.get(), rows, cols,
                     this->stream_);
    EXPECT_TRUE(all_close(to_host_float(dx_d), dx, storage_tol<T>())) << "dx";
    EXPECT_TRUE(all_close(dw_d.download(), dw, column_sum_tol(rows))) << "dweight (accumulated)";

    // dx may overwrite dout.
    rmsnorm_backward(dout_d.get(), dw_d.get(), dout_d.get(), x_d.get(), w_d.get(), rstd_ref_d.get(), rows,
                     cols, this->stream_);
    EXPECT_TRUE(all_close(to_host_float(dout_d), dx, storage_tol<T>())) << "dx in place";
  }
}

TYPED_TEST(CudaMixedPrecision, Layernorm) {
  using T = TypeParam;
  const float eps = 1e-5f;
  for (const RowsCols sh : kRowShapes) {
    SCOPED_TRACE(shape_name(sh));
    const int rows = sh.rows, cols = sh.cols;
    const std::size_t n = static_cast<std::size_t>(rows) * cols;
    std::mt19937 rng(static_cast<unsigned>(n) + 1);
    auto x = random_vector(n, rng, -1.0f, 3.0f), w = random_vector(cols, rng, 0.5f, 1.5f);
    auto b = random_vector(cols, rng), dout = random_vector(n, rng);
    auto dw0 = random_vector(cols, rng), db0 = random_vector(cols, rng);
    auto x_d = to_device<T>(x), w_d = to_device<T>(w), b_d = to_device<T>(b), dout_d = to_device<T>(dout);

    std::vector<float> out(n), mean(rows), rstd(rows);
    layernorm_forward_cpu(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), rows, cols,
                          eps);
    DeviceBuffer<T> out_d(n);
    DeviceBuffer<float> mean_d(rows), rstd_d(rows);
    layernorm_forward(out_d.get(), mean_d.get(), rstd_d.get(), x_d.get(), w_d.get(), b_d.get(), rows, cols,
                      eps, this->stream_);
    EXPECT_TRUE(all_close(to_host_float(out_d), out, storage_tol<T>())) << "out";
    EXPECT_TRUE(all_close(mean_d.download(), mean, kFp32)) << "mean";
    EXPECT_TRUE(all_close(rstd_d.download(), rstd, kFp32)) << "rstd";

    std::vector<float> dx(n), dw(dw0), db(db0);
    layernorm_backward_cpu(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                           rstd.data(), rows, cols);
    DeviceBuffer<T> dx_d(n);
    DeviceBuffer<float> dw_d(dw0), db_d(db0), mean_ref_d(mean), rstd_ref_d(rstd);
    layernorm_backward(dx_d.get(), dw_d.get(), db_d.get(), dout_d.get(), x_d.get(), w_d.get(),
                       mean_ref_d.get(), rstd_ref_d.get(), rows, cols, this->stream_);
    EXPECT_TRUE(all_close(to_host_float(dx_d), dx, storage_tol<T>())) << "dx";
    EXPECT_TRUE(all_close(dw_d.download(), dw, column_sum_tol(rows))) << "dweight";
    EXPECT_TRUE(all_close(db_d.download(), db, column_sum_tol(rows))) << "dbias";
  }
}

// --- elementwise -----------------------------------------------------------------------------------
TYPED_TEST(CudaMixedPrecision, Residual) {
  using T = TypeParam;
  const std::size_t n = 1000003;  // odd: no vector-width assumption
  std::mt19937 rng(20);
  auto a = random_vector(n, rng), b = random_vector(n, rng);
  auto a_d = to_device<T>(a), b_d = to_device<T>(b);
  std::vector<float> out(n);
  residual_forward_cpu(out.data(), a.data(), b.data(), n);
  DeviceBuffer<T> out_d(n);
  residual_forward(out_d.get(), a_d.get(), b_d.get(), n, this->stream_);
  EXPECT_TRUE(all_close(to_host_float(out_d), out, storage_tol<T>()));
}

TYPED_TEST(CudaMixedPrecision, BiasGelu) {
  using T = TypeParam;
  for (const RowsCols sh : kRowShapes) {
    SCOPED_TRACE(shape_name(sh));
    const int rows = sh.rows, cols = sh.cols;
    const std::size_t n = static_cast<std::size_t>(rows) * cols;
    std::mt19937 rng(static_cast<unsigned>(n) + 3);
    auto x = random_vector(n, rng, -4.0f, 4.0f), bias = random_vector(cols, rng, -0.5f, 0.5f);
    auto dout = random_vector(n, rng), db0 = random_vector(cols, rng);
    auto x_d = to_device<T>(x), bias_d = to_device<T>(bias), dout_d = to_device<T>(dout);

    for (const bool with_bias : {true, false}) {
      SCOPED_TRACE(with_bias ? "bias" : "no bias");
      const float* b = with_bias ? bias.data() : nullptr;
      const T* b_dev = with_bias ? bias_d.get() : nullptr;
      std::vector<float> out(n);
      bias_gelu_forward_cpu(out.data(), x.data(), b, rows, cols);
      DeviceBuffer<T> out_d(n);
      bias_gelu_forward(out_d.get(), x_d.get(), b_dev, rows, cols, this->stream_);
      EXPECT_TRUE(all_close(to_host_float(out_d), out, storage_tol<T>())) << "forward";

      std::vector<float> dx(n), db(db0);
      // dbias is accumulated with or without a bias in the forward (a null dbias is the caller's
      // choice, not the bias's), so both cases compare it.
      bias_gelu_backward_cpu(dx.data(), db.data(), x.data(), b, dout.data(), rows, cols);
      DeviceBuffer<T> dx_d(n);
      DeviceBuffer<float> db_d(db0);
      bias_gelu_backward(dx_d.get(), db_d.get(), x_d.get(), b_dev, dout_d.get(), rows, cols, this->stream_);
      EXPECT_TRUE(all_close(to_host_float(dx_d), dx, storage_tol<T>())) << "dx";
      EXPECT_TRUE(all_close(db_d.download(), db, column_sum_tol(rows))) << "dbias";
    }
    // dx may overwrite dout.
    std::vector<float> dx(n), db(db0);
    bias_gelu_backward_cpu(dx.data(), db.data(), x.data(), bias.data(), dout.data(), rows, cols);
    DeviceBuffer<float> db_d(db0);
    bias_gelu_backward(dout_d.get(), db_d.get(), x_d.get(), bias_d.get(), dout_d.get(), rows, cols,
                       this->stream_);
    EXPECT_TRUE(all_close(to_host_float(dout_d), dx, storage_tol<T>())) << "dx in place";
    EXPECT_TRUE(all_close(db_d.download(), db, column_sum_tol(rows))) << "dbias in place";
  }
}

TYPED_TEST(CudaMixedPrecision, Swiglu) {
  using T = TypeParam;
  for (const RowsCols sh : kRowShapes) {
    SCOPED_TRACE(shape_name(sh));
    const int rows = sh.rows, cols = sh.cols;
    const std::size_t n = static_cast<std::size_t>(rows) * cols;
    std::mt19937 rng(static_cast<unsigned>(n) + 4);
    auto gu = random_vector(2 * n, rng, -4.0f, 4.0f), dout = random_vector(n, rng);
    auto gu_d = to_device<T>(gu), dout_d = to_device<T>(dout);
    std::vector<float> out(n), dgu(2 * n);
    swiglu_forward_cpu(out.data(), gu.data(), rows, cols);
    swiglu_backward_cpu(dgu.data(), gu.data(), dout.data(), rows, cols);
    DeviceBuffer<T> out_d(n), dgu_d(2 * n);
    swiglu_forward(out_d.get(), gu_d.get(), rows, cols, this->stream_);
    swiglu_backward(dgu_d.get(), gu_d.get(), dout_d.get(), rows, cols, this->stream_);
    EXPECT_TRUE(all_close(to_host_float(out_d), out, storage_tol<T>())) << "forward";
    EXPECT_TRUE(all_close(to_host_float(dgu_d), dgu, storage_tol<T>())) << "backward";
  }
}

TYPED_TEST(CudaMixedPrecision, BiasForwardAndBackward) {
  using T = TypeParam;
  for (const RowsCols sh : kRowShapes) {
    SCOPED_TRACE(shape_name(sh));
    const int rows = sh.rows, cols = sh.cols;
    const std::size_t n = static_cast<std::size_t>(rows) * cols;
    std::mt19937 rng(static_cast<unsigned>(n) + 5);
    auto x = random_vector(n, rng), bias = random_vector(cols, rng), db0 = random_vector(cols, rng);
    auto x_d = to_device<T>(x), bias_d = to_device<T>(bias);
    // References (no reference.h counterpart): out = x + bias per column; dbias += column sums.
    std::vector<float> out(n), db(db0);
    for (std::size_t i = 0; i < n; ++i) out[i] = x[i] + bias[i % cols];
    if constexpr (!std::is_same_v<T, float>) out = round_to_bf16(out);
    for (std::size_t i = 0; i < n; ++i) db[i % cols] += x[i];
    DeviceBuffer<T> out_d(n);
    DeviceBuffer<float> db_d(db0);
    bias_forward(out_d.get(), x_d.get(), bias_d.get(), rows, cols, this->stream_);
    bias_backward(db_d.get(), x_d.get(), rows, cols, this->stream_);
    EXPECT_TRUE(all_close(to_host_float(out_d), out, kExact)) << "one add, one rounding on both sides";
    EXPECT_TRUE(all_close(db_d.download(), db, column_sum_tol(rows))) << "dbias";
    bias_forward(x_d.get(), x_d.get(), bias_d.get(), rows, cols, this->stream_);  // in place
    EXPECT_TRUE(all_close(to_host_float(x_d), out, kExact)) << "in place";
  }
}

TEST_F(CudaKernels, ConvertRoundsToNearestEven) {
  std::mt19937 rng(21);
  auto x = random_vector(100001, rng, -1e3f, 1e3f);
  x[0] = 1.0f + 1.0f / 256;  // exactly halfway between two bf16 values: rounds to the even one, 1.0
  DeviceBuffer<float> x_d(x);
  DeviceBuffer<bf16> y_d(x.size());
  DeviceBuffer<float> back_d(x.size());
  convert(y_d.get(), x_d.get(), x.size(), stream_);
  convert(back_d.get(), y_d.get(), x.size(), stream_);
  const auto back = back_d.download();
  EXPECT_TRUE(all_close(back, round_to_bf16(x), kExact));
  EXPECT_EQ(back[0], 1.0f);
}

TEST_F(CudaKernels, Rope) {
  AttentionShape s;
  s.batch = 2, s.seq = 130, s.q_heads = 4, s.kv_heads = 2, s.head_dim = 64;
  std::mt19937 rng(22);
  auto qkv = random_vector(s.tokens() * s.qkv_width(), rng);
  for (const bool inverse : {false, true}) {
    SCOPED_TRACE(inverse ? "inverse" : "forward");
    auto ref = qkv;
    rope_cpu(ref.data(), s, 10000.0f, inverse);
    DeviceBuffer<float> d(qkv);
    rope(d.get(), s, 10000.0f, inverse, stream_);
    EXPECT_TRUE(all_close(d.download(), ref, kFp32));
  }
}

// --- attention ---------------------------------------------------------------------------------------
AttentionShape make_shape(int batch, int seq, int q_heads, int kv_heads, int head_dim) {
  AttentionShape s;
  s.batch = batch, s.seq = seq, s.q_heads = q_heads, s.kv_heads = kv_heads, s.head_dim = head_dim;
  return s;
}
// Grouped-query with partial tiles; multi-query with a head_dim that is no multiple of the 16-wide
// k step; plain multi-head on exact 64-row tiles; a single token.
const std::vector<AttentionShape> kAttentionShapes = {make_shape(2, 130, 4, 2, 64),
                                                      make_shape(1, 67, 3, 1, 40),
                                                      make_shape(3, 64, 2, 2, 16), make_shape(1, 1, 1, 1, 8)};

std::string attention_name(const AttentionShape& s) {
  std::ostringstream name;  // not a chain of string operator+: GCC 12 -Wrestrict false positive
  name << "b" << s.batch << " s" << s.seq << " hq" << s.q_heads << " hkv" << s.kv_heads << " d" << s.head_dim;
  return name.str();
}

TEST_F(CudaKernels, AttentionStepsMatchReference) {
  for (const AttentionShape& s : kAttentionShapes) {
    SCOPED_TRACE(attention_name(s));
    std::mt19937 rng(static_cast<unsigned>(s.score_elems()));
    const std::size_t nqkv = s.tokens() * s.qkv_width(), nout = s.tokens() * s.q_heads * s.head_dim;
    const auto qkv = random_vector(nqkv, rng), dout = random_vector(nout, rng);
    DeviceBuffer<float> qkv_d(qkv), dout_d(dout);

    std::vector<float> scores(s.score_elems()), probs(s.score_elems()), out(nout);
    attention_scores_cpu(scores.data(), qkv.data(), s);
    causal_softmax_forward_cpu(probs.data(), scores.data(), s);
    attention_values_cpu(out.data(), probs.data(), qkv.data(), s);
    // Each step gets the reference's inputs, so a failure points at one kernel.
    DeviceBuffer<float> scores_d(s.score_elems()), probs_d(s.score_elems()), out_d(nout);
    DeviceBuffer<float> scores_ref_d(scores), probs_ref_d(probs);
    attention_scores(scores_d.get(), qkv_d.get(), s, stream_);
    causal_softmax_forward(probs_d.get(), scores_ref_d.get(), s, stream_);
    attention_values(out_d.get(), probs_ref_d.get(), qkv_d.get(), s, stream_);
    EXPECT_TRUE(all_close(scores_d.download(), scores, kFp32)) << "scores";
    EXPECT_TRUE(all_close(probs_d.download(), probs, kFp32)) << "probs";
    EXPECT_TRUE(all_close(out_d.download(), out, kFp32)) << "out";
    causal_softmax_forward(scores_ref_d.get(), scores_ref_d.get(), s, stream_);
    EXPECT_TRUE(all_close(scores_ref_d.download(), probs, kFp32)) << "softmax in place";

    // Backward. dqkv starts at a sentinel on both sides: each step owns only its part.
    const float sentinel = 7.0f;
    std::vector<float> dprobs(s.score_elems()), dscores(s.score_elems()), dqkv_v(nqkv, sentinel),
        dqkv_qk(nqkv, sentinel);
    attention_values_backward_cpu(dprobs.data(), dqkv_v.data(), dout.data(), probs.data(), qkv.data(), s);
    causal_softmax_backward_cpu(dscores.data(), dprobs.data(), probs.data(), s);
    attention_scores_backward_cpu(dqkv_qk.data(), dscores.data(), qkv.data(), s);
    DeviceBuffer<float> dprobs_d(s.score_elems()), dscores_d(s.score_elems());
    DeviceBuffer<float> dqkv_v_d(std::vector<float>(nqkv, sentinel)),
        dqkv_qk_d(std::vector<float>(nqkv, sentinel));
    DeviceBuffer<float> dprobs_ref_d(dprobs), dscores_ref_d(dscores);
    attention_values_backward(dprobs_d.get(), dqkv_v_d.get(), dout_d.get(), probs_ref_d.get(), qkv_d.get(), s,
                              stream_);
    causal_softmax_backward(dscores_d.get(), dprobs_ref_d.get(), probs_ref_d.get(), s, stream_);
    attention_scores_backward(dqkv_qk_d.get(), dscores_ref_d.get(), qkv_d.get(), s, stream_);
    EXPECT_TRUE(all_close(dprobs_d.download(), dprobs, kFp32)) << "dprobs";
    EXPECT_TRUE(all_close(dqkv_v_d.download(), dqkv_v, kFp32)) << "dqkv after values backward (v part only)";
    EXPECT_TRUE(all_close(dscores_d.download(), dscores, kFp32)) << "dscores";
    EXPECT_TRUE(all_close(dqkv_qk_d.download(), dqkv_qk, kFp32))
        << "dqkv after scores backward (q, k parts only)";
  }
}

TEST_F(CudaKernels, FusedAttentionMatchesReference) {
  for (const AttentionShape& s : kAttentionShapes) {
    SCOPED_TRACE(attention_name(s));
    std::mt19937 rng(static_cast<unsigned>(s.score_elems()) + 1);
    const std::size_t nqkv = s.tokens() * s.qkv_width(), nout = s.tokens() * s.q_heads * s.head_dim;
    const auto qkv = random_vector(nqkv, rng), dout = random_vector(nout, rng);
    std::vector<float> out(nout), probs(s.score_elems()), dqkv(nqkv), sa(s.score_elems()),
        sb(s.score_elems());
    attention_forward_cpu(out.data(), probs.data(), qkv.data(), s);
    attention_backward_cpu(dqkv.data(), sa.data(), sb.data(), dout.data(), probs.data(), qkv.data(), s);

    DeviceBuffer<float> qkv_d(qkv), dout_d(dout), out_d(nout), probs_d(s.score_elems());
    DeviceBuffer<float> dqkv_d(
        std::vector<float>(nqkv, std::numeric_limits<float>::quiet_NaN()));  // all written
    DeviceBuffer<float> sa_d(s.score_elems()), sb_d(s.score_elems());
    attention_forward(out_d.get(), probs_d.get(), qkv_d.get(), s, stream_);
    attention_backward(dqkv_d.get(), sa_d.get(), sb_d.get(), dout_d.get(), probs_d.get(), qkv_d.get(), s,
                       stream_);
    EXPECT_TRUE(all_close(out_d.download(), out, kFp32)) << "out";
    EXPECT_TRUE(all_close(probs_d.download(), probs, kFp32)) << "probs";
    EXPECT_TRUE(all_close(dqkv_d.download(), dqkv, kFp32)) << "dqkv";
  }
}

// --- loss ----------------------------------------------------------------------------------------
TEST_F(CudaKernels, Crossentropy) {
  const int rows = 33, vocab = 50257;  // GPT-2's vocabulary: odd, not a multiple of the block
  std::mt19937 rng(23);
  const auto logits = random_vector(static_cast<std::size_t>(rows) * vocab, rng, -4.0f, 4.0f);
  std::vector<int> targets(rows);
  for (int r = 0; r < rows; ++r) targets[r] = static_cast<int>(rng() % vocab);
  targets[0] = 0;
  targets[1] = vocab - 1;
  const float dloss = 1.0f / rows;
  std::vector<float> losses(rows), dlogits(logits.size());
  crossentropy_forward_cpu(losses.data(), logits.data(), targets.data(), rows, vocab);
  crossentropy_backward_cpu(dlogits.data(), logits.data(), targets.data(), dloss, rows, vocab);

  DeviceBuffer<float> logits_d(logits), losses_d(rows), dlogits_d(logits.size());
  DeviceBuffer<int> targets_d(targets);
  crossentropy_forward(losses_d.get(), logits_d.get(), targets_d.get(), rows, vocab, stream_);
  crossentropy_backward(dlogits_d.get(), logits_d.get(), targets_d.get(), dloss, rows, vocab, stream_);
  EXPECT_TRUE(all_close(losses_d.download(), losses, kFp32)) << "losses";
  // Most gradients are ~ dloss / vocab ~ 6e-7: no absolute slack, relative only (fp32 exp and sum
  // against the reference's double: ~1e-6 relative).
  const Tolerance grad_tol{1e-12, 1e-4};
  EXPECT_TRUE(all_close(dlogits_d.download(), dlogits, grad_tol)) << "dlogits";
  crossentropy_backward(logits_d.get(), logits_d.get(), targets_d.get(), dloss, rows, vocab, stream_);
  EXPECT_TRUE(all_close(logits_d.download(), dlogits, grad_tol)) << "dlogits in place";
}

// The vocabulary-parallel cross-entropy's pieces on a slice [first, first + cols) of the vocabulary:
// targets inside and outside the slice, at both of its edges.
TEST_F(CudaKernels, VocabularyParallelCrossentropyPieces) {
  const int rows = 37, cols = 12289, first = 12289;  // the second of four slices of a 49156 vocabulary
  std::mt19937 rng(29);
  const auto logits = random_vector(static_cast<std::size_t>(rows) * cols, rng, -4.0f, 4.0f);
  std::vector<int> targets(rows);
  for (int r = 0; r < rows; ++r) targets[r] = static_cast<int>(rng() % (4 * cols));
  targets[0] = first;
  targets[1] = first + cols - 1;
  targets[2] = first - 1;
  targets[3] = first + cols;
  std::vector<float> mx(rows), sum(rows), exps(logits.size()), tl(rows), scale(rows);
  for (int r = 0; r < rows; ++r) scale[r] = 0.25f + 0.01f * static_cast<float>(r);
  softmax_row_stats_cpu(mx.data(), sum.data(), exps.data(), logits.data(), rows, cols);
  target_logits_cpu(tl.data(), logits.data(), targets.data(), first, rows, cols);
  std::vector<float> x = exps;
  scale_rows_cpu(x.data(), scale.data(), rows, cols);
  add_at_targets_cpu(x.data(), targets.data(), first, rows, cols, -0.5f);

  DeviceBuffer<float> logits_d(logits), mx_d(rows), sum_d(rows), exps_d(logits.size()), tl_d(rows),
      scale_d(scale);
  DeviceBuffer<int> targets_d(targets);
  softmax_row_stats(mx_d.get(), sum_d.get(), exps_d.get(), logits_d.get(), rows, cols, stream_);
  target_logits(tl_d.get(), logits_d.get(), targets_d.get(), first, rows, cols, stream_);
  EXPECT_TRUE(all_close(mx_d.download(), mx, kFp32)) << "row maxima";
  EXPECT_TRUE(all_close(sum_d.download(), sum, Tolerance{1e-6, 1e-5})) << "row sums (fp32 against double)";
  EXPECT_TRUE(all_close(exps_d.download(), exps, kFp32)) << "exponentials";
  const auto tl_gpu = tl_d.download();
  for (int r = 0; r < rows; ++r) {
    if (std::isinf(tl[r]))
      EXPECT_TRUE(std::isinf(tl_gpu[r]) && tl_gpu[r] < 0) << "row " << r << " (target outside)";
    else
      EXPECT_EQ(tl_gpu[r], tl[r]) << "row " << r;
  }
  scale_rows(exps_d.get(), scale_d.get(), rows, cols, stream_);
  add_at_targets(exps_d.get(), targets_d.get(), first, rows, cols, -0.5f, stream_);
  EXPECT_TRUE(all_close(exps_d.download(), x, kFp32)) << "scaled rows, targets shifted";
}

// --- optimizer and mixed precision -------------------------------------------------------------------
TYPED_TEST(CudaMixedPrecision, AdamwGradients) {
  using T = TypeParam;
  const std::size_t n = 300007;
  std::mt19937 rng(24);
  auto p = random_vector(n, rng), m = random_vector(n, rng, -0.1f, 0.1f),
       v = random_vector(n, rng, 0.1f, 1.0f);
  DeviceBuffer<float> p_d(p), m_d(m), v_d(v);
  AdamWConfig c;  // defaults: lr 1e-3, betas (0.9, 0.95), eps 1e-8, weight decay 0.1
  for (int step = 1; step <= 3; ++step) {
    auto g = random_vector(n, rng, -2.0f, 2.0f);
    auto g_d = to_device<T>(g);
    const float grad_scale = 1.0f / 1024;  // as after a loss scale of 1024
    adamw_cpu(p.data(), m.data(), v.data(), g.data(), n, c, step, grad_scale);
    adamw(p_d.get(), m_d.get(), v_d.get(), g_d.get(), n, c, step, grad_scale, this->stream_);
  }
  // Same formula elementwise; only FMA contraction differs (a few ulps of each term). m can cancel
  // (b1 m + (1 - b1) g with opposite signs), hence its absolute part; parameters move by ~lr per
  // step, and 1e-8 is 1e-5 of that.
  EXPECT_TRUE(all_close(m_d.download(), m, Tolerance{1e-7, 4 * FLT_EPSILON})) << "m";
  EXPECT_TRUE(all_close(v_d.download(), v, Tolerance{1e-9, 4 * FLT_EPSILON})) << "v";
  EXPECT_TRUE(all_close(p_d.download(), p, Tolerance{1e-8, 4 * FLT_EPSILON})) << "params";
}

TYPED_TEST(CudaMixedPrecision, HasOverflow) {
  using T = TypeParam;
  const std::size_t n = 3000001;
  const float limit = 65504.0f;
  std::mt19937 rng(25);
  const auto clean = random_vector(n, rng, -60000.0f, 60000.0f);
  struct Case {
    const char* name;
    std::size_t at;
    float value;
  };
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const Case k : {Case{"clean", 0, 1.0f}, Case{"inf last", n - 1, inf}, Case{"-inf", n / 2, -inf},
                       Case{"nan first", 0, nan}, Case{"65505", 12345, 65505.0f},
                       Case{"-1e30", n - 7, -1e30f}, Case{"at the limit", 77, -65504.0f}}) {
    SCOPED_TRACE(k.name);
    auto g = clean;
    g[k.at] = k.value;
    auto g_d = to_device<T>(g);  // bf16: 65504 and 65505 both round to 65536, over the limit
    DeviceBuffer<int> flag_d(std::vector<int>{-1});
    has_overflow(g_d.get(), n, limit, flag_d.get(), this->stream_);
    EXPECT_EQ(flag_d.download()[0], has_overflow_cpu(g.data(), n, limit) ? 1 : 0);
  }
  DeviceBuffer<T> empty(0);
  DeviceBuffer<int> flag_d(std::vector<int>{-1});
  has_overflow(empty.get(), 0, limit, flag_d.get(), this->stream_);
  EXPECT_EQ(flag_d.download()[0], 0) << "no gradients, no overflow";
}

// --- gradient compression ----------------------------------------------------------------------------
TEST_F(CudaKernels, Int8QuantizeRoundTrip) {
  const std::size_t n = 1000003;
  std::mt19937 rng(26);
  auto x = random_vector(n, rng, -3.0f, 3.0f);
  std::fill(x.begin() + 4096, x.begin() + 8192, 0.0f);  // zero blocks: scale 0, q 0
  DeviceBuffer<float> x_d(x);
  for (const int block : {32, 100, 2048}) {
    SCOPED_TRACE("block " + std::to_string(block));
    const std::size_t blocks = (n + block - 1) / block;
    std::vector<std::int8_t> q(n);
    std::vector<float> scales(blocks), y(n);
    quantize_int8_cpu(q.data(), scales.data(), x.data(), n, block);
    dequantize_int8_cpu(y.data(), q.data(), scales.data(), n, block);
    DeviceBuffer<std::int8_t> q_d(n);
    DeviceBuffer<float> scales_d(blocks), y_d(n);
    quantize_int8(q_d.get(), scales_d.get(), x_d.get(), n, block, stream_);
    dequantize_int8(y_d.get(), q_d.get(), scales_d.get(), n, block, stream_);
    // Same operations in the same order (max, /127, IEEE x / scale, round half to even): exact.
    EXPECT_TRUE(all_close(scales_d.download(), scales, kExact)) << "scales";
    EXPECT_TRUE(all_close(q_d.download(), q, kExact)) << "q";
    EXPECT_TRUE(all_close(y_d.download(), y, kExact)) << "dequantized";
  }
}

TEST_F(CudaKernels, TopkSparsifyMatchesReferenceExactly) {
  const std::size_t n = 100003;
  std::mt19937 rng(27);
  // Magnitudes on a coarse grid (many ties across the threshold), both signs.
  auto grad = random_vector(n, rng);
  for (float& g : grad) g = std::round(g * 16.0f) / 16.0f;
  auto residual0 = random_vector(n, rng);
  for (float& r : residual0) r = std::round(r * 8.0f) / 16.0f;
  for (const std::size_t k : {std::size_t{0}, std::size_t{1}, std::size_t{1000}, n / 2, n - 1, n, n + 7}) {
    SCOPED_TRACE("k " + std::to_string(k));
    auto residual = residual0;
    std::vector<std::int32_t> idx(n, -1);
    std::vector<float> val(n, 0.0f);
    const std::size_t sent = topk_sparsify_cpu(idx.data(), val.data(), residual.data(), grad.data(), n, k);
    DeviceBuffer<float> grad_d(grad), res_d(residual0), val_d(std::vector<float>(n, 0.0f));
    DeviceBuffer<std::int32_t> idx_d(std::vector<std::int32_t>(n, -1));
    ASSERT_EQ(topk_sparsify(idx_d.get(), val_d.get(), res_d.get(), grad_d.get(), n, k, stream_), sent);
    // One float add per element and a selection: bit-identical results expected.
    EXPECT_TRUE(all_close(idx_d.download(), idx, kExact)) << "indices (ascending, ties to the lower index)";
    EXPECT_TRUE(all_close(val_d.download(), val, kExact)) << "values";
    EXPECT_TRUE(all_close(res_d.download(), residual, kExact)) << "residual";
  }
}

TEST_F(CudaKernels, TopkErrorFeedbackStepsMatchReference) {
  const std::size_t n = 65536, k = 1000;
  std::mt19937 rng(28);
  std::vector<float> residual(n, 0.0f);
  DeviceBuffer<float> res_d(residual), val_d(k);
  DeviceBuffer<std::int32_t> idx_d(k);
  std::vector<std::int32_t> idx(k);
  std::vector<float> val(k);
  for (int step = 0; step < 4; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const auto g = random_vector(n, rng);
    DeviceBuffer<float> g_d(g);
    topk_sparsify_cpu(idx.data(), val.data(), residual.data(), g.data(), n, k);
    topk_sparsify(idx_d.get(), val_d.get(), res_d.get(), g_d.get(), n, k, stream_);
    EXPECT_TRUE(all_close(idx_d.download(), idx, kExact)) << "indices";
    EXPECT_TRUE(all_close(val_d.download(), val, kExact)) << "values";
    EXPECT_TRUE(all_close(res_d.download(), residual, kExact)) << "residual";
  }
}

}  // namespace
}  // namespace foresight::kernels

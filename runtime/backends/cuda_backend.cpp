// The CUDA backend: device memory, cuBLAS and kernels/*.cu on one stream, NCCL groups, CUDA events.
#include "runtime/backends/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "kernels/cuda_check.h"
#include "kernels/cuda_kernels.h"
#include "runtime/communication/nccl_comm.h"

namespace foresight::runtime {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::string cuda_visibility() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  std::string why = e == cudaSuccess ? std::to_string(n) + " devices" : std::string(cudaGetErrorString(e));
  static_cast<void>(cudaGetLastError());
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) why += std::string(", CUDA_VISIBLE_DEVICES=") + v;
  return why;
}

namespace {

using kernels::AttentionShape;

// A group's collectives on the backend's stream, over NCCL. The communicator is made at the
// group's first collective (every member reaches it together, as collectives require), so a group
// that only carries pipeline transfers, or has one rank, never makes one: a one-rank group's
// collectives are identities (a reduce-scatter copies its one block).
//
// Pipeline transfers are staged through host memory over the MPI group: the send copies the
// tensor out and hands it to a non-blocking MPI send, the receive takes it from MPI and copies it
// in. That keeps the CPU backend's ordering guarantees (a non-blocking send can never wait on its
// peer), which NCCL's send and receive on one stream do not give when two stages send to each
// other at once (the 1F1B steady state), at the price of two PCIe copies per transfer.
class CudaComm final : public GroupComm {
 public:
  CudaComm(Comm& group, Backend& be, cudaStream_t stream) : group_(group), be_(be), stream_(stream) {}
  void all_reduce(float* data, std::size_t n) override {
    if (NcclComm* c = nccl()) c->all_reduce(data, n, stream_);
  }
  void reduce_scatter(const float* in, float* out_block, std::size_t n) override {
    if (NcclComm* c = nccl())
      c->reduce_scatter(in, out_block, n, stream_);
    else if (in != out_block)
      FS_CUDA_CHECK(cudaMemcpyAsync(out_block, in, n * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
  }
  void all_gather(float* data, std::size_t n) override {
    if (NcclComm* c = nccl()) c->all_gather(data, n, stream_);
  }
  void send(DeviceBuffer&& data, int peer, int tag) override {
    Buffer staged(data.size());
    be_.download(staged.data(), data.data(), data.size());  // waits for the tensor's producer
    group_.send(std::move(staged), peer, tag);
    data.release();
  }
  void recv(float* data, std::size_t n, int peer, int tag) override {
    Buffer staged(n);
    group_.recv(staged.data(), n, peer, tag);
    be_.upload(data, staged.data(), n);
  }
  void wait_sends() override { group_.wait_sends(); }

 private:
  NcclComm* nccl() {
    if (group_.size() == 1) return nullptr;
    if (!nccl_) {
      auto c = NcclComm::create(group_);
      if (!c) throw std::runtime_error(c.error().message());
      nccl_ = std::make_unique<NcclComm>(std::move(*c));
    }
    return nccl_.get();
  }
  Comm& group_;
  Backend& be_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<NcclComm> nccl_;
};

// Device scratch that grows to the largest request and is reused (ids, targets, losses, scales).
template <class T>
struct Scratch {
  T* p = nullptr;
  std::size_t cap = 0;
  T* get(std::size_t n, cudaStream_t s) {
    if (n > cap) {
      if (p) FS_CUDA_CHECK(cudaFreeAsync(p, s));
      p = nullptr;  // freed: if the allocation below fails, nothing is freed twice
      cap = 0;
      FS_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&p), n * sizeof(T), s));
      cap = n;
    }
    return p;
  }
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {}
  ~CudaBackend() override {
    // Nothing may throw here: errors of the teardown are ignored (the process is ending or the
    // device is already in an error state).
    static_cast<void>(cudaSetDevice(device_));
    if (stream_) static_cast<void>(cudaStreamSynchronize(stream_));
    for (void* p : {static_cast<void*>(ids_.p), static_cast<void*>(losses_.p), static_cast<void*>(rows_.p),
                    static_cast<void*>(flag_.p), static_cast<void*>(bf_a_.p), static_cast<void*>(bf_b_.p),
                    static_cast<void*>(bf_c_.p)})
      if (p) static_cast<void>(cudaFree(p));
    for (cudaEvent_t e : events_) static_cast<void>(cudaEventDestroy(e));
    if (cublas_) static_cast<void>(cublasDestroy(cublas_));
    if (stream_) static_cast<void>(cudaStreamDestroy(stream_));
  }

  Status init() {
    if (const cudaError_t e = cudaSetDevice(device_); e != cudaSuccess)
      return Error("backend cuda: cudaSetDevice(" + std::to_string(device_) + "): " + cudaGetErrorString(e));
    cudaDeviceProp prop{};
    if (const cudaError_t e = cudaGetDeviceProperties(&prop, device_); e != cudaSuccess)
      return Error(std::string("backend cuda: cudaGetDeviceProperties: ") + cudaGetErrorString(e));
    name_ = prop.name;
    memory_gib_ = static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0);
    try {
      FS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      FS_CUBLAS_CHECK(cublasCreate(&cublas_));
      FS_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
      FS_CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
      // Freed blocks stay in the device's pool for the next micro-batch instead of going back to
      // the driver at each synchronisation.
      cudaMemPool_t pool = nullptr;
      FS_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device_));
      std::uint64_t keep = UINT64_MAX;
      FS_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    } catch (const kernels::CudaError& e) {
      return Error(std::string("backend cuda: ") + e.what());
    }
    return Status::Ok();
  }

  std::string name() const override { return "cuda"; }
  std::string describe() const override {
    char mem[32];
    std::snprintf(mem, sizeof mem, "%.0f", memory_gib_);
    return "cuda (" + name_ + ", " + mem + " GiB, device " + std::to_string(device_) + "; cuBLAS GEMMs " +
           labels().gemm + ", fp32 tensors)";
  }
  bool host_memory() const override { return false; }
  std::string compute_precision() const override { return labels().compute; }
  Status check_plan(const Plan& plan) const override {
    if (plan.precision == Precision::kFp8)
      return Error(
          "plan: /precision: fp8 GEMMs are not implemented on the cuda backend (bf16, fp16 and fp32 run)");
    if (!plan.kernel_fusion)
      return Error(
          "plan: /kernel_fusion: the cuda backend runs fused kernels only so far (the CPU backend runs the "
          "eager chains)");
    return Status::Ok();
  }
  std::vector<Precision> gemm_precisions() const override { return {Precision::kBf16, Precision::kFp16}; }
  void set_gemm_precision(Precision p) override {
    gemm_precision_ = p;
    FS_CUBLAS_CHECK(
        cublasSetMathMode(cublas_, p == Precision::kFp16 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  }

  float* allocate(std::size_t n) override {
    void* p = nullptr;
    FS_CUDA_CHECK(cudaMallocAsync(&p, n * sizeof(float), stream_));
    return static_cast<float*>(p);
  }
  // Called from DeviceBuffer's destructor: never throws (after a device error the process is
  // reporting that error, and a second one from the teardown would end it without the message).
  void deallocate(float* p) override { static_cast<void>(cudaFreeAsync(p, stream_)); }
  void fill_zero(float* p, std::size_t n) override {
    if (n > 0) FS_CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(float), stream_));
  }
  void copy(float* dst, const float* src, std::size_t n) override {
    if (n > 0) FS_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
  }
  // From pageable host memory the copy is staged before the call returns, so `host_src` may go.
  void upload(float* dst, const float* host_src, std::size_t n) override {
    if (n > 0)
      FS_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, n * sizeof(float), cudaMemcpyHostToDevice, stream_));
  }
  void download(float* host_dst, const float* src, std::size_t n) override {
    if (n == 0) return;
    FS_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    FS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void synchronize() override { FS_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  // The default pool's high-water mark: every tensor, scratch and cuBLAS workspace allocated
  // stream-ordered (cuBLAS's own handle memory and the CUDA context are outside it).
  double peak_device_bytes() const override {
    cudaMemPool_t pool = nullptr;
    std::uint64_t high = 0;
    if (cudaDeviceGetDefaultMemPool(&pool, device_) != cudaSuccess ||
        cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high) != cudaSuccess)
      return 0;
    return static_cast<double>(high);
  }

  Result<std::unique_ptr<Backend>> another() const override { return make_cuda_backend(device_); }
  Result<std::unique_ptr<GroupComm>> make_comm(Comm& group) override {
    return std::unique_ptr<GroupComm>(new CudaComm(group, *this, stream_));
  }

  void reset_marks() override { used_ = 0; }
  int mark() override {
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      FS_CUDA_CHECK(cudaEventCreate(&e));
      events_.push_back(e);
    }
    FS_CUDA_CHECK(cudaEventRecord(events_[used_], stream_));
    return static_cast<int>(used_++);
  }
  double seconds(int m) override {
    float ms = 0;
    FS_CUDA_CHECK(cudaEventElapsedTime(&ms, events_.front(), events_[static_cast<std::size_t>(m)]));
    return ms * 1e-3;
  }

  void gemm_forward(float* out, const float* in, const float* w, int rows, int k, int n) override {
    if (gemm_precision_ != Precision::kBf16) {
      kernels::matmul_forward(out, in, w, rows, k, n, cublas_);
      return;
    }
    const auto in_n = static_cast<std::size_t>(rows) * k, w_n = static_cast<std::size_t>(k) * n;
    kernels::matmul_forward(out, to_bf16(bf_a_, in, in_n), to_bf16(bf_b_, w, w_n), rows, k, n, cublas_);
  }
  void gemm_backward(float* din, float* dw, const float* dout, const float* in, const float* w, int rows,
                     int k, int n) override {
    if (gemm_precision_ != Precision::kBf16) {
      kernels::matmul_backward(din, dw, dout, in, w, rows, k, n, cublas_);
      return;
    }
    const auto in_n = static_cast<std::size_t>(rows) * k, w_n = static_cast<std::size_t>(k) * n,
               out_n = static_cast<std::size_t>(rows) * n;
    kernels::matmul_backward(din, dw, to_bf16(bf_c_, dout, out_n), to_bf16(bf_a_, in, in_n),
                             to_bf16(bf_b_, w, w_n), rows, k, n, cublas_);
  }
  void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int rows, int cols, float eps,
                       bool fused) override {
    require_fused(fused);
    kernels::rmsnorm_forward(out, rstd, x, w, rows, cols, eps, stream_);
  }
  void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w,
                        const float* rstd, int rows, int cols, bool fused) override {
    require_fused(fused);
    kernels::rmsnorm_backward(dx, dw, dout, x, w, rstd, rows, cols, stream_);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b,
                         int rows, int cols, float eps) override {
    kernels::layernorm_forward(out, mean, rstd, x, w, b, rows, cols, eps, stream_);
  }
  void layernorm_backward(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w,
                          const float* mean, const float* rstd, int rows, int cols) override {
    kernels::layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, rows, cols, stream_);
  }
  void rope(float* qkv, const AttentionShape& s, float theta, bool inverse) override {
    kernels::rope(qkv, s, theta, inverse, stream_);
  }
  void attention_forward(float* out, float* probs, const float* qkv, const AttentionShape& s) override {
    kernels::attention_forward(out, probs, qkv, s, stream_);
  }
  std::size_t attention_scratch(const AttentionShape& s) const override { return 2 * s.score_elems(); }
  void attention_backward(float* dqkv, float* scratch, const float* dout, const float* probs,
                          const float* qkv, const AttentionShape& s) override {
    kernels::attention_backward(dqkv, scratch, scratch + s.score_elems(), dout, probs, qkv, s, stream_);
  }
  void attention_scores(float* scores, const float* qkv, const AttentionShape& s) override {
    kernels::attention_scores(scores, qkv, s, stream_);
  }
  void causal_softmax_forward(float* probs, const float* scores, const AttentionShape& s) override {
    kernels::causal_softmax_forward(probs, scores, s, stream_);
  }
  void attention_values(float* out, const float* probs, const float* qkv, const AttentionShape& s) override {
    kernels::attention_values(out, probs, qkv, s, stream_);
  }
  void attention_values_backward(float* dprobs, float* dqkv, const float* dout, const float* probs,
                                 const float* qkv, const AttentionShape& s) override {
    kernels::attention_values_backward(dprobs, dqkv, dout, probs, qkv, s, stream_);
  }
  void causal_softmax_backward(float* dscores, const float* dprobs, const float* probs,
                               const AttentionShape& s) override {
    kernels::causal_softmax_backward(dscores, dprobs, probs, s, stream_);
  }
  void attention_scores_backward(float* dqkv, const float* dscores, const float* qkv,
                                 const AttentionShape& s) override {
    kernels::attention_scores_backward(dqkv, dscores, qkv, s, stream_);
  }
  void add(float* out, const float* a, const float* b, std::size_t n) override {
    kernels::residual_forward(out, a, b, n, stream_);
  }
  void swiglu_forward(float* out, const float* gate_up, int rows, int cols, bool fused) override {
    require_fused(fused);
    kernels::swiglu_forward(out, gate_up, rows, cols, stream_);
  }
  void swiglu_backward(float* dgate_up, const float* gate_up, const float* dout, int rows, int cols,
                       bool fused) override {
    require_fused(fused);
    kernels::swiglu_backward(dgate_up, gate_up, dout, rows, cols, stream_);
  }
  void gelu_forward(float* out, const float* x, int rows, int cols) override {
    kernels::bias_gelu_forward(out, x, nullptr, rows, cols, stream_);
  }
  void gelu_backward(float* dx, const float* x, const float* dout, int rows, int cols) override {
    kernels::bias_gelu_backward(dx, nullptr, x, nullptr, dout, rows, cols, stream_);
  }
  void embedding_forward(float* out, const float* table, const int* host_ids, int rows, int hidden) override {
    kernels::embedding_forward(out, table, upload_ints(host_ids, rows), rows, hidden, stream_);
  }
  void embedding_backward(float* dtable, const float* dout, const int* host_ids, int rows,
                          int hidden) override {
    kernels::embedding_backward(dtable, dout, upload_ints(host_ids, rows), rows, hidden, stream_);
  }
  double crossentropy(float* dlogits, const float* logits, const int* host_targets, float dloss, int rows,
                      int vocab) override {
    const int* targets = upload_ints(host_targets, rows);
    float* losses = losses_.get(static_cast<std::size_t>(rows), stream_);
    kernels::crossentropy_forward(losses, logits, targets, rows, vocab, stream_);
    kernels::crossentropy_backward(dlogits, logits, targets, dloss, rows, vocab, stream_);
    host_losses_.resize(static_cast<std::size_t>(rows));
    download(host_losses_.data(), losses, host_losses_.size());
    double sum = 0;
    for (float l : host_losses_) sum += l;
    return sum;
  }
  void softmax_row_stats(float* row_max, float* row_sum, float* exps, const float* logits, int rows,
                         int cols) override {
    kernels::softmax_row_stats(row_max, row_sum, exps, logits, rows, cols, stream_);
  }
  void target_logits(float* out, const float* logits, const int* host_targets, int first, int rows,
                     int cols) override {
    kernels::target_logits(out, logits, upload_ints(host_targets, rows), first, rows, cols, stream_);
  }
  void scale_rows(float* x, const float* host_scale, int rows, int cols) override {
    float* scale = rows_.get(static_cast<std::size_t>(rows), stream_);
    upload(scale, host_scale, static_cast<std::size_t>(rows));
    kernels::scale_rows(x, scale, rows, cols, stream_);
  }
  void add_at_targets(float* x, const int* host_targets, int first, int rows, int cols,
                      float value) override {
    kernels::add_at_targets(x, upload_ints(host_targets, rows), first, rows, cols, value, stream_);
  }
  void adamw(float* params, float* m, float* v, const float* grads, std::size_t n,
             const kernels::AdamWConfig& c, int step, float grad_scale) override {
    kernels::adamw(params, m, v, grads, n, c, step, grad_scale, stream_);
  }
  bool has_overflow(const float* grads, std::size_t n, float limit) override {
    int* flag = flag_.get(1, stream_);
    kernels::has_overflow(grads, n, limit, flag, stream_);
    int host = 0;
    FS_CUDA_CHECK(cudaMemcpyAsync(&host, flag, sizeof host, cudaMemcpyDeviceToHost, stream_));
    FS_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return host != 0;
  }

 private:
  // bf16 GEMMs between fp32 tensors round each operand into a bf16 scratch first (one more pass
  // over it: what autocast does), then run on bf16 tensor cores with fp32 accumulation and output.
  const __nv_bfloat16* to_bf16(Scratch<__nv_bfloat16>& s, const float* x, std::size_t n) {
    __nv_bfloat16* p = s.get(n, stream_);
    kernels::convert(p, x, n, stream_);
    return p;
  }
  // What the GEMM precision reads as: in the banner's GEMM label, and as the run's arithmetic.
  struct Labels {
    const char* gemm;
    const char* compute;
  };
  Labels labels() const {
    switch (gemm_precision_) {
      case Precision::kBf16:
        return {"bf16 operands", "fp32 tensors, bf16 GEMM operands"};
      case Precision::kFp16:
        return {"TF32", "fp32 tensors, TF32 GEMMs"};
      default:
        return {"fp32", "fp32"};
    }
  }
  static void require_fused(bool fused) {
    if (!fused) throw std::logic_error("the CUDA backend runs fused norm and SwiGLU kernels only");
  }
  // Host ints (token ids, targets) into device scratch. The staged copy lets the caller's vector go
  // as soon as this returns; the scratch is reused only by work queued after this on the same
  // stream, so the kernel that reads it has its data.
  const int* upload_ints(const int* host, int n) {
    int* d = ids_.get(static_cast<std::size_t>(n), stream_);
    if (n > 0)
      FS_CUDA_CHECK(cudaMemcpyAsync(d, host, static_cast<std::size_t>(n) * sizeof(int),
                                    cudaMemcpyHostToDevice, stream_));
    return d;
  }

  int device_ = 0;
  std::string name_;
  double memory_gib_ = 0;
  Precision gemm_precision_ = Precision::kFp32;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::vector<cudaEvent_t> events_;
  std::size_t used_ = 0;
  Scratch<int> ids_, flag_;
  Scratch<float> losses_, rows_;
  Scratch<__nv_bfloat16> bf_a_, bf_b_, bf_c_;
  std::vector<float> host_losses_;
};

}  // namespace

Result<std::unique_ptr<Backend>> make_cuda_backend(int device) {
  auto be = std::make_unique<CudaBackend>(device);
  FS_RETURN_IF_ERROR(be->init());
  return std::unique_ptr<Backend>(std::move(be));
}

}  // namespace foresight::runtime

extern "C" __attribute__((visibility("default"))) const foresight::runtime::CudaBackendPlugin*
foresight_cuda_backend_plugin() {
  static const foresight::runtime::CudaBackendPlugin plugin{foresight::runtime::cuda_device_count,
                                                            foresight::runtime::cuda_visibility,
                                                            foresight::runtime::make_cuda_backend};
  return &plugin;
}

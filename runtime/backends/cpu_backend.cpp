// The CPU backend: host memory, Eigen GEMMs and the vectorised kernels of cpu_fast.h (the
// references of kernels/reference.h where no fast path exists), MPI groups. Synchronous: every
// call has finished when it returns.
#include <fmt/core.h>

#include <Eigen/Core>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "runtime/backends/backend.h"
#include "runtime/backends/cpu_fast.h"

namespace foresight::runtime {

namespace {

using kernels::AttentionShape;

// The MPI group itself: host memory is what MPI reads and writes.
class CpuComm final : public GroupComm {
 public:
  CpuComm(Comm& c, bool separate) : c_(c), separate_(separate) {}
  void all_reduce(float* data, std::size_t n) override { c_.all_reduce(data, n); }
  void reduce_scatter(const float* in, float* out_block, std::size_t n) override {
    c_.reduce_scatter(in, out_block, n);
  }
  void all_gather(float* data, std::size_t n) override { c_.all_gather(data, n); }
  void send(DeviceBuffer&& data, int peer, int tag) override {
    if (separate_)
      c_.send(Buffer(data.data(), data.data() + data.size()), peer, tag);
    else
      c_.send(data.take(), peer, tag);
    data.release();
  }
  void recv(float* data, std::size_t n, int peer, int tag) override { c_.recv(data, n, peer, tag); }
  void wait_sends() override { c_.wait_sends(); }

 private:
  Comm& c_;
  bool separate_ = false;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(bool separate) : separate_(separate) {}
  std::string name() const override { return "cpu"; }
  std::string describe() const override {
    return fmt::format("cpu (Eigen {}.{}.{} GEMMs, fp32{})", EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION,
                       EIGEN_MINOR_VERSION, separate_ ? "; tensors in separately managed memory" : "");
  }
  bool host_memory() const override { return !separate_; }
  bool host_addressable() const override { return true; }

  // Blocks aligned as Buffer's are, so Eigen takes the same SIMD paths on them.
  float* allocate(std::size_t n) override {
    return static_cast<float*>(::operator new(n * sizeof(float), Aligned64<float>::kAlign));
  }
  void deallocate(float* p) override { ::operator delete(p, Aligned64<float>::kAlign); }
  void fill_zero(float* p, std::size_t n) override { std::fill(p, p + n, 0.0f); }
  void copy(float* dst, const float* src, std::size_t n) override { std::copy(src, src + n, dst); }
  void upload(float* dst, const float* host_src, std::size_t n) override { copy(dst, host_src, n); }
  void download(float* host_dst, const float* src, std::size_t n) override { copy(host_dst, src, n); }
  void synchronize() override {}

  Result<std::unique_ptr<Backend>> another() const override { return make_cpu_backend(separate_); }
  Result<std::unique_ptr<GroupComm>> make_comm(Comm& group) override {
    return std::unique_ptr<GroupComm>(new CpuComm(group, separate_));
  }

  void reset_marks() override { marks_.clear(); }
  int mark() override {
    marks_.push_back(std::chrono::steady_clock::now());
    return static_cast<int>(marks_.size()) - 1;
  }
  double seconds(int m) override {
    return std::chrono::duration<double>(marks_[static_cast<std::size_t>(m)] - marks_.front()).count();
  }

  void gemm_forward(float* out, const float* in, const float* w, int rows, int k, int n) override {
    runtime::gemm_forward(out, in, w, rows, k, n);
  }
  void gemm_backward(float* din, float* dw, const float* dout, const float* in, const float* w, int rows,
                     int k, int n) override {
    runtime::gemm_backward(din, dw, dout, in, w, rows, k, n);
  }
  void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int rows, int cols, float eps,
                       bool fused) override {
    (fused ? rmsnorm_forward_fast : rmsnorm_forward_eager)(out, rstd, x, w, rows, cols, eps);
  }
  void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w,
                        const float* rstd, int rows, int cols, bool fused) override {
    (fused ? rmsnorm_backward_fast : rmsnorm_backward_eager)(dx, dw, dout, x, w, rstd, rows, cols);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b,
                         int rows, int cols, float eps) override {
    kernels::layernorm_forward_cpu(out, mean, rstd, x, w, b, rows, cols, eps);
  }
  void layernorm_backward(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w,
                          const float* mean, const float* rstd, int rows, int cols) override {
    kernels::layernorm_backward_cpu(dx, dw, db, dout, x, w, mean, rstd, rows, cols);
  }
  void rope(float* qkv, const AttentionShape& s, float theta, bool inverse) override {
    rope_.apply(qkv, s, theta, inverse);
  }
  void attention_forward(float* out, float* probs, const float* qkv, const AttentionShape& s) override {
    attention_forward_fast(out, probs, qkv, s);
  }
  std::size_t attention_scratch(const AttentionShape& s) const override {
    return static_cast<std::size_t>(s.seq) * s.seq;
  }
  void attention_backward(float* dqkv, float* scratch, const float* dout, const float* probs,
                          const float* qkv, const AttentionShape& s) override {
    attention_backward_fast(dqkv, scratch, dout, probs, qkv, s);
  }
  void attention_scores(float* scores, const float* qkv, const AttentionShape& s) override {
    kernels::attention_scores_cpu(scores, qkv, s);
  }
  void causal_softmax_forward(float* probs, const float* scores, const AttentionShape& s) override {
    kernels::causal_softmax_forward_cpu(probs, scores, s);
  }
  void attention_values(float* out, const float* probs, const float* qkv, const AttentionShape& s) override {
    kernels::attention_values_cpu(out, probs, qkv, s);
  }
  void attention_values_backward(float* dprobs, float* dqkv, const float* dout, const float* probs,
                                 const float* qkv, const AttentionShape& s) override {
    kernels::attention_values_backward_cpu(dprobs, dqkv, dout, probs, qkv, s);
  }
  void causal_softmax_backward(float* dscores, const float* dprobs, const float* probs,
                               const AttentionShape& s) override {
    kernels::causal_softmax_backward_cpu(dscores, dprobs, probs, s);
  }
  void attention_scores_backward(float* dqkv, const float* dscores, const float* qkv,
                                 const AttentionShape& s) override {
    kernels::attention_scores_backward_cpu(dqkv, dscores, qkv, s);
  }
  void add(float* out, const float* a, const float* b, std::size_t n) override {
    kernels::residual_forward_cpu(out, a, b, n);
  }
  void swiglu_forward(float* out, const float* gate_up, int rows, int cols, bool fused) override {
    (fused ? swiglu_forward_fast : swiglu_forward_eager)(out, gate_up, rows, cols);
  }
  void swiglu_backward(float* dgate_up, const float* gate_up, const float* dout, int rows, int cols,
                       bool fused) override {
    (fused ? swiglu_backward_fast : swiglu_backward_eager)(dgate_up, gate_up, dout, rows, cols);
  }
  void gelu_forward(float* out, const float* x, int rows, int cols) override {
    gelu_forward_fast(out, x, static_cast<std::size_t>(rows) * cols);
  }
  void gelu_backward(float* dx, const float* x, const float* dout, int rows, int cols) override {
    gelu_backward_fast(dx, x, dout, static_cast<std::size_t>(rows) * cols);
  }
  void embedding_forward(float* out, const float* table, const int* host_ids, int rows, int hidden) override {
    kernels::embedding_forward_cpu(out, table, host_ids, rows, hidden);
  }
  void embedding_backward(float* dtable, const float* dout, const int* host_ids, int rows,
                          int hidden) override {
    kernels::embedding_backward_cpu(dtable, dout, host_ids, rows, hidden);
  }
  double crossentropy(float* dlogits, const float* logits, const int* host_targets, float dloss, int rows,
                      int vocab) override {
    losses_.resize(static_cast<std::size_t>(rows));
    return crossentropy_fused(losses_.data(), dlogits, logits, host_targets, dloss, rows, vocab);
  }
  void softmax_row_stats(float* row_max, float* row_sum, float* exps, const float* logits, int rows,
                         int cols) override {
    runtime::softmax_row_stats(row_max, row_sum, exps, logits, rows, cols);
  }
  void target_logits(float* out, const float* logits, const int* host_targets, int first, int rows,
                     int cols) override {
    kernels::target_logits_cpu(out, logits, host_targets, first, rows, cols);
  }
  void scale_rows(float* x, const float* host_scale, int rows, int cols) override {
    runtime::scale_rows(x, host_scale, rows, cols);
  }
  void add_at_targets(float* x, const int* host_targets, int first, int rows, int cols,
                      float value) override {
    kernels::add_at_targets_cpu(x, host_targets, first, rows, cols, value);
  }
  void adamw(float* params, float* m, float* v, const float* grads, std::size_t n,
             const kernels::AdamWConfig& c, int step, float grad_scale) override {
    adamw_fast(params, m, v, grads, n, c, step, grad_scale);
  }
  bool has_overflow(const float* grads, std::size_t n, float limit) override {
    return kernels::has_overflow_cpu(grads, n, limit);
  }

 private:
  bool separate_ = false;
  std::vector<std::chrono::steady_clock::time_point> marks_;
  Buffer losses_;
  RopeTable rope_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(bool separate_memory) {
  return std::make_unique<CpuBackend>(separate_memory);
}

}  // namespace foresight::runtime

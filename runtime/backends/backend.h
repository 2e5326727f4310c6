// The runtime's backends behind one interface. The trainer (runtime/training/trainer.h) keeps the schedule,
// the op graph and every host-side decision; a Backend owns the memory its tensors live in, runs
// the kernels on them and moves them between ranks. The CPU backend keeps tensors in host memory
// and computes with Eigen and the reference kernels (runtime/backends/cpu_fast.h, kernels/reference.h),
// over MPI; the CUDA backend (runtime/backends/cuda_backend.h, CUDA builds only) keeps them in GPU memory
// and computes with cuBLAS and kernels/*.cu, over NCCL.
//
//   auto be = make_cpu_backend();
//   DeviceBuffer x(be.get());
//   x.resize(rows * cols);                       // zero-filled, as std::vector grows
//   be->rmsnorm_forward(out.data(), rstd.data(), x.data(), w, rows, cols, 1e-5f, true);
//
// Pointers passed to a Backend's kernels are its memory (DeviceBuffer::data() and offsets into
// it); pointers named `host_*` are host memory. Kernels keep the contracts of kernels/reference.h
// (fp32, row-major, weight gradients accumulated). On an asynchronous backend a kernel returns once
// queued; anything that returns a value to the host (a loss, an overflow flag, download) waits.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/reference.h"
#include "runtime/backends/buffer.h"
#include "runtime/communication/comm.h"
#include "sim/core/status.h"
#include "sim/spec/plan.h"

namespace foresight::runtime {

class Backend;

// A resizable fp32 tensor in a backend's memory, with std::vector's semantics: resize keeps the
// prefix and zero-fills what it adds, release frees. On a host backend (or unbound) the storage is
// a Buffer, so the CPU path allocates and computes exactly as it did before backends existed.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(Backend* backend = nullptr) { bind(backend); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept { swap(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      swap(o);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void bind(Backend* backend);
  float* data() { return on_host_ ? host_.data() : dev_; }
  const float* data() const { return on_host_ ? host_.data() : dev_; }
  std::size_t size() const { return on_host_ ? host_.size() : n_; }
  bool empty() const { return size() == 0; }
  void resize(std::size_t n);
  void assign_zero(std::size_t n);        // n elements, all zero
  void zero();                            // every element to zero
  void copy_from(const DeviceBuffer& o);  // this = o (resized to its size)
  void release();
  void swap(DeviceBuffer& o) noexcept {
    std::swap(be_, o.be_);
    std::swap(on_host_, o.on_host_);
    host_.swap(o.host_);
    std::swap(dev_, o.dev_);
    std::swap(n_, o.n_);
    std::swap(cap_, o.cap_);
  }
  // Host backends: the storage itself; adopt() replaces it and take() hands it over (the
  // pipeline's non-blocking sends), both counted in the backend's live bytes.
  const Buffer& host() const { return host_; }
  void adopt(Buffer&& b);
  Buffer take();

 private:
  std::size_t held_bytes() const { return (on_host_ ? host_.capacity() : cap_) * sizeof(float); }
  void account(std::size_t before);  // tells the backend what the storage grew or shrank by

  Backend* be_ = nullptr;
  bool on_host_ = true;  // be_ is null or keeps its tensors in host memory (fixed by bind)
  Buffer host_;
  float* dev_ = nullptr;
  std::size_t n_ = 0, cap_ = 0;
};

// Sum-collectives and pipeline transfers of one group on a backend's memory. The CPU backend's
// run over the MPI group (runtime/communication/comm.h); the CUDA backend's over an NCCL twin of it.
class GroupComm {
 public:
  virtual ~GroupComm() = default;
  virtual void all_reduce(float* data, std::size_t n) = 0;
  // `n` divisible by size(): this rank's block of the sum lands in `out_block`.
  virtual void reduce_scatter(const float* in, float* out_block, std::size_t n) = 0;
  // In place: every rank contributes block rank() of n / size() elements.
  virtual void all_gather(float* data, std::size_t n) = 0;
  // Pipeline transfers (world group): the send takes the buffer over until wait_sends (it may
  // complete later); the receive blocks until the data is in `data`.
  virtual void send(DeviceBuffer&& data, int peer, int tag) = 0;
  virtual void recv(float* data, std::size_t n, int peer, int tag) = 0;
  virtual void wait_sends() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda"
  // A short description for the run's banner (library versions, device, precision).
  virtual std::string describe() const = 0;
  // Its arithmetic, for a run's metadata: "fp32", or what its GEMMs round to among fp32 tensors.
  virtual std::string compute_precision() const { return "fp32"; }
  // True when tensors live in host memory (DeviceBuffer keeps a Buffer).
  virtual bool host_memory() const = 0;
  // True when the host may read and write the tensors through their pointers (the trainer's
  // host-side gradient transforms: compression, decayed accumulation, ARAdam).
  virtual bool host_addressable() const { return host_memory(); }
  // Empty when the backend runs everything `plan` asks of it; otherwise the reason, naming the field.
  virtual Status check_plan(const Plan&) const { return Status::Ok(); }
  // The precision of GEMM operands between the fp32 tensors: a GPU backend rounds them for its
  // tensor cores as a mixed-precision plan asks (bf16: bf16 operands; fp16: TF32 operands, the fp16
  // range kept by the loss scale; fp32: none), accumulating and writing in fp32. A no-op where
  // there is no such mode (the CPU computes in fp32).
  virtual void set_gemm_precision(Precision) {}
  // The precisions besides fp32 that set_gemm_precision runs differently (calibrate measures a
  // GEMM peak for each); empty where every precision computes in fp32.
  virtual std::vector<Precision> gemm_precisions() const { return {}; }

  // --- memory (used by DeviceBuffer when !host_memory()) ---------------------------------------
  virtual float* allocate(std::size_t n) = 0;  // uninitialised
  virtual void deallocate(float* p) = 0;       // never throws (DeviceBuffer calls it from its destructor)
  virtual void fill_zero(float* p, std::size_t n) = 0;
  virtual void copy(float* dst, const float* src, std::size_t n) = 0;
  virtual void upload(float* dst, const float* host_src, std::size_t n) = 0;
  virtual void download(float* host_dst, const float* src, std::size_t n) = 0;
  // Waits for everything queued (a no-op on a synchronous backend).
  virtual void synchronize() = 0;
  // The most device memory its tensors have held at once, in bytes (0 for a host backend, whose
  // tensors the process's resident memory counts).
  virtual double peak_device_bytes() const { return 0; }
  // The bytes its DeviceBuffers hold now (their capacities), as the trainer's measured memory
  // track samples them after each op.
  std::int64_t live_bytes() const { return live_bytes_; }
  void add_live_bytes(std::int64_t delta) { live_bytes_ += delta; }

  // A fresh backend of the same kind on the same device (a trainer takes ownership of its own).
  virtual Result<std::unique_ptr<Backend>> another() const = 0;

  // A communicator of `group` for this backend's memory (every member calls it together).
  virtual Result<std::unique_ptr<GroupComm>> make_comm(Comm& group) = 0;

  // --- timing: a step's per-op marks ----------------------------------------------------------
  // reset_marks starts a step; mark() records an instant on the backend's clock (a CUDA event on
  // the compute stream, the steady clock on the CPU) and returns its index; after synchronize(),
  // seconds(i) is mark i's time since the first mark of the step.
  virtual void reset_marks() = 0;
  virtual int mark() = 0;
  virtual double seconds(int mark) = 0;

  // --- kernels (kernels/reference.h contracts) ----------------------------------------------------
  virtual void gemm_forward(float* out, const float* in, const float* w, int rows, int k, int n) = 0;
  virtual void gemm_backward(float* din, float* dw, const float* dout, const float* in, const float* w,
                             int rows, int k, int n) = 0;
  // `fused` false runs the eager chain of passes (kernel fusion off).
  virtual void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int rows, int cols,
                               float eps, bool fused) = 0;
  virtual void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w,
                                const float* rstd, int rows, int cols, bool fused) = 0;
  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w,
                                 const float* b, int rows, int cols, float eps) = 0;
  virtual void layernorm_backward(float* dx, float* dw, float* db, const float* dout, const float* x,
                                  const float* w, const float* mean, const float* rstd, int rows,
                                  int cols) = 0;
  virtual void rope(float* qkv, const kernels::AttentionShape& s, float theta, bool inverse) = 0;
  // Whole attention. The backward's scratch holds attention_scratch(s) floats.
  virtual void attention_forward(float* out, float* probs, const float* qkv,
                                 const kernels::AttentionShape& s) = 0;
  virtual std::size_t attention_scratch(const kernels::AttentionShape& s) const = 0;
  virtual void attention_backward(float* dqkv, float* scratch, const float* dout, const float* probs,
                                  const float* qkv, const kernels::AttentionShape& s) = 0;
  // The unfused steps (scores, softmax, values) and their backwards.
  virtual void attention_scores(float* scores, const float* qkv, const kernels::AttentionShape& s) = 0;
  virtual void causal_softmax_forward(float* probs, const float* scores,
                                      const kernels::AttentionShape& s) = 0;
  virtual void attention_values(float* out, const float* probs, const float* qkv,
                                const kernels::AttentionShape& s) = 0;
  virtual void attention_values_backward(float* dprobs, float* dqkv, const float* dout, const float* probs,
                                         const float* qkv, const kernels::AttentionShape& s) = 0;
  virtual void causal_softmax_backward(float* dscores, const float* dprobs, const float* probs,
                                       const kernels::AttentionShape& s) = 0;
  virtual void attention_scores_backward(float* dqkv, const float* dscores, const float* qkv,
                                         const kernels::AttentionShape& s) = 0;
  // out = a + b (out may alias a or b).
  virtual void add(float* out, const float* a, const float* b, std::size_t n) = 0;
  virtual void swiglu_forward(float* out, const float* gate_up, int rows, int cols, bool fused) = 0;
  virtual void swiglu_backward(float* dgate_up, const float* gate_up, const float* dout, int rows, int cols,
                               bool fused) = 0;
  virtual void gelu_forward(float* out, const float* x, int rows, int cols) = 0;
  virtual void gelu_backward(float* dx, const float* x, const float* dout, int rows, int cols) = 0;
  virtual void embedding_forward(float* out, const float* table, const int* host_ids, int rows,
                                 int hidden) = 0;
  virtual void embedding_backward(float* dtable, const float* dout, const int* host_ids, int rows,
                                  int hidden) = 0;
  // The loss of each row and, in the same call, the logits' gradient (times dloss); returns the
  // sum of the rows' losses.
  virtual double crossentropy(float* dlogits, const float* logits, const int* host_targets, float dloss,
                              int rows, int vocab) = 0;
  // The vocabulary-parallel cross-entropy's pieces (kernels/reference.h): a slice's row maxima and
  // sums of exponentials (exponentials into `exps`), each row's target logit where this slice
  // holds it, rows scaled by host-computed factors, and `value` added at the targets.
  virtual void softmax_row_stats(float* row_max, float* row_sum, float* exps, const float* logits, int rows,
                                 int cols) = 0;
  virtual void target_logits(float* out, const float* logits, const int* host_targets, int first, int rows,
                             int cols) = 0;
  virtual void scale_rows(float* x, const float* host_scale, int rows, int cols) = 0;
  virtual void add_at_targets(float* x, const int* host_targets, int first, int rows, int cols,
                              float value) = 0;
  virtual void adamw(float* params, float* m, float* v, const float* grads, std::size_t n,
                     const kernels::AdamWConfig& c, int step, float grad_scale) = 0;
  virtual bool has_overflow(const float* grads, std::size_t n, float limit) = 0;

 private:
  std::int64_t live_bytes_ = 0;
};

// The CPU backend (always built). With `separate_memory` its tensors are not Buffers but blocks it
// allocates, copies and frees itself, the way a device backend's are: tests run the trainer's
// device-memory paths (uploads, downloads, copies between tensors) on a machine without a GPU.
std::unique_ptr<Backend> make_cpu_backend(bool separate_memory = false);

// The backend `name` names: "cpu", "cuda", or "auto" (CUDA when this build has it and a GPU is
// visible, else the CPU). `local_rank` picks the GPU of a multi-GPU node. Errors name the reason
// (a build without CUDA, no GPU).
Result<std::unique_ptr<Backend>> make_backend(const std::string& name, int local_rank);

}  // namespace foresight::runtime

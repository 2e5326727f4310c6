// NCCL communicators of the CUDA backend, one GPU per rank: each is bootstrapped through the MPI
// communicator of the same group (its rank 0 makes NCCL's unique id, the group's all-gather of
// bytes hands it to every member), so the plan's TP, PP and DP groups get NCCL twins of the
// runtime's Comm groups. Collectives sum fp32 or bf16 device buffers asynchronously on the given
// stream (order them against the compute stream with events); errors throw
// kernels::CudaError naming the NCCL call and its message.
//
//   Comm tp = world.split(color, key);          // the MPI group (runtime/communication/comm.h)
//   auto nccl = NcclComm::create(tp);           // every member calls it, its device current
//   nccl->all_reduce(grad, n, stream);
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "runtime/communication/comm.h"
#include "sim/core/status.h"

struct ncclComm;

namespace foresight::runtime {

class NcclComm {
 public:
  // Collective over `group`: every member calls it with the GPU it uses current
  // (cudaSetDevice). Errors (no device, NCCL's own) come back as a Status naming the call.
  static Result<NcclComm> create(const Comm& group);
  ~NcclComm();  // ncclCommDestroy (after the queued work)
  NcclComm(NcclComm&&) noexcept;
  NcclComm& operator=(NcclComm&&) noexcept;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // In place, summed over the group.
  void all_reduce(float* data, std::size_t n, cudaStream_t stream) const;
  void all_reduce(__nv_bfloat16* data, std::size_t n, cudaStream_t stream) const;
  // `n` divisible by size(): this rank's block (rank-th of n / size) receives the reduced sum.
  void reduce_scatter(const float* in, float* out_block, std::size_t n, cudaStream_t stream) const;
  // In place: every rank contributes block rank() of `data` (n / size elements).
  void all_gather(float* data, std::size_t n, cudaStream_t stream) const;
  // Point to point (pipeline activations and gradients). A send and its peer's receive must be
  // issued in the same order on both sides, as NCCL requires.
  void send(const float* data, std::size_t n, int peer, cudaStream_t stream) const;
  void recv(float* data, std::size_t n, int peer, cudaStream_t stream) const;
  // Ends the communicator without waiting for its peers (a rank died): ncclCommAbort.
  void abort();

 private:
  NcclComm(ncclComm* comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
  ncclComm* comm_ = nullptr;
  int rank_ = 0, size_ = 1;
};

}  // namespace foresight::runtime

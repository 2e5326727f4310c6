// NCCL communicators bootstrapped through the runtime's MPI groups.
#include "runtime/communication/nccl_comm.h"

#include <nccl.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda_check.h"

namespace foresight::runtime {

namespace {

void check(ncclResult_t r, const char* expr, const char* file, int line) {
  if (r == ncclSuccess) return;
  throw kernels::CudaError(
      std::string(file) + ":" + std::to_string(line) + ": " + expr + " failed: " + ncclGetErrorString(r),
      static_cast<int>(r));
}

#define FS_NCCL_CHECK(expr) check((expr), #expr, __FILE__, __LINE__)

}  // namespace

Result<NcclComm> NcclComm::create(const Comm& group) {
  int device = -1;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess)
    return Error(std::string("NCCL communicator: no CUDA device (cudaGetDevice: ") + cudaGetErrorString(e) +
                 ")");
  // Rank 0's unique id reaches every member through the group's byte all-gather (the others
  // contribute nothing).
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (group.rank() == 0) {
    if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
      return Error(std::string("ncclGetUniqueId: ") + ncclGetErrorString(r));
  }
  std::vector<std::size_t> counts(static_cast<std::size_t>(group.size()), 0);
  counts[0] = sizeof id;
  std::vector<std::uint8_t> all(sizeof id);
  group.all_gather_bytes(reinterpret_cast<const std::uint8_t*>(&id), all.data(), counts);
  std::memcpy(&id, all.data(), sizeof id);
  ncclComm_t comm = nullptr;
  if (const ncclResult_t r = ncclCommInitRank(&comm, group.size(), id, group.rank()); r != ncclSuccess)
    return Error("ncclCommInitRank (rank " + std::to_string(group.rank()) + " of " +
                 std::to_string(group.size()) + ", device " + std::to_string(device) +
                 "): " + ncclGetErrorString(r));
  return NcclComm(comm, group.rank(), group.size());
}

NcclComm::~NcclComm() {
  if (comm_) static_cast<void>(ncclCommDestroy(comm_));
}

NcclComm::NcclComm(NcclComm&& o) noexcept
    : comm_(std::exchange(o.comm_, nullptr)), rank_(o.rank_), size_(o.size_) {}

NcclComm& NcclComm::operator=(NcclComm&& o) noexcept {
  if (this != &o) {
    if (comm_) static_cast<void>(ncclCommDestroy(comm_));
    comm_ = std::exchange(o.comm_, nullptr);
    rank_ = o.rank_;
    size_ = o.size_;
  }
  return *this;
}

void NcclComm::all_reduce(float* data, std::size_t n, cudaStream_t stream) const {
  FS_NCCL_CHECK(ncclAllReduce(data, data, n, ncclFloat32, ncclSum, comm_, stream));
}

void NcclComm::all_reduce(__nv_bfloat16* data, std::size_t n, cudaStream_t stream) const {
  FS_NCCL_CHECK(ncclAllReduce(data, data, n, ncclBfloat16, ncclSum, comm_, stream));
}

void NcclComm::reduce_scatter(const float* in, float* out_block, std::size_t n, cudaStream_t stream) const {
  FS_NCCL_CHECK(ncclReduceScatter(in, out_block, n / static_cast<std::size_t>(size_), ncclFloat32, ncclSum,
                                  comm_, stream));
}

void NcclComm::all_gather(float* data, std::size_t n, cudaStream_t stream) const {
  const std::size_t block = n / static_cast<std::size_t>(size_);
  FS_NCCL_CHECK(
      ncclAllGather(data + block * static_cast<std::size_t>(rank_), data, block, ncclFloat32, comm_, stream));
}

void NcclComm::send(const float* data, std::size_t n, int peer, cudaStream_t stream) const {
  FS_NCCL_CHECK(ncclSend(data, n, ncclFloat32, peer, comm_, stream));
}

void NcclComm::recv(float* data, std::size_t n, int peer, cudaStream_t stream) const {
  FS_NCCL_CHECK(ncclRecv(data, n, ncclFloat32, peer, comm_, stream));
}

void NcclComm::abort() {
  if (comm_) static_cast<void>(ncclCommAbort(std::exchange(comm_, nullptr)));
}

}  // namespace foresight::runtime

// Communicators of the runtime: the world and one sub-communicator per group kind of the plan (TP,
// DP, ...), over MPI when the build has it; a world of one rank otherwise. Collectives are blocking
// sum-reductions on fp32 buffers (and byte exchanges for compressed gradients); pipeline sends are
// non-blocking (their buffers are kept until `wait_sends`), receives blocking, so every schedule the workload
// lowers runs without deadlock.
//
//   Comm world = Comm::world();
//   Comm tp = world.split(color, key);
//   tp.all_reduce(buf.data(), buf.size());
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/backends/buffer.h"
#include "sim/core/status.h"

namespace foresight::runtime {

class Comm {
 public:
  // Under an MPI launcher: MPI_COMM_WORLD (initialising MPI if needed). Started alone, or in a
  // build without MPI: a one-rank world that makes no MPI calls.
  static Comm world();
  // True when this process runs under an MPI launcher (mpirun, srun).
  static bool launched_by_mpi();
  // This process's rank among those of its node, as the launcher says (Open MPI, MPICH, Slurm):
  // a GPU per rank is picked by it. Without a launcher's word, `fallback`.
  static int local_rank(int fallback);
  // Ends the job on every rank (MPI_Abort), after the caller printed why.
  [[noreturn]] static void abort_job(int code);
  // MPI_Finalize (no-op without MPI).
  static void finalize();

  Comm();  // a one-rank communicator (no MPI calls): serial runs and in-process references
  ~Comm();
  Comm(Comm&&) noexcept;
  Comm& operator=(Comm&&) noexcept;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Ranks with the same color form a communicator, ordered by key.
  Comm split(int color, int key) const;

  void all_reduce(float* data, std::size_t n) const;
  void all_reduce(double* data, std::size_t n) const;
  void all_reduce_max(float* data, std::size_t n) const;
  void all_reduce_max(double* data, std::size_t n) const;
  // `n` divisible by size(): this rank's block (rank-th of n / size) receives the reduced sum.
  void reduce_scatter(const float* in, float* out_block, std::size_t n) const;
  // Every rank contributes block `rank()` of `data` (n / size elements) in place.
  void all_gather(float* data, std::size_t n) const;
  void barrier() const;
  // Byte payloads of the compressed gradient reduction (runtime/communication/grad_compression.h); every rank
  // passes the same count vectors. all_to_all_bytes: `send` holds, in rank order, send_counts[j]
  // bytes for rank j; `recv` receives recv_counts[j] bytes from rank j, in rank order.
  // all_gather_bytes: rank j's counts[j] bytes (this rank's from `mine`) land in `all`, in rank
  // order. Throws std::length_error past MPI's int counts.
  void all_to_all_bytes(const std::uint8_t* send, const std::vector<std::size_t>& send_counts,
                        std::uint8_t* recv, const std::vector<std::size_t>& recv_counts) const;
  void all_gather_bytes(const std::uint8_t* mine, std::uint8_t* all,
                        const std::vector<std::size_t>& counts) const;
  // Gathers variable-length byte blobs at rank 0 (empty result elsewhere).
  std::vector<std::string> gather_bytes(const std::string& mine) const;
  // Rank 0's `value` on every rank (the others' arguments are ignored).
  std::string broadcast_bytes(const std::string& value) const;

  void send(Buffer data, int peer, int tag);
  void recv(float* data, std::size_t n, int peer, int tag) const;
  void send_blocking(const float* data, std::size_t n, int peer, int tag) const;  // MPI_Send
  void wait_sends();
  static int max_tag();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, size_ = 1;
};

}  // namespace foresight::runtime

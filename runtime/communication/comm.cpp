// MPI implementation of Comm (and the one-rank world of a build without MPI).
#include "runtime/communication/comm.h"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "foresight/config.h"
#if FORESIGHT_HAVE_MPI
#include <mpi.h>
#endif

namespace foresight::runtime {

namespace {
// One rank: the exchanges are copies of this rank's own block.
void copy_own(const std::uint8_t* from, std::uint8_t* to, const std::vector<std::size_t>& counts) {
  if (!counts.empty() && counts[0] > 0) std::memcpy(to, from, counts[0]);
}
}  // namespace

#if FORESIGHT_HAVE_MPI
struct Comm::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  bool owned = false;
  struct Pending {
    MPI_Request request;
    Buffer buffer;
  };
  std::vector<std::unique_ptr<Pending>> sends;
  ~Impl() {
    if (owned && comm != MPI_COMM_NULL) {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Comm_free(&comm);
    }
  }
};
#else
struct Comm::Impl {};
#endif

Comm::Comm() : impl_(std::make_unique<Impl>()) {}
Comm::~Comm() = default;
Comm::Comm(Comm&&) noexcept = default;
Comm& Comm::operator=(Comm&&) noexcept = default;

bool Comm::launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
}

#if FORESIGHT_HAVE_MPI

Comm Comm::world() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  // A process started without a launcher is a world of one: no MPI (singleton init would start
  // Open MPI's runtime for nothing, and its allocations outlive the process).
  if (!initialized && !launched_by_mpi()) return Comm{};
  if (!initialized) MPI_Init(nullptr, nullptr);
  Comm c;
  c.impl_->comm = MPI_COMM_WORLD;
  MPI_Comm_rank(MPI_COMM_WORLD, &c.rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &c.size_);
  return c;
}

void Comm::abort_job(int code) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

void Comm::finalize() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
}

Comm Comm::split(int color, int key) const {
  Comm c;
  if (impl_->comm == MPI_COMM_NULL) return c;  // a one-rank communicator splits into itself
  MPI_Comm_split(impl_->comm, color, key, &c.impl_->comm);
  c.impl_->owned = true;
  MPI_Comm_rank(c.impl_->comm, &c.rank_);
  MPI_Comm_size(c.impl_->comm, &c.size_);
  return c;
}

void Comm::all_reduce(float* data, std::size_t n) const {
  if (size_ > 1) MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM, impl_->comm);
}
void Comm::all_reduce(double* data, std::size_t n) const {
  if (size_ > 1) MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_DOUBLE, MPI_SUM, impl_->comm);
}
void Comm::all_reduce_max(float* data, std::size_t n) const {
  if (size_ > 1) MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_MAX, impl_->comm);
}
void Comm::all_reduce_max(double* data, std::size_t n) const {
  if (size_ > 1) MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_DOUBLE, MPI_MAX, impl_->comm);
}
void Comm::reduce_scatter(const float* in, float* out_block, std::size_t n) const {
  if (size_ == 1) {
    std::memcpy(out_block, in, n * sizeof(float));
    return;
  }
  MPI_Reduce_scatter_block(in, out_block, static_cast<int>(n / size_), MPI_FLOAT, MPI_SUM, impl_->comm);
}
void Comm::all_gather(float* data, std::size_t n) const {
  if (size_ > 1)
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, static_cast<int>(n / size_), MPI_FLOAT,
                  impl_->comm);
}
void Comm::barrier() const {
  if (size_ > 1) MPI_Barrier(impl_->comm);
}

namespace {
std::vector<int> mpi_counts(const std::vector<std::size_t>& v, const char* what) {
  std::vector<int> out(v.size());
  std::size_t total = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    total += v[i];
    if (total > static_cast<std::size_t>(INT_MAX))
      throw std::length_error(std::string(what) + ": " + std::to_string(total) +
                              " bytes exceed MPI's int counts");
    out[i] = static_cast<int>(v[i]);
  }
  return out;
}
std::vector<int> mpi_displs(const std::vector<int>& counts) {
  std::vector<int> d(counts.size(), 0);
  for (std::size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}
}  // namespace

void Comm::all_to_all_bytes(const std::uint8_t* send, const std::vector<std::size_t>& send_counts,
                            std::uint8_t* recv, const std::vector<std::size_t>& recv_counts) const {
  if (send_counts.size() != static_cast<std::size_t>(size_) ||
      recv_counts.size() != static_cast<std::size_t>(size_))
    throw std::invalid_argument("all_to_all_bytes: one count per rank expected");
  if (size_ == 1) return copy_own(send, recv, send_counts);
  const std::vector<int> sc = mpi_counts(send_counts, "all_to_all_bytes"),
                         rc = mpi_counts(recv_counts, "all_to_all_bytes");
  const std::vector<int> sd = mpi_displs(sc), rd = mpi_displs(rc);
  MPI_Alltoallv(send, sc.data(), sd.data(), MPI_BYTE, recv, rc.data(), rd.data(), MPI_BYTE, impl_->comm);
}

void Comm::all_gather_bytes(const std::uint8_t* mine, std::uint8_t* all,
                            const std::vector<std::size_t>& counts) const {
  if (counts.size() != static_cast<std::size_t>(size_))
    throw std::invalid_argument("all_gather_bytes: one count per rank expected");
  if (size_ == 1) return copy_own(mine, all, counts);
  const std::vector<int> c = mpi_counts(counts, "all_gather_bytes"), d = mpi_displs(c);
  MPI_Allgatherv(mine, c[static_cast<std::size_t>(rank_)], MPI_BYTE, all, c.data(), d.data(), MPI_BYTE,
                 impl_->comm);
}

std::vector<std::string> Comm::gather_bytes(const std::string& mine) const {
  if (size_ == 1) return {mine};
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(rank_ == 0 ? size_ : 0), displs;
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, impl_->comm);
  std::string all;
  if (rank_ == 0) {
    displs.resize(size_);
    int total = 0;
    for (int r = 0; r < size_; ++r) {
      displs[r] = total;
      total += lens[r];
    }
    all.resize(static_cast<std::size_t>(total));
  }
  MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0, impl_->comm);
  std::vector<std::string> out;
  for (int r = 0; rank_ == 0 && r < size_; ++r) out.push_back(all.substr(displs[r], lens[r]));
  return out;
}

std::string Comm::broadcast_bytes(const std::string& value) const {
  if (size_ == 1) return value;
  if (value.size() > static_cast<std::size_t>(INT_MAX))
    throw std::length_error("broadcast_bytes: " + std::to_string(value.size()) +
                            " bytes exceed MPI's int counts");
  int len = rank_ == 0 ? static_cast<int>(value.size()) : 0;
  MPI_Bcast(&len, 1, MPI_INT, 0, impl_->comm);
  std::string out = rank_ == 0 ? value : std::string(static_cast<std::size_t>(len), '\0');
  MPI_Bcast(out.data(), len, MPI_CHAR, 0, impl_->comm);
  return out;
}

void Comm::send(Buffer data, int peer, int tag) {
  auto p = std::make_unique<Impl::Pending>();
  p->buffer = std::move(data);
  MPI_Isend(p->buffer.data(), static_cast<int>(p->buffer.size()), MPI_FLOAT, peer, tag, impl_->comm,
            &p->request);
  impl_->sends.push_back(std::move(p));
}
void Comm::send_blocking(const float* data, std::size_t n, int peer, int tag) const {
  MPI_Send(data, static_cast<int>(n), MPI_FLOAT, peer, tag, impl_->comm);
}
void Comm::recv(float* data, std::size_t n, int peer, int tag) const {
  MPI_Recv(data, static_cast<int>(n), MPI_FLOAT, peer, tag, impl_->comm, MPI_STATUS_IGNORE);
}
void Comm::wait_sends() {
  for (auto& p : impl_->sends) MPI_Wait(&p->request, MPI_STATUS_IGNORE);
  impl_->sends.clear();
}
int Comm::max_tag() {
  int* ub = nullptr;
  int flag = 0, initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return 32767;  // the MPI standard's guaranteed minimum
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  return flag && ub ? *ub : 32767;
}

#else  // one process, no MPI

Comm Comm::world() { return Comm{}; }
void Comm::abort_job(int code) { std::_Exit(code); }
void Comm::finalize() {}
Comm Comm::split(int, int) const { return Comm{}; }
void Comm::all_reduce(float*, std::size_t) const {}
void Comm::all_reduce(double*, std::size_t) const {}
void Comm::all_reduce_max(float*, std::size_t) const {}
void Comm::all_reduce_max(double*, std::size_t) const {}
void Comm::reduce_scatter(const float* in, float* out_block, std::size_t n) const {
  std::memcpy(out_block, in, n * sizeof(float));
}
void Comm::all_gather(float*, std::size_t) const {}
void Comm::barrier() const {}
void Comm::all_to_all_bytes(const std::uint8_t* send, const std::vector<std::size_t>& send_counts,
                            std::uint8_t* recv, const std::vector<std::size_t>&) const {
  copy_own(send, recv, send_counts);
}
void Comm::all_gather_bytes(const std::uint8_t* mine, std::uint8_t* all,
                            const std::vector<std::size_t>& counts) const {
  copy_own(mine, all, counts);
}
std::vector<std::string> Comm::gather_bytes(const std::string& mine) const { return {mine}; }
std::string Comm::broadcast_bytes(const std::string& value) const { return value; }
void Comm::send(Buffer, int, int) {
  throw std::logic_error("pipeline send in a one-rank world (this build has no MPI)");
}
void Comm::send_blocking(const float*, std::size_t, int, int) const {
  throw std::logic_error("send in a one-rank world (this build has no MPI)");
}
void Comm::recv(float*, std::size_t, int, int) const {
  throw std::logic_error("pipeline receive in a one-rank world (this build has no MPI)");
}
void Comm::wait_sends() {}
int Comm::max_tag() { return 32767; }

#endif

int Comm::local_rank(int fallback) {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return fallback;
}

}  // namespace foresight::runtime

// DeviceBuffer, and choosing a backend by name (--backend auto|cpu|cuda).
#include "runtime/backend.h"

#include <algorithm>

#if FORESIGHT_RUNTIME_CUDA
#include "runtime/cuda_backend.h"
#endif

namespace foresight::runtime {

// --- DeviceBuffer -------------------------------------------------------------------------------

void DeviceBuffer::bind(Backend* backend) {
  be_ = backend;
  on_host_ = be_ == nullptr || be_->host_memory();
}

void DeviceBuffer::resize(std::size_t n) {
  if (on_host_) {
    host_.resize(n);
    return;
  }
  if (n <= cap_) {
    if (n > n_) be_->fill_zero(dev_ + n_, n - n_);
    n_ = n;
    return;
  }
  float* p = be_->allocate(n);
  if (n_ > 0) be_->copy(p, dev_, n_);
  be_->fill_zero(p + n_, n - n_);
  if (dev_ != nullptr) be_->deallocate(dev_);
  dev_ = p;
  n_ = cap_ = n;
}

void DeviceBuffer::assign_zero(std::size_t n) {
  if (on_host_) {
    host_.assign(n, 0.0f);
    return;
  }
  resize(n);
  zero();
}

void DeviceBuffer::zero() {
  if (on_host_)
    std::fill(host_.begin(), host_.end(), 0.0f);
  else if (n_ > 0)
    be_->fill_zero(dev_, n_);
}

void DeviceBuffer::copy_from(const DeviceBuffer& o) {
  if (on_host_) {
    host_ = o.host_;
    return;
  }
  resize(o.n_);
  if (n_ > 0) be_->copy(dev_, o.dev_, n_);
}

void DeviceBuffer::release() {
  if (on_host_) {
    Buffer().swap(host_);
    return;
  }
  if (dev_ != nullptr) be_->deallocate(dev_);
  dev_ = nullptr;
  n_ = cap_ = 0;
}

Result<std::unique_ptr<Backend>> make_backend(const std::string& name, int local_rank) {
  if (name == "cpu") return make_cpu_backend();
  if (name != "cuda" && name != "auto") return Error("unknown backend '" + name + "' (auto, cpu or cuda)");
#if FORESIGHT_RUNTIME_CUDA
  const int gpus = cuda_device_count();
  if (gpus == 0) {
    if (name == "auto") return make_cpu_backend();
    return Error("no CUDA device is visible to this process (" + cuda_visibility() + ")");
  }
  return make_cuda_backend(local_rank % gpus);
#else
  (void)local_rank;
  if (name == "auto") return make_cpu_backend();
  return Error("this build has no CUDA backend (it is built when CMake finds the CUDA toolkit and NCCL)");
#endif
}

}  // namespace foresight::runtime

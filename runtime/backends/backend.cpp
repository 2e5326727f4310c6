// DeviceBuffer, and choosing a backend by name (--backend auto|cpu|cuda).
#include "runtime/backends/backend.h"

#include <algorithm>

#if FORESIGHT_RUNTIME_CUDA
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <vector>

#include "runtime/backends/cuda_backend.h"
#endif

namespace foresight::runtime {

// --- DeviceBuffer -------------------------------------------------------------------------------

void DeviceBuffer::bind(Backend* backend) {
  if (be_ != nullptr) be_->add_live_bytes(-static_cast<std::int64_t>(held_bytes()));
  be_ = backend;
  on_host_ = be_ == nullptr || be_->host_memory();
  if (be_ != nullptr) be_->add_live_bytes(static_cast<std::int64_t>(held_bytes()));
}

void DeviceBuffer::account(std::size_t before) {
  if (be_ != nullptr)
    be_->add_live_bytes(static_cast<std::int64_t>(held_bytes()) - static_cast<std::int64_t>(before));
}

void DeviceBuffer::resize(std::size_t n) {
  const std::size_t before = held_bytes();
  if (on_host_) {
    host_.resize(n);
    account(before);
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
  account(before);
}

void DeviceBuffer::assign_zero(std::size_t n) {
  if (on_host_) {
    const std::size_t before = held_bytes();
    host_.assign(n, 0.0f);
    account(before);
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
    const std::size_t before = held_bytes();
    host_ = o.host_;
    account(before);
    return;
  }
  resize(o.n_);
  if (n_ > 0) be_->copy(dev_, o.dev_, n_);
}

void DeviceBuffer::adopt(Buffer&& b) {
  const std::size_t before = held_bytes();
  host_ = std::move(b);
  account(before);
}

Buffer DeviceBuffer::take() {
  const std::size_t before = held_bytes();
  Buffer out;
  out.swap(host_);
  account(before);
  return out;
}

void DeviceBuffer::release() {
  const std::size_t before = held_bytes();
  if (on_host_) {
    Buffer().swap(host_);
    account(before);
    return;
  }
  if (dev_ != nullptr) be_->deallocate(dev_);
  dev_ = nullptr;
  n_ = cap_ = 0;
  account(before);
}

#if FORESIGHT_RUNTIME_CUDA
namespace {

// The CUDA backend's plugin (runtime/backends/cuda_backend.h), loaded once: from $FORESIGHT_CUDA_BACKEND
// when set, else beside the executable, else where the build put it. Null, with the loader's
// reasons in `why`, when none loads (CUDA's libraries missing, say).
const CudaBackendPlugin* cuda_plugin(std::string* why) {
  static const CudaBackendPlugin* plugin = nullptr;
  static std::string failures;
  static std::once_flag once;
  std::call_once(once, [] {
    auto failed = [](const std::string& reason) { failures += (failures.empty() ? "" : "; ") + reason; };
    constexpr const char* kFile = "libforesight_cuda_backend.so";
    std::vector<std::string> paths;
    if (const char* env = std::getenv("FORESIGHT_CUDA_BACKEND"); env != nullptr && *env != '\0') {
      paths.emplace_back(env);
    } else {
      std::string exe(4096, '\0');
      const ssize_t n = readlink("/proc/self/exe", exe.data(), exe.size() - 1);
      if (n > 0) {
        exe.resize(static_cast<std::size_t>(n));
        paths.push_back(exe.substr(0, exe.rfind('/') + 1) + kFile);
      }
      paths.emplace_back(FORESIGHT_CUDA_BACKEND_FILE);
    }
    for (const std::string& path : paths) {
      void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib == nullptr) {
        const char* e = dlerror();
        failed(e != nullptr ? std::string(e) : path + ": not loadable");
        continue;
      }
      using Entry = const CudaBackendPlugin* (*)();
      auto entry = reinterpret_cast<Entry>(dlsym(lib, "foresight_cuda_backend_plugin"));
      if (entry == nullptr) {
        failed(path + ": no foresight_cuda_backend_plugin");
        dlclose(lib);
        continue;
      }
      plugin = entry();  // the library stays loaded for the process's life
      return;
    }
  });
  if (plugin == nullptr && why != nullptr) *why = failures;
  return plugin;
}

}  // namespace
#endif

Result<std::unique_ptr<Backend>> make_backend(const std::string& name, int local_rank) {
  if (name == "cpu") return make_cpu_backend();
  if (name != "cuda" && name != "auto") return Error("unknown backend '" + name + "' (auto, cpu or cuda)");
#if FORESIGHT_RUNTIME_CUDA
  std::string why;
  const CudaBackendPlugin* cuda = cuda_plugin(&why);
  if (cuda == nullptr) {
    if (name == "auto") return make_cpu_backend();
    return Error("the CUDA backend could not be loaded (" + why +
                 "); set FORESIGHT_CUDA_BACKEND to the path of libforesight_cuda_backend.so");
  }
  const int gpus = cuda->device_count();
  if (gpus == 0) {
    if (name == "auto") return make_cpu_backend();
    return Error("no CUDA device is visible to this process (" + cuda->visibility() + ")");
  }
  return cuda->make(local_rank % gpus);
#else
  (void)local_rank;
  if (name == "auto") return make_cpu_backend();
  return Error("this build has no CUDA backend (it is built when CMake finds the CUDA toolkit and NCCL)");
#endif
}

}  // namespace foresight::runtime

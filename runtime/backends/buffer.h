// Host tensor storage of the CPU backend: fp32 vectors aligned to 64 bytes (a cache line, an
// AVX-512 register). Eigen peels unaligned heads with scalar code whose exp/tanh and summation
// order differ from its SIMD code, so with arbitrary heap addresses the same run could differ in
// the last bits from one launch to the next; aligned buffers make every run bit-reproducible
// (resumed runs continue bit-identically).
#pragma once

#include <cstddef>
#include <new>
#include <vector>

#ifdef __GLIBC__
#include <malloc.h>
#endif

namespace foresight::runtime {

template <class T>
struct Aligned64 {
  using value_type = T;
  static constexpr std::align_val_t kAlign{64};
  Aligned64() = default;
  template <class U>
  Aligned64(const Aligned64<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, kAlign); }
  template <class U>
  bool operator==(const Aligned64<U>&) const noexcept {
    return true;
  }
};

using Buffer = std::vector<float, Aligned64<float>>;

// The executor frees and reallocates the same activation sizes every micro-batch. glibc hands
// blocks above 128 KiB back to the OS and page-faults them in again on the next use, which cost
// 40% of a step of the small model; keeping them in the heap makes malloc a caching allocator
// (PyTorch keeps its own for the same reason). The trainer and the calibration's microbenchmarks
// both run this way.
inline void keep_freed_memory_in_heap() {
#ifdef __GLIBC__
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

}  // namespace foresight::runtime

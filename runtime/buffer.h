// Host tensor storage of the CPU backend: fp32 vectors aligned to 64 bytes (a cache line, an
// AVX-512 register). Eigen peels unaligned heads with scalar code whose exp/tanh and summation
// order differ from its SIMD code, so with arbitrary heap addresses the same run could differ in
// the last bits from one launch to the next; aligned buffers make every run bit-reproducible
// (resumed runs continue bit-identically).
#pragma once

#include <cstddef>
#include <new>
#include <vector>

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
  bool operator==(const Aligned64<U>&) const noexcept { return true; }
};

using Buffer = std::vector<float, Aligned64<float>>;

}  // namespace foresight::runtime

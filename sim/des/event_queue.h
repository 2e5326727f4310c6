// A 4-ary min-heap of events ordered by (time, sequence number): the simulator's event queue.
// Shallower than a binary heap (log4 n levels) with the children of a node on one cache line,
// which is what the event loop spends most of its time on. Ties in time keep insertion order, so
// runs are deterministic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace foresight {

template <typename Event>  // Event has `double time` and `std::uint64_t seq`
class EventQueue {
 public:
  bool empty() const { return heap_.empty(); }
  std::size_t size() const { return heap_.size(); }
  const Event& top() const { return heap_.front(); }

  void push(const Event& e) {
    heap_.push_back(e);
    std::size_t i = heap_.size() - 1;
    while (i > 0) {
      const std::size_t parent = (i - 1) / 4;
      if (!less(heap_[i], heap_[parent])) break;
      std::swap(heap_[i], heap_[parent]);
      i = parent;
    }
  }

  void pop() {
    heap_.front() = heap_.back();
    heap_.pop_back();
    const std::size_t n = heap_.size();
    std::size_t i = 0;
    while (true) {
      const std::size_t first = 4 * i + 1;
      if (first >= n) break;
      std::size_t best = first;
      const std::size_t last = first + 4 < n ? first + 4 : n;
      for (std::size_t c = first + 1; c < last; ++c)
        if (less(heap_[c], heap_[best])) best = c;
      if (!less(heap_[best], heap_[i])) break;
      std::swap(heap_[i], heap_[best]);
      i = best;
    }
  }

 private:
  static bool less(const Event& a, const Event& b) {
    return a.time < b.time || (a.time == b.time && a.seq < b.seq);
  }
  std::vector<Event> heap_;
};

}  // namespace foresight

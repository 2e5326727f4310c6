// The simulator's event queue: a monotone radix heap over the bit patterns of event times, popped
// in time order, events at equal times in insertion order.
//
// A discrete-event simulation never schedules into the past, so the keys are monotone: every
// pushed time is >= the time last popped. For non-negative doubles the IEEE-754 bit pattern, read
// as an unsigned integer, orders like the value, so a radix heap applies (Ahuja, Mehlhorn, Orlin
// and Tarjan, "Faster algorithms for the shortest path problem", JACM 1990): bucket i > 0 holds
// keys whose highest bit differing from the last popped key is bit i-1, bucket 0 the keys equal
// to it. Push is O(1); an element moves to a lower bucket at most 64 times over its life.
//
// Ties: every bucket holds its events in insertion order. A push appends. A refill empties the
// first non-empty bucket i, when buckets 0 to i-1 are empty, into those buckets in its own order,
// so each of them again holds a subsequence of it. Events at equal times thus come out in
// insertion order and runs are deterministic -- the order a binary heap on (time, insertion
// number) gives, without storing, comparing or sorting such numbers (the refills used to sort
// bucket 0 by them: perf, 2026-11-30).
//
// It replaced a 4-ary heap whose sift-down, with thousands of ranks at equal times, spent most of
// the event loop comparing sequence numbers (perf, 2026-11-29).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace foresight {

template <typename Event>  // Event has `double time` (>= 0, finite)
class EventQueue {
 public:
  EventQueue() { low_.fill(kNoKey); }

  bool empty() const { return size_ == 0; }
  std::size_t size() const { return size_; }

  // The earliest event (smallest time, then first pushed). Not const: it may redistribute, after
  // which nothing earlier than it may be pushed.
  const Event& top() {
    if (head_ == buckets_[0].size()) refill();
    return buckets_[0][head_];
  }

  // The time of the earliest event, without committing to it: events may still be pushed at any
  // time >= the last popped one (top() and pop() advance that bound to the earliest event).
  double next_time() const {
    if (head_ < buckets_[0].size()) return buckets_[0][head_].time;
    return std::bit_cast<double>(low_[first_used()]);  // callers check empty() first
  }

  void push(const Event& e) {
    const std::uint64_t k = key(e.time);
    assert(k >= last_ && "events are never scheduled before the last popped time");
    place(e, k);
    ++size_;
  }

  void pop() {
    if (head_ == buckets_[0].size()) refill();
    ++head_;
    --size_;
    if (head_ == buckets_[0].size()) {
      buckets_[0].clear();
      head_ = 0;
    }
  }

 private:
  static std::uint64_t key(double t) { return std::bit_cast<std::uint64_t>(t + 0.0); }  // -0 -> +0
  std::size_t bucket(std::uint64_t k) const {
    return k == last_ ? 0 : static_cast<std::size_t>(64 - std::countl_zero(k ^ last_));
  }
  void place(const Event& e, std::uint64_t k) {
    const std::size_t b = bucket(k);
    buckets_[b].push_back(e);
    if (b == 0) return;
    low_[b] = std::min(low_[b], k);
    used_ |= std::uint64_t{1} << (b - 1);
  }
  std::size_t first_used() const { return static_cast<std::size_t>(std::countr_zero(used_)) + 1; }

  // Bucket 0 is used up: the smallest key of the first non-empty bucket becomes `last_` and that
  // bucket's events move down, in order; those equal to it land in bucket 0.
  void refill() {
    buckets_[0].clear();
    head_ = 0;
    const std::size_t i = first_used();  // callers check empty() first
    std::vector<Event>& from = buckets_[i];
    last_ = low_[i];
    low_[i] = kNoKey;
    used_ &= ~(std::uint64_t{1} << (i - 1));
    for (const Event& e : from) place(e, key(e.time));
    from.clear();
  }

  static constexpr std::uint64_t kNoKey = ~std::uint64_t{0};
  std::array<std::vector<Event>, 65> buckets_;
  // Buckets 1 to 64: the smallest key of each (kNoKey if empty), and which are not empty (bit
  // i-1 for bucket i). A refill then moves a bucket in one pass, without first scanning it for
  // its minimum, and next_time() scans nothing (perf, 2026-11-30: a third of the queue's time).
  std::array<std::uint64_t, 65> low_;
  std::uint64_t used_ = 0;
  std::size_t head_ = 0;  // next event of bucket 0
  std::size_t size_ = 0;
  std::uint64_t last_ = 0;
};

}  // namespace foresight

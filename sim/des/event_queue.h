// The simulator's event queue: a monotone radix heap over the bit patterns of event times, popped
// in time order, events at equal times in insertion order.
//
// A discrete-event simulation never schedules into the past, so the keys are monotone: every
// pushed time is >= the time last popped. For non-negative doubles the IEEE-754 bit pattern, read
// as an unsigned integer, orders like the value, so a radix heap applies (Ahuja, Mehlhorn, Orlin
// and Tarjan, "Faster algorithms for the shortest path problem", JACM 1990), here with digits of
// kDigitBits bits: a key other than the last popped one goes to the bucket of (the highest digit
// in which they differ, the key's value of that digit); bucket 0 holds the keys equal to it.
// Bucket numbers order like the keys they hold. Push is O(1); an element moves to a lower bucket
// at most 64 / kDigitBits times over its life. Binary digits (64 levels of one bucket) moved each
// event 4.2 times on average in the GPT-3 1,024-rank step (perf, 2026-11-30): a sixth of the run.
//
// Ties: every bucket holds its events in insertion order. A push appends. A refill empties the
// first non-empty bucket i, when buckets 0 to i-1 are empty, into those buckets in its own order,
// so each of them again holds a subsequence of it; equal keys always share a bucket. Events at
// equal times thus come out in insertion order and runs are deterministic -- the order a binary
// heap on (time, insertion number) gives, without storing, comparing or sorting such numbers (the
// refills used to sort bucket 0 by them: perf, 2026-11-30).
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
  // 4-bit digits: 16 levels of 16 buckets. 8-bit digits (8 levels of 256 buckets, 48 KiB of
  // bucket headers) were 4% slower on the GPT-3 step (des_bench, 2026-11-30).
  static constexpr int kDigitBits = 4;
  static constexpr std::size_t kRadix = std::size_t{1} << kDigitBits;
  static constexpr std::size_t kBuckets = 64 / kDigitBits * kRadix;
  static constexpr std::size_t kWords = kBuckets / 64;  // of the non-empty mask
  static_assert(64 % kDigitBits == 0 && kWords >= 1 && kWords <= 64);

  static std::uint64_t key(double t) { return std::bit_cast<std::uint64_t>(t + 0.0); }  // -0 -> +0
  void place(const Event& e, std::uint64_t k) {
    if (k == last_) {
      buckets_[0].push_back(e);
      return;
    }
    // The key's digit at the highest differing level exceeds the last key's, so at level 0 it is
    // at least 1: bucket 0 stays the bucket of equal keys.
    const int level = (63 - std::countl_zero(k ^ last_)) / kDigitBits;
    const std::size_t b = static_cast<std::size_t>(level) * kRadix + ((k >> (level * kDigitBits)) & (kRadix - 1));
    buckets_[b].push_back(e);
    low_[b] = std::min(low_[b], k);
    used_[b / 64] |= std::uint64_t{1} << (b % 64);
    words_ |= std::uint64_t{1} << (b / 64);
  }
  std::size_t first_used() const {
    const std::size_t w = static_cast<std::size_t>(std::countr_zero(words_));
    return w * 64 + static_cast<std::size_t>(std::countr_zero(used_[w]));
  }

  // Bucket 0 is used up: the smallest key of the first non-empty bucket becomes `last_` and that
  // bucket's events move down, in order; those equal to it land in bucket 0.
  void refill() {
    buckets_[0].clear();
    head_ = 0;
    const std::size_t i = first_used();  // callers check empty() first
    std::vector<Event>& from = buckets_[i];
    last_ = low_[i];
    low_[i] = kNoKey;
    used_[i / 64] &= ~(std::uint64_t{1} << (i % 64));
    if (used_[i / 64] == 0) words_ &= ~(std::uint64_t{1} << (i / 64));
    for (const Event& e : from) place(e, key(e.time));
    from.clear();
  }

  static constexpr std::uint64_t kNoKey = ~std::uint64_t{0};
  std::array<std::vector<Event>, kBuckets> buckets_;
  // The smallest key of each bucket but 0 (kNoKey if empty), which are not empty (bit b % 64 of
  // word b / 64 for bucket b) and which words of that mask are not zero. A refill then moves a
  // bucket in one pass, without first scanning it for its minimum, and next_time() scans nothing
  // (perf, 2026-11-30: a third of the queue's time).
  std::array<std::uint64_t, kBuckets> low_;
  std::array<std::uint64_t, kWords> used_{};
  std::uint64_t words_ = 0;
  std::size_t head_ = 0;  // next event of bucket 0
  std::size_t size_ = 0;
  std::uint64_t last_ = 0;
};

}  // namespace foresight

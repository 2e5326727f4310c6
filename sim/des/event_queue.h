// The simulator's event queue: events popped in time order, events at equal times in insertion
// order. Events are kept in groups, one per distinct pending time, and a monotone radix heap orders
// the groups' times.
//
// Groups: in a lockstep simulation many events share a time (the ranks of a stage finish the same
// op together), so each event is appended once to its time's group -- found by a hash table of the
// pending times -- and only the groups move through the radix heap. A group holds its events in
// insertion order and the group of the current time is popped from in place, so events at equal
// times come out in insertion order and runs are deterministic. In the GPT-3 1,024-rank step a
// group holds 25 events on average and at most 28 times are pending at once, so the table stays in
// L1. When the radix heap moved the events themselves, each was placed 3.2 times on average, a
// sixth of the run in the queue; grouped, the step ran 8% faster.
//
// The radix heap: a discrete-event simulation never schedules into the past, so the keys are
// monotone: every pushed time is >= the time last popped. For non-negative doubles the IEEE-754
// bit pattern, read as an unsigned integer, orders like the value, so a radix heap applies (Ahuja,
// Mehlhorn, Orlin and Tarjan, "Faster algorithms for the shortest path problem", JACM 1990), here
// with digits of kDigitBits bits: a key other than the last popped one goes to the bucket of (the
// highest digit in which they differ, the key's value of that digit). Bucket numbers order like
// the keys they hold. Push is O(1); a group moves to a lower bucket at most 64 / kDigitBits times
// over its life. Binary digits (64 levels of one bucket) moved each event 4.2 times on average in
// the GPT-3 1,024-rank step: a sixth of the run.
//
// It replaced a 4-ary heap whose sift-down, with thousands of ranks at equal times, spent most of
// the event loop comparing sequence numbers.
//
// The figures here are of the GPT-3 1,024-rank step, profiled and timed with
// `perf record build/bench/des_bench --benchmark_filter=Gpt3_1024`.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace foresight {

template <typename Event>  // Event has `double time` (>= 0, finite)
class EventQueue {
 public:
  EventQueue() {
    low_.fill(kNoKey);
    slots_.assign(kMinSlots, Handle{kNoKey, 0});
  }

  bool empty() const { return size_ == 0; }
  std::size_t size() const { return size_; }

  // The earliest event (smallest time, then first pushed). Not const: it may move to the next
  // time, after which nothing earlier than it may be pushed.
  const Event& top() {
    if (head_ == current_.size()) refill();
    return current_[head_];
  }

  // The time of the earliest event, without committing to it: events may still be pushed at any
  // time >= the last popped one (top() and pop() advance that bound to the earliest event).
  double next_time() const {
    if (head_ < current_.size()) return current_[head_].time;
    return std::bit_cast<double>(low_[first_used()]);  // callers check empty() first
  }

  // By value: a 16-byte event travels in two registers. Passed by reference, the caller's separate
  // stores were read back as one 16-byte load that store forwarding cannot serve; push's share of
  // the GPT-3 step's samples fell from 13% to 4%, though the step gained only 0-4% (the stall
  // moves to the next load that misses the cache).
  void push(Event e) {
    const std::uint64_t k = key(e.time);
    assert(k >= last_ && "events are never scheduled before the last popped time");
    if (k == last_) {
      current_.push_back(e);
    } else {
      // Events at one time are mostly pushed in a row (95% of the GPT-3 1,024-rank step's): the
      // last group used is tried before the table.
      if (k != recent_key_) {
        recent_key_ = k;
        recent_group_ = group_of(k);
      }
      groups_[recent_group_].push_back(e);
    }
    ++size_;
  }

  void pop() {
    if (head_ == current_.size()) refill();
    ++head_;
    --size_;
    if (head_ == current_.size()) {
      current_.clear();
      head_ = 0;
    }
  }

 private:
  // 4-bit digits: 16 levels of 16 buckets. 8-bit digits (8 levels of 256 buckets, 48 KiB of
  // bucket headers) were 4% slower on the GPT-3 step.
  static constexpr int kDigitBits = 4;
  static constexpr std::size_t kRadix = std::size_t{1} << kDigitBits;
  static constexpr std::size_t kBuckets = 64 / kDigitBits * kRadix;
  static constexpr std::size_t kWords = kBuckets / 64;  // of the non-empty mask
  static_assert(64 % kDigitBits == 0 && kWords >= 1 && kWords <= 64);
  static constexpr std::uint64_t kNoKey = ~std::uint64_t{0};  // a NaN's pattern: never a time
  static constexpr std::size_t kMinSlots = 64;

  // A pending time other than the current one, and its group: the radix heap's entries and the
  // hash table's slots alike (an empty slot has key kNoKey).
  struct Handle {
    std::uint64_t key;
    std::uint32_t group;
  };

  static std::uint64_t key(double t) { return std::bit_cast<std::uint64_t>(t + 0.0); }  // -0 -> +0

  // The group of pending time k (> last_), made if there is none.
  std::uint32_t group_of(std::uint64_t k) {
    std::size_t i = home(k);
    while (slots_[i].key != kNoKey) {
      if (slots_[i].key == k) return slots_[i].group;
      i = (i + 1) & (slots_.size() - 1);
    }
    std::uint32_t g;
    if (!free_groups_.empty()) {
      g = free_groups_.back();
      free_groups_.pop_back();
    } else {
      g = static_cast<std::uint32_t>(groups_.size());
      groups_.emplace_back();
    }
    slots_[i] = Handle{k, g};
    if (++pending_ * 2 > slots_.size()) grow();
    place(Handle{k, g});
    return g;
  }

  // Linear probing; Fibonacci hashing spreads the times' bit patterns, whose low bits vary little.
  std::size_t home(std::uint64_t k) const {
    return static_cast<std::size_t>((k * 0x9E3779B97F4A7C15ull) >> (64 - std::countr_zero(slots_.size())));
  }
  void grow() {
    std::vector<Handle> old(slots_.size() * 2, Handle{kNoKey, 0});
    old.swap(slots_);
    for (const Handle& s : old) {
      if (s.key == kNoKey) continue;
      std::size_t i = home(s.key);
      while (slots_[i].key != kNoKey) i = (i + 1) & (slots_.size() - 1);
      slots_[i] = s;
    }
  }
  // Takes pending time k out of the table, shifting back the entries after it that probed past it.
  void erase(std::uint64_t k) {
    const std::size_t mask = slots_.size() - 1;
    std::size_t i = home(k);
    while (slots_[i].key != k) i = (i + 1) & mask;
    for (std::size_t j = (i + 1) & mask; slots_[j].key != kNoKey; j = (j + 1) & mask) {
      const std::size_t h = home(slots_[j].key);
      // Entry j may move to hole i unless its home lies cyclically in (i, j].
      if (((j - h) & mask) >= ((j - i) & mask)) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i].key = kNoKey;
    --pending_;
  }

  void place(const Handle& h) {
    // The key exceeds the last one, so its digit at the highest differing level does too: at level
    // 0 it is at least 1, and bucket 0 is never used.
    const int level = (63 - std::countl_zero(h.key ^ last_)) / kDigitBits;
    const std::size_t b =
        static_cast<std::size_t>(level) * kRadix + ((h.key >> (level * kDigitBits)) & (kRadix - 1));
    buckets_[b].push_back(h);
    low_[b] = std::min(low_[b], h.key);
    used_[b / 64] |= std::uint64_t{1} << (b % 64);
    words_ |= std::uint64_t{1} << (b / 64);
  }
  std::size_t first_used() const {
    const std::size_t w = static_cast<std::size_t>(std::countr_zero(words_));
    return w * 64 + static_cast<std::size_t>(std::countr_zero(used_[w]));
  }

  // The current time's events are used up: the smallest pending time becomes `last_`, its group
  // the current one, and the rest of its bucket moves down.
  void refill() {
    current_.clear();
    head_ = 0;
    const std::size_t i = first_used();  // callers check empty() first
    std::vector<Handle>& from = buckets_[i];
    last_ = low_[i];
    low_[i] = kNoKey;
    used_[i / 64] &= ~(std::uint64_t{1} << (i % 64));
    if (used_[i / 64] == 0) words_ &= ~(std::uint64_t{1} << (i / 64));
    for (const Handle& h : from) {
      if (h.key != last_) {
        place(h);
        continue;
      }
      // Its events become the current ones; the group's storage (the old current vector's) is
      // kept for reuse.
      current_.swap(groups_[h.group]);
      free_groups_.push_back(h.group);
      erase(h.key);
      if (recent_key_ == h.key) recent_key_ = kNoKey;
    }
    from.clear();
  }

  std::vector<Event> current_;  // the events at time `last_`, from head_ on
  std::size_t head_ = 0;
  std::vector<std::vector<Event>> groups_;  // events of each pending time, in insertion order
  std::vector<std::uint32_t> free_groups_;
  std::vector<Handle> slots_;  // pending time -> group; size a power of two, at most half full
  std::size_t pending_ = 0;
  std::uint64_t recent_key_ = kNoKey;  // the last pending time pushed to, and its group
  std::uint32_t recent_group_ = 0;
  std::array<std::vector<Handle>, kBuckets> buckets_;
  // The smallest key of each bucket (kNoKey if empty), which are not empty (bit b % 64 of word
  // b / 64 for bucket b) and which words of that mask are not zero. A refill then moves a bucket in
  // one pass, without first scanning it for its minimum, and next_time() scans nothing (the scan was
  // a third of the queue's time).
  std::array<std::uint64_t, kBuckets> low_;
  std::array<std::uint64_t, kWords> used_{};
  std::uint64_t words_ = 0;
  std::size_t size_ = 0;
  std::uint64_t last_ = 0;
};

}  // namespace foresight

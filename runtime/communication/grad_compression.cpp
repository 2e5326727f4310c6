// Data-parallel gradient compression: int8 compressed all-reduce and top-k with error feedback
// (see the header).
#include "runtime/communication/grad_compression.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/reference.h"
#include "sim/analytic/compression.h"

namespace foresight::runtime {

namespace {
constexpr std::size_t kBlock = static_cast<std::size_t>(kInt8BlockElements);
constexpr std::size_t kPairBytes = sizeof(std::int32_t) + sizeof(float);  // one top-k (index, value)

std::size_t blocks(std::size_t n) { return (n + kBlock - 1) / kBlock; }
}  // namespace

RegionCompressor::RegionCompressor(GradCompression scheme, double topk_fraction,
                                   const std::vector<Segment>& segments, int ranks, std::size_t padded)
    : scheme_(scheme), ranks_(ranks), padded_(padded) {
  if (scheme != GradCompression::kInt8 && scheme != GradCompression::kTopK)
    throw std::invalid_argument("RegionCompressor: only int8 and topk are executed, not " +
                                to_string(scheme));
  if (ranks < 1 || padded % static_cast<std::size_t>(ranks) != 0)
    throw std::invalid_argument("RegionCompressor: " + std::to_string(ranks) + " ranks do not divide " +
                                std::to_string(padded) + " elements");
  std::size_t at = 0;
  for (const Segment& s : segments) {
    if (s.begin < at || s.begin + s.size > padded)
      throw std::invalid_argument(
          "RegionCompressor: segments must be ordered, disjoint and inside the region");
    at = s.begin + s.size;
  }
  if (scheme == GradCompression::kTopK) {
    if (padded > static_cast<std::size_t>(INT32_MAX))
      throw std::invalid_argument("RegionCompressor: top-k indices are int32; the region has " +
                                  std::to_string(padded));
    if (!(topk_fraction > 0 && topk_fraction <= 1))
      throw std::invalid_argument("RegionCompressor: the top-k fraction must be in (0, 1], got " +
                                  std::to_string(topk_fraction));
    for (const Segment& s : segments) {
      if (s.size == 0) continue;
      const auto k = static_cast<std::size_t>(std::ceil(topk_fraction * static_cast<double>(s.size)));
      segments_.push_back(s);
      k_.push_back(std::min(s.size, std::max<std::size_t>(1, k)));
      kept_ += k_.back();
    }
    return;
  }
  // int8: the tensors plus the gaps between them (the padding), so every element is quantised
  // with a block of its own tensor; then each of them cut at the chunk boundaries.
  std::vector<Segment> cover;
  at = 0;
  for (const Segment& s : segments) {
    if (s.begin > at) cover.push_back({at, s.begin - at});
    if (s.size > 0) cover.push_back(s);
    at = s.begin + s.size;
  }
  if (at < padded) cover.push_back({at, padded - at});
  chunk_ = padded / static_cast<std::size_t>(ranks);
  pieces_.resize(static_cast<std::size_t>(ranks));
  chunk_bytes_.resize(static_cast<std::size_t>(ranks));
  chunk_offset_.resize(static_cast<std::size_t>(ranks));
  std::size_t offset = 0;
  for (int c = 0; c < ranks; ++c) {
    const std::size_t lo = static_cast<std::size_t>(c) * chunk_, hi = lo + chunk_;
    std::size_t scales = 0;
    for (const Segment& s : cover) {
      const std::size_t b = std::max(lo, s.begin), e = std::min(hi, s.begin + s.size);
      if (b >= e) continue;
      pieces_[static_cast<std::size_t>(c)].push_back({b, e - b, scales});
      scales += blocks(e - b);
    }
    chunk_bytes_[static_cast<std::size_t>(c)] = chunk_ + scales * sizeof(float);
    chunk_offset_[static_cast<std::size_t>(c)] = offset;
    offset += chunk_bytes_[static_cast<std::size_t>(c)];
  }
}

std::size_t RegionCompressor::wire_bytes() const {
  if (scheme_ == GradCompression::kTopK) return static_cast<std::size_t>(ranks_) * kept_ * kPairBytes;
  std::size_t total = 0;
  for (std::size_t b : chunk_bytes_) total += b;
  return total;
}

// A chunk's payload: its int8 elements, then its scales (fp32, unaligned: copied in and out).
void RegionCompressor::quantise_chunk(int chunk, const float* x, std::uint8_t* out) const {
  const auto c = static_cast<std::size_t>(chunk);
  auto* q = reinterpret_cast<std::int8_t*>(out);
  std::vector<float> scales((chunk_bytes_[c] - chunk_) / sizeof(float));
  const std::size_t lo = c * chunk_;
  for (const Piece& p : pieces_[c])
    kernels::quantize_int8_cpu(q + (p.begin - lo), scales.data() + p.scale, x + (p.begin - lo), p.size,
                               kInt8BlockElements);
  if (!scales.empty()) std::memcpy(out + chunk_, scales.data(), scales.size() * sizeof(float));
}

void RegionCompressor::dequantise_chunk(int chunk, const std::uint8_t* in, float* x) const {
  const auto c = static_cast<std::size_t>(chunk);
  const auto* q = reinterpret_cast<const std::int8_t*>(in);
  std::vector<float> scales((chunk_bytes_[c] - chunk_) / sizeof(float));
  if (!scales.empty()) std::memcpy(scales.data(), in + chunk_, scales.size() * sizeof(float));
  const std::size_t lo = c * chunk_;
  for (const Piece& p : pieces_[c])
    kernels::dequantize_int8_cpu(x + (p.begin - lo), q + (p.begin - lo), scales.data() + p.scale, p.size,
                                 kInt8BlockElements);
}

void RegionCompressor::compress(const float* grad, float* residual) {
  exchanged_ = false;
  if (scheme_ == GradCompression::kInt8) {
    mine_.resize(wire_bytes());
    for (int c = 0; c < ranks_; ++c)
      quantise_chunk(c, grad + static_cast<std::size_t>(c) * chunk_,
                     mine_.data() + chunk_offset_[static_cast<std::size_t>(c)]);
    return;
  }
  if (residual == nullptr)
    throw std::invalid_argument("RegionCompressor: top-k needs the error-feedback residual");
  std::vector<std::int32_t> idx(kept_);
  std::vector<float> val(kept_);
  std::size_t o = 0;
  for (std::size_t i = 0; i < segments_.size(); ++i) {
    const Segment& s = segments_[i];
    kernels::topk_sparsify_cpu(idx.data() + o, val.data() + o, residual + s.begin, grad + s.begin, s.size,
                               k_[i]);
    for (std::size_t j = o; j < o + k_[i]; ++j)
      idx[j] += static_cast<std::int32_t>(s.begin);  // region element
    o += k_[i];
  }
  mine_.resize(kept_ * kPairBytes);
  if (kept_ > 0) {
    std::memcpy(mine_.data(), idx.data(), kept_ * sizeof(std::int32_t));
    std::memcpy(mine_.data() + kept_ * sizeof(std::int32_t), val.data(), kept_ * sizeof(float));
  }
}

void RegionCompressor::exchange(const Comm& dp) {
  if (dp.size() != ranks_)
    throw std::invalid_argument("RegionCompressor: built for " + std::to_string(ranks_) +
                                " ranks, the group has " + std::to_string(dp.size()));
  const auto n = static_cast<std::size_t>(ranks_);
  if (scheme_ == GradCompression::kTopK) {
    gathered_.resize(n * mine_.size());
    dp.all_gather_bytes(mine_.data(), gathered_.data(), std::vector<std::size_t>(n, mine_.size()));
    exchanged_ = true;
    return;
  }
  // Phase 1 (reduce-scatter as an all-to-all): every rank's copy of my chunk, summed in fp32.
  const int me = dp.rank();
  const std::size_t mine_bytes = chunk_bytes_[static_cast<std::size_t>(me)];
  std::vector<std::uint8_t> copies(n * mine_bytes);
  dp.all_to_all_bytes(mine_.data(), chunk_bytes_, copies.data(), std::vector<std::size_t>(n, mine_bytes));
  std::vector<float> sum(chunk_, 0.0f), x(chunk_);
  for (std::size_t j = 0; j < n; ++j) {
    dequantise_chunk(me, copies.data() + j * mine_bytes, x.data());
    for (std::size_t i = 0; i < chunk_; ++i) sum[i] += x[i];
  }
  // Phase 2: the requantised sums, all-gathered.
  std::vector<std::uint8_t> reduced(mine_bytes);
  quantise_chunk(me, sum.data(), reduced.data());
  gathered_.resize(wire_bytes());
  dp.all_gather_bytes(reduced.data(), gathered_.data(), chunk_bytes_);
  exchanged_ = true;
}

void RegionCompressor::decompress(float* grad) const {
  if (!exchanged_) throw std::logic_error("RegionCompressor: decompress before the collective");
  if (scheme_ == GradCompression::kInt8) {
    for (int c = 0; c < ranks_; ++c)
      dequantise_chunk(c, gathered_.data() + chunk_offset_[static_cast<std::size_t>(c)],
                       grad + static_cast<std::size_t>(c) * chunk_);
    return;
  }
  std::fill(grad, grad + padded_, 0.0f);
  std::vector<std::int32_t> idx(kept_);
  std::vector<float> val(kept_);
  const std::size_t set_bytes = kept_ * kPairBytes;
  for (std::size_t j = 0; j < static_cast<std::size_t>(ranks_) && kept_ > 0; ++j) {
    const std::uint8_t* set = gathered_.data() + j * set_bytes;
    std::memcpy(idx.data(), set, kept_ * sizeof(std::int32_t));
    std::memcpy(val.data(), set + kept_ * sizeof(std::int32_t), kept_ * sizeof(float));
    for (std::size_t i = 0; i < kept_; ++i) grad[idx[i]] += val[i];
  }
}

}  // namespace foresight::runtime

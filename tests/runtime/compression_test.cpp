// Gradient compression on one rank: top-k's error feedback, int8 blocks, what it refuses, and a
// top-k run resumed from a checkpoint.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/communication/grad_compression.h"
#include "tests/runtime/runtime_test_util.h"

namespace foresight::runtime {
namespace {

// --- gradient compression -----------------------------------------------------------------------

// Values in [-1, 1) from a fixed LCG (Numerical Recipes' constants): the same on every platform.
struct Lcg {
  unsigned state = 12345;
  float operator()() {
    state = state * 1664525u + 1013904223u;
    return 2.0f * (static_cast<float>(state >> 8) / (1 << 24)) - 1.0f;
  }
};

TEST(RuntimeCompression, TopKErrorFeedbackTransmitsEveryGradientEventually) {
  // Two tensors of 100 and 37 elements and 3 of padding; f = 0.1 keeps ceil(10) = 10 and
  // ceil(3.7) = 4 entries a step. acc = g + residual splits exactly into what is sent and the new
  // residual, so after T steps sum(sent) + residual = sum(g) up to the rounding of the T additions
  // g + residual: at most T x 2^-24 x max|acc| per element, under 1e-5 here (|acc| < 10).
  const std::vector<Segment> segments{{0, 100}, {100, 37}};
  const std::size_t padded = 140;
  RegionCompressor c(GradCompression::kTopK, 0.1, segments, 1, padded);
  EXPECT_EQ(c.kept(), 14u);
  EXPECT_EQ(c.wire_bytes(), 14u * 8);  // a 4-byte index and a 4-byte value each, one rank
  Comm self;
  Lcg rnd;
  std::vector<float> residual(padded, 0.0f), g(padded, 0.0f), sent(padded), acc(padded);
  std::vector<double> sum_g(padded, 0.0), sum_sent(padded, 0.0);
  const int steps = 8;
  for (int step = 0; step < steps; ++step) {
    for (std::size_t i = 0; i < 137; ++i) g[i] = rnd();
    for (std::size_t i = 0; i < padded; ++i) {
      sum_g[i] += g[i];
      acc[i] = g[i] + residual[i];
    }
    c.compress(g.data(), residual.data());
    c.exchange(self);
    c.decompress(sent.data());
    for (std::size_t s = 0; s < segments.size(); ++s) {
      const Segment& seg = segments[s];
      const std::size_t k = s == 0 ? 10 : 4;
      std::size_t n_sent = 0;
      float smallest_sent = 1e30f, largest_kept = 0;
      for (std::size_t i = seg.begin; i < seg.begin + seg.size; ++i) {
        ASSERT_EQ(sent[i] + residual[i], acc[i]) << "step " << step << " element " << i;  // one of them is 0
        if (sent[i] != 0) {
          ++n_sent;
          smallest_sent = std::min(smallest_sent, std::fabs(sent[i]));
        } else {
          largest_kept = std::max(largest_kept, std::fabs(residual[i]));
        }
      }
      EXPECT_EQ(n_sent, k) << "step " << step << " tensor " << s;
      EXPECT_GE(smallest_sent, largest_kept)
          << "step " << step << " tensor " << s << ": not the largest |acc|";
    }
    for (std::size_t i = 0; i < padded; ++i) sum_sent[i] += sent[i];
  }
  double held_back = 0;
  for (std::size_t i = 0; i < padded; ++i) {
    EXPECT_NEAR(sum_sent[i] + residual[i], sum_g[i], 1e-5) << i;
    held_back += std::fabs(residual[i]);
  }
  EXPECT_GT(held_back, 1.0);  // most of the gradient is still waiting: the identity is not trivial
}

TEST(RuntimeCompression, Int8BlocksStayInsideTheirTensor) {
  // Gradients of ~1e-6 beside gradients of ~1: a block spanning both would round the small ones
  // to 0 (1e-6 / (1 / 127) << 0.5). Inside its own blocks, one rank's compressed all-reduce (two
  // roundings, the second of already-rounded values) errs by at most half a step, absmax / 254,
  // plus the second scale's last bit.
  const std::vector<Segment> segments{{0, 300}, {300, 200}};
  const std::size_t padded = 500;
  RegionCompressor c(GradCompression::kInt8, 0, segments, 1, padded);
  EXPECT_EQ(c.wire_bytes(),
            500u + 4 * 3);  // 500 int8s; scales: 2 blocks of the first tensor, 1 of the second
  Comm self;
  Lcg rnd;
  std::vector<float> g(padded), out(padded);
  for (std::size_t i = 0; i < 300; ++i) g[i] = rnd();
  for (std::size_t i = 300; i < padded; ++i) g[i] = 1e-6f * rnd();
  c.compress(g.data(), nullptr);
  c.exchange(self);
  c.decompress(out.data());
  const std::size_t blocks[][2] = {{0, 256}, {256, 300}, {300, 500}};
  for (const auto& b : blocks) {
    float amax = 0;
    for (std::size_t i = b[0]; i < b[1]; ++i) amax = std::max(amax, std::fabs(g[i]));
    for (std::size_t i = b[0]; i < b[1]; ++i) ASSERT_NEAR(out[i], g[i], 0.5001f * amax / 127) << i;
  }
}

TEST(RuntimeCompression, RefusesWhatItDoesNotExecuteWithTheField) {
  const ModelSpec m = tiny4();
  for (GradCompression c : {GradCompression::kPowerSgd, GradCompression::kFourStage}) {
    Plan p = plan(8);
    p.grad_compression = c;
    const Status s = check_runtime_plan(m, p, "plan.json");
    ASSERT_FALSE(s) << to_string(c);
    EXPECT_NE(s.error().message().find("plan.json: /grad_compression: " + to_string(c)), std::string::npos)
        << s.error().message();
  }
  Plan p = plan(8);
  p.grad_compression = GradCompression::kTopK;
  p.precision = Precision::kFp16;
  Status s = check_runtime_plan(m, p, "plan.json");
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message().find("plan.json: /grad_compression: topk gradient compression with fp16"),
            std::string::npos)
      << s.error().message();
  p = plan(8);
  p.grad_compression = GradCompression::kInt8;
  p.zero_stage = 2;
  s = check_runtime_plan(m, p, "plan.json");
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message().find("plan.json: /zero_stage"), std::string::npos) << s.error().message();
  for (GradCompression c : {GradCompression::kInt8, GradCompression::kTopK})
    for (int zero : {0, 1}) {
      p = plan(8);
      p.grad_compression = c;
      p.zero_stage = zero;
      EXPECT_TRUE(check_runtime_plan(m, p, "plan.json")) << to_string(c) << " ZeRO-" << zero;
    }
}

TEST(RuntimeCompression, TopKCheckpointResumeIsBitIdentical) {
  // One rank: the graph still compresses, so the update is the sparse one and the residual is
  // training state that a resumed run must get back.
  const auto dir = test_temp_path("foresight-ckpt-topk-test");
  std::filesystem::remove_all(dir);
  Plan p = plan(2);
  p.grad_compression = GradCompression::kTopK;
  p.compression_topk = 0.1;
  auto straight = serial(tiny4(), p);
  std::vector<double> losses;
  for (int i = 0; i < 5; ++i) losses.push_back(straight->t->step()->loss);

  auto first = serial(tiny4(), p);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(first->t->step());
  const Buffer residual = first->t->error_feedback();
  ASSERT_EQ(residual.size(), first->t->params().size());
  EXPECT_TRUE(std::any_of(residual.begin(), residual.end(), [](float x) { return x != 0; }));
  ASSERT_TRUE(first->t->step(false));  // a dry step leaves the error feedback as it was
  EXPECT_EQ(first->t->error_feedback(), residual);
  ASSERT_TRUE(first->t->save_checkpoint(dir.string()));

  auto resumed = serial(tiny4(), p);
  ASSERT_TRUE(resumed->t->load_checkpoint(dir.string()));
  EXPECT_EQ(resumed->t->error_feedback(), residual);
  EXPECT_EQ(resumed->t->step()->loss, losses[3]);  // bit-identical doubles
  EXPECT_EQ(resumed->t->step()->loss, losses[4]);
  EXPECT_EQ(resumed->t->params(), straight->t->params());
  EXPECT_EQ(resumed->t->error_feedback(), straight->t->error_feedback());

  // The content hash covers the residual: it is the last tensor, just before the 8-byte hash.
  const auto file = dir / "step-00000003" / "rank-00000.ckpt";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(0, std::ios::end);
    const std::streamoff at = static_cast<std::streamoff>(f.tellg()) - 8 - 4 * 10;
    f.seekg(at);
    char ch = 0;
    f.read(&ch, 1);
    f.seekp(at);
    ch ^= 0x10;
    f.write(&ch, 1);
  }
  auto again = serial(tiny4(), p);
  const auto bad = again->t->load_checkpoint(dir.string());
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("FNV-1a hash"), std::string::npos) << bad.error().message();
  // The file's own content hash refuses it too, when handed over without the manifest's check.
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const Status own = again->t->restore_checkpoint(bytes, file.string());
  ASSERT_FALSE(own);
  EXPECT_NE(own.error().message().find("content hash mismatch"), std::string::npos) << own.error().message();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace foresight::runtime

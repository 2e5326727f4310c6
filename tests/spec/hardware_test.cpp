// Hardware presets load, round-trip through JSON, and carry a source for their numbers.
#include "sim/spec/hardware.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "sim/spec/json_reader.h"
#include "sim/spec/presets.h"

namespace foresight {
namespace {

// `text` with `from` replaced by `to` fails to load as a cluster, its error naming `pointer` and
// containing `why`.
void expect_cluster_error(const std::string& text, const std::string& from, const std::string& to,
                          const std::string& pointer, const std::string& why) {
  std::string t = text;
  t.replace(t.find(from), from.size(), to);
  auto edited = parse_json_text(t, "c.json");
  ASSERT_TRUE(edited.ok()) << t;
  auto bad = cluster_from_json(*edited, "c.json");
  ASSERT_FALSE(bad.ok()) << to;
  EXPECT_NE(bad.error().message().find(pointer), std::string::npos) << bad.error().message();
  EXPECT_NE(bad.error().message().find(why), std::string::npos) << bad.error().message();
}

TEST(Hardware, EveryPresetLoadsAndRoundTrips) {
  for (const auto& name : preset_names(PresetKind::kDevice)) {
    auto d = load_device(name);
    ASSERT_TRUE(d.ok()) << name << ": " << d.error().message();
    auto back = device_from_json(device_to_json(*d), "rt.json");
    ASSERT_TRUE(back.ok()) << back.error().message();
    EXPECT_EQ(*back, *d) << name;
  }
  for (const auto& name : preset_names(PresetKind::kCluster)) {
    auto c = load_cluster(name);
    ASSERT_TRUE(c.ok()) << name << ": " << c.error().message();
    auto back = cluster_from_json(cluster_to_json(*c), "rt.json");
    ASSERT_TRUE(back.ok()) << name << ": " << back.error().message();
    EXPECT_EQ(*back, *c) << name;
  }
}

// Every preset file has a "sources" (or "source") object: numbers without a source are not allowed.
TEST(Hardware, EveryPresetCitesSources) {
  for (auto kind : {PresetKind::kDevice, PresetKind::kNode, PresetKind::kCluster, PresetKind::kModel}) {
    for (const auto& name : preset_names(kind)) {
      auto doc = parse_json_text(*preset_text(kind, name), name);
      ASSERT_TRUE(doc.ok());
      const bool cited = doc->contains("sources") || doc->contains("source");
      EXPECT_TRUE(cited) << to_string(kind) << " preset " << name << " cites no source";
    }
  }
}

TEST(Hardware, DatasheetFigures) {
  auto h100 = load_device("h100-sxm5-80gb");
  ASSERT_TRUE(h100.ok());
  EXPECT_DOUBLE_EQ(h100->peak(DType::kBf16), 989.4e12);
  EXPECT_DOUBLE_EQ(h100->memory_bandwidth, 3.35e12);
  auto dgx = load_cluster("dgx-a100-hdr");
  ASSERT_TRUE(dgx.ok());
  EXPECT_EQ(dgx->node.accelerators(), 8);
  EXPECT_EQ(dgx->node.accelerator().name, "a100-sxm4-80gb");
  // 8 NICs x 200 Gb/s x 0.96 measured efficiency, shared by 8 GPUs.
  EXPECT_DOUBLE_EQ(dgx->node.nic_bandwidth_per_device(), 25e9 * 0.96);
  auto two = load_cluster("two-tier-ib-eth");
  ASSERT_TRUE(two.ok());
  ASSERT_EQ(two->tiers.size(), 2u);
  EXPECT_EQ(two->tiers[0].kind, "ethernet");
  EXPECT_EQ(two->tiers[1].kind, "infiniband");
  auto hetero = load_cluster("hetero-node");
  ASSERT_TRUE(hetero.ok());
  EXPECT_EQ(hetero->node.devices.size(), 3u);
  EXPECT_EQ(hetero->node.devices[1].device.kind, DeviceKind::kNpu);
  EXPECT_EQ(hetero->node.devices[2].device.kind, DeviceKind::kCpu);
}

// A GEMM's share of the large-GEMM rate, by hand on the H100 preset's tile (128x256, main loop 64
// deep, 3 fixed steps per tile, 132 SMs).
TEST(Hardware, GemmShapeEfficiencyByHand) {
  auto h100 = load_device("h100-sxm5-80gb");
  ASSERT_TRUE(h100.ok());
  const DeviceSpec& d = *h100;
  ASSERT_EQ(d.gemm_tile.m, 128);
  ASSERT_EQ(d.gemm_tile.n, 256);
  ASSERT_EQ(d.gemm_tile.k, 64);
  ASSERT_EQ(d.gemm_tile.fixed_k_steps, 3);
  ASSERT_EQ(d.sm_count, 132);
  // Large in every dimension: only the fixed steps, 256 of 259.
  EXPECT_NEAR(d.gemm_shape_efficiency(16384, 16384, 16384), 256.0 / 259, 1e-12);
  // FP8's main loop is twice as deep in elements: 128 of 131.
  EXPECT_NEAR(d.gemm_shape_efficiency(16384, 16384, 16384, 1, true), 128.0 / 131, 1e-12);
  // A shallow reduction: 100 of 128 elements in 2 steps, plus 3.
  EXPECT_NEAR(d.gemm_shape_efficiency(16384, 16384, 100), (100.0 / 64) / 5, 1e-12);
  // Padding: 129 rows take two 128-row tiles (129/256), or one of the transposed kernel's 256-row
  // tiles narrowed to 144 (nine of the MMA's 16): 129/144.
  EXPECT_NEAR(d.gemm_shape_efficiency(129, 16384 * 4, 16384), 129.0 / 144 * 256.0 / 259, 1e-12);
  // Two tiles' worth of output over a long reduction: split-K 66 ways fills the 132 SMs, each
  // slice 16 steps (ceil(65536/66/64)) and its 3 fixed ones: 2048 steps of work over 132 x 19.
  EXPECT_NEAR(d.gemm_shape_efficiency(256, 256, 65536), 2048.0 / (132 * 19), 1e-12);
  // A dimension narrower than the tile runs a narrower kernel: 8 experts' 8-column router output
  // is padded to 16, not to 128.
  EXPECT_NEAR(d.gemm_shape_efficiency(16384 * 8, 8, 16384), 0.5 * 256.0 / 259, 1e-12);
  // Grouped: 8 experts of 1024 tokens each run as one dense 8192-row GEMM would.
  EXPECT_NEAR(d.gemm_shape_efficiency(1024, 4096, 4096, 8), d.gemm_shape_efficiency(8192, 4096, 4096), 1e-12);
  // Without a tile (CPU and calibrated profiles) every shape runs at the flat rate.
  DeviceSpec flat = d;
  flat.gemm_tile = {};
  EXPECT_EQ(flat.gemm_shape_efficiency(129, 8, 100), 1.0);
}

TEST(Hardware, GemmTileNamesItsFields) {
  auto doc = parse_json_text(*preset_text(PresetKind::kDevice, "h100-sxm5-80gb"), "d.json");
  ASSERT_TRUE(doc.ok());
  auto expect_error = [&](nlohmann::json d, const std::string& why) {
    auto bad = device_from_json(d, "d.json");
    ASSERT_FALSE(bad.ok()) << d.dump();
    EXPECT_NE(bad.error().message().find("gemm_tile"), std::string::npos) << bad.error().message();
    EXPECT_NE(bad.error().message().find(why), std::string::npos) << bad.error().message();
  };
  nlohmann::json no_k = *doc;
  no_k["gemm_tile"].erase("k");
  expect_error(no_k, "needs m, n and k");
  nlohmann::json no_sms = *doc;
  no_sms.erase("sm_count");
  expect_error(no_sms, "needs sm_count");
  nlohmann::json unknown = *doc;
  unknown["gemm_tile"]["stages"] = 3;
  expect_error(unknown, "stages");
  nlohmann::json negative = *doc;
  negative["gemm_tile"]["fixed_k_steps"] = -1;
  expect_error(negative, "fixed_k_steps");
}

// A flash-attention call's share of the long-sequence rate, by hand on the A100 preset's blocks
// (128 queries by 64 keys, 2 fixed iterations per block row, 108 SMs).
TEST(Hardware, AttentionShapeEfficiencyByHand) {
  auto a100 = load_device("a100-sxm4-80gb");
  ASSERT_TRUE(a100.ok());
  const DeviceSpec& d = *a100;
  ASSERT_EQ(d.attention_tile.q, 128);
  ASSERT_EQ(d.attention_tile.kv, 64);
  ASSERT_EQ(d.attention_tile.fixed_kv_steps, 2);
  ASSERT_EQ(d.sm_count, 108);
  // 2,048 tokens, causal: 16 block rows over 32 key blocks run 16 x (32 + 2) / 2 = 272 iterations
  // for 256 of work (the diagonal's blocks whole), plus 2 fixed per row: 256 of 304.
  EXPECT_NEAR(d.attention_shape_efficiency(2048, 2048, 1024), 256.0 / 304, 1e-12);
  // A long sequence: 1,024 rows of 2,048 blocks: 1,048,576 of 1,049,600 + 2,048.
  EXPECT_NEAR(d.attention_shape_efficiency(131072, 131072, 1024), 1048576.0 / (1049600 + 2048), 1e-12);
  // One head of one sequence: 16 rows on 108 SMs, and the longest (32 blocks + 2) sets the time.
  EXPECT_NEAR(d.attention_shape_efficiency(2048, 2048, 1), 256.0 / 108 / 34, 1e-12);
  // Context parallelism: 2,048 local queries against 8,192 keys in 4 calls, each paying the fixed
  // cost per row: 16 x (128 + 2) / 2 = 1,040 iterations and 4 x 2 x 16 fixed for 1,024 of work.
  EXPECT_NEAR(d.attention_shape_efficiency(2048, 8192, 1024, 4), 1024.0 / (1040 + 128), 1e-12);
  // Longer sequences reach more of the rate.
  EXPECT_LT(d.attention_shape_efficiency(512, 512, 1024), d.attention_shape_efficiency(8192, 8192, 1024));
  DeviceSpec flat = d;
  flat.attention_tile = {};
  EXPECT_EQ(flat.attention_shape_efficiency(512, 512, 1), 1.0);
}

// Attention's time per FLOP against head dimension 128, by hand: each score costs 14 x head_dim
// multiply FLOPs and 2 exponentials.
TEST(Hardware, AttentionHeadDimFactorByHand) {
  auto a100 = load_device("a100-sxm4-80gb");
  auto h100 = load_device("h100-sxm5-80gb");
  ASSERT_TRUE(a100.ok() && h100.ok());
  // A100, FlashAttention-2: exponentials in turn with the multiplies; 2.44e12 a second, a 0.55
  // rate of 312 TFLOPS at width 128 (A: a score's time there, E: its exponentials' share of it).
  ASSERT_FALSE(a100->attention_exp_overlap);
  const double A = 14 * 128 / (0.55 * 312e12), E = 2 / 2.44e12;
  EXPECT_DOUBLE_EQ(a100->attention_head_dim_factor(128, 0.55, 312e12, false), 1.0);
  // Half the width halves the multiplies, not the exponentials: (A - E) / 2 + E over A / 2.
  EXPECT_NEAR(a100->attention_head_dim_factor(64, 0.55, 312e12, false), 1 + E / A, 1e-12);
  EXPECT_NEAR(a100->attention_head_dim_factor(256, 0.55, 312e12, false), 1 - E / (2 * A), 1e-12);
  // H100, overlapped: the multiplies hide the exponentials down to a width where they no longer do.
  const double Ah = 14 * 128 / (0.5 * 989.4e12), Eh = 2 / 3.9e12;
  EXPECT_DOUBLE_EQ(h100->attention_head_dim_factor(64, 0.5, 989.4e12, true), 1.0);
  EXPECT_NEAR(h100->attention_head_dim_factor(16, 0.5, 989.4e12, true), Eh / (Ah / 8), 1e-12);
  // Run in turn (FlashAttention-2 on the H100), the same width is slower.
  EXPECT_GT(h100->attention_head_dim_factor(64, 0.35, 989.4e12, false), 1.0);
  DeviceSpec none = *a100;
  none.special_function_rate = 0;
  EXPECT_EQ(none.attention_head_dim_factor(64, 0.55, 312e12, false), 1.0);
}

TEST(Hardware, AttentionTileNamesItsFields) {
  auto doc = parse_json_text(*preset_text(PresetKind::kDevice, "a100-sxm4-80gb"), "d.json");
  ASSERT_TRUE(doc.ok());
  auto expect_error = [&](nlohmann::json d, const std::string& field, const std::string& why) {
    auto bad = device_from_json(d, "d.json");
    ASSERT_FALSE(bad.ok()) << d.dump();
    EXPECT_NE(bad.error().message().find(field), std::string::npos) << bad.error().message();
    EXPECT_NE(bad.error().message().find(why), std::string::npos) << bad.error().message();
  };
  nlohmann::json no_kv = *doc;
  no_kv["attention_tile"].erase("kv");
  expect_error(no_kv, "attention_tile", "needs q and kv");
  nlohmann::json no_sms = *doc;
  no_sms.erase("sm_count");
  no_sms.erase("gemm_tile");
  expect_error(no_sms, "attention_tile", "needs sm_count");
  nlohmann::json unknown = *doc;
  unknown["attention_tile"]["warps"] = 4;
  expect_error(unknown, "attention_tile", "warps");
  nlohmann::json unit = *doc;
  unit["special_functions"] = "2.44GB/s";
  expect_error(unit, "special_functions", "");
  // What it reads, it writes back.
  auto d = device_from_json(*doc, "d.json");
  ASSERT_TRUE(d.ok());
  auto back = device_from_json(device_to_json(*d), "back.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->attention_tile, d->attention_tile);
  EXPECT_NEAR(back->special_function_rate, d->special_function_rate, 1e-6 * d->special_function_rate);
  EXPECT_EQ(back->attention_exp_overlap, d->attention_exp_overlap);
}

TEST(Hardware, UnknownPresetListsTheKnownOnes) {
  auto c = load_cluster("dgx-z100");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("unknown cluster 'dgx-z100'"), std::string::npos);
  EXPECT_NE(c.error().message().find("dgx-a100-hdr"), std::string::npos);
}

TEST(Hardware, ErrorsInsideNestedObjectsNameThePointer) {
  auto doc = parse_json_text(R"({"name": "c", "nodes": 2, "tiers": [{"name": "leaf"}],
     "node": {"devices": [{"device": "a100-sxm4-80gb", "count": 8}],
              "fabric": {"bandwidth": "300GB/s"}, "nics": 8, "nic": {"bandwidth": "200Gbits"}}})",
                             "c.json");
  ASSERT_TRUE(doc.ok());
  auto c = cluster_from_json(*doc, "c.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("/node/nic/bandwidth"), std::string::npos) << c.error().message();
  EXPECT_NE(c.error().message().find("unknown unit 'Gbits'"), std::string::npos);
}

TEST(Hardware, SmallMessageProtocolRoundTripsAndNamesItsFields) {
  const char* text = R"({"name": "c", "nodes": 1,
     "node": {"devices": [{"device": "a100-sxm4-80gb", "count": 8}],
              "fabric": {"bandwidth": "300GB/s", "latency": "2us",
                         "small_messages": {"below": "8 KiB", "latency": "0.5us"}}}})";
  auto doc = parse_json_text(text, "c.json");
  ASSERT_TRUE(doc.ok());
  auto c = cluster_from_json(*doc, "c.json");
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_DOUBLE_EQ(c->node.fabric.small_message_bytes, 8192);
  EXPECT_NEAR(c->node.fabric.small_message_latency_s, 0.5e-6, 1e-15);
  EXPECT_NEAR(c->node.fabric.latency_for(4096), 0.5e-6, 1e-15);
  EXPECT_NEAR(c->node.fabric.latency_for(8192), 2e-6, 1e-15);
  auto again = cluster_from_json(cluster_to_json(*c), "again.json");
  ASSERT_TRUE(again.ok()) << again.error().message();
  EXPECT_EQ(again->node.fabric, c->node.fabric);

  // The text with `from` replaced by `to` fails, naming `pointer`.
  auto fails_at = [&](const std::string& from, const std::string& to, const std::string& pointer) {
    std::string t = text;
    t.replace(t.find(from), from.size(), to);
    auto edited = parse_json_text(t, "c.json");
    ASSERT_TRUE(edited.ok());
    auto bad = cluster_from_json(*edited, "c.json");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message().find(pointer), std::string::npos) << bad.error().message();
  };
  fails_at("\"0.5us\"", "\"0.5 parsecs\"", "/node/fabric/small_messages/latency");
  fails_at("\"below\": \"8 KiB\", ", "", "/node/fabric/small_messages/below");
}

// A collective's own rates on the fabric (a calibrated MPI's): read, written back, checked.
TEST(Hardware, CollectivesOwnRatesRoundTripAndNameTheirFields) {
  const char* text = R"({"name": "c", "nodes": 1,
     "node": {"devices": [{"device": "a100-sxm4-80gb", "count": 8}],
              "fabric": {"bandwidth": "6GB/s", "latency": "2us", "cold_bandwidth": "3GB/s",
                         "small_messages": {"below": "8 KiB", "latency": "0.5us"},
                         "collectives": {"all_gather": {"bandwidth": "20GB/s", "latency": "1.5us"},
                                         "reduce_scatter": {"bandwidth": "2.5GB/s", "cold_bandwidth": "0.8GB/s",
                                                            "small_message_latency": "0.7us"}}}}})";
  auto doc = parse_json_text(text, "c.json");
  ASSERT_TRUE(doc.ok());
  auto c = cluster_from_json(*doc, "c.json");
  ASSERT_TRUE(c.ok()) << c.error().message();
  const LinkSpec& f = c->node.fabric;
  EXPECT_DOUBLE_EQ(f.all_gather.bandwidth, 20e9);
  EXPECT_NEAR(f.all_gather.latency_s, 1.5e-6, 1e-15);
  EXPECT_DOUBLE_EQ(f.reduce_scatter.cold_bandwidth, 0.8e9);
  EXPECT_TRUE(f.send_recv.empty());
  // As each collective sees the link: its own fields where it has them, the link's elsewhere.
  constexpr CollectiveOp ag = CollectiveOp::kAllGather, rs = CollectiveOp::kReduceScatter;
  EXPECT_DOUBLE_EQ(f.bandwidth_of(ag), 20e9);
  EXPECT_NEAR(f.latency_of(ag, 16384), 1.5e-6, 1e-15);
  EXPECT_NEAR(f.latency_of(ag, 4096), 0.5e-6, 1e-15);  // the link's small-message latency
  EXPECT_DOUBLE_EQ(f.cold_rate_of(ag), 3e9);
  EXPECT_DOUBLE_EQ(f.bandwidth_of(rs), 2.5e9);
  EXPECT_NEAR(f.latency_of(rs, 16384), 2e-6, 1e-15);
  EXPECT_NEAR(f.latency_of(rs, 4096), 0.7e-6, 1e-15);
  EXPECT_DOUBLE_EQ(f.cold_rate_of(rs), 0.8e9);
  EXPECT_EQ(f.bandwidth_of(CollectiveOp::kAllReduce), 6e9);
  EXPECT_EQ(f.bandwidth_of(CollectiveOp::kSendRecv), 6e9);
  EXPECT_NEAR(f.latency_of(CollectiveOp::kSendRecv, 16384), 2e-6, 1e-15);
  auto again = cluster_from_json(cluster_to_json(*c), "again.json");
  ASSERT_TRUE(again.ok()) << again.error().message();
  EXPECT_EQ(again->node.fabric, c->node.fabric);
  EXPECT_FALSE(cluster_to_json(*c)["node"]["fabric"]["collectives"].contains("send_recv"));

  const auto fails_at = [&](auto&&... edit) { expect_cluster_error(text, edit...); };
  fails_at("\"20GB/s\"", "\"0GB/s\"", "/node/fabric/collectives/all_gather/bandwidth", "positive");
  fails_at("\"1.5us\"", "\"1.5 fortnights\"", "/node/fabric/collectives/all_gather/latency", "unit");
  fails_at("\"all_gather\"", "\"all_gathr\"", "/node/fabric/collectives", "all_gathr");
  fails_at("\"cold_bandwidth\": \"0.8GB/s\"", "\"cold_bandwith\": \"0.8GB/s\"",
           "/node/fabric/collectives/reduce_scatter", "cold_bandwith");
  fails_at("\"small_messages\": {\"below\": \"8 KiB\", \"latency\": \"0.5us\"},", "",
           "/node/fabric/collectives/reduce_scatter/small_message_latency",
           "neither the link nor the collective");
  fails_at("\"small_message_latency\": \"0.7us\"", "\"small_messages_below\": \"4 KiB\"",
           "/node/fabric/collectives/reduce_scatter/small_messages_below", "small_message_latency");
  // A collective's own small-message size (a send/recv's eager limit below the all-reduce's split).
  std::string own = text;
  own.replace(own.find("\"small_message_latency\": \"0.7us\""),
              std::strlen("\"small_message_latency\": \"0.7us\""),
              "\"small_message_latency\": \"0.7us\", \"small_messages_below\": \"4 KiB\"");
  auto own_doc = parse_json_text(own, "c.json");
  ASSERT_TRUE(own_doc.ok());
  auto with_own = cluster_from_json(*own_doc, "c.json");
  ASSERT_TRUE(with_own.ok()) << with_own.error().message();
  const LinkSpec& g = with_own->node.fabric;
  EXPECT_EQ(g.small_message_bytes_of(rs), 4096);
  EXPECT_EQ(g.small_message_bytes_of(ag), 8192);
  EXPECT_NEAR(g.latency_of(rs, 2048), 0.7e-6, 1e-15);
  EXPECT_NEAR(g.latency_of(rs, 4096), 2e-6, 1e-15);  // past its own split, though below the link's
  auto own_again = cluster_from_json(cluster_to_json(*with_own), "again.json");
  ASSERT_TRUE(own_again.ok()) << own_again.error().message();
  EXPECT_EQ(own_again->node.fabric, g);
}

// Measured collective times on the fabric (LinkSpec::measured, as calibrate writes them): they
// round-trip, interpolate in log size and log time between the sizes measured, apply to groups of
// their size only (send/recv to any), and bad input names its field.
TEST(Hardware, MeasuredCollectiveTimesRoundTripInterpolateAndNameTheirFields) {
  const char* text = R"({"name": "c", "nodes": 1,
     "node": {"devices": [{"device": "a100-sxm4-80gb", "count": 8}],
              "fabric": {"bandwidth": "6GB/s", "latency": "2us",
                         "measured": {"ranks": 2,
                                      "all_reduce": [{"size": "1 KiB", "time": "1us"}, {"size": "4 KiB", "time": "4us"},
                                                     {"size": "16 KiB", "time": "6us"}],
                                      "send_recv": [{"size": "1 KiB", "time": "2us"}, {"size": "1 MiB", "time": "200us"}]}}}})";
  auto doc = parse_json_text(text, "c.json");
  ASSERT_TRUE(doc.ok());
  auto c = cluster_from_json(*doc, "c.json");
  ASSERT_TRUE(c.ok()) << c.error().message();
  const MeasuredTimes& m = c->node.fabric.measured;
  ASSERT_EQ(m.ranks, 2);
  ASSERT_EQ(m.all_reduce.size(), 3u);
  EXPECT_TRUE(m.all_gather.empty());
  EXPECT_TRUE(c->node.fabric.has_own_rates());
  constexpr CollectiveOp ar = CollectiveOp::kAllReduce, sr = CollectiveOp::kSendRecv;
  EXPECT_NEAR(m.time(ar, 2, 4096), 4e-6, 1e-18);  // a measured size: its time
  EXPECT_NEAR(m.time(ar, 2, 2048), 2e-6, 1e-15);  // halfway in log size: the geometric mean
  EXPECT_NEAR(m.time(ar, 2, 8192), std::sqrt(24.0) * 1e-6, 1e-15);
  EXPECT_NEAR(m.time(ar, 2, 512), 1e-6, 1e-18);  // below them: the first size's
  EXPECT_LT(m.time(ar, 2, 0), 0);
  EXPECT_LT(m.time(ar, 2, 32768), 0);                                          // above
  EXPECT_LT(m.time(ar, 4, 4096), 0);                                           // another group size
  EXPECT_LT(m.time(CollectiveOp::kAllGather, 2, 4096), 0);                     // not measured
  EXPECT_NEAR(m.time(sr, 8, 32768), 2e-6 * std::pow(100.0, 5.0 / 10), 1e-12);  // any pair
  auto again = cluster_from_json(cluster_to_json(*c), "again.json");
  ASSERT_TRUE(again.ok()) << again.error().message();
  EXPECT_EQ(again->node.fabric, c->node.fabric);

  const auto fails_at = [&](auto&&... edit) { expect_cluster_error(text, edit...); };
  fails_at("\"16 KiB\"", "\"2 KiB\"", "/node/fabric/measured/all_reduce/2/size", "increase");
  fails_at("\"6us\"", "\"0us\"", "/node/fabric/measured/all_reduce/2/time", "positive");
  fails_at("\"6us\"", "\"6 parsecs\"", "/node/fabric/measured/all_reduce/2/time", "unit");
  fails_at(", {\"size\": \"1 MiB\", \"time\": \"200us\"}", "", "/node/fabric/measured/send_recv",
           "two sizes");
  fails_at("\"ranks\": 2,", "", "/node/fabric/measured/ranks", "missing");
  fails_at("\"ranks\": 2", "\"ranks\": 1", "/node/fabric/measured/ranks", "");
  fails_at("\"send_recv\"", "\"sendrecv\"", "/node/fabric/measured", "sendrecv");
  fails_at("\"time\": \"1us\"", "\"tme\": \"1us\"", "/node/fabric/measured/all_reduce/0", "tme");
  // Only the node's fabric carries them.
  std::string nic = text;
  nic.replace(nic.find("\"fabric\""), 8,
              "\"nics\": 1, \"nic\": {\"bandwidth\": \"25GB/s\", \"measured\": {}}, \"fabric\"");
  auto nic_doc = parse_json_text(nic, "c.json");
  ASSERT_TRUE(nic_doc.ok());
  auto bad = cluster_from_json(*nic_doc, "c.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("/node/nic/measured"), std::string::npos) << bad.error().message();
}

TEST(Hardware, ResizeKeepsWholeNodes) {
  auto c = load_cluster("dgx-h100-ndr");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(resize_cluster(*c, 1024, "--gpus").ok());
  EXPECT_EQ(c->nodes, 128);
  const Status bad = resize_cluster(*c, 12, "--gpus");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("not a multiple of the 8"), std::string::npos);
  EXPECT_TRUE(resize_cluster(*c, 4, "--gpus").ok());
  EXPECT_EQ(c->total_accelerators(), 4);
}

}  // namespace
}  // namespace foresight

// Plan: JSON load/save and the layout checks.
#include "sim/spec/plan.h"

#include <algorithm>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>

#include "sim/core/units.h"
#include "sim/spec/json_reader.h"

namespace foresight {

std::string layout_string(const Plan& p) {
  std::string s = "tp" + std::to_string(p.tp);
  s.append(" pp").append(std::to_string(p.pp)).append(" dp").append(std::to_string(p.dp));
  if (p.cp > 1) s.append(" cp").append(std::to_string(p.cp));
  if (p.ep > 1) s.append(" ep").append(std::to_string(p.ep));
  if (p.sequence_parallel) s.append(" sp");
  if (p.virtual_stages > 1) s.append(" v").append(std::to_string(p.virtual_stages));
  if (!p.stage_tp.empty()) {
    s.append(" tp per stage ");
    for (std::size_t i = 0; i < p.stage_tp.size(); ++i)
      s.append(i ? "," : "").append(std::to_string(p.stage_tp[i]));
  }
  if (p.rank_order != Plan{}.rank_order) s.append(" order ").append(p.rank_order);
  if (p.node_order != Plan{}.node_order) s.append(" nodes ").append(p.node_order);
  if (!p.stage_devices.empty()) {
    // Runs of stages on one accelerator, with their layers when split unevenly:
    // "[2 h100-sxm5-80gb 22+22 | 2 ascend-910b 10+10]".
    s.append(" [");
    for (int st = 0; st < static_cast<int>(p.stage_devices.size());) {
      int end = st;
      while (end < static_cast<int>(p.stage_devices.size()) && p.stage_devices[end] == p.stage_devices[st])
        ++end;
      if (st > 0) s.append(" | ");
      s.append(std::to_string(end - st)).append(" ").append(p.stage_devices[st]);
      if (static_cast<int>(p.layer_split.size()) == p.pp) {
        s.append(" ");
        for (int i = st; i < end; ++i) s.append(i > st ? "+" : "").append(std::to_string(p.layer_split[i]));
      }
      st = end;
    }
    s.append("]");
  }
  return s;
}

void read_recompute_modules(JsonReader& r, std::vector<std::string>& out) {
  for (JsonReader v : r.array("recompute_modules")) {
    if (!v.node().is_string()) {
      v.fail("", "expected a recompute module name, got " + describe_json_value(v.node()));
      break;
    }
    out.push_back(v.node().get<std::string>());
  }
}

std::string recompute_string(const Plan& p) {
  std::string s = to_string(p.recompute);
  for (std::size_t i = 0; i < p.recompute_modules.size(); ++i)
    s.append(i == 0 ? " (" : "+")
        .append(p.recompute_modules[i])
        .append(i + 1 == p.recompute_modules.size() ? ")" : "");
  if (p.recompute_early_stop && (p.recompute == Recompute::kFull || p.recompute == Recompute::kOptimal))
    s.append(" early-stop");
  if (p.uniform_recompute())
    s.append(" /").append(std::to_string(p.recompute_layers));
  else if (p.partial_recompute())
    s.append(" x").append(std::to_string(p.recompute_layers));
  return s;
}

using nlohmann::json;

std::pair<int, int> Plan::stage_layer_range(int layers, int stage) const {
  if (static_cast<int>(layer_split.size()) == pp) {
    int begin = 0;
    for (int i = 0; i < stage; ++i) begin += layer_split[i];
    return {begin, begin + layer_split[stage]};
  }
  const int base = layers / pp, extra = layers % pp;
  const int begin = stage * base + std::min(stage, extra);
  return {begin, begin + base + (stage < extra ? 1 : 0)};
}

std::pair<int, int> Plan::chunk_layer_range(int layers, int stage, int chunk) const {
  const int v = chunks();
  if (v == 1) return stage_layer_range(layers, stage);
  const int k = chunk * pp + stage;  // the model chunk's place in the model
  if (static_cast<int>(layer_split.size()) == pp * v) {
    int begin = 0;
    for (int i = 0; i < k; ++i) begin += layer_split[static_cast<std::size_t>(i)];
    return {begin, begin + layer_split[static_cast<std::size_t>(k)]};
  }
  const int per = layers / (pp * v);
  return {k * per, (k + 1) * per};
}

int Plan::stage_layer_count(int layers, int stage) const {
  int n = 0;
  for (int c = 0; c < chunks(); ++c) {
    const auto [begin, end] = chunk_layer_range(layers, stage, c);
    n += end - begin;
  }
  return n;
}

namespace {
// The value among `values` whose name (to_string) is `s`, else an error that lists the names.
template <typename E>
Result<E> parse_named(const std::string& s, std::initializer_list<E> values) {
  std::string names;
  for (E v : values) {
    if (to_string(v) == s) return v;
    names += (names.empty() ? "" : ", ") + to_string(v);
  }
  return Error(quote_excerpt(s) + " is not one of: " + names);
}
}  // namespace

std::string to_string(Schedule s) {
  switch (s) {
    case Schedule::kGpipe:
      return "gpipe";
    case Schedule::k1F1B:
      return "1f1b";
    case Schedule::kInterleaved1F1B:
      return "interleaved-1f1b";
    case Schedule::kZeroBubble:
      return "zero-bubble";
    case Schedule::kDualPipe:
      return "dualpipe";
  }
  return "1f1b";
}
std::string to_string(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
    case Recompute::kOptimal:
      return "optimal";
    case Recompute::kSelectiveOp:
      return "selective-op";
  }
  return "none";
}
std::string to_string(RecomputeMethod m) { return m == RecomputeMethod::kUniform ? "uniform" : "block"; }
Result<RecomputeMethod> parse_recompute_method(const std::string& s) {
  return parse_named(s, {RecomputeMethod::kBlock, RecomputeMethod::kUniform});
}
std::string to_string(CpComm c) { return c == CpComm::kAllGather ? "all-gather" : "ring"; }
Result<CpComm> parse_cp_comm(const std::string& s) {
  return parse_named(s, {CpComm::kRing, CpComm::kAllGather});
}
std::string to_string(AttentionKernel k) {
  switch (k) {
    case AttentionKernel::kFlash2:
      return "flash2";
    case AttentionKernel::kFlash1:
      return "flash1";
    default:
      return "best";
  }
}
Result<AttentionKernel> parse_attention_kernel(const std::string& s) {
  return parse_named(s, {AttentionKernel::kBest, AttentionKernel::kFlash2, AttentionKernel::kFlash1});
}
std::string to_string(CrossEntropy c) {
  switch (c) {
    case CrossEntropy::kJitFused:
      return "jit-fused";
    case CrossEntropy::kUnfused:
      return "unfused";
    default:
      return "one-pass";
  }
}
Result<CrossEntropy> parse_cross_entropy(const std::string& s) {
  return parse_named(s, {CrossEntropy::kOnePass, CrossEntropy::kJitFused, CrossEntropy::kUnfused});
}
std::string to_string(Fp8Recipe r) {
  switch (r) {
    case Fp8Recipe::kCurrent:
      return "current";
    case Fp8Recipe::kBlockwise:
      return "blockwise";
    case Fp8Recipe::kMxfp8:
      return "mxfp8";
    case Fp8Recipe::kRowwise:
      return "rowwise";
    default:
      return "delayed";
  }
}
Result<Fp8Recipe> parse_fp8_recipe(const std::string& s) {
  return parse_named(s, {Fp8Recipe::kDelayed, Fp8Recipe::kCurrent, Fp8Recipe::kBlockwise, Fp8Recipe::kMxfp8,
                         Fp8Recipe::kRowwise});
}
std::string to_string(ExpertGemm g) { return g == ExpertGemm::kPerExpert ? "per_expert" : "grouped"; }
Result<ExpertGemm> parse_expert_gemm(const std::string& s) {
  return parse_named(s, {ExpertGemm::kGrouped, ExpertGemm::kPerExpert});
}
std::string to_string(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
    case Precision::kFp8:
      return "fp8";
  }
  return "bf16";
}

Result<Schedule> parse_schedule(const std::string& s) {
  return parse_named(s, {Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved1F1B, Schedule::kZeroBubble,
                         Schedule::kDualPipe});
}
Result<Recompute> parse_recompute(const std::string& s) {
  return parse_named(s, {Recompute::kNone, Recompute::kSelective, Recompute::kFull, Recompute::kOptimal,
                         Recompute::kSelectiveOp});
}
std::string to_string(GradCompression c) {
  switch (c) {
    case GradCompression::kNone:
      return "none";
    case GradCompression::kInt8:
      return "int8";
    case GradCompression::kTopK:
      return "topk";
    case GradCompression::kPowerSgd:
      return "powersgd";
    case GradCompression::kFourStage:
      return "four-stage";
  }
  return "none";
}
Result<GradCompression> parse_grad_compression(const std::string& s) {
  return parse_named(s, {GradCompression::kNone, GradCompression::kInt8, GradCompression::kTopK,
                         GradCompression::kPowerSgd, GradCompression::kFourStage});
}
Result<Precision> parse_precision(const std::string& s) {
  return parse_named(s, {Precision::kFp32, Precision::kBf16, Precision::kFp16, Precision::kFp8});
}

namespace {
// The dimensions of a rank order, fastest first, as indices into {tp, cp, dp, pp}.
Result<std::array<int, 4>> parse_rank_order(const std::string& order) {
  static constexpr std::array<std::string_view, 4> kDims = {"tp", "cp", "dp", "pp"};
  std::array<int, 4> dims{};
  std::array<int, 4> seen{};
  std::size_t start = 0;
  int parts = 0;
  while (start <= order.size()) {
    const std::size_t end = std::min(order.find('-', start), order.size());
    const std::string_view part(order.data() + start, end - start);
    const auto it = std::find(kDims.begin(), kDims.end(), part);
    if (it == kDims.end())
      return Error(quote_excerpt(order) + ": " + quote_excerpt(part) +
                   " is not one of tp, cp, dp, pp (e.g. \"tp-cp-dp-pp\")");
    const int d = static_cast<int>(it - kDims.begin());
    ++seen[static_cast<std::size_t>(d)];
    if (parts < 4) dims[static_cast<std::size_t>(parts)] = d;
    ++parts;
    start = end + 1;
  }
  if (parts != 4 || std::count(seen.begin(), seen.end(), 1) != 4)
    return Error(quote_excerpt(order) + " must name each of tp, cp, dp, pp once (e.g. \"tp-cp-dp-pp\")");
  return dims;
}
}  // namespace

Status check_rank_order(const std::string& order) {
  const auto dims = parse_rank_order(order);
  return dims.ok() ? Status::Ok() : Status(dims.error());
}

std::array<int, 4> Plan::rank_strides() const {
  std::array<int, 4> strides{1, tp, tp * cp, tp * cp * dp};
  if (rank_order == "tp-cp-dp-pp") return strides;  // the default, without parsing
  const auto dims = parse_rank_order(rank_order);
  if (!dims.ok()) return strides;  // validate_plan reports it
  const std::array<int, 4> size = {tp, cp, dp, pp};
  int stride = 1;
  for (int d : *dims) {
    strides[static_cast<std::size_t>(d)] = stride;
    stride *= size[static_cast<std::size_t>(d)];
  }
  return strides;
}

bool DataLoading::set_compression(const std::string& name) {
  if (name != "none" && name != "lz4") return false;
  compression = name;
  compression_ratio = name == "lz4" ? kLz4Ratio : 1.0;
  decompress_rate = name == "lz4" ? kLz4DecompressRate : 0.0;
  return true;
}

Plan stage_view(const Plan& p, int stage) {
  if (p.stage_tp.empty()) return p;
  Plan q = p;
  const std::int64_t mbs = p.micro_batches();
  q.tp = p.stage_tp[stage];
  q.dp = p.tp * p.dp / q.tp;
  q.micro_batch = static_cast<int>(p.global_batch / (std::int64_t{q.dp} * std::max<std::int64_t>(1, mbs)));
  q.sequence_parallel = p.sequence_parallel && q.tp > 1;
  q.stage_tp.clear();
  return q;
}

std::string offload_string(const Plan& p) {
  std::string out;
  for (auto [on, name] : {std::pair{p.offload_optimizer, "optimizer"},
                          {p.offload_params, "params"},
                          {p.offload_activations, "activations"},
                          {p.offload_embeddings, "embeddings"}})
    if (on) out.append(out.empty() ? "" : "+").append(name);
  return out;
}

std::string overlap_string(const Plan& p) {
  std::string out;
  for (auto [on, name] : {std::pair{p.overlap_grad_reduce && p.zero_stage < 3, "grad"},
                          {p.overlap_param_gather, "param"},
                          {p.overlap_tp_comm, "tp"},
                          {async_tp_dgrad(p), "tp-dgrad"},
                          {p.overlap_ep_comm, "ep"}})
    if (on) out.append(out.empty() ? "" : "+").append(name);
  return out;
}

namespace {

// plan_from_json's parts, each reading its fields in the file's documented order.
std::int64_t read_int(JsonReader& r, std::string_view key, std::int64_t fallback, IntRange range) {
  return r.integer(key, fallback, range.min, range.max);
}

// The degrees, the batch sizes and sequence parallelism.
void read_layout(JsonReader& r, Plan& p, bool require_global_batch) {
  using namespace plan_range;
  constexpr std::int64_t kMaxDegree = kDegree.max;
  auto int_field = [&r](std::string_view key, std::int64_t fallback, IntRange range) {
    return read_int(r, key, fallback, range);
  };

  p.tp = static_cast<int>(int_field("tp", 1, kDegree));
  p.pp = static_cast<int>(int_field("pp", 1, kDegree));
  p.dp = static_cast<int>(int_field("dp", 1, kDegree));
  p.ep = static_cast<int>(int_field("ep", 1, kDegree));
  p.expert_tp = static_cast<int>(int_field("expert_tp", 0, kDegree));
  p.cp = static_cast<int>(int_field("cp", 1, kDegree));
  // The product must fit Plan::gpus() (an int): bound the device count like each degree.
  if (r.ok() && 1.0 * p.tp * p.pp * p.dp * p.cp > kMaxDegree)
    r.fail("dp", "tp*pp*dp*cp exceeds " + std::to_string(kMaxDegree) + " devices");
  p.sequence_parallel = r.boolean("sequence_parallel", false);
  p.virtual_stages = static_cast<int>(int_field("virtual_stages", 1, kVirtualStages));
  p.micro_batch = static_cast<int>(int_field("micro_batch", 1, kMicroBatch));
  p.global_batch = require_global_batch
                       ? r.required_integer("global_batch", kGlobalBatch.min, kGlobalBatch.max)
                       : r.integer("global_batch", 0, kGlobalBatch.min, kGlobalBatch.max);
}

// Schedule, ZeRO, recompute, precision, kernels, offload, compression and rank placement.
void read_techniques(JsonReader& r, Plan& p) {
  using namespace plan_range;
  auto int_field = [&r](std::string_view key, std::int64_t fallback, IntRange range) {
    return read_int(r, key, fallback, range);
  };
  auto read_enum = [&](std::string_view key, auto parse, auto fallback) {
    const std::string text = r.string(key, to_string(fallback));
    auto v = parse(text);
    if (!v) {
      r.fail(key, v.error().message());
      return fallback;
    }
    return v.value();
  };
  p.schedule = read_enum("schedule", parse_schedule, Schedule::k1F1B);
  p.zero_stage = static_cast<int>(int_field("zero_stage", 0, kZeroStage));
  p.recompute = read_enum("recompute", parse_recompute, Recompute::kNone);
  p.recompute_layers = static_cast<int>(int_field("recompute_layers", -1, kRecomputeLayers));
  p.recompute_method = read_enum("recompute_method", parse_recompute_method, RecomputeMethod::kBlock);
  p.recompute_headroom = r.number("recompute_headroom", 0, 0, 0.99);
  p.cp_comm = read_enum("cp_comm", parse_cp_comm, CpComm::kRing);
  p.precision = read_enum("precision", parse_precision, Precision::kBf16);
  p.fp8_recipe = read_enum("fp8_recipe", parse_fp8_recipe, Fp8Recipe::kDelayed);
  p.fp8_weight_recast = r.boolean("fp8_weight_recast", false);
  p.flash_attention = r.boolean("flash_attention", true);
  p.attention_kernel = read_enum("attention_kernel", parse_attention_kernel, AttentionKernel::kBest);
  p.overlap_grad_reduce = r.boolean("overlap_grad_reduce", false);
  p.overlap_tp_comm = r.boolean("overlap_tp_comm", false);
  p.grad_bucket_params = int_field("grad_bucket_params", 0, kGradBucketParams);
  p.overlap_tp_dgrad = r.boolean("overlap_tp_dgrad", false);
  p.overlap_param_gather = r.boolean("overlap_param_gather", false);
  p.overlap_p2p_comm = r.boolean("overlap_p2p_comm", false);
  p.overlap_ep_comm = r.boolean("overlap_ep_comm", false);
  if (r.has("grad_reduce_precision"))
    p.grad_reduce_precision = read_enum("grad_reduce_precision", parse_precision, Precision::kFp32);
  p.optimizer_state_precision = read_enum("optimizer_state_precision", parse_precision, Precision::kFp32);
  p.kernel_fusion = r.boolean("kernel_fusion", true);
  p.cross_entropy = read_enum("cross_entropy", parse_cross_entropy, CrossEntropy::kOnePass);
  p.repeat_kv = r.boolean("repeat_kv", false);
  p.fsdp_copies = r.boolean("fsdp_copies", false);
  p.recompute_early_stop = r.boolean("recompute_early_stop", false);
  p.expert_gemm = read_enum("expert_gemm", parse_expert_gemm, ExpertGemm::kGrouped);
  p.moe_capacity_factor = r.number("moe_capacity_factor", 0.0, 0.0, 64.0);
  p.cuda_graphs = r.boolean("cuda_graphs", false);
  p.offload_optimizer = r.boolean("offload_optimizer", false);
  p.offload_params = r.boolean("offload_params", false);
  p.offload_activations = r.boolean("offload_activations", false);
  p.offload_embeddings = r.boolean("offload_embeddings", false);
  p.grad_compression = read_enum("grad_compression", parse_grad_compression, GradCompression::kNone);
  p.compression_topk = r.number("compression_topk", 0.01, 1e-9, 1.0);
  p.compression_rank = static_cast<int>(int_field("compression_rank", 4, kCompressionRank));
  p.compression_penalty = r.number("compression_penalty", 0, 0, 100);
  p.seq_len = static_cast<int>(int_field("seq_len", 0, kSeqLen));  // absent: the model's
  p.rank_order = r.string("rank_order", p.rank_order);
  if (auto s = check_rank_order(p.rank_order); !s.ok()) r.fail("rank_order", s.error().message());
  p.node_order = r.string("node_order", p.node_order);
  p.attention_device = r.string("attention_device", "");
  if (p.node_order != "linear" && p.node_order != "shuffled")
    r.fail("node_order", quote_excerpt(p.node_order) + " is not one of: linear, shuffled");
}

// The "data" object: how samples are loaded.
void read_data_loading(JsonReader& r, DataLoading& dl) {
  using namespace plan_range;
  JsonReader d = r.object("data");
  d.reject_null_fields();
  d.reject_unknown_keys({"sample_bytes", "token_bytes", "compression", "compression_ratio", "decompress_rate",
                         "preprocess_rate", "loader_cores", "prefetch", "cached_fraction"});
  dl.sample_bytes = d.quantity("sample_bytes", Dimension::kBytes, 0.0);
  dl.token_bytes = static_cast<int>(d.integer("token_bytes", 0, 0, 8));
  const std::string compression = d.string("compression", "none");
  if (!dl.set_compression(compression))
    d.fail("compression", quote_excerpt(compression) +
                              " is not one of: none, lz4 (or give compression_ratio and decompress_rate)");
  dl.compression_ratio = d.number("compression_ratio", dl.compression_ratio, 1.0, 1e6);
  dl.decompress_rate = d.quantity("decompress_rate", Dimension::kBandwidth, dl.decompress_rate);
  dl.preprocess_rate = d.quantity("preprocess_rate", Dimension::kBandwidth, 0.0);
  dl.loader_cores = static_cast<int>(d.integer("loader_cores", 8, kLoaderCores.min, kLoaderCores.max));
  dl.prefetch = static_cast<int>(d.integer("prefetch", 2, kPrefetch.min, kPrefetch.max));
  dl.cached_fraction = d.number("cached_fraction", 0.0, 0.0, 1.0);
  if (d.ok() && dl.compression_ratio > 1 && dl.decompress_rate <= 0)
    d.fail("decompress_rate",
           "is needed when compression_ratio > 1 (bytes/s per loader core, e.g. \"1.8GB/s\")");
}

// layer_split, stage_tp and stage_devices: one entry per pipeline stage.
void read_stage_lists(JsonReader& r, Plan& p) {
  constexpr std::int64_t kMaxDegree = plan_range::kDegree.max;
  for (JsonReader v : r.array("layer_split")) {
    if (!v.node().is_number_integer() || v.node().get<long long>() < 0 ||
        v.node().get<long long>() > 100000) {
      v.fail("", "expected a number of layers (0 or more), got " + describe_json_value(v.node()));
      break;
    }
    p.layer_split.push_back(v.node().get<int>());
  }
  for (JsonReader v : r.array("stage_tp")) {
    if (!v.node().is_number_integer() || v.node().get<long long>() < 1 ||
        v.node().get<long long>() > kMaxDegree) {
      v.fail("",
             "expected a tensor-parallel degree (a positive integer), got " + describe_json_value(v.node()));
      break;
    }
    p.stage_tp.push_back(v.node().get<int>());
  }
  read_recompute_modules(r, p.recompute_modules);
  for (JsonReader v : r.array("stage_devices")) {
    if (!v.node().is_string() || v.node().get<std::string>().empty()) {
      v.fail("", "expected a device name, got " + describe_json_value(v.node()));
      break;
    }
    p.stage_devices.push_back(v.node().get<std::string>());
  }
}

}  // namespace

Result<Plan> plan_from_json(const json& doc, const std::string& file, bool require_global_batch) {
  JsonReader r(doc, file);
  r.reject_unknown_keys({"tp",
                         "pp",
                         "dp",
                         "ep",
                         "expert_tp",
                         "cp",
                         "sequence_parallel",
                         "virtual_stages",
                         "micro_batch",
                         "global_batch",
                         "schedule",
                         "zero_stage",
                         "recompute",
                         "recompute_modules",
                         "precision",
                         "fp8_recipe",
                         "fp8_weight_recast",
                         "flash_attention",
                         "attention_kernel",
                         "overlap_grad_reduce",
                         "overlap_tp_comm",
                         "grad_bucket_params",
                         "overlap_tp_dgrad",
                         "overlap_param_gather",
                         "overlap_p2p_comm",
                         "overlap_ep_comm",
                         "grad_reduce_precision",
                         "optimizer_state_precision",
                         "offload_optimizer",
                         "seq_len",
                         "layer_split",
                         "stage_devices",
                         "grad_compression",
                         "compression_topk",
                         "compression_rank",
                         "compression_penalty",
                         "recompute_layers",
                         "recompute_method",
                         "recompute_headroom",
                         "recompute_early_stop",
                         "cp_comm",
                         "offload_params",
                         "offload_activations",
                         "offload_embeddings",
                         "kernel_fusion",
                         "cross_entropy",
                         "repeat_kv",
                         "fsdp_copies",
                         "expert_gemm",
                         "moe_capacity_factor",
                         "cuda_graphs",
                         "data",
                         "rank_order",
                         "node_order",
                         "attention_device",
                         "stage_tp"});
  r.reject_null_fields();
  Plan p;
  read_layout(r, p, require_global_batch);
  read_techniques(r, p);
  read_data_loading(r, p.data);
  read_stage_lists(r, p);
  if (!r.ok()) return r.error();
  return p;
}

Result<Plan> load_plan_file(const std::string& path) {
  FS_ASSIGN_OR_RETURN(json doc, read_json_file(path));
  return plan_from_json(doc, path);
}

json plan_to_json(const Plan& p) {
  json j = {{"tp", p.tp},
            {"pp", p.pp},
            {"dp", p.dp},
            {"ep", p.ep},
            {"cp", p.cp},
            {"sequence_parallel", p.sequence_parallel},
            {"virtual_stages", p.virtual_stages},
            {"micro_batch", p.micro_batch},
            {"global_batch", p.global_batch},
            {"schedule", to_string(p.schedule)},
            {"zero_stage", p.zero_stage},
            {"recompute", to_string(p.recompute)},
            {"precision", to_string(p.precision)},
            {"flash_attention", p.flash_attention},
            {"overlap_grad_reduce", p.overlap_grad_reduce},
            {"overlap_tp_comm", p.overlap_tp_comm},
            {"offload_optimizer", p.offload_optimizer}};
  if (!p.recompute_modules.empty()) j["recompute_modules"] = p.recompute_modules;
  if (p.seq_len > 0) j["seq_len"] = p.seq_len;
  if (!p.layer_split.empty()) j["layer_split"] = p.layer_split;
  if (!p.stage_devices.empty()) j["stage_devices"] = p.stage_devices;
  if (!p.stage_tp.empty()) j["stage_tp"] = p.stage_tp;
  if (p.recompute_layers >= 0) j["recompute_layers"] = p.recompute_layers;
  if (p.recompute_method != RecomputeMethod::kBlock) j["recompute_method"] = to_string(p.recompute_method);
  if (p.recompute_headroom > 0) j["recompute_headroom"] = p.recompute_headroom;
  if (p.recompute_early_stop) j["recompute_early_stop"] = true;
  if (p.cp_comm != CpComm::kRing) j["cp_comm"] = to_string(p.cp_comm);
  if (p.attention_kernel != AttentionKernel::kBest) j["attention_kernel"] = to_string(p.attention_kernel);
  if (p.fp8_recipe != Fp8Recipe::kDelayed) j["fp8_recipe"] = to_string(p.fp8_recipe);
  if (p.fp8_weight_recast) j["fp8_weight_recast"] = true;
  if (!p.kernel_fusion) j["kernel_fusion"] = false;
  if (p.cross_entropy != CrossEntropy::kOnePass) j["cross_entropy"] = to_string(p.cross_entropy);
  if (p.repeat_kv) j["repeat_kv"] = true;
  if (p.fsdp_copies) j["fsdp_copies"] = true;
  if (p.expert_gemm != ExpertGemm::kGrouped) j["expert_gemm"] = to_string(p.expert_gemm);
  if (p.moe_drop_and_pad()) j["moe_capacity_factor"] = p.moe_capacity_factor;
  if (p.cuda_graphs) j["cuda_graphs"] = true;
  if (p.offload_params) j["offload_params"] = true;
  if (p.overlap_param_gather) j["overlap_param_gather"] = true;
  if (p.grad_bucket_params > 0) j["grad_bucket_params"] = p.grad_bucket_params;
  if (p.overlap_tp_dgrad) j["overlap_tp_dgrad"] = true;
  if (p.overlap_p2p_comm) j["overlap_p2p_comm"] = true;
  if (p.overlap_ep_comm) j["overlap_ep_comm"] = true;
  if (p.expert_tp != 0) j["expert_tp"] = p.expert_tp;
  if (p.grad_reduce_precision) j["grad_reduce_precision"] = to_string(*p.grad_reduce_precision);
  if (p.optimizer_state_precision != Precision::kFp32)
    j["optimizer_state_precision"] = to_string(p.optimizer_state_precision);
  if (p.rank_order != Plan{}.rank_order) j["rank_order"] = p.rank_order;
  if (p.node_order != Plan{}.node_order) j["node_order"] = p.node_order;
  if (!p.attention_device.empty()) j["attention_device"] = p.attention_device;
  if (!(p.data == DataLoading{})) {
    const DataLoading& d = p.data;
    j["data"] = {{"token_bytes", d.token_bytes},
                 {"compression", d.compression},
                 {"compression_ratio", d.compression_ratio},
                 {"loader_cores", d.loader_cores},
                 {"prefetch", d.prefetch},
                 {"cached_fraction", d.cached_fraction}};
    if (d.sample_bytes > 0) j["data"]["sample_bytes"] = format_quantity(d.sample_bytes, Dimension::kBytes);
    if (d.decompress_rate > 0)
      j["data"]["decompress_rate"] = format_quantity(d.decompress_rate, Dimension::kBandwidth);
    if (d.preprocess_rate > 0)
      j["data"]["preprocess_rate"] = format_quantity(d.preprocess_rate, Dimension::kBandwidth);
  }
  if (p.offload_activations) j["offload_activations"] = true;
  if (p.offload_embeddings) j["offload_embeddings"] = true;
  if (p.grad_compression != GradCompression::kNone) {
    j["grad_compression"] = to_string(p.grad_compression);
    j["compression_topk"] = p.compression_topk;
    j["compression_rank"] = p.compression_rank;
    j["compression_penalty"] = p.compression_penalty;
  }
  return j;
}

namespace {

// validate_plan's checks in groups; the first check that fails is the error.
class PlanChecks {
 public:
  PlanChecks(const Plan& plan, const ModelSpec& model, const std::string& file)
      : p(plan), m(model), file_(file), seq(effective_seq_len(plan, model)) {}
  Status layout(int accelerators) const;  // degrees against the model, the devices and the layers
  Status batch() const;                   // global batch against dp, micro-batches and the schedule
  Status techniques() const;              // recompute and gradient compression
  Status stage_tp() const;                // per-stage tensor parallelism
  Status offload_and_schedule() const;    // what offload and dualpipe can be combined with

 private:
  Status fail(const std::string& field, const std::string& why) const {
    return Status(Error(file_ + ": /" + field + ": " + why));
  }
  // Micro-batches per step: only once the batch checks hold (dp * micro_batch divides it).
  std::int64_t mbs() const { return p.micro_batches(); }
  template <typename T>
  static std::string s(T v) {
    return std::to_string(v);
  }
  const Plan& p;
  const ModelSpec& m;
  const std::string& file_;
  const int seq;
};

Status PlanChecks::layout(int accelerators) const {
  if (accelerators > 0 && p.gpus() != accelerators) {
    return fail("dp", "tp*pp*dp*cp = " + s(p.tp) + "*" + s(p.pp) + "*" + s(p.dp) + "*" + s(p.cp) + " = " +
                          s(p.gpus()) + " does not equal the " + s(accelerators) + " accelerators");
  }
  if (m.heads % p.tp != 0) return fail("tp", s(p.tp) + " does not divide model heads (" + s(m.heads) + ")");
  if (!m.mla.enabled() && m.kv_heads % p.tp != 0 && p.tp % m.kv_heads != 0)
    return fail("tp", s(p.tp) + " and model kv_heads (" + s(m.kv_heads) + ") must divide one another");
  if (m.dense_layers() > 0 && m.ffn_hidden % p.tp != 0)
    return fail("tp", s(p.tp) + " does not divide model ffn_hidden (" + s(m.ffn_hidden) + ")");
  if (p.pp > m.layers) return fail("pp", s(p.pp) + " exceeds the model's " + s(m.layers) + " layers");
  if (!p.layer_split.empty()) {
    // One entry per stage, or with virtual stages one per model chunk (Megatron-Core builds a
    // chunk of 0 layers when the embedding or the loss takes its place).
    const int chunks = p.pp * p.chunks();
    if (static_cast<int>(p.layer_split.size()) != chunks)
      return fail("layer_split",
                  "has " + s(p.layer_split.size()) + " entries, needs " +
                      (p.chunks() > 1 ? "pp*virtual_stages = " + s(p.pp) + "*" + s(p.virtual_stages) + " = " +
                                            s(chunks) + " (one per model chunk, in model order)"
                                      : "pp = " + s(p.pp) + " (one per stage)"));
    int total = 0;
    for (int n : p.layer_split) {
      if (n < 0) return fail("layer_split", "has a negative entry (" + s(n) + ")");
      total += n;
    }
    if (total != m.layers)
      return fail("layer_split", "adds up to " + s(total) + " layers, the model has " + s(m.layers));
  }
  if (p.schedule != Schedule::kInterleaved1F1B && p.virtual_stages > 1)
    return fail("virtual_stages", s(p.virtual_stages) + " needs schedule \"interleaved-1f1b\"");
  if (p.virtual_stages > 1) {
    if (p.pp < 2) return fail("virtual_stages", s(p.virtual_stages) + " needs pp >= 2");
    if (p.layer_split.empty() && m.layers % (p.pp * p.virtual_stages) != 0)
      return fail("virtual_stages", "pp*virtual_stages = " + s(p.pp * p.virtual_stages) +
                                        " does not divide the model's " + s(m.layers) + " layers");
  }
  if (seq % p.cp != 0) return fail("cp", s(p.cp) + " does not divide the sequence length (" + s(seq) + ")");
  if (p.ep > 1) {
    if (!m.is_moe()) return fail("ep", s(p.ep) + " needs a mixture-of-experts model");
    if (m.moe.experts % p.ep != 0)
      return fail("ep", s(p.ep) + " does not divide the model's " + s(m.moe.experts) + " experts");
    if (!p.experts_folded() && (p.dp * p.cp) % p.ep != 0)
      return fail("ep", s(p.ep) + " does not divide dp*cp = " + s(p.dp * p.cp) +
                            " (experts are carved out of the data-parallel ranks; with expert_tp 1 they are "
                            "carved out of tp*cp*dp)");
    if (p.experts_folded() && (p.tp * p.dp * p.cp) % p.ep != 0)
      return fail("ep", s(p.ep) + " does not divide tp*cp*dp = " + s(p.tp * p.dp * p.cp) +
                            " (with expert_tp 1 the experts are carved out of all of a stage's ranks)");
  }
  if (p.expert_tp != 0 && p.expert_tp != p.tp) {
    if (p.expert_tp != 1)
      return fail("expert_tp", s(p.expert_tp) + " is neither 1 nor tp (" + s(p.tp) +
                                   "); other expert tensor-parallel degrees are not modelled");
    if (!m.is_moe()) return fail("expert_tp", "needs a mixture-of-experts model");
    if (!p.sequence_parallel)
      return fail("expert_tp",
                  "1 below tp " + s(p.tp) +
                      " needs sequence_parallel (each TP rank dispatches its own share of the tokens)");
  }
  return Status::Ok();
}

Status PlanChecks::batch() const {
  if (p.global_batch % (std::int64_t{p.dp} * p.micro_batch) != 0)
    return fail("global_batch", s(p.global_batch) + " is not a multiple of dp*micro_batch = " + s(p.dp) +
                                    "*" + s(p.micro_batch));
  if (mbs() > plan_range::kMaxMicroBatches)
    return fail("global_batch", s(p.global_batch) + " sequences make " + s(mbs()) +
                                    " micro-batches per step, more than the " +
                                    s(plan_range::kMaxMicroBatches) +
                                    " a step may have (raise micro_batch or dp)");
  if (p.virtual_stages > 1 && mbs() % p.pp != 0)
    return fail("global_batch", "interleaved 1F1B needs the micro-batch count (" + s(mbs()) +
                                    ") to be a multiple of pp (" + s(p.pp) + ")");
  return Status::Ok();
}

Status PlanChecks::techniques() const {
  if (p.recompute_layers >= 0 && p.recompute == Recompute::kNone)
    return fail("recompute_layers",
                "is set but recompute is none (say which recompute the first layers use)");
  if (p.recompute_layers >= 0 && p.recompute == Recompute::kOptimal)
    return fail("recompute_layers",
                "cannot be combined with recompute optimal (it chooses every layer's recompute)");
  if (p.recompute_method == RecomputeMethod::kUniform) {
    if (p.recompute != Recompute::kFull)
      return fail("recompute_method", "uniform needs recompute full (it checkpoints groups of whole layers)");
    if (p.recompute_layers < 1)
      return fail("recompute_layers", "uniform recompute needs the group size (recompute_layers >= 1)");
    if (p.recompute_early_stop)
      return fail("recompute_early_stop",
                  "applies to layers checkpointed one by one (the block method), not to uniform groups");
  }
  if ((p.recompute == Recompute::kOptimal || p.recompute_method == RecomputeMethod::kUniform) &&
      (p.schedule == Schedule::kDualPipe || p.offload_activations))
    return fail("recompute", to_string(p.recompute) +
                                 (p.recompute_method == RecomputeMethod::kUniform ? " (uniform)" : "") +
                                 " cannot be combined with dualpipe or offload_activations (not modelled)");
  if (!p.recompute_modules.empty()) {
    if (p.recompute != Recompute::kSelective)
      return fail("recompute_modules",
                  "needs recompute selective (the modules are what selective recompute drops)");
    for (const std::string& name : p.recompute_modules) {
      if (name == "mla_up_proj" && !m.mla.enabled())
        return fail("recompute_modules",
                    "mla_up_proj needs a model with multi-head latent attention (model.mla)");
      if (std::find(std::begin(kRecomputeModules), std::end(kRecomputeModules), name) ==
          std::end(kRecomputeModules)) {
        std::string known;
        for (std::string_view k : kRecomputeModules) known.append(known.empty() ? "" : ", ").append(k);
        return fail("recompute_modules", "unknown module \"" + name + "\" (modelled: " + known +
                                             "; Megatron-Core's moe and shared_experts are not)");
      }
    }
  }
  if (p.grad_compression != GradCompression::kNone && p.zero_stage >= 3)
    return fail("grad_compression",
                "needs zero_stage 0, 1 or 2 (ZeRO-3 reduce-scatters each layer's gradients as it goes)");
  return Status::Ok();
}

Status PlanChecks::stage_tp() const {
  if (!p.stage_tp.empty()) {
    if (static_cast<int>(p.stage_tp.size()) != p.pp)
      return fail("stage_tp", "has " + s(p.stage_tp.size()) + " entries for pp = " + s(p.pp) + " stages");
    if (p.virtual_stages > 1 || p.schedule == Schedule::kDualPipe)
      return fail(
          "stage_tp",
          "cannot be combined with virtual stages or dualpipe (a rank would hold stages of different tp)");
    if (p.ep > 1 || p.cp > 1) return fail("stage_tp", "cannot be combined with ep or cp (not modelled)");
    const long long ranks = 1LL * p.tp * p.dp;
    for (int st = 0; st < p.pp; ++st) {
      const int t = p.stage_tp[st];
      const std::string where = "stage " + s(st) + ": tp " + s(t);
      if (t < 1) return fail("stage_tp", where + " is not a tensor-parallel degree (>= 1)");
      if (m.heads % t != 0)
        return fail("stage_tp", where + " does not divide model heads (" + s(m.heads) + ")");
      if (!m.mla.enabled() && m.kv_heads % t != 0 && t % m.kv_heads != 0)
        return fail("stage_tp",
                    where + " and model kv_heads (" + s(m.kv_heads) + ") must divide one another");
      if (m.ffn_hidden % t != 0)
        return fail("stage_tp", where + " does not divide model ffn_hidden (" + s(m.ffn_hidden) + ")");
      if (ranks % t != 0)
        return fail("stage_tp", where + " does not divide the stage's tp*dp = " + s(ranks) + " ranks");
      const long long dp_i = ranks / t;
      if (p.global_batch % (dp_i * mbs()) != 0)
        return fail("stage_tp", where + ": its " + s(dp_i) + " replicas cannot split the " + s(mbs()) +
                                    " micro-batches of " + s(p.global_batch / mbs()) + " sequences evenly");
    }
  }
  return Status::Ok();
}

Status PlanChecks::offload_and_schedule() const {
  if (p.optimizer_state_precision != Precision::kFp32 && p.optimizer_state_precision != Precision::kBf16)
    return fail("optimizer_state_precision",
                "must be fp32 or bf16 (not " + to_string(p.optimizer_state_precision) + ")");
  if (p.optimizer_state_precision == Precision::kBf16 &&
      (p.offload_optimizer || p.precision == Precision::kFp32))
    return fail("optimizer_state_precision",
                p.offload_optimizer
                    ? "bf16 cannot be combined with offload_optimizer (the host's optimizer keeps "
                      "fp32 state)"
                    : "bf16 needs a 16-bit or fp8 model (precision fp32 keeps fp32 state)");
  if (p.offload_params && !p.offload_optimizer)
    return fail("offload_params",
                "needs offload_optimizer (parameters offloaded to the host are updated there)");
  if ((p.offload_params || p.offload_activations) &&
      (p.schedule == Schedule::kZeroBubble || p.schedule == Schedule::kDualPipe))
    return fail(p.offload_params ? "offload_params" : "offload_activations",
                "is not modelled with " + to_string(p.schedule) +
                    " (its split-off weight gradients would need the layer again)");
  if (p.offload_embeddings && m.tied_embeddings && p.pp == 1)
    return fail("offload_embeddings",
                "the model ties its embedding table to the LM head, which needs it on the device "
                "(offload works with untied embeddings, or with pp > 1)");
  if (p.offload_embeddings && p.schedule == Schedule::kDualPipe)
    return fail("offload_embeddings", "cannot be combined with dualpipe (both end ranks embed)");
  if (p.schedule == Schedule::kDualPipe && (p.pp % 2 != 0 || mbs() < 2 * p.pp || mbs() % 2 != 0))
    return fail("schedule",
                "dualpipe needs an even pp and an even number of micro-batches, at least 2*pp (here pp " +
                    s(p.pp) + ", " + s(mbs()) + " micro-batches)");
  if (p.overlap_ep_comm) {
    if (m.moe.experts == 0 || p.ep < 2)
      return fail("overlap_ep_comm", "needs a MoE model with expert parallelism (ep > 1)");
    if (!p.schedule_pairs())
      return fail(
          "overlap_ep_comm",
          "needs interleaved-1f1b with virtual_stages > 1, dualpipe, or pp 1 with 1f1b (Megatron-Core "
          "pairs a forward with a backward only there)");
    if (!p.recompute_pairs())
      return fail("overlap_ep_comm",
                  "cannot be combined with recompute " + to_string(p.recompute) +
                      (p.recompute_layers >= 0 ? " of some layers" : "") +
                      " (Megatron-Core refuses full and per-layer recompute with it; selective works)");
  }
  return Status::Ok();
}

}  // namespace

Status validate_plan(const Plan& p, const ModelSpec& m, int accelerators, const std::string& file) {
  const PlanChecks checks(p, m, file);
  FS_RETURN_IF_ERROR(checks.layout(accelerators));
  FS_RETURN_IF_ERROR(checks.batch());
  FS_RETURN_IF_ERROR(checks.techniques());
  FS_RETURN_IF_ERROR(checks.stage_tp());
  return checks.offload_and_schedule();
}

Status validate_plan_on(const Plan& p, const ModelSpec& m, const ClusterSpec& c, const std::string& file) {
  FS_RETURN_IF_ERROR(validate_plan(p, m, p.stage_devices.empty() ? c.total_accelerators() : 0, file));
  auto fail = [&](const std::string& why) { return Status(Error(file + ": /stage_devices: " + why)); };
  const NodeSpec& node = c.node;
  if (!p.attention_device.empty()) {
    auto bad = [&](const std::string& why) { return Status(Error(file + ": /attention_device: " + why)); };
    if (!p.stage_devices.empty()) return bad("cannot be combined with stage_devices (not modelled)");
    if (p.cp > 1)
      return bad(
          "cannot be combined with context parallelism (its ring exchange is not modelled off the device)");
    const int main = stage_group(p, node, 0);
    if (p.attention_device != "auto") {
      const int g = node.accelerator_group(p.attention_device);
      if (g < 0 || g == main)
        return bad(quote_excerpt(p.attention_device) + " is not another accelerator of node '" + node.name +
                   "' (the stages run on " + node.devices[main].device.name + ")");
      if (node.devices[g].count < node.devices[main].count)
        return bad("node '" + node.name + "' has " + std::to_string(node.devices[g].count) + " " +
                   p.attention_device + " for " + std::to_string(node.devices[main].count) + " " +
                   node.devices[main].device.name + " (one partner each is needed)");
    } else {
      int partners = 0;
      for (std::size_t i = 0; i < node.devices.size(); ++i)
        if (static_cast<int>(i) != main && node.devices[i].device.kind != DeviceKind::kCpu) {
          partners = node.devices[i].count;
          break;
        }
      if (partners < node.devices[main].count)
        return bad("auto needs another accelerator per " + node.devices[main].device.name + " on node '" +
                   node.name + "'");
    }
  }
  if (p.stage_devices.empty()) return Status::Ok();
  if (!p.stage_tp.empty()) return fail("cannot be combined with stage_tp (not modelled)");
  if (p.rank_order != Plan{}.rank_order || p.node_order != Plan{}.node_order)
    return fail(
        "cannot be combined with a rank_order or node_order of its own (stages fill their accelerator groups "
        "in order)");
  if (static_cast<int>(p.stage_devices.size()) != p.pp)
    return fail("has " + std::to_string(p.stage_devices.size()) +
                " entries for pp = " + std::to_string(p.pp) + " stages");
  if (p.virtual_stages > 1)
    return fail("cannot be combined with virtual_stages (a chunk per stage device is not modelled)");
  if (p.schedule == Schedule::kDualPipe)
    return fail("cannot be combined with dualpipe (each rank holds two stages)");
  std::vector<int> ranks(node.devices.size(), 0);
  const int per_stage = p.tp * p.cp * p.dp;
  for (int st = 0; st < p.pp; ++st) {
    const std::string& name = p.stage_devices[st];
    const int g = node.accelerator_group(name);
    if (g < 0) {
      std::string have;
      for (const auto& dg : node.devices)
        if (dg.device.kind != DeviceKind::kCpu) have.append(have.empty() ? "" : ", ").append(dg.device.name);
      return fail(quote_excerpt(name) + " (stage " + std::to_string(st) +
                  ") is not an accelerator of node '" + node.name + "' (it has: " + have + ")");
    }
    if (p.precision == Precision::kFp8 && node.devices[g].device.peak(DType::kFp8) <= 0)
      return fail("stage " + std::to_string(st) + ": fp8 is not supported by " + name);
    ranks[g] += per_stage;
  }
  for (std::size_t g = 0; g < ranks.size(); ++g) {
    const int have = node.devices[g].count * c.nodes;
    if (ranks[g] > have)
      return fail("the stages on " + node.devices[g].device.name + " need " + std::to_string(ranks[g]) +
                  " devices (tp*cp*dp = " + std::to_string(per_stage) + " each), the cluster has " +
                  std::to_string(have));
  }
  return Status::Ok();
}

int stage_group(const Plan& p, const NodeSpec& node, int stage) {
  if (!p.stage_devices.empty()) {
    const int g = node.accelerator_group(p.stage_devices[stage]);
    if (g >= 0) return g;
  }
  for (std::size_t i = 0; i < node.devices.size(); ++i)
    if (node.devices[i].device.kind != DeviceKind::kCpu) return static_cast<int>(i);
  return 0;
}

const DeviceSpec& stage_accelerator(const Plan& p, const NodeSpec& node, int stage) {
  if (p.stage_devices.empty()) return node.accelerator();
  return node.devices[static_cast<std::size_t>(stage_group(p, node, stage))].device;
}

std::vector<int> node_permutation(const Plan& p, int nodes) {
  std::vector<int> perm(static_cast<std::size_t>(std::max(0, nodes)));
  for (int i = 0; i < nodes; ++i) perm[i] = i;
  if (p.node_order != "shuffled") return perm;
  // Fisher-Yates with a fixed seed: the same order on every machine and run.
  std::mt19937 rng(20261130u);
  for (int i = nodes - 1; i > 0; --i) std::swap(perm[i], perm[rng() % static_cast<unsigned>(i + 1)]);
  return perm;
}

std::vector<int> rank_devices(const Plan& p, const ClusterSpec& c) {
  const NodeSpec& node = c.node;
  const int slots = node.accelerator_slots();
  if (p.stage_devices.empty() && (p.rank_order != Plan{}.rank_order || p.node_order != Plan{}.node_order)) {
    // One accelerator group: the rank's place along the devices under rank_order, on its node in
    // node_order.
    const int first = stage_group(p, node, 0);
    int offset = 0;
    for (int i = 0; i < first; ++i)
      if (node.devices[i].device.kind != DeviceKind::kCpu) offset += node.devices[i].count;
    const int per_node = std::max(1, node.devices[first].count);
    const std::array<int, 4> stride = p.rank_strides();
    const std::vector<int> perm = node_permutation(p, (p.gpus() + per_node - 1) / per_node);
    std::vector<int> out(static_cast<std::size_t>(p.gpus()));
    for (int r = 0; r < p.gpus(); ++r) {
      const int t = r % p.tp, cp = (r / p.tp) % p.cp, d = (r / (p.tp * p.cp)) % p.dp,
                pp = r / (p.tp * p.cp * p.dp);
      const int pos = t * stride[0] + cp * stride[1] + d * stride[2] + pp * stride[3];
      out[r] = perm[pos / per_node] * slots + offset + pos % per_node;
    }
    return out;
  }
  std::vector<int> offset(node.devices.size(), 0), used(node.devices.size(), 0);
  int o = 0;
  for (std::size_t i = 0; i < node.devices.size(); ++i) {
    offset[i] = o;
    if (node.devices[i].device.kind != DeviceKind::kCpu) o += node.devices[i].count;
  }
  std::vector<int> out(static_cast<std::size_t>(p.gpus()));
  const int per_stage = p.tp * p.cp * p.dp;
  for (int r = 0; r < p.gpus(); ++r) {
    const int g = stage_group(p, node, r / per_stage);
    const int k = used[g]++;
    const int count = std::max(1, node.devices[g].count);
    out[r] = (k / count) * slots + offset[g] + k % count;
  }
  return out;
}

}  // namespace foresight

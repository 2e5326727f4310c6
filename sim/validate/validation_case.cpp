// Validation cases: load, fill unreported fields by the best-performing plan that fits, compare.
#include "sim/validate/validation_case.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>

#include "sim/analytic/analytic_model.h"
#include "sim/des/simulator.h"
#include "sim/spec/json_reader.h"
#include "sim/workload/workload.h"

namespace foresight {

using nlohmann::json;

Result<ValidationCase> validation_case_from_json(const json& doc, const std::string& file) {
  JsonReader r(doc, file);
  r.reject_unknown_keys({"id", "model", "hardware", "parallel", "measured"});
  ValidationCase c;
  c.file = file;
  c.id = r.required_string("id");
  c.source = r.string("source", "");
  const std::string schema = r.string("schema", "foresight-validation-case/1");
  if (r.ok() && schema != "foresight-validation-case/1")
    r.fail("schema", "\"" + schema + "\" is not foresight-validation-case/1");

  JsonReader mr = r.object("model");
  mr.reject_unknown_keys({"name", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "mlp",
                          "vocab", "seq_len", "moe"});
  ModelSpec& m = c.model;
  m.name = mr.string("name", c.id);
  m.layers = static_cast<int>(mr.required_integer("layers", 1, 100000));
  m.hidden = mr.required_integer("hidden", 1, 1 << 22);
  m.heads = static_cast<int>(mr.required_integer("heads", 1, 1 << 16));
  m.kv_heads = static_cast<int>(mr.integer("kv_heads", m.heads, 1, 1 << 16));
  m.head_dim = static_cast<int>(mr.integer("head_dim", m.heads > 0 ? m.hidden / m.heads : 1, 1, 1 << 16));
  m.ffn_hidden = mr.integer("ffn_hidden", 4 * m.hidden, 1, 1 << 24);
  const std::string mlp = mr.choice("mlp", {"gelu", "swiglu", "squared-relu"}, "gelu");
  m.mlp = mlp == "swiglu" ? MlpKind::kSwiglu : mlp == "squared-relu" ? MlpKind::kSquaredRelu : MlpKind::kGelu;
  m.norm = NormKind::kLayerNorm;
  m.vocab = mr.required_integer("vocab", 1, 1 << 24);
  m.seq_len = static_cast<int>(mr.required_integer("seq_len", 1, 1 << 24));
  if (mr.has("moe")) {
    JsonReader moe = mr.object("moe");
    m.moe.experts = static_cast<int>(moe.required_integer("experts", 1, 1 << 16));
    m.moe.top_k = static_cast<int>(moe.required_integer("top_k", 1, 1 << 16));
    m.moe.shared_experts = static_cast<int>(moe.integer("shared_experts", 0, 0, 1 << 10));
    m.moe.expert_ffn_hidden = moe.integer("expert_ffn_hidden", m.ffn_hidden, 1, 1 << 24);
    m.moe.dense_layers = static_cast<int>(moe.integer("dense_layers", 0, 0, 100000));
  }

  JsonReader hr = r.object("hardware");
  hr.reject_unknown_keys({"gpu", "gpus", "gpus_per_node", "nics_per_node", "nic_gbps", "fabric"});
  const std::string gpu = hr.required_string("gpu");
  const int gpus = static_cast<int>(hr.required_integer("gpus", 1, 1 << 24));
  const auto per_node = hr.optional_integer("gpus_per_node", 1, 1024);
  const auto nics = hr.optional_integer("nics_per_node", 0, 1024);
  const auto nic_gbps = hr.optional_number("nic_gbps", 0.001, 1e6);
  const std::string fabric = hr.choice("fabric", {"infiniband", "roce", "omnipath", "ethernet"}, "");

  c.parallel = r.node().contains("parallel") ? r.node()["parallel"] : json::object();
  if (r.ok() && !c.parallel.is_object()) r.fail("parallel", "expected an object");
  JsonReader meas = r.object("measured");
  c.measured_step_s = meas.number("step_time_s", 0.0, 1e-9, 1e12);
  if (r.ok() && !meas.has("step_time_s")) meas.fail("step_time_s", "missing required field");
  if (!r.ok()) return r.error();
  FS_RETURN_IF_ERROR(validate_model(m, file));

  // The GPU's reference system, adjusted to what the case reports.
  auto device = load_device(gpu);
  if (!device)
    return Error(file + ": /hardware/gpu: unknown GPU \"" + gpu + "\" (" + device.error().message() + ")");
  if (device->reference_cluster.empty())
    return Error(file + ": /hardware/gpu: device \"" + gpu + "\" names no reference_cluster");
  auto cluster = load_cluster(device->reference_cluster);
  if (!cluster) return cluster.error().with_context(file + ": /hardware/gpu");
  c.cluster = std::move(cluster).value();
  NodeSpec& node = c.cluster.node;
  if (per_node) {
    for (auto& g : node.devices)
      if (g.device.kind != DeviceKind::kCpu) {
        g.count = static_cast<int>(*per_node);
        break;
      }
  }
  if (nics) node.nics = static_cast<int>(*nics);
  if (nic_gbps) node.nic.bandwidth = *nic_gbps * 1e9 / 8;
  if (!fabric.empty()) {
    node.nic.kind = fabric;
    for (auto& t : c.cluster.tiers) t.kind = fabric == "ethernet" ? "ethernet" : fabric;
  }
  FS_RETURN_IF_ERROR(resize_cluster(c.cluster, gpus, file + ": /hardware/gpus"));
  return c;
}

Result<ValidationCase> load_validation_case(const std::string& path) {
  FS_ASSIGN_OR_RETURN(json doc, read_json_file(path));
  return validation_case_from_json(doc, path);
}

namespace {

// What the software stack behind a published run could do, by its source. These are facts about
// the frameworks (not fitted numbers): a kernel that did not exist yet cannot have been used.
struct SoftwareStack {
  std::string_view source_prefix;
  std::string_view name;
  bool flash_attention;        // fused attention kernel used
  bool sequence_parallel;      // Megatron sequence parallelism available
  bool dropout;                // dropout layers present in the trained model
  bool distributed_optimizer;  // ZeRO-1 style optimizer sharding available
  bool tied_embeddings;        // the output head is the input embedding's table
};
constexpr SoftwareStack kSoftwareStacks[] = {
    // Megatron-LM, 2021: before FlashAttention (Dao et al., May 2022) and before sequence
    // parallelism (Korthikanti et al., May 2022); GPT models with dropout 0.1, whose output layer
    // multiplies by the word embeddings' weight (untying came later, as an opt-in flag).
    {"Narayanan et al., SC'21", "Megatron-LM 2021", false, false, true, false, true},
    // Megatron-LM, 2022: the paper that introduced selective recompute of the s^2 attention
    // activations -- the memory FlashAttention avoids -- so unfused attention; dropout 0.1. The
    // distributed optimizer (--use-distributed-optimizer) came to Megatron-LM later. Tied as above.
    {"Korthikanti et al.", "Megatron-LM 2022", false, true, true, false, true},
    // Megatron-DeepSpeed for BLOOM (trained Mar-Jul 2022): fused scale-mask-softmax, no flash
    // attention; BLOOM's config sets hidden and attention dropout to 0.0 and ties its LM head to
    // the word embeddings.
    {"bigscience-workshop", "Megatron-DeepSpeed 2022", false, false, false, true, true},
    // llm-foundry benchmarks (2023): MPT uses flash/triton attention and no dropout; its
    // SharedEmbedding serves as the output layer (weight tying).
    {"mosaicml/llm-foundry", "llm-foundry 2023", true, false, false, true, true},
};

const SoftwareStack* software_for(const std::string& source) {
  for (const auto& s : kSoftwareStacks)
    if (source.starts_with(s.source_prefix)) return &s;
  return nullptr;
}

std::vector<int> divisors_up_to(std::int64_t n, int limit) {
  std::vector<int> out;
  for (int d = 1; d <= limit && d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// One unreported field: its name and the values to try, as (JSON value, apply) pairs.
struct Choice {
  std::string field;
  std::vector<std::pair<json, std::function<void(Plan&)>>> options;
};

// The plan a case reports (`base`), the model as its software trained it, and the values to try
// for the fields the case leaves out.
struct CaseLayouts {
  Plan base;
  ModelSpec model;
  std::vector<Choice> choices;
};

// The parallel degrees and the global batch.
void read_degrees(JsonReader& r, Plan& base) {
  base.tp = static_cast<int>(r.integer("tp", 1, 1, 1 << 20));
  base.pp = static_cast<int>(r.integer("pp", 1, 1, 1 << 20));
  base.dp = static_cast<int>(r.integer("dp", 1, 1, 1 << 20));
  base.cp = static_cast<int>(r.integer("cp", 1, 1, 1 << 20));
  base.ep = static_cast<int>(r.integer("ep", 1, 1, 1 << 20));
  base.global_batch = r.required_integer("global_batch", 1, std::int64_t{1} << 40);
}

// The attention kernel is not a field of the schema: known stacks fix it (and the model's dropout
// and tied embeddings), otherwise it is chosen like an unreported field. Sequence parallelism:
// reported, else impossible on the stack, else chosen where tp > 1.
void read_software(const SoftwareStack* stack, JsonReader& r, CaseLayouts& l, CaseResult& out) {
  if (stack) {
    l.base.flash_attention = stack->flash_attention;
    l.model.dropout = stack->dropout;
    l.model.tied_embeddings = stack->tied_embeddings;
    out.assumed = {{"software", stack->name},
                   {"flash_attention", stack->flash_attention},
                   {"dropout", stack->dropout},
                   {"tied_embeddings", stack->tied_embeddings}};
  } else {
    l.choices.push_back({"flash_attention",
                         {{true, [](Plan& p) { p.flash_attention = true; }},
                          {false, [](Plan& p) { p.flash_attention = false; }}}});
  }
  auto opt_bool = r.optional_boolean("sequence_parallel");
  if (opt_bool) {
    l.base.sequence_parallel = *opt_bool;
  } else if (stack && !stack->sequence_parallel) {
    l.base.sequence_parallel = false;
    out.assumed["sequence_parallel"] = false;
  } else if (l.base.tp > 1) {
    l.choices.push_back({"sequence_parallel",
                         {{false, [](Plan& p) { p.sequence_parallel = false; }},
                          {true, [](Plan& p) { p.sequence_parallel = true; }}}});
  }
}

// The schedule, and its virtual stages: reported, or for an interleaved schedule chosen among
// the chunk counts that divide the layers.
void read_schedule(const ValidationCase& c, JsonReader& r, CaseLayouts& l) {
  Plan& base = l.base;
  const std::string sched = r.string("schedule", "");
  if (!sched.empty()) {
    auto s = parse_schedule(sched);
    if (!s)
      r.fail("schedule", s.error().message());
    else
      base.schedule = *s;
  }
  if (auto v = r.optional_integer("virtual_stages", 1, 1024)) {
    base.virtual_stages = static_cast<int>(*v);
  } else if (base.schedule == Schedule::kInterleaved1F1B && base.pp > 1) {
    Choice ch{"virtual_stages", {}};
    for (int chunks : divisors_up_to(c.model.layers / base.pp, 64))
      if (c.model.layers % (base.pp * chunks) == 0)
        ch.options.push_back({chunks, [chunks](Plan& p) { p.virtual_stages = chunks; }});
    l.choices.push_back(ch);
  }
}

// The micro-batch, ZeRO stage and recompute (each reported, fixed by the stack or chosen) and the
// precision.
void read_memory_fields(JsonReader& r, const SoftwareStack* stack, CaseLayouts& l, CaseResult& out) {
  Plan& base = l.base;
  if (auto mb = r.optional_integer("micro_batch", 1, 1 << 20)) {
    base.micro_batch = static_cast<int>(*mb);
  } else {
    Choice ch{"micro_batch", {}};
    for (int b : divisors_up_to(base.global_batch / base.dp, 64))
      ch.options.push_back({b, [b](Plan& p) { p.micro_batch = b; }});
    l.choices.push_back(ch);
  }
  if (auto z = r.optional_integer("zero_stage", 0, 3)) {
    base.zero_stage = static_cast<int>(*z);
  } else if (stack && !stack->distributed_optimizer) {
    base.zero_stage = 0;
    out.assumed["zero_stage"] = 0;
  } else if (base.dp * base.cp > 1) {
    l.choices.push_back(
        {"zero_stage", {{0, [](Plan& p) { p.zero_stage = 0; }}, {1, [](Plan& p) { p.zero_stage = 1; }}}});
  }
  const std::string rc = r.string("recompute", "");
  if (!rc.empty()) {
    auto parsed = parse_recompute(rc);
    if (!parsed)
      r.fail("recompute", parsed.error().message());
    else
      base.recompute = *parsed;
  } else {
    l.choices.push_back({"recompute",
                         {{"none", [](Plan& p) { p.recompute = Recompute::kNone; }},
                          {"selective", [](Plan& p) { p.recompute = Recompute::kSelective; }},
                          {"full", [](Plan& p) { p.recompute = Recompute::kFull; }}}});
  }
  const std::string prec = r.string("precision", "bf16");
  if (auto v = parse_precision(prec); v)
    base.precision = *v;
  else
    r.fail("precision", v.error().message());
}

// Reads the case's /parallel into `l`; false (out.failure says why) on a bad field.
bool read_case_layouts(const ValidationCase& c, CaseLayouts& l, CaseResult& out) {
  JsonReader r(c.parallel, c.file, "/parallel");
  r.reject_unknown_keys({"tp", "pp", "dp", "cp", "ep", "sequence_parallel", "virtual_stages", "zero_stage",
                         "micro_batch", "global_batch", "recompute", "precision", "schedule"});
  read_degrees(r, l.base);
  if (!r.ok()) {
    out.failure = r.error().message();
    return false;
  }
  const SoftwareStack* stack = software_for(c.source);
  l.model = c.model;
  read_software(stack, r, l, out);
  read_schedule(c, r, l);
  read_memory_fields(r, stack, l, out);
  if (!r.ok()) {
    out.failure = r.error().message();
    return false;
  }
  if (l.base.virtual_stages > 1 && l.base.schedule != Schedule::kInterleaved1F1B)
    l.base.schedule = Schedule::kInterleaved1F1B;
  return true;
}

// Tries every combination of the choices and keeps in `out` the fastest plan that validates and
// fits; false (out.failure: the smallest memory overrun, or the first invalid field) when none.
bool choose_fastest(const ValidationCase& c, const CaseLayouts& l, CaseResult& out) {
  const std::vector<Choice>& choices = l.choices;
  AnalyticModel am(l.model, c.cluster);
  const int accelerators = c.cluster.total_accelerators();
  bool found = false;
  std::string first_problem;
  double least_memory = INFINITY;
  MemoryBreakdown least_mem_breakdown;
  std::vector<std::size_t> idx(choices.size(), 0);
  while (true) {
    Plan plan = l.base;
    json chosen = json::object();
    for (std::size_t i = 0; i < choices.size(); ++i) {
      if (choices[i].options.empty()) continue;
      choices[i].options[idx[i]].second(plan);
      chosen[choices[i].field] = choices[i].options[idx[i]].first;
    }
    Status valid = validate_plan(plan, l.model, accelerators, c.file + " (at /parallel)");
    if (valid) {
      Prediction pred = am.evaluate(plan);
      if (!pred.fits()) {
        if (pred.memory.total < least_memory) {
          least_memory = pred.memory.total;
          least_mem_breakdown = pred.memory;
        }
      } else if (!found || pred.step_time_s < out.predicted_step_s) {
        found = true;
        out.predicted_step_s = pred.step_time_s;
        out.prediction = pred;
        out.plan = plan;
        out.chosen = chosen;
      }
    } else if (first_problem.empty()) {
      first_problem = valid.error().message();
    }
    // Next combination (odometer).
    std::size_t i = 0;
    for (; i < choices.size(); ++i) {
      if (++idx[i] < std::max<std::size_t>(1, choices[i].options.size())) break;
      idx[i] = 0;
    }
    if (i == choices.size()) break;
  }
  if (!found)
    out.failure = std::isfinite(least_memory)
                      ? "no layout fits in memory; the smallest " + describe_memory(least_mem_breakdown)
                      : (first_problem.empty() ? "no valid layout" : first_problem);
  return found;
}

// The discrete-event simulator's step time for the chosen plan; false (out.failure) on an error.
bool simulate_chosen(const ValidationCase& c, const ModelSpec& model, CaseResult& out) {
  auto w = lower(model, c.cluster, out.plan);
  if (!w) {
    out.failure = w.error().message();
    return false;
  }
  Simulator sim(*w, SimOptions{});
  auto simulated = sim.run();
  if (!simulated) {
    out.failure = simulated.error().message();
    return false;
  }
  out.prediction = simulated->prediction;
  out.predicted_step_s = simulated->prediction.step_time_s;
  return true;
}

}  // namespace

CaseResult run_validation_case(const ValidationCase& c, Engine engine) {
  CaseResult out;
  out.id = c.id;
  out.file = c.file;
  out.measured_step_s = c.measured_step_s;
  CaseLayouts l;
  if (!read_case_layouts(c, l, out) || !choose_fastest(c, l, out)) return out;
  if (engine == Engine::kDes && !simulate_chosen(c, l.model, out)) return out;
  out.ok = true;
  out.error_pct = (out.predicted_step_s - c.measured_step_s) / c.measured_step_s * 100.0;
  return out;
}

Result<std::vector<std::string>> collect_case_files(const std::vector<std::string>& paths) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  for (const auto& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<std::string> found;
      for (const auto& e : fs::recursive_directory_iterator(p, ec))
        if (e.is_regular_file() && e.path().extension() == ".json") found.push_back(e.path().string());
      if (ec) return Error(p + ": cannot list directory: " + ec.message());
      std::sort(found.begin(), found.end());
      if (found.empty()) return Error(p + ": no *.json validation cases in this directory");
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::is_regular_file(p, ec)) {
      files.push_back(p);
    } else {
      return Error(p + ": no such file or directory");
    }
  }
  return files;
}

ValidationSummary run_validation(const std::vector<std::string>& files, Engine engine) {
  ValidationSummary s;
  s.engine = engine;
  double sum = 0, csum = 0;
  int n = 0;
  for (const auto& f : files) {
    auto doc = read_json_file(f);
    if (doc && is_collectives_file(*doc)) {
      auto cases = collective_cases_from_json(*doc, f);
      if (!cases) {
        CollectiveResult bad;
        bad.id = std::filesystem::path(f).stem().string();
        bad.failure = cases.error().message();
        s.collectives.push_back(bad);
        ++s.failed;
        continue;
      }
      for (const auto& cc : *cases) {
        CollectiveResult cr = run_collective_case(cc);
        if (cr.ok) {
          csum += std::fabs(cr.error_pct);
          s.collectives_max_abs_error_pct =
              std::max(s.collectives_max_abs_error_pct, std::fabs(cr.error_pct));
        } else {
          ++s.failed;
        }
        s.collectives.push_back(std::move(cr));
      }
      continue;
    }
    Result<ValidationCase> c = doc ? validation_case_from_json(*doc, f) : Result<ValidationCase>(doc.error());
    CaseResult r;
    if (!c) {
      r.file = f;
      r.id = std::filesystem::path(f).stem().string();
      r.failure = c.error().message();
    } else {
      r = run_validation_case(*c, engine);
    }
    if (r.ok) {
      sum += std::fabs(r.error_pct);
      ++n;
      if (std::fabs(r.error_pct) > s.max_abs_error_pct) {
        s.max_abs_error_pct = std::fabs(r.error_pct);
        s.worst_id = r.id;
      }
    } else {
      ++s.failed;
    }
    s.cases.push_back(std::move(r));
  }
  s.mape_pct = n > 0 ? sum / n : 0.0;
  int cok = 0;
  for (const auto& cr : s.collectives) cok += cr.ok ? 1 : 0;
  s.collectives_mape_pct = cok > 0 ? csum / cok : 0.0;
  return s;
}

json validation_to_json(const ValidationSummary& s) {
  json cases = json::array(), failed = json::array();
  for (const auto& r : s.cases) {
    if (r.ok) {
      cases.push_back({{"id", r.id},
                       {"predicted_step_s", r.predicted_step_s},
                       {"measured_step_s", r.measured_step_s},
                       {"error_pct", r.error_pct},
                       {"chosen", r.chosen},
                       {"assumed", r.assumed},
                       {"plan", plan_to_json(r.plan)},
                       {"prediction", prediction_to_json(r.prediction)}});
    } else {
      failed.push_back({{"id", r.id}, {"file", r.file}, {"reason", r.failure}});
    }
  }
  json out = {{"engine", s.engine == Engine::kDes ? "des" : "analytic"},
              {"cases", cases},
              {"mape_pct", s.mape_pct},
              {"max_abs_error_pct", s.max_abs_error_pct},
              {"worst_id", s.worst_id},
              {"failed", failed}};
  if (!s.collectives.empty()) {
    json cs = json::array();
    for (const auto& c : s.collectives) {
      if (!c.ok) {
        out["failed"].push_back({{"id", c.id}, {"reason", c.failure}});
        continue;
      }
      cs.push_back({{"id", c.id},
                    {"kind", c.kind},
                    {"algorithm", c.algorithm},
                    {"predicted_busbw_GBps", c.predicted_busbw / 1e9},
                    {"measured_busbw_GBps", c.measured_busbw / 1e9},
                    {"error_pct", c.error_pct}});
    }
    out["collectives"] = {{"cases", cs},
                          {"mape_pct", s.collectives_mape_pct},
                          {"max_abs_error_pct", s.collectives_max_abs_error_pct}};
  }
  return out;
}

}  // namespace foresight

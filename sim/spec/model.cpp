// ModelSpec: parameter counts, JSON load/save and Hugging Face config.json import.
#include "sim/spec/model.h"

#include <algorithm>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "sim/spec/json_reader.h"

namespace foresight {

using nlohmann::json;

std::string to_string(MlpKind k) {
  switch (k) {
    case MlpKind::kGelu:
      return "gelu";
    case MlpKind::kSwiglu:
      return "swiglu";
    case MlpKind::kSquaredRelu:
      return "squared-relu";
  }
  return "gelu";
}

std::string to_string(NormKind k) { return k == NormKind::kRmsNorm ? "rmsnorm" : "layernorm"; }

namespace {

double norm_params(const ModelSpec& m) {
  return m.norm == NormKind::kLayerNorm ? 2.0 * m.hidden : 1.0 * m.hidden;
}

// Weight matrices of an MLP of width f: gate+up+down for SwiGLU, up+down otherwise.
double mlp_matrix_params(const ModelSpec& m, double f) {
  const double mats = m.mlp == MlpKind::kSwiglu ? 3.0 : 2.0;
  return mats * m.hidden * f + (m.bias ? f * (mats - 1) + m.hidden : 0.0);
}

MlpKind mlp_from_activation(const std::string& act) {
  if (act == "silu" || act == "swiglu" || act == "swish") return MlpKind::kSwiglu;
  if (act == "relu2" || act == "squared-relu" || act == "squared_relu") return MlpKind::kSquaredRelu;
  return MlpKind::kGelu;
}

}  // namespace

std::int64_t ModelSpec::q_dim() const {
  if (mla.enabled()) return std::int64_t{heads} * (mla.qk_nope_head_dim + mla.qk_rope_head_dim);
  return std::int64_t{heads} * head_dim;
}
std::int64_t ModelSpec::kv_dim() const {
  if (mla.enabled()) return mla.kv_lora_rank + mla.qk_rope_head_dim;
  return std::int64_t{kv_heads} * head_dim;
}
std::int64_t ModelSpec::v_dim() const {
  if (mla.enabled()) return std::int64_t{heads} * mla.v_head_dim;
  return std::int64_t{heads} * head_dim;
}

double ModelSpec::attention_params() const {
  const double h = static_cast<double>(hidden);
  double p = 0.0;
  if (mla.enabled()) {
    const double qk_head = mla.qk_nope_head_dim + mla.qk_rope_head_dim;
    if (mla.q_lora_rank > 0) {
      p += h * mla.q_lora_rank + mla.q_lora_rank + 1.0 * mla.q_lora_rank * heads * qk_head;
    } else {
      p += h * heads * qk_head;
    }
    p += h * (mla.kv_lora_rank + mla.qk_rope_head_dim) + mla.kv_lora_rank;
    p += 1.0 * mla.kv_lora_rank * heads * (mla.qk_nope_head_dim + mla.v_head_dim);
    p += 1.0 * heads * mla.v_head_dim * h;
  } else {
    const double q = static_cast<double>(q_dim()), kv = static_cast<double>(kv_dim());
    p += h * (q + 2 * kv) + q * h;
    if (bias) p += q + 2 * kv + h;
  }
  return p + norm_params(*this);
}

double ModelSpec::dense_mlp_params() const {
  return mlp_matrix_params(*this, static_cast<double>(ffn_hidden)) + norm_params(*this);
}

double ModelSpec::expert_params() const {
  return mlp_matrix_params(*this, static_cast<double>(moe.expert_ffn_hidden));
}

double ModelSpec::moe_mlp_params() const {
  return (moe.experts + moe.shared_experts) * expert_params() + 1.0 * hidden * moe.experts +
         norm_params(*this);
}

double ModelSpec::embedding_params() const { return end_params_on_stage(0, 1, false, 1); }

double ModelSpec::end_params_on_stage(int stage, int pp, bool dualpipe, int tp) const {
  const bool first = stage == 0, last = stage == pp - 1;
  const bool both = dualpipe && pp > 1;
  const int tables = both ? (first || last ? 2 : 0)
                          : (first ? 1 : 0) + (last ? 1 : 0) - (tied_embeddings && pp == 1 ? 1 : 0);
  const bool head = last || (both && first);
  return tables * static_cast<double>(vocab) * hidden / tp + (head ? norm_params(*this) : 0.0);
}

double ModelSpec::total_params() const {
  return layers * attention_params() + dense_layers() * dense_mlp_params() + moe_layers() * moe_mlp_params() +
         embedding_params();
}

double ModelSpec::active_params() const {
  if (!is_moe()) return total_params();
  const double active_moe =
      (moe.top_k + moe.shared_experts) * expert_params() + 1.0 * hidden * moe.experts + norm_params(*this);
  return layers * attention_params() + dense_layers() * dense_mlp_params() + moe_layers() * active_moe +
         embedding_params();
}

Status validate_model(const ModelSpec& m, const std::string& file) {
  auto fail = [&](const std::string& field, const std::string& why) {
    return Status(Error(file + ": /" + field + ": " + why));
  };
  if (m.layers < 1) return fail("layers", "must be >= 1");
  if (m.hidden < 1) return fail("hidden", "must be >= 1");
  if (m.heads < 1) return fail("heads", "must be >= 1");
  if (m.kv_heads < 1 || m.kv_heads > m.heads)
    return fail("kv_heads",
                std::to_string(m.kv_heads) + " must be in [1, heads=" + std::to_string(m.heads) + "]");
  if (m.heads % m.kv_heads != 0)
    return fail("kv_heads",
                std::to_string(m.kv_heads) + " does not divide heads (" + std::to_string(m.heads) + ")");
  if (m.head_dim < 1) return fail("head_dim", "must be >= 1");
  if (m.ffn_hidden < 1 && m.dense_layers() > 0) return fail("ffn_hidden", "must be >= 1");
  if (m.vocab < 1) return fail("vocab", "must be >= 1");
  if (m.seq_len < 1) return fail("seq_len", "must be >= 1");
  if (m.is_moe()) {
    if (m.moe.top_k < 1 || m.moe.top_k > m.moe.experts)
      return fail("moe/top_k", std::to_string(m.moe.top_k) +
                                   " must be in [1, experts=" + std::to_string(m.moe.experts) + "]");
    if (m.moe.expert_ffn_hidden < 1) return fail("moe/expert_ffn_hidden", "must be >= 1");
    if (m.moe.dense_layers < 0 || m.moe.dense_layers > m.layers)
      return fail("moe/dense_layers", "must be in [0, layers]");
  }
  if (m.mla.enabled() && (m.mla.qk_nope_head_dim < 1 || m.mla.v_head_dim < 1))
    return fail("mla", "qk_nope_head_dim and v_head_dim must be >= 1 when kv_lora_rank > 0");
  return Status::Ok();
}

MlaSpec read_mla(JsonReader& mla) {
  mla.reject_unknown_keys(
      {"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"});
  MlaSpec out;
  out.q_lora_rank = static_cast<int>(mla.integer("q_lora_rank", 0, 0, 1 << 20));
  out.kv_lora_rank = static_cast<int>(mla.required_integer("kv_lora_rank", 1, 1 << 20));
  out.qk_nope_head_dim = static_cast<int>(mla.required_integer("qk_nope_head_dim", 1, 1 << 16));
  out.qk_rope_head_dim = static_cast<int>(mla.integer("qk_rope_head_dim", 0, 0, 1 << 16));
  out.v_head_dim = static_cast<int>(mla.required_integer("v_head_dim", 1, 1 << 16));
  return out;
}

Result<ModelSpec> model_from_json(const json& doc, const std::string& file) {
  JsonReader r(doc, file);
  r.reject_unknown_keys({"name", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "mlp",
                         "norm", "vocab", "seq_len", "tied_embeddings", "bias", "dropout", "rope",
                         "parallel_block", "sliding_window", "moe", "mla"});
  ModelSpec m;
  m.name = r.string("name", "unnamed");
  m.layers = static_cast<int>(r.required_integer("layers", 1, 100000));
  m.hidden = r.required_integer("hidden", 1, 1 << 22);
  m.heads = static_cast<int>(r.required_integer("heads", 1, 1 << 16));
  m.kv_heads = static_cast<int>(r.integer("kv_heads", m.heads, 1, 1 << 16));
  m.head_dim = static_cast<int>(r.integer("head_dim", m.heads > 0 ? m.hidden / m.heads : 1, 1, 1 << 16));
  m.ffn_hidden = r.integer("ffn_hidden", 4 * m.hidden, 1, 1 << 24);
  m.mlp = mlp_from_activation(r.choice("mlp", {"gelu", "swiglu", "squared-relu"}, "gelu"));
  m.norm = r.choice("norm", {"layernorm", "rmsnorm"}, "layernorm") == "rmsnorm" ? NormKind::kRmsNorm
                                                                                : NormKind::kLayerNorm;
  m.vocab = r.required_integer("vocab", 1, 1 << 24);
  m.seq_len = static_cast<int>(r.required_integer("seq_len", 1, 1 << 24));
  m.tied_embeddings = r.boolean("tied_embeddings", false);
  m.bias = r.boolean("bias", false);
  m.dropout = r.boolean("dropout", false);
  m.rope = r.boolean("rope", false);
  m.parallel_block = r.boolean("parallel_block", false);
  m.sliding_window = static_cast<int>(r.integer("sliding_window", 0, 0, 1 << 24));
  if (r.has("moe")) {
    JsonReader moe = r.object("moe");
    moe.reject_unknown_keys({"experts", "top_k", "shared_experts", "expert_ffn_hidden", "dense_layers"});
    m.moe.experts = static_cast<int>(moe.required_integer("experts", 1, 1 << 16));
    m.moe.top_k = static_cast<int>(moe.required_integer("top_k", 1, 1 << 16));
    m.moe.shared_experts = static_cast<int>(moe.integer("shared_experts", 0, 0, 1 << 10));
    m.moe.expert_ffn_hidden = moe.integer("expert_ffn_hidden", m.ffn_hidden, 1, 1 << 24);
    m.moe.dense_layers = static_cast<int>(moe.integer("dense_layers", 0, 0, 100000));
  }
  if (r.has("mla")) {
    JsonReader mla = r.object("mla");
    m.mla = read_mla(mla);
  }
  if (!r.ok()) return r.error();
  FS_RETURN_IF_ERROR(validate_model(m, file));
  return m;
}

json model_to_json(const ModelSpec& m) {
  json j = {{"name", m.name},
            {"layers", m.layers},
            {"hidden", m.hidden},
            {"heads", m.heads},
            {"kv_heads", m.kv_heads},
            {"head_dim", m.head_dim},
            {"ffn_hidden", m.ffn_hidden},
            {"mlp", to_string(m.mlp)},
            {"norm", to_string(m.norm)},
            {"vocab", m.vocab},
            {"seq_len", m.seq_len},
            {"tied_embeddings", m.tied_embeddings},
            {"bias", m.bias},
            {"dropout", m.dropout},
            {"rope", m.rope}};
  if (m.parallel_block) j["parallel_block"] = true;
  if (m.sliding_window > 0) j["sliding_window"] = m.sliding_window;
  if (m.is_moe()) {
    j["moe"] = {{"experts", m.moe.experts},
                {"top_k", m.moe.top_k},
                {"shared_experts", m.moe.shared_experts},
                {"expert_ffn_hidden", m.moe.expert_ffn_hidden},
                {"dense_layers", m.moe.dense_layers}};
  }
  if (m.mla.enabled()) {
    j["mla"] = {{"q_lora_rank", m.mla.q_lora_rank},
                {"kv_lora_rank", m.mla.kv_lora_rank},
                {"qk_nope_head_dim", m.mla.qk_nope_head_dim},
                {"qk_rope_head_dim", m.mla.qk_rope_head_dim},
                {"v_head_dim", m.mla.v_head_dim}};
  }
  return j;
}

bool looks_like_hf_config(const json& doc) {
  return doc.is_object() &&
         (doc.contains("model_type") || doc.contains("architectures") || doc.contains("num_hidden_layers"));
}

namespace {

// How a config.json names its dimensions: the Llama family's names, or one of the older models'.
enum class HfNames { kLlama, kGpt2, kGptNeoX, kFalcon, kBloom, kOpt };

// One Hugging Face architecture (transformers' modeling_<model_type>.py): how its config names the
// fields and what its layers do. Whether the MLP is gated is the architecture's, not the
// activation's: Llama gates whatever hidden_act says, GPT-NeoX does not gate a SiLU.
struct HfArchitecture {
  std::string_view class_name;  // an "architectures" entry
  std::string_view model_type;  // "model_type"
  HfNames names;
  bool gated;                    // act(gate(x)) * up(x) (SwiGLU, Gemma's GeGLU) or act(up(x))
  std::string_view act_key;      // the field naming the activation; empty: fixed by the code
  std::string_view act_default;  // transformers' default for it
  NormKind norm;
  bool bias;  // default for the linear layers' biases
  bool tied;  // default for tie_word_embeddings
  bool rope;  // rotary positions (else learned or ALiBi)
};

// Sources: each model's configuration_<model_type>.py defaults and modeling_<model_type>.py MLP.
constexpr HfArchitecture kHfArchitectures[] = {
    {"LlamaForCausalLM", "llama", HfNames::kLlama, true, "hidden_act", "silu", NormKind::kRmsNorm, false,
     false, true},
    {"MistralForCausalLM", "mistral", HfNames::kLlama, true, "hidden_act", "silu", NormKind::kRmsNorm, false,
     false, true},
    {"MixtralForCausalLM", "mixtral", HfNames::kLlama, true, "hidden_act", "silu", NormKind::kRmsNorm, false,
     false, true},
    // Qwen2's q, k and v projections always carry biases (no attention_bias field).
    {"Qwen2ForCausalLM", "qwen2", HfNames::kLlama, true, "hidden_act", "silu", NormKind::kRmsNorm, true,
     false, true},
    {"Qwen2MoeForCausalLM", "qwen2_moe", HfNames::kLlama, true, "hidden_act", "silu", NormKind::kRmsNorm,
     true, false, true},
    {"Qwen3ForCausalLM", "qwen3", HfNames::kLlama, true, "hidden_act", "silu", NormKind::kRmsNorm, false,
     false, true},
    {"Qwen3MoeForCausalLM", "qwen3_moe", HfNames::kLlama, true, "hidden_act", "silu", NormKind::kRmsNorm,
     false, false, true},
    {"DeepseekV2ForCausalLM", "deepseek_v2", HfNames::kLlama, true, "hidden_act", "silu", NormKind::kRmsNorm,
     false, false, true},
    {"DeepseekV3ForCausalLM", "deepseek_v3", HfNames::kLlama, true, "hidden_act", "silu", NormKind::kRmsNorm,
     false, false, true},
    // Gemma: GeGLU, gelu_pytorch_tanh (hidden_activation, falling back to hidden_act), tied tables.
    {"GemmaForCausalLM", "gemma", HfNames::kLlama, true, "hidden_activation", "gelu_pytorch_tanh",
     NormKind::kRmsNorm, false, true, true},
    {"Gemma2ForCausalLM", "gemma2", HfNames::kLlama, true, "hidden_activation", "gelu_pytorch_tanh",
     NormKind::kRmsNorm, false, true, true},
    {"GPT2LMHeadModel", "gpt2", HfNames::kGpt2, false, "activation_function", "gelu_new",
     NormKind::kLayerNorm, true, true, false},
    {"GPTNeoXForCausalLM", "gpt_neox", HfNames::kGptNeoX, false, "hidden_act", "gelu", NormKind::kLayerNorm,
     true, false, true},
    {"FalconForCausalLM", "falcon", HfNames::kFalcon, false, "activation", "gelu", NormKind::kLayerNorm,
     false, true, true},
    // BLOOM's MLP calls its own tanh GeLU whatever the config says; ALiBi positions.
    {"BloomForCausalLM", "bloom", HfNames::kBloom, false, "", "gelu", NormKind::kLayerNorm, true, true,
     false},
    {"OPTForCausalLM", "opt", HfNames::kOpt, false, "activation_function", "relu", NormKind::kLayerNorm, true,
     true, false},
};

// transformers' ACT2FN keys (activations.py ACT2CLS). get_activation looks them up in a dict, so
// the match is exact and case-sensitive: "SiLU" fails there and here.
constexpr std::string_view kHfActivations[] = {
    "gelu",          "gelu_10", "gelu_fast",  "gelu_new", "gelu_python", "gelu_pytorch_tanh",
    "gelu_accurate", "laplace", "leaky_relu", "linear",   "mish",        "quick_gelu",
    "relu",          "relu2",   "relu6",      "sigmoid",  "silu",        "swish",
    "tanh",          "prelu"};

template <typename Range, typename Name>
std::string join_names(const Range& items, Name name) {
  std::string out;
  for (const auto& x : items) out += (out.empty() ? "" : ", ") + std::string(name(x));
  return out;
}

// The architecture a config describes: its "architectures" entries (every one must be known), or
// when it has none its "model_type". Records the error in `r` and returns null otherwise.
const HfArchitecture* hf_architecture(JsonReader& r) {
  const auto by_class = [](std::string_view c) -> const HfArchitecture* {
    for (const auto& a : kHfArchitectures)
      if (a.class_name == c) return &a;
    return nullptr;
  };
  const std::string classes = join_names(kHfArchitectures, [](const auto& a) { return a.class_name; });
  if (r.has("architectures")) {
    const HfArchitecture* first = nullptr;
    std::vector<JsonReader> entries = r.array("architectures");
    if (!r.ok()) return nullptr;
    if (entries.empty()) {
      r.fail("architectures", "empty; name the model class (known: " + classes + ")");
      return nullptr;
    }
    for (JsonReader& e : entries) {
      if (!e.node().is_string()) {
        e.fail("", "expected a model class name as a string, got " + std::string(e.node().type_name()));
        return nullptr;
      }
      const std::string name = e.node().get<std::string>();
      const HfArchitecture* a = by_class(name);
      if (!a) {
        e.fail("", "unknown architecture \"" + name + "\" (known: " + classes + ")");
        return nullptr;
      }
      if (!first) first = a;
    }
    return first;
  }
  const std::string types = join_names(kHfArchitectures, [](const auto& a) { return a.model_type; });
  if (!r.has("model_type")) {
    r.fail("architectures",
           "missing, and no model_type either: the config does not say which model it is "
           "(known architectures: " +
               classes + ")");
    return nullptr;
  }
  const std::string type = r.string("model_type");
  if (!r.ok()) return nullptr;
  for (const auto& a : kHfArchitectures)
    if (a.model_type == type) return &a;
  r.fail("model_type", "unknown model type \"" + type + "\" (known: " + types + ")");
  return nullptr;
}

// The MLP the architecture builds with the activation its config names (checked against ACT2FN).
MlpKind hf_mlp(JsonReader& r, const HfArchitecture& a) {
  std::string key(a.act_key);
  // Gemma's hidden_activation wins; without it transformers uses hidden_act.
  if (a.act_key == "hidden_activation" && !r.has(key)) key = "hidden_act";
  const std::string act =
      a.act_key.empty() ? std::string(a.act_default) : r.string(key, std::string(a.act_default));
  if (!r.ok()) return MlpKind::kGelu;
  if (std::find(std::begin(kHfActivations), std::end(kHfActivations), act) == std::end(kHfActivations)) {
    r.fail(key, "unknown activation \"" + act + "\" (transformers' ACT2FN names, matched exactly: " +
                    join_names(kHfActivations, [](std::string_view s) { return s; }) + ")");
    return MlpKind::kGelu;
  }
  if (a.gated) return MlpKind::kSwiglu;  // SwiGLU or GeGLU: gate, up and down matrices alike
  return act == "relu2" ? MlpKind::kSquaredRelu : MlpKind::kGelu;
}

// Where each family of configs keeps the shape (transformers' attribute names, in the order
// read), indexed by HfNames.
struct HfShapeKeys {
  HfNames names;
  std::string_view layers;
  std::string_view hidden_alias;  // an older name read first where present (BLOOM's n_embed)
  std::string_view hidden, heads;
  std::string_view ffn;  // empty: 4 x hidden, fixed by the code
  std::string_view seq;  // the position limit (ALiBi models: the training length)
  std::int64_t seq_default;
  std::string_view bias;        // overrides the architecture's bias; empty: none
  std::string_view dropout[2];  // attention and residual dropout (either > 0: dropout)
  double dropout_default;       // the first one's default
};
constexpr HfShapeKeys kHfShapeKeys[] = {
    {HfNames::kLlama,
     "num_hidden_layers",
     "",
     "hidden_size",
     "num_attention_heads",
     "intermediate_size",
     "max_position_embeddings",
     4096,
     "attention_bias",
     {"attention_dropout", "hidden_dropout"},
     0.0},
    {HfNames::kGpt2,
     "n_layer",
     "",
     "n_embd",
     "n_head",
     "n_inner",
     "n_positions",
     1024,
     "",
     {"resid_pdrop", "attn_pdrop"},
     0.0},
    {HfNames::kGptNeoX,
     "num_hidden_layers",
     "",
     "hidden_size",
     "num_attention_heads",
     "intermediate_size",
     "max_position_embeddings",
     2048,
     "attention_bias",
     {"attention_dropout", "hidden_dropout"},
     0.0},
    {HfNames::kFalcon,
     "num_hidden_layers",
     "",
     "hidden_size",
     "num_attention_heads",
     "ffn_hidden_size",
     "max_position_embeddings",
     2048,
     "bias",
     {"attention_dropout", "hidden_dropout"},
     0.0},
    {HfNames::kBloom,
     "n_layer",
     "n_embed",
     "hidden_size",
     "n_head",
     "",
     "seq_length",
     2048,
     "",
     {"attention_dropout", "hidden_dropout"},
     0.0},
    {HfNames::kOpt,
     "num_hidden_layers",
     "",
     "hidden_size",
     "num_attention_heads",
     "ffn_dim",
     "max_position_embeddings",
     2048,
     "enable_bias",
     {"dropout", "attention_dropout"},
     0.1},
};
static_assert(
    [] {
      for (std::size_t i = 0; i < std::size(kHfShapeKeys); ++i)
        if (static_cast<std::size_t>(kHfShapeKeys[i].names) != i) return false;
      return true;
    }(),
    "kHfShapeKeys is indexed by HfNames");

// The shape of the model from the config's own names, and the family's own fields: Llama's
// rope_scaling and head_dim, GPT-NeoX's partial rotary, Falcon's ALiBi switch and its key-value
// heads.
void read_hf_shape(JsonReader& r, const HfArchitecture& arch, ModelSpec& m) {
  const HfShapeKeys& k = kHfShapeKeys[static_cast<int>(arch.names)];
  m.layers = static_cast<int>(r.required_integer(k.layers, 1, 100000));
  m.hidden = !k.hidden_alias.empty() && r.has(k.hidden_alias) ? r.integer(k.hidden_alias, 1, 1, 1 << 22)
                                                              : r.required_integer(k.hidden, 1, 1 << 22);
  m.heads = static_cast<int>(r.required_integer(k.heads, 1, 1 << 16));
  m.ffn_hidden = k.ffn.empty() ? 4 * m.hidden : r.integer(k.ffn, 4 * m.hidden, 1, 1 << 24);
  m.seq_len = static_cast<int>(r.integer(k.seq, k.seq_default, 1, 1 << 24));
  if (k.names == HfNames::kLlama && r.has("rope_scaling") && r.node()["rope_scaling"].is_object()) {
    // The pre-training length: rope_scaling's original length when context was extended later.
    JsonReader rs = r.object("rope_scaling");
    m.seq_len = static_cast<int>(rs.integer("original_max_position_embeddings", m.seq_len, 1, 1 << 24));
  }
  if (!k.bias.empty()) m.bias = r.boolean(k.bias, arch.bias);
  if (k.names == HfNames::kGptNeoX) m.rope = r.number("rotary_pct", 0.25, 0.0, 1.0) > 0.0;
  if (k.names == HfNames::kFalcon) m.rope = !r.boolean("alibi", false);
  m.dropout = r.number(k.dropout[0], k.dropout_default, 0.0, 1.0) > 0.0 ||
              r.number(k.dropout[1], 0.0, 0.0, 1.0) > 0.0;
  if (k.names == HfNames::kFalcon) {
    // FalconAttention: the new decoder's num_kv_heads, else one shared head (multi_query) or MHA.
    const int kv = static_cast<int>(r.integer("num_kv_heads", m.heads, 1, 1 << 16));
    m.kv_heads = r.boolean("new_decoder_architecture", false) ? kv
                 : r.boolean("multi_query", true)             ? 1
                                                              : m.heads;
  }
  // GPTNeoXLayer's use_parallel_residual (default true); FalconDecoderLayer runs attention and MLP
  // side by side with parallel_attn (default true) or the new decoder architecture.
  if (k.names == HfNames::kGptNeoX) m.parallel_block = r.boolean("use_parallel_residual", true);
  if (k.names == HfNames::kFalcon)
    m.parallel_block = r.boolean("parallel_attn", true) || r.boolean("new_decoder_architecture", false);
  // Sliding windows: Mistral's and Mixtral's sliding_window (null: none); Qwen2's and Qwen3's only
  // with use_sliding_window (default false). Gemma 2 alternates windowed and global layers, which
  // one window for every layer cannot say: its layers are read as global.
  if (k.names == HfNames::kLlama && arch.model_type != "gemma2" && r.has("sliding_window") &&
      r.node()["sliding_window"].is_number_integer()) {
    const bool qwen = arch.model_type.substr(0, 4) == "qwen";
    if (!qwen || r.boolean("use_sliding_window", false))
      m.sliding_window = static_cast<int>(r.integer("sliding_window", 0, 0, 1 << 24));
  }
  if (k.names == HfNames::kLlama) {
    m.kv_heads = static_cast<int>(r.integer("num_key_value_heads", m.heads, 1, 1 << 16));
    if (r.has("head_dim")) m.head_dim = static_cast<int>(r.integer("head_dim", 1, 1, 1 << 16));
  }
  if (m.kv_heads == 0) m.kv_heads = m.heads;
  if (m.head_dim == 0 && m.heads > 0) {  // derived, so held to the limit head_dim has when given
    const std::int64_t head = m.hidden / m.heads;
    if (head > (1 << 16))
      r.fail("head_dim", "hidden size " + std::to_string(m.hidden) + " / " + std::to_string(m.heads) +
                             " heads = " + std::to_string(head) + " is out of range; expected at most 65536");
    else
      m.head_dim = static_cast<int>(head);
  }
}

// Mixture of experts: Mixtral, Qwen2-MoE and DeepSeek spell it differently; DeepSeek's MLA.
void read_hf_experts(JsonReader& r, ModelSpec& m) {
  if (r.has("num_local_experts")) {  // Mixtral
    m.moe.experts = static_cast<int>(r.integer("num_local_experts", 0, 1, 1 << 16));
    m.moe.top_k = static_cast<int>(r.integer("num_experts_per_tok", 2, 1, 1 << 16));
    m.moe.expert_ffn_hidden = m.ffn_hidden;
  } else if (r.has("n_routed_experts")) {  // DeepSeek-V2/V3
    m.moe.experts = static_cast<int>(r.integer("n_routed_experts", 0, 1, 1 << 16));
    m.moe.top_k = static_cast<int>(r.integer("num_experts_per_tok", 1, 1, 1 << 16));
    m.moe.shared_experts = static_cast<int>(r.integer("n_shared_experts", 0, 0, 1 << 10));
    m.moe.expert_ffn_hidden = r.integer("moe_intermediate_size", m.ffn_hidden, 1, 1 << 24);
    m.moe.dense_layers = static_cast<int>(r.integer("first_k_dense_replace", 0, 0, 100000));
  } else if (r.has("num_experts") && r.integer("num_experts", 0, 0, 1 << 16) > 0) {  // Qwen2-MoE
    m.moe.experts = static_cast<int>(r.integer("num_experts", 0, 1, 1 << 16));
    m.moe.top_k = static_cast<int>(r.integer("num_experts_per_tok", 1, 1, 1 << 16));
    m.moe.expert_ffn_hidden = r.integer("moe_intermediate_size", m.ffn_hidden, 1, 1 << 24);
    const auto shared = r.integer("shared_expert_intermediate_size", 0, 0, 1 << 24);
    // The shared expert as routed-expert widths, within the model format's own limit (1024).
    const std::int64_t widths =
        m.moe.expert_ffn_hidden > 0 ? (shared + m.moe.expert_ffn_hidden / 2) / m.moe.expert_ffn_hidden : 0;
    if (widths > (1 << 10))
      r.fail("shared_expert_intermediate_size",
             std::to_string(shared) + " is " + std::to_string(widths) + " experts of moe_intermediate_size " +
                 std::to_string(m.moe.expert_ffn_hidden) + "; at most 1024");
    else
      m.moe.shared_experts = static_cast<int>(widths);
  }
  if (r.has("kv_lora_rank")) {
    m.mla.kv_lora_rank = static_cast<int>(r.integer("kv_lora_rank", 0, 0, 1 << 20));
    m.mla.q_lora_rank = static_cast<int>(r.integer("q_lora_rank", 0, 0, 1 << 20));
    m.mla.qk_nope_head_dim = static_cast<int>(r.integer("qk_nope_head_dim", 128, 1, 1 << 16));
    m.mla.qk_rope_head_dim = static_cast<int>(r.integer("qk_rope_head_dim", 64, 0, 1 << 16));
    m.mla.v_head_dim = static_cast<int>(r.integer("v_head_dim", 128, 1, 1 << 16));
  }
}

}  // namespace

Result<ModelSpec> model_from_hf_config(const json& doc, const std::string& file) {
  if (!doc.is_object()) return Error(file + ": /: expected a JSON object (a Hugging Face config.json)");
  JsonReader r(doc, file);
  const HfArchitecture* arch = hf_architecture(r);
  if (!arch) return r.error();
  const std::string type = r.string("model_type", std::string(arch->model_type));
  ModelSpec m;
  m.name = r.string("_name_or_path", type.empty() ? "hf-model" : type);
  m.norm = arch->norm;
  m.bias = arch->bias;
  m.rope = arch->rope;
  m.tied_embeddings = r.boolean("tie_word_embeddings", arch->tied);
  read_hf_shape(r, *arch, m);
  m.vocab = r.required_integer("vocab_size", 1, 1 << 24);
  m.mlp = hf_mlp(r, *arch);
  read_hf_experts(r, m);
  if (!r.ok()) return r.error();
  FS_RETURN_IF_ERROR(validate_model(m, file));
  return m;
}

namespace {
Result<ModelSpec> model_from_document(const json& doc, const std::string& file) {
  if (!doc.is_object()) return Error(file + ": /: expected a JSON object describing a model");
  if (looks_like_hf_config(doc)) return model_from_hf_config(doc, file);
  return model_from_json(doc, file);
}
}  // namespace

Result<ModelSpec> model_from_text(std::string_view text, const std::string& file) {
  FS_ASSIGN_OR_RETURN(json doc, parse_json_text(text, file));
  return model_from_document(doc, file);
}

Result<ModelSpec> load_model_file(const std::string& path) {
  FS_ASSIGN_OR_RETURN(json doc, read_json_file(path));
  return model_from_document(doc, path);
}

}  // namespace foresight

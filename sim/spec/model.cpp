// ModelSpec: parameter counts, JSON load/save and Hugging Face config.json import.
#include "sim/spec/model.h"

#include <nlohmann/json.hpp>

#include "sim/spec/json_reader.h"

namespace foresight {

using nlohmann::json;

std::string to_string(MlpKind k) {
  switch (k) {
    case MlpKind::kGelu: return "gelu";
    case MlpKind::kSwiglu: return "swiglu";
    case MlpKind::kSquaredRelu: return "squared-relu";
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
  const int tables = both ? (first || last ? 2 : 0) : (first ? 1 : 0) + (last ? 1 : 0) - (tied_embeddings && pp == 1 ? 1 : 0);
  const bool head = last || (both && first);
  return tables * static_cast<double>(vocab) * hidden / tp + (head ? norm_params(*this) : 0.0);
}

double ModelSpec::total_params() const {
  return layers * attention_params() + dense_layers() * dense_mlp_params() +
         moe_layers() * moe_mlp_params() + embedding_params();
}

double ModelSpec::active_params() const {
  if (!is_moe()) return total_params();
  const double active_moe =
      (moe.top_k + moe.shared_experts) * expert_params() + 1.0 * hidden * moe.experts + norm_params(*this);
  return layers * attention_params() + dense_layers() * dense_mlp_params() +
         moe_layers() * active_moe + embedding_params();
}

Status validate_model(const ModelSpec& m, const std::string& file) {
  auto fail = [&](const std::string& field, const std::string& why) {
    return Status(Error(file + ": /" + field + ": " + why));
  };
  if (m.layers < 1) return fail("layers", "must be >= 1");
  if (m.hidden < 1) return fail("hidden", "must be >= 1");
  if (m.heads < 1) return fail("heads", "must be >= 1");
  if (m.kv_heads < 1 || m.kv_heads > m.heads)
    return fail("kv_heads", std::to_string(m.kv_heads) + " must be in [1, heads=" + std::to_string(m.heads) + "]");
  if (m.heads % m.kv_heads != 0)
    return fail("kv_heads", std::to_string(m.kv_heads) + " does not divide heads (" + std::to_string(m.heads) + ")");
  if (m.head_dim < 1) return fail("head_dim", "must be >= 1");
  if (m.ffn_hidden < 1 && m.dense_layers() > 0) return fail("ffn_hidden", "must be >= 1");
  if (m.vocab < 1) return fail("vocab", "must be >= 1");
  if (m.seq_len < 1) return fail("seq_len", "must be >= 1");
  if (m.is_moe()) {
    if (m.moe.top_k < 1 || m.moe.top_k > m.moe.experts)
      return fail("moe/top_k", std::to_string(m.moe.top_k) + " must be in [1, experts=" + std::to_string(m.moe.experts) + "]");
    if (m.moe.expert_ffn_hidden < 1) return fail("moe/expert_ffn_hidden", "must be >= 1");
    if (m.moe.dense_layers < 0 || m.moe.dense_layers > m.layers)
      return fail("moe/dense_layers", "must be in [0, layers]");
  }
  if (m.mla.enabled() && (m.mla.qk_nope_head_dim < 1 || m.mla.v_head_dim < 1))
    return fail("mla", "qk_nope_head_dim and v_head_dim must be >= 1 when kv_lora_rank > 0");
  return Status::Ok();
}

Result<ModelSpec> model_from_json(const json& doc, const std::string& file) {
  JsonReader r(doc, file);
  r.reject_unknown_keys({"name", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden",
                         "mlp", "norm", "vocab", "seq_len", "tied_embeddings", "bias", "dropout",
                         "rope", "moe", "mla"});
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
    mla.reject_unknown_keys({"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"});
    m.mla.q_lora_rank = static_cast<int>(mla.integer("q_lora_rank", 0, 0, 1 << 20));
    m.mla.kv_lora_rank = static_cast<int>(mla.required_integer("kv_lora_rank", 1, 1 << 20));
    m.mla.qk_nope_head_dim = static_cast<int>(mla.required_integer("qk_nope_head_dim", 1, 1 << 16));
    m.mla.qk_rope_head_dim = static_cast<int>(mla.integer("qk_rope_head_dim", 0, 0, 1 << 16));
    m.mla.v_head_dim = static_cast<int>(mla.required_integer("v_head_dim", 1, 1 << 16));
  }
  if (!r.ok()) return r.error();
  FS_RETURN_IF_ERROR(validate_model(m, file));
  return m;
}

json model_to_json(const ModelSpec& m) {
  json j = {{"name", m.name},         {"layers", m.layers},       {"hidden", m.hidden},
            {"heads", m.heads},       {"kv_heads", m.kv_heads},   {"head_dim", m.head_dim},
            {"ffn_hidden", m.ffn_hidden}, {"mlp", to_string(m.mlp)}, {"norm", to_string(m.norm)},
            {"vocab", m.vocab},       {"seq_len", m.seq_len},     {"tied_embeddings", m.tied_embeddings},
            {"bias", m.bias},         {"dropout", m.dropout},     {"rope", m.rope}};
  if (m.is_moe()) {
    j["moe"] = {{"experts", m.moe.experts}, {"top_k", m.moe.top_k},
                {"shared_experts", m.moe.shared_experts},
                {"expert_ffn_hidden", m.moe.expert_ffn_hidden}, {"dense_layers", m.moe.dense_layers}};
  }
  if (m.mla.enabled()) {
    j["mla"] = {{"q_lora_rank", m.mla.q_lora_rank}, {"kv_lora_rank", m.mla.kv_lora_rank},
                {"qk_nope_head_dim", m.mla.qk_nope_head_dim},
                {"qk_rope_head_dim", m.mla.qk_rope_head_dim}, {"v_head_dim", m.mla.v_head_dim}};
  }
  return j;
}

bool looks_like_hf_config(const json& doc) {
  return doc.is_object() && (doc.contains("model_type") || doc.contains("architectures") ||
                             doc.contains("num_hidden_layers"));
}

Result<ModelSpec> model_from_hf_config(const json& doc, const std::string& file) {
  JsonReader r(doc, file);
  if (!doc.is_object()) return Error(file + ": /: expected a JSON object (a Hugging Face config.json)");
  const std::string type = r.string("model_type", "");
  ModelSpec m;
  m.name = r.string("_name_or_path", type.empty() ? "hf-model" : type);
  const bool gpt2 = r.has("n_embd");
  if (gpt2) {  // GPT-2 style names
    m.layers = static_cast<int>(r.required_integer("n_layer", 1, 100000));
    m.hidden = r.required_integer("n_embd", 1, 1 << 22);
    m.heads = static_cast<int>(r.required_integer("n_head", 1, 1 << 16));
    m.ffn_hidden = r.integer("n_inner", 4 * m.hidden, 1, 1 << 24);
    m.seq_len = static_cast<int>(r.integer("n_positions", 1024, 1, 1 << 24));
    m.bias = true;
    m.dropout = r.number("resid_pdrop", 0.0, 0.0, 1.0) > 0.0;
    m.tied_embeddings = r.boolean("tie_word_embeddings", true);
  } else {
    m.layers = static_cast<int>(r.required_integer("num_hidden_layers", 1, 100000));
    m.hidden = r.required_integer("hidden_size", 1, 1 << 22);
    m.heads = static_cast<int>(r.required_integer("num_attention_heads", 1, 1 << 16));
    m.ffn_hidden = r.integer("intermediate_size", 4 * m.hidden, 1, 1 << 24);
    // The pre-training length: rope_scaling's original length when context was extended later.
    m.seq_len = static_cast<int>(r.integer("max_position_embeddings", 4096, 1, 1 << 24));
    if (r.has("rope_scaling") && r.node()["rope_scaling"].is_object()) {
      JsonReader rs = r.object("rope_scaling");
      m.seq_len = static_cast<int>(rs.integer("original_max_position_embeddings", m.seq_len, 1, 1 << 24));
    }
    m.tied_embeddings = r.boolean("tie_word_embeddings", false);
    m.bias = r.boolean("attention_bias", type == "qwen2" || type == "qwen2_moe");
    m.dropout = r.number("attention_dropout", 0.0, 0.0, 1.0) > 0.0 ||
                r.number("hidden_dropout", 0.0, 0.0, 1.0) > 0.0;
    // Llama-family configs (Llama, Mistral, Mixtral, Qwen, DeepSeek) give RoPE's base frequency.
    m.rope = r.has("rope_theta") || r.has("rope_scaling") || r.has("qk_rope_head_dim");
  }
  m.kv_heads = static_cast<int>(r.integer("num_key_value_heads", m.heads, 1, 1 << 16));
  m.head_dim = static_cast<int>(r.integer("head_dim", m.heads > 0 ? m.hidden / m.heads : 1, 1, 1 << 16));
  m.vocab = r.required_integer("vocab_size", 1, 1 << 24);
  const std::string act = r.string("hidden_act", r.string("activation_function", gpt2 ? "gelu" : "silu"));
  m.mlp = mlp_from_activation(act);
  m.norm = (gpt2 || r.has("layer_norm_eps") || r.has("layer_norm_epsilon")) && !r.has("rms_norm_eps")
               ? NormKind::kLayerNorm
               : NormKind::kRmsNorm;

  // Mixture of experts: Mixtral, Qwen2-MoE and DeepSeek spell it differently.
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
    if (m.moe.expert_ffn_hidden > 0)
      m.moe.shared_experts = static_cast<int>((shared + m.moe.expert_ffn_hidden / 2) / m.moe.expert_ffn_hidden);
  }
  if (r.has("kv_lora_rank")) {
    m.mla.kv_lora_rank = static_cast<int>(r.integer("kv_lora_rank", 0, 0, 1 << 20));
    m.mla.q_lora_rank = static_cast<int>(r.integer("q_lora_rank", 0, 0, 1 << 20));
    m.mla.qk_nope_head_dim = static_cast<int>(r.integer("qk_nope_head_dim", 128, 1, 1 << 16));
    m.mla.qk_rope_head_dim = static_cast<int>(r.integer("qk_rope_head_dim", 64, 0, 1 << 16));
    m.mla.v_head_dim = static_cast<int>(r.integer("v_head_dim", 128, 1, 1 << 16));
  }
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

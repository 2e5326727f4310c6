// ModelSpec: a decoder-only transformer (dense or mixture-of-experts, MHA/GQA or MLA attention).
//
//   Result<ModelSpec> m = load_model_file("models/llama3-8b.json");
//   double n = m->total_params();   // ~8.03e9
//
// Loads our own JSON (units-free: every field is a count) and Hugging Face `config.json` files of
// the architectures it knows (Llama, Mistral/Mixtral, Qwen2/3 and their MoE, DeepSeek-V2/V3, Gemma
// 1/2, GPT-2, GPT-NeoX, Falcon, BLOOM, OPT); any other architecture or activation is an error.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "sim/core/status.h"

namespace foresight {

class JsonReader;  // sim/spec/json_reader.h

// kSwiglu stands for every gated MLP, act(gate(x)) * up(x): SwiGLU and Gemma's GeGLU cost the same
// three matrices and one product. kGelu is any ungated act(up(x)) but squared ReLU.
enum class MlpKind { kGelu, kSwiglu, kSquaredRelu };
enum class NormKind { kLayerNorm, kRmsNorm };

struct MoeSpec {
  int experts = 0;         // routed experts per MoE layer; 0 means a dense model
  int top_k = 0;           // routed experts each token visits
  int shared_experts = 0;  // experts every token visits
  std::int64_t expert_ffn_hidden = 0;
  int dense_layers = 0;  // the first layers use a dense MLP (DeepSeek: first_k_dense_replace)
  bool operator==(const MoeSpec&) const = default;
};

// Multi-head latent attention (DeepSeek-V2/V3); enabled when kv_lora_rank > 0.
struct MlaSpec {
  int q_lora_rank = 0;  // 0: queries are projected directly
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  bool enabled() const { return kv_lora_rank > 0; }
  bool operator==(const MlaSpec&) const = default;
};

struct ModelSpec {
  std::string name;
  int layers = 0;
  std::int64_t hidden = 0;
  int heads = 0;
  int kv_heads = 0;             // == heads for MHA, fewer for GQA
  int head_dim = 0;             // hidden / heads unless given
  std::int64_t ffn_hidden = 0;  // dense MLP width
  MlpKind mlp = MlpKind::kGelu;
  NormKind norm = NormKind::kLayerNorm;
  std::int64_t vocab = 0;
  int seq_len = 0;  // training sequence length
  bool tied_embeddings = false;
  bool bias = false;     // linear layers carry biases (GPT-2/3, BLOOM)
  bool dropout = false;  // dropout layers present (changes activation memory)
  // Rotary position embeddings (RoPE: Llama, Mixtral, DeepSeek, the runtime's own models): q and k
  // rotated after the QKV projection, one elementwise pass each way. Without: learned or ALiBi
  // positions (GPT-3, BERT, BLOOM, MPT), whose cost the model leaves out.
  bool rope = false;
  // Attention and MLP side by side on one norm's output, their sums added to the residual together
  // (GPT-J, PaLM, GPT-NeoX's use_parallel_residual, Falcon's parallel_attn, MegaScale): one norm a
  // layer, and with tensor parallelism one reduction for both blocks' row-parallel outputs.
  bool parallel_block = false;
  // Sliding-window attention (Mistral, MegaScale): each query attends to at most this many keys
  // before it; 0: the whole causal prefix. The same window on every layer.
  int sliding_window = 0;
  MoeSpec moe;
  MlaSpec mla;

  bool is_moe() const { return moe.experts > 0; }
  int moe_layers() const { return is_moe() ? layers - moe.dense_layers : 0; }
  int dense_layers() const { return layers - moe_layers(); }

  // Parameter counts (weights only).
  double attention_params() const;  // one layer's attention block incl. its norm
  double dense_mlp_params() const;  // one dense MLP incl. its norm
  double expert_params() const;     // one routed expert
  double moe_mlp_params() const;    // one MoE MLP: all routed + shared experts + router + norm
  double embedding_params() const;  // input embedding + output head (unless tied) + final norm
  // The parameters outside the layers that pipeline stage `stage` of `pp` holds on one of `tp`
  // ranks: the first stage the input embedding, the last the output head (one table for both when
  // tied and pp = 1; with pp > 1 the last stage keeps its own copy of a tied table, as Megatron
  // does) and the final norm; under DualPipe both end ranks hold both ends (one per direction).
  // The tables are split over tp (vocabulary-parallel), the norm is not.
  double end_params_on_stage(int stage, int pp, bool dualpipe, int tp) const;
  double total_params() const;
  double active_params() const;  // parameters a token touches (MoE: top_k experts)

  // Query/key/value widths.
  std::int64_t q_dim() const;   // heads * head_dim (MLA: heads * (nope + rope))
  std::int64_t kv_dim() const;  // kv_heads * head_dim (MLA: latent rank)
  std::int64_t v_dim() const;   // heads * value head dim (MLA: heads * v_head_dim)

  bool operator==(const ModelSpec&) const = default;
};

// Checks internal consistency; errors are "<file>: /<field>: reason".
Status validate_model(const ModelSpec& m, const std::string& file);

Result<ModelSpec> model_from_json(const nlohmann::json& doc, const std::string& file);
// The "mla" object of a model description (model files, validation cases): DeepSeek's latent
// attention ranks; failures are recorded in `mla` (JsonReader's own error).
MlaSpec read_mla(JsonReader& mla);
nlohmann::json model_to_json(const ModelSpec& m);
// A Hugging Face config.json (detected by "model_type" or "architectures"). The architecture comes
// from "architectures" (or, without it, "model_type") and decides the field names and whether the
// MLP is gated; the activation must be one of transformers' ACT2FN names. Errors name the field
// and the known values.
Result<ModelSpec> model_from_hf_config(const nlohmann::json& doc, const std::string& file);
bool looks_like_hf_config(const nlohmann::json& doc);

// Parses text/file as our JSON or an HF config, whichever it is.
Result<ModelSpec> model_from_text(std::string_view text, const std::string& file);
Result<ModelSpec> load_model_file(const std::string& path);

std::string to_string(MlpKind k);
std::string to_string(NormKind k);

}  // namespace foresight

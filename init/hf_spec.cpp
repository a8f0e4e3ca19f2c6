// Hugging Face config.json <-> model spec, through the family records (family_record.hpp). Each family
// reads the fields its modeling_<type>.py reads to make tensors, with the defaults of its
// configuration_<type>.py (transformers 5.23, listed in family_records()), and refuses values that
// would make tensors this family does not make; the families layerinit has presets of write one.
#include <layerinit/init/hf_spec.hpp>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>

#include <layerinit/core/errors.hpp>
#include <layerinit/core/input_file.hpp>
#include <layerinit/init/families.hpp>
#include <layerinit/init/spec_json.hpp>

#include "family_record.hpp"
#include "json_read.hpp"

namespace layerinit {

namespace {

const JsonReader r("config.json");

using hf::Config;
using hf::Defaults;
using hf::FamilyRecord;

// Llama 3.1's scaling ("rope_type": "llama3"), from rope_parameters or rope_scaling (`path`).
RopeScaling llama3_scaling(const json& o, const std::string& path) {
  RopeScaling s;
  s.factor = r.to_double(r.require(o, path, "factor"), join(path, "factor"));
  s.low_freq_factor = r.to_double(r.require(o, path, "low_freq_factor"), join(path, "low_freq_factor"));
  s.high_freq_factor = r.to_double(r.require(o, path, "high_freq_factor"), join(path, "high_freq_factor"));
  s.original_max_position_embeddings =
      r.to_uint(r.require(o, path, "original_max_position_embeddings"), join(path, "original_max_position_embeddings"), true);
  return s;
}

std::optional<std::string> rope_type(const json& o, const std::string& path) {
  const json* t = find(o, "rope_type");
  if (!t) t = find(o, "type");  // configs before rope_type
  if (!t) return std::nullopt;
  return r.to_string(*t, join(path, "rope_type"), true);
}

}  // namespace

// ---- hf::Config ----

namespace hf {

void Config::fail(const std::string& key, const std::string& what) const { r.fail(key, what); }

const json* Config::get(const char* key) const {
  const json* v = find(doc_, key);
  for (const auto& [alias, canonical] : aliases_) {
    if (canonical != key) continue;
    if (const json* a = find(doc_, alias.c_str())) {
      if (v && *v != *a)
        r.fail(key, "given twice, as " + std::string(key) + " and as its alias " + alias + ", with different values");
      v = a;
    }
  }
  return v;
}

std::string Config::given(const char* key) const {
  for (const auto& [alias, canonical] : aliases_)
    if (canonical == key && find(doc_, alias.c_str()) && !find(doc_, key)) return alias;
  return key;
}

std::uint64_t Config::count(const char* key, std::uint64_t def) const {
  const json* v = get(key);
  return v ? r.to_uint(*v, key, true) : def;
}

std::uint64_t Config::count0(const char* key, std::uint64_t def) const {
  const json* v = get(key);
  return v ? r.to_uint(*v, key, false) : def;
}

std::uint64_t Config::derived(const char* key, std::optional<std::uint64_t> def) const {
  const json* v = get(key);
  if (!v) return def.value_or(0);
  return v->is_null() ? 0 : r.to_uint(*v, key, true);
}

bool Config::flag(const char* key, bool def) const {
  const json* v = get(key);
  return v ? r.to_bool(*v, key) : def;
}

double Config::real(const char* key, double def) const {
  const json* v = get(key);
  if (!v) return def;
  const double x = r.to_double(*v, key);
  if (x < 0) r.fail(key, "must not be negative");
  return x;
}

double Config::initializer_range() const {
  const double x = real("initializer_range", 0.02);
  return x == 0 ? 0.02 : x;
}

void Config::read_rope(Hyper& h, double default_theta) const {
  h.rope_theta = default_theta;
  // transformers 5 keeps rope_theta in rope_parameters (per layer type for Gemma 3) and prefers it
  // to a top-level rope_theta or rope_scaling.
  if (const json* rp = get("rope_parameters"); rp && !rp->is_null()) {
    if (!rp->is_object()) r.fail("rope_parameters", "must be an object");
    const json* p = rp;
    std::string path = "rope_parameters";
    if (!find(*rp, "rope_theta") && find(*rp, "full_attention")) {
      p = find(*rp, "full_attention");
      path = "rope_parameters.full_attention";
      if (!p->is_object()) r.fail(path, "must be an object");
    }
    if (const json* t = find(*p, "rope_theta")) h.rope_theta = r.to_double(*t, join(path, "rope_theta"));
    if (rope_type(*p, path) == "llama3") h.rope_scaling = llama3_scaling(*p, path);
    return;
  }
  if (const json* t = get("rope_theta"); t && !t->is_null()) h.rope_theta = r.to_double(*t, "rope_theta");
  if (const json* s = get("rope_scaling"); s && !s->is_null()) {
    if (!s->is_object()) r.fail("rope_scaling", "must be an object or null");
    if (rope_type(*s, "rope_scaling") == "llama3") h.rope_scaling = llama3_scaling(*s, "rope_scaling");
  }
}

Hyper Config::hyper(const Defaults& d) const {
  Hyper h;
  h.vocab_size = count("vocab_size", d.vocab_size);
  h.hidden_size = count("hidden_size", d.hidden_size);
  h.intermediate_size = count("intermediate_size", d.intermediate_size);
  h.num_heads = count("num_attention_heads", d.num_attention_heads);
  h.num_kv_heads = derived("num_key_value_heads", d.num_key_value_heads);
  if (const json* v = get("head_dim"); v && v->is_null() && !checks_.null_head_dim)
    r.fail("head_dim", "null is not a head width for " + model_type_ + " (transformers derives a null head_dim for llama, "
                       "mistral and mixtral only): give the width or leave head_dim out");
  h.head_dim = derived("head_dim", d.head_dim);
  h.max_position_embeddings = count("max_position_embeddings", d.max_position_embeddings);
  h.initializer_range = initializer_range();
  h.norm_eps = real("rms_norm_eps", d.rms_norm_eps);
  h.tie_word_embeddings = flag("tie_word_embeddings", d.tie_word_embeddings);
  if (checks_.heads_divide_hidden && h.hidden_size % h.num_heads != 0)
    r.fail("num_attention_heads", std::to_string(h.num_heads) + " does not divide hidden_size " + std::to_string(h.hidden_size) +
                                      " (transformers' " + checks_.heads_divide_hidden + ".validate_architecture refuses it)");
  // transformers' `hidden_size // num_attention_heads`, rounded down: Glm4MoeConfig's own defaults,
  // 4096 and 96 heads, make heads of 42.
  if (h.head_dim == 0) h.head_dim = h.hidden_size / h.num_heads;
  read_rope(h, d.rope_theta);
  return h;
}

}  // namespace hf

namespace {

// The config.json key of a Hyper field, for messages.
std::string config_key(const std::string& field) {
  if (field == "num_heads") return "num_attention_heads";
  if (field == "num_kv_heads") return "num_key_value_heads";
  if (field == "experts_per_token") return "num_experts_per_tok";
  if (field == "norm_eps") return "rms_norm_eps";
  return field;
}

void check_hyper(const Hyper& h) {
  if (const auto p = hyper_problem(h))
    r.fail(config_key(p->field), p->message);
}

// ---- the families ----

// The experts of an MoE config: `key` (its count, default E) and num_experts_per_tok (default k).
void read_experts(const Config& c, Hyper& h, const char* key, std::uint64_t E, std::uint64_t k) {
  h.num_experts = c.count(key, E);
  h.experts_per_token = c.count("num_experts_per_tok", k);
}

// DeepSeek-V3's MoE layers (GLM-4.5's too): first_k_dense_replace dense layers, then routed experts of
// moe_intermediate_size, a sigmoid router with its correction-bias buffer, n_shared_experts shared ones.
void deepseek_moe(const Config& c, const Defaults& d, DecoderLayout& l, std::uint64_t width, std::uint64_t dense) {
  l.moe = MoeKind::routed;
  l.moe_intermediate_size = c.count("moe_intermediate_size", width);
  l.shared_experts = c.count0("n_shared_experts", 1);
  // DeepseekV3MoE and Glm4MoeMoE make shared_experts of width moe_intermediate_size * n_shared_experts
  // whatever it is: at 0, gate_proj, up_proj and down_proj of zero elements, made here too.
  l.shared_experts_always = true;
  l.correction_bias = true;
  l.dense_layers = c.count0("first_k_dense_replace", dense);
  if (l.dense_layers >= c.layers(d)) r.fail("first_k_dense_replace", "must leave at least one MoE layer");
}

using Reader = ModelSpec (*)(const Config&, const Defaults&, std::string name);

// `experts` and `dense` name the config's fields that set Hyper.num_experts and the dense layers, for
// a refusal of their counts: they are checked before any tensor is made (2^40 experts would fill the
// memory with tensor records).
ModelSpec decoder(const Config& c, const Defaults& d, std::string name, Hyper h, const DecoderLayout& l,
                  const char* experts = "num_experts", const char* dense = "first_k_dense_replace") {
  h.bias = l.qkv_bias;
  check_hyper(h);
  if (const auto p = decoder_size_problem(h, l, c.layers(d)))
    r.fail(c.given(p->field == "num_experts" ? experts : dense), p->message);
  return decoder_spec(std::move(name), c.model_type(), h, l, c.layers(d));
}

// Llama, SmolLM3: attention_bias on q, k, v and o; mlp_bias on gate, up and down.
ModelSpec read_llama(const Config& c, const Defaults& d, std::string name) {
  DecoderLayout l;
  l.qkv_bias = l.o_bias = c.flag("attention_bias", false);
  l.mlp_bias = c.flag("mlp_bias", false);
  return decoder(c, d, std::move(name), c.hyper(d), l);
}

ModelSpec read_mistral(const Config& c, const Defaults& d, std::string name) {
  return decoder(c, d, std::move(name), c.hyper(d), DecoderLayout{});
}

// Qwen2Attention: q/k/v always with biases, o_proj without.
ModelSpec read_qwen2(const Config& c, const Defaults& d, std::string name) {
  DecoderLayout l;
  l.qkv_bias = true;
  return decoder(c, d, std::move(name), c.hyper(d), l);
}

ModelSpec read_mixtral(const Config& c, const Defaults& d, std::string name) {
  Hyper h = c.hyper(d);
  read_experts(c, h, "num_local_experts", 8, 2);
  DecoderLayout l;
  l.moe = MoeKind::mixtral;
  return decoder(c, d, std::move(name), h, l, "num_local_experts");
}

// Gemma 2 and 3: four norms a layer, all stored as offsets from one; Gemma 3 adds q/k norms.
ModelSpec read_gemma(const Config& c, const Defaults& d, std::string name) {
  DecoderLayout l;
  l.qkv_bias = l.o_bias = c.flag("attention_bias", false);
  l.pre_feedforward_norm = l.post_feedforward_norm = true;
  l.zero_centered_norms = true;
  if (c.model_type() == "gemma3_text") l.qk_norm = QkNorm::head;
  return decoder(c, d, std::move(name), c.hyper(d), l);
}

// Qwen3: Llama's layer with q/k norms of a head's width; attention_bias on q, k, v and o.
ModelSpec read_qwen3(const Config& c, const Defaults& d, std::string name) {
  DecoderLayout l;
  l.qkv_bias = l.o_bias = c.flag("attention_bias", false);
  l.qk_norm = QkNorm::head;
  return decoder(c, d, std::move(name), c.hyper(d), l);
}

// Qwen3MoeDecoderLayer: layer i has experts unless it is in mlp_only_layers or (i + 1) is not a
// multiple of decoder_sparse_step. The repeated block is one kind of layer: dense layers are allowed
// before the MoE layers only.
ModelSpec read_qwen3_moe(const Config& c, const Defaults& d, std::string name) {
  Hyper h = c.hyper(d);
  h.num_experts = c.count0("num_local_experts", 128);
  h.experts_per_token = c.count("num_experts_per_tok", 8);
  const std::uint64_t L = c.layers(d), step = c.count("decoder_sparse_step", 1);
  std::set<std::uint64_t> dense_only;
  if (const json* v = c.get("mlp_only_layers"); v && !v->is_null()) {
    if (!v->is_array()) r.fail("mlp_only_layers", "must be an array of layer indices");
    for (std::size_t i = 0; i < v->size(); ++i) dense_only.insert(r.to_uint((*v)[i], at("mlp_only_layers", i), false));
  }
  // From the counts, not a flag per layer (num_hidden_layers may be 2^62): the first layer i with
  // (i + 1) % step == 0 outside mlp_only_layers, and whether a dense layer follows it.
  std::uint64_t first_moe = L;
  if (h.num_experts > 0)
    for (std::uint64_t i = step - 1; i < L; i += step) {
      if (!dense_only.count(i)) {
        first_moe = i;
        break;
      }
      if (L - 1 - i < step) break;  // i + step would pass the last layer (or wrap)
    }
  DecoderLayout l;
  l.qkv_bias = l.o_bias = c.flag("attention_bias", false);
  l.qk_norm = QkNorm::head;
  if (first_moe == L) {  // no experts anywhere: a dense model
    h.num_experts = h.experts_per_token = 0;
    return decoder(c, d, std::move(name), h, l);
  }
  const bool dense_after = (step > 1 && first_moe + 1 < L) ||
                           std::any_of(dense_only.begin(), dense_only.end(), [&](std::uint64_t i) { return i > first_moe && i < L; });
  const char* dense_key = dense_only.empty() ? "decoder_sparse_step" : "mlp_only_layers";
  if (dense_after)
    r.fail(dense_key, "dense layers between MoE layers are not supported (layerinit repeats one kind of layer; dense layers may "
                      "only come first)");
  l.moe = MoeKind::routed;
  l.moe_intermediate_size = c.count("moe_intermediate_size", 768);
  l.dense_layers = first_moe;
  return decoder(c, d, std::move(name), h, l, "num_local_experts", dense_key);
}

// Olmo2: q/k norms over all heads, and norms after attention and the MLP instead of before.
ModelSpec read_olmo2(const Config& c, const Defaults& d, std::string name) {
  DecoderLayout l;
  l.qkv_bias = l.o_bias = c.flag("attention_bias", false);
  l.qk_norm = QkNorm::whole;
  l.input_norm = false;
  l.post_feedforward_norm = true;
  return decoder(c, d, std::move(name), c.hyper(d), l);
}

// Phi-3 and Phi-4: fused qkv_proj and gate_up_proj.
ModelSpec read_phi3(const Config& c, const Defaults& d, std::string name) {
  DecoderLayout l;
  l.fused_qkv = true;
  l.fused_gate_up = true;
  return decoder(c, d, std::move(name), c.hyper(d), l);
}

// GLM-4.5: attention_bias on q, k and v only; first_k_dense_replace dense layers, then MoE layers with
// a sigmoid router, its correction bias and shared experts (DeepSeek-V3's MoE with Llama's attention).
ModelSpec read_glm4_moe(const Config& c, const Defaults& d, std::string name) {
  Hyper h = c.hyper(d);
  read_experts(c, h, "n_routed_experts", 128, 8);
  DecoderLayout l;
  l.qkv_bias = c.flag("attention_bias", false);
  if (c.flag("use_qk_norm", false)) l.qk_norm = QkNorm::head;
  deepseek_moe(c, d, l, 1408, 1);
  return decoder(c, d, std::move(name), h, l, "n_routed_experts");
}

ModelSpec read_gpt_oss(const Config& c, const Defaults& d, std::string name) {
  Hyper h = c.hyper(d);
  read_experts(c, h, "num_local_experts", 128, 4);
  DecoderLayout l;
  l.qkv_bias = l.o_bias = c.flag("attention_bias", true);
  l.sinks = true;
  l.moe = MoeKind::gpt_oss;
  return decoder(c, d, std::move(name), h, l, "num_local_experts");
}

// DeepSeek-V3 (and Kimi K2, which is one): multi-head latent attention; attention_bias on q_a_proj,
// kv_a_proj_with_mqa and o_proj. The multi-token-prediction layers (num_nextn_predict_layers) are
// not built by transformers and not here.
ModelSpec read_deepseek_v3(const Config& c, const Defaults& d, std::string name) {
  Hyper h = c.hyper(d);
  read_experts(c, h, "n_routed_experts", 256, 8);
  DecoderLayout l;
  l.qkv_bias = l.o_bias = c.flag("attention_bias", false);
  LatentAttention x;
  x.q_lora_rank = c.derived("q_lora_rank", 1536);  // null: no query compression
  x.kv_lora_rank = c.count("kv_lora_rank", 512);
  x.qk_nope_head_dim = c.count("qk_nope_head_dim", 128);
  x.qk_rope_head_dim = c.count("qk_rope_head_dim", 64);
  x.v_head_dim = c.count("v_head_dim", 128);
  l.latent = x;
  deepseek_moe(c, d, l, 2048, 3);
  // A query head's width.
  h.head_dim = checked_add(x.qk_nope_head_dim, x.qk_rope_head_dim, "qk_nope_head_dim + qk_rope_head_dim");
  return decoder(c, d, std::move(name), h, l, "n_routed_experts");
}

// ---- writing: the config.json of a spec made without one (a preset, a JSON spec) ----

using ojson = nlohmann::ordered_json;

// The keys of transformers' decoder configs, from the spec's numbers; `act` is the MLP's activation
// key and value (Gemma 2's hidden_activation, the others' hidden_act). transformers 5 reads
// rope_parameters, older releases rope_theta and rope_scaling: both are written.
void write_decoder(const ModelSpec& spec, ojson& j, const char* act_key = "hidden_act", const char* act = "silu") {
  const Hyper& h = spec.hyper;
  j["vocab_size"] = h.vocab_size;
  j["hidden_size"] = h.hidden_size;
  j["intermediate_size"] = h.intermediate_size;
  j["num_hidden_layers"] = spec.total_layers();
  j["num_attention_heads"] = h.num_heads;
  j["num_key_value_heads"] = h.num_kv_heads ? h.num_kv_heads : h.num_heads;
  if (h.head_dim) j["head_dim"] = h.head_dim;
  j[act_key] = act;
  j["max_position_embeddings"] = h.max_position_embeddings;
  j["rms_norm_eps"] = h.norm_eps;
  j["rope_theta"] = h.rope_theta;
  ojson rope{{"rope_theta", h.rope_theta}, {"rope_type", "default"}};
  if (const RopeScaling& rs = h.rope_scaling; rs != RopeScaling{}) {  // Llama 3.1's, as its config.json writes it
    j["rope_scaling"] = {{"factor", rs.factor},
                         {"low_freq_factor", rs.low_freq_factor},
                         {"high_freq_factor", rs.high_freq_factor},
                         {"original_max_position_embeddings", rs.original_max_position_embeddings},
                         {"rope_type", "llama3"}};
    rope = j["rope_scaling"];
    rope["rope_theta"] = h.rope_theta;
  }
  j["rope_parameters"] = rope;
  j["tie_word_embeddings"] = h.tie_word_embeddings;
  j["initializer_range"] = h.initializer_range;
}

void write_llama(const ModelSpec& spec, ojson& j) {
  write_decoder(spec, j);
  j["attention_bias"] = spec.hyper.bias;
  j["mlp_bias"] = false;
}

void write_mistral(const ModelSpec& spec, ojson& j) {
  write_decoder(spec, j);
  j["sliding_window"] = nullptr;
}

void write_mixtral(const ModelSpec& spec, ojson& j) {
  write_mistral(spec, j);
  j["num_local_experts"] = spec.hyper.num_experts;
  j["num_experts_per_tok"] = spec.hyper.experts_per_token;
}

// Qwen2.5's configs: full attention in every layer.
void write_qwen2(const ModelSpec& spec, ojson& j) {
  write_decoder(spec, j);
  j["use_sliding_window"] = false;
  j["sliding_window"] = spec.hyper.max_position_embeddings;
  j["max_window_layers"] = spec.total_layers();
}

// google/gemma-2-9b's attention numbers.
void write_gemma2(const ModelSpec& spec, ojson& j) {
  const Hyper& h = spec.hyper;
  write_decoder(spec, j, "hidden_activation", "gelu_pytorch_tanh");
  j["query_pre_attn_scalar"] = h.head_dim ? h.head_dim : h.hidden_size / h.num_heads;
  j["sliding_window"] = 4096;
  j["final_logit_softcapping"] = 30.0;
  j["attn_logit_softcapping"] = 50.0;
  j["pad_token_id"] = 0;
  j["eos_token_id"] = 1;
  j["bos_token_id"] = 2;
}

}  // namespace

// ---- the records ----

namespace hf {

// Defaults: each configuration_<type>.py's class fields (transformers 5.23; pad_token_id as 5.24's).
// The families layerinit writes a config.json for come first, in the order config_json's messages
// list them, then the records in files of their own (by file name); hf_model_types() sorts them all.
const std::vector<FamilyRecord>& family_records() {
  using std::nullopt;
  static const std::vector<FamilyRecord> all = [] {
    std::vector<FamilyRecord> records = {
        {"llama", "LlamaForCausalLM", {32000, 4096, 11008, 32, 32, nullopt, nullopt, 2048, 1e-6, false, 1e4, nullopt}, {}, read_llama,
         {"LlamaConfig", true}, true, write_llama},
        {"mistral", "MistralForCausalLM", {32000, 4096, 14336, 32, 32, 8, nullopt, 131072, 1e-6, false, 1e4, nullopt}, {}, read_mistral,
         {nullptr, true}, true, write_mistral},
        {"mixtral", "MixtralForCausalLM", {32000, 4096, 14336, 32, 32, 8, nullopt, 131072, 1e-5, false, 1e6, nullopt},
         {{"num_experts", "num_local_experts"}}, read_mixtral, {nullptr, true}, true, write_mixtral},
        {"qwen2", "Qwen2ForCausalLM", {151936, 4096, 22016, 32, 32, 32, nullopt, 32768, 1e-6, false, 1e4, nullopt}, {}, read_qwen2,
         {}, true, write_qwen2},
        {"gemma2", "Gemma2ForCausalLM", {256000, 2304, 9216, 26, 8, 4, 256, 8192, 1e-6, true, 1e4, 0}, {}, read_gemma,
         {"Gemma2Config", false}, true, write_gemma2},
        {"deepseek_v3", "DeepseekV3ForCausalLM", {129280, 7168, 18432, 61, 128, 128, nullopt, 4096, 1e-6, false, 1e4, nullopt},
         {{"num_local_experts", "n_routed_experts"}}, read_deepseek_v3, {nullptr, true}},
        {"gemma3_text", "Gemma3ForCausalLM", {262208, 2304, 9216, 26, 8, 4, 256, 131072, 1e-6, true, 1e6, 0}, {}, read_gemma,
         {"Gemma3TextConfig", false}},
        {"glm4_moe", "Glm4MoeForCausalLM", {151552, 4096, 10944, 46, 96, 8, nullopt, 131072, 1e-5, false, 1e4, nullopt},
         {{"num_local_experts", "n_routed_experts"}}, read_glm4_moe},
        {"gpt_oss", "GptOssForCausalLM", {201088, 2880, 2880, 36, 64, 8, 64, 131072, 1e-5, false, 150000, nullopt},
         {{"num_experts", "num_local_experts"}}, read_gpt_oss, {}, true, nullptr, {.sinks_and_router_bias_drawn = true}},
        // Kimi K2 is DeepSeek-V3's architecture under its own model_type (its remote code's DeepseekV3Config).
        {"kimi_k2", "DeepseekV3ForCausalLM", {129280, 7168, 18432, 61, 128, 128, nullopt, 4096, 1e-6, false, 1e4, nullopt},
         {{"num_local_experts", "n_routed_experts"}}, read_deepseek_v3, {nullptr, true}},
        {"olmo2", "Olmo2ForCausalLM", {50304, 4096, 11008, 32, 32, nullopt, nullopt, 2048, 1e-5, false, 1e4, 1}, {}, read_olmo2},
        {"phi3", "Phi3ForCausalLM", {32064, 3072, 8192, 32, 32, nullopt, nullopt, 4096, 1e-5, false, 1e4, 32000}, {}, read_phi3},
        {"qwen3", "Qwen3ForCausalLM", {151936, 4096, 22016, 32, 32, 32, 128, 32768, 1e-6, false, 1e4, nullopt}, {}, read_qwen3},
        {"qwen3_moe", "Qwen3MoeForCausalLM", {151936, 2048, 6144, 24, 32, 4, nullopt, 32768, 1e-6, false, 1e4, nullopt},
         {{"num_experts", "num_local_experts"}}, read_qwen3_moe},
        {"smollm3", "SmolLM3ForCausalLM", {128256, 2048, 11008, 36, 16, 4, nullopt, 32768, 1e-6, true, 2e6, 128004}, {}, read_llama},
    };
    for (FamilyRecord& f : family_file_records()) records.push_back(std::move(f));
    return records;
  }();
  return all;
}

const FamilyRecord* find_family(std::string_view model_type) {
  for (const FamilyRecord& f : family_records())
    if (model_type == f.model_type) return &f;
  return nullptr;
}

}  // namespace hf

namespace {

// PreTrainedConfig.validate_layer_type (transformers/configuration_utils.py): a layer_types or
// mlp_layer_types list has one entry per layer. The entries' names are not checked here: no family
// read here makes other tensors for any of them.
void check_layer_types(const json& doc, std::uint64_t layers) {
  for (const char* key : {"layer_types", "mlp_layer_types"}) {
    const json* v = find(doc, key);
    if (!v || v->is_null()) continue;
    if (!v->is_array()) r.fail(key, "must be an array of layer types, one per layer");
    for (std::size_t i = 0; i < v->size(); ++i) (void)r.to_string((*v)[i], at(key, i), false);
    if (v->size() != layers)
      r.fail(key, "has " + std::to_string(v->size()) + " entries for " + std::to_string(layers) +
                      " layers (num_hidden_layers); transformers' validate_layer_type wants one per layer");
  }
}

// The padding row of the token embedding: transformers makes embed_tokens an
// nn.Embedding(vocab_size, hidden_size, padding_idx=config.pad_token_id), and
// PreTrainedModel._init_weights (modeling_utils.py) draws it, then zeroes its padding_idx row
// (init.zeros_(module.weight[module.padding_idx])); a tied lm_head is that tensor. pad_token_id is
// `int | None` (@strict refuses a list, a float, a string); absent, the class default. nn.Embedding
// counts a negative index from the end (-1: the last row) and refuses one outside [-vocab, vocab)
// ("Padding_idx must be within num_embeddings"): a model transformers cannot build, refused here.
void pad_row(const json& doc, const FamilyRecord& family, ModelSpec& m) {
  const json* v = find(doc, "pad_token_id");
  if (v && !v->is_null() && !v->is_number_integer())
    r.fail("pad_token_id", "must be an integer or null (transformers' pad_token_id: int | None)");
  if (!family.padding_idx || (v && v->is_null()) || (!v && !family.defaults.pad_token_id)) return;
  const auto e = std::find_if(m.pre.begin(), m.pre.end(), [](const TensorSpec& t) { return t.role == TensorRole::embedding; });
  // Every family with a padding_idx makes model.embed_tokens.weight (decoder_spec).
  LAYERINIT_EXPECTS(e != m.pre.end() && e->shape.size() == 2, "config.json: " + m.name + " has no token embedding");
  const std::uint64_t vocab = e->shape[0];
  std::uint64_t row = 0;
  bool inside = false;
  if (!v) {
    row = static_cast<std::uint64_t>(*family.defaults.pad_token_id);
    inside = row < vocab;
  } else if (v->is_number_unsigned()) {
    row = v->get<std::uint64_t>();
    inside = row < vocab;
  } else {  // negative: from the end
    const std::uint64_t back = 0 - static_cast<std::uint64_t>(v->get<std::int64_t>());
    inside = back <= vocab;
    row = vocab - back;
  }
  if (!inside)
    r.fail("pad_token_id", (v ? v->dump() : std::to_string(*family.defaults.pad_token_id) + " (" + family.model_type +
                                                 "'s default)") +
                               " is not a row of the embedding of vocab_size " + std::to_string(vocab) +
                               " (nn.Embedding's padding_idx must lie in [-vocab_size, vocab_size)): transformers cannot build "
                               "this model; give pad_token_id a row or null");
  e->regions.push_back({{row, 0}, {1, e->shape[1]}, FillSpec::constant(0)});
}

std::string supported() {
  std::string s;
  for (const auto& t : hf_model_types()) s += (s.empty() ? "" : ", ") + t;
  return s;
}

}  // namespace

std::optional<DType> hf_config_dtype(const ModelSpec& spec) {
  if (spec.hf_config.empty()) return std::nullopt;
  const json doc = r.parse(spec.hf_config);
  for (const char* key : {"dtype", "torch_dtype"}) {
    const json* v = find(doc, key);
    if (!v || v->is_null()) continue;
    const std::string name = r.to_string(*v, key, false);
    if (const auto t = dtype_from_torch_name(name)) return *t;
    r.fail(key, quote(name) + " is not a dtype layerinit writes (float32, float16, bfloat16): give the dtype to write");
  }
  return std::nullopt;
}

DType default_dtype(const ModelSpec& spec) { return hf_config_dtype(spec).value_or(DType::bf16); }

std::vector<std::string> hf_model_types() {
  std::vector<std::string> out;
  for (const auto& f : hf::family_records()) out.emplace_back(f.model_type);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::pair<std::string, std::string>> hf_module_names(std::string_view model_type) {
  const hf::FamilyRecord* f = hf::find_family(model_type);
  return f ? f->module_names : std::vector<std::pair<std::string, std::string>>{};
}

ModelSpec spec_from_hf_config(std::string_view text, std::string name) {
  const json doc = r.parse(text);
  if (!doc.is_object()) r.fail("", "must be an object");
  const std::string type = r.to_string(r.require(doc, "", "model_type"), "model_type", false);
  const FamilyRecord* family = hf::find_family(type);
  if (!family) {
    if (type == "gemma3")
      r.fail("model_type", "'gemma3' is Gemma 3's image-text model: give its text_config (model_type gemma3_text)");
    r.fail("model_type", "no layerinit spec for Hugging Face model_type '" + type + "' (supported: " + supported() + ")");
  }
  // Another class (a classification head, another model) would have other tensors.
  if (const json* a = find(doc, "architectures"); a && !a->is_null()) {
    if (!a->is_array()) r.fail("architectures", "must be an array of class names");
    bool causal = a->empty();
    for (std::size_t i = 0; i < a->size(); ++i)
      causal = causal || r.to_string((*a)[i], at("architectures", i), true) == family->causal_lm;
    if (!causal)
      r.fail("architectures", a->dump() + " does not name " + family->causal_lm + ", the model layerinit makes for " + type);
  }
  if (name.empty())
    if (const json* n = find(doc, "_name_or_path"); n && n->is_string()) name = n->get<std::string>();
  if (name.empty()) name = type;
  const Config config(doc, type, family->aliases, family->checks);
  ModelSpec m;
  try {
    m = family->read(config, family->defaults, std::move(name));
    check_layer_types(doc, m.total_layers());
    pad_row(doc, *family, m);
    m.validate();
  } catch (const spec_error&) {
    throw;
  } catch (const std::invalid_argument& e) {
    throw spec_error("config.json", printable(e.what()));
  } catch (const std::overflow_error& e) {
    throw spec_error("config.json", printable(e.what()));
  }
  m.hf_config = std::string(text);
  return m;
}

ModelSpec load_hf_config(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path file = path;
  if (fs::is_directory(file, ec)) file /= "config.json";
  const std::string text = read_input_file(file.string(), "Hugging Face config");
  // Named as the model's directory ("Qwen3-8B/config.json") or the file ("qwen3-8b.json").
  std::string name = file.stem().string();
  if (file.filename() == "config.json") {
    const fs::path dir = fs::absolute(file, ec).parent_path();
    if (!dir.filename().empty()) name = dir.filename().string();
  }
  return spec_from_hf_config(text, name);
}

}  // namespace layerinit

// Hugging Face config.json <-> model spec, through the family records (family_record.hpp), one file
// each in init/families/. Each family reads the fields its modeling_<type>.py reads to make tensors,
// with the defaults of its configuration_<type>.py (transformers 5.23, in its record), and refuses
// values that would make tensors this family does not make; the families layerinit has presets of
// write one.
#include <layerinit/init/hf_spec.hpp>

#include <algorithm>
#include <filesystem>
#include <optional>

#include <layerinit/core/errors.hpp>
#include <layerinit/core/input_file.hpp>
#include <layerinit/init/spec_json.hpp>

#include "family_record.hpp"
#include "json_read.hpp"

namespace layerinit {

namespace {

const JsonReader r("config.json");

using hf::Config;
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

// ---- the records ----

// Every record is a file of its own, init/families/<model_type>.cpp, in the list the build generates
// from the folder by file name (init/CMakeLists.txt).
const std::vector<FamilyRecord>& family_records() {
  static const std::vector<FamilyRecord> all = family_file_records();
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

std::optional<TorchtitanFamily> torchtitan_family(std::string_view package, bool moe) {
  for (const auto& f : hf::family_records()) {
    const auto& t = f.torchtitan;
    if (t.package && package == t.package && (!t.moe || *t.moe == moe)) return TorchtitanFamily{f.model_type, t.rope_interleaved};
  }
  return std::nullopt;
}

std::vector<std::string> torchtitan_packages() {
  std::vector<std::string> out;
  for (const auto& f : hf::family_records())
    if (f.torchtitan.package && std::find(out.begin(), out.end(), f.torchtitan.package) == out.end())
      out.emplace_back(f.torchtitan.package);
  return out;
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

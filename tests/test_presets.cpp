// Presets: exact published parameter counts, Hugging Face names and shapes, roles and fans.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>

#include <layerinit/init/presets.hpp>

using namespace layerinit;

namespace {

const TensorSpec* find_tensor(const std::vector<TensorSpec>& ts, std::string_view name) {
  for (const auto& t : ts)
    if (t.name == name) return &t;
  return nullptr;
}
const TensorSpec& tensor(const std::vector<TensorSpec>& ts, std::string_view name) {
  const TensorSpec* t = find_tensor(ts, name);
  if (!t) throw std::runtime_error("no tensor " + std::string(name));
  return *t;
}
std::vector<std::string> names(const std::vector<TensorSpec>& ts) {
  std::vector<std::string> out;
  for (const auto& t : ts) out.push_back(t.name);
  return out;
}

}  // namespace

// Published counts (model cards / safetensors totals), each also re-derived from the config.json.
TEST(Presets, ExactParameterCounts) {
  const std::pair<const char*, std::uint64_t> expected[] = {
      {"mlp-deep", 10'500'097ULL},         {"gpt2", 124'439'808ULL},
      {"gpt2-medium", 354'823'168ULL},     {"gpt2-large", 774'030'080ULL},
      {"gpt2-xl", 1'557'611'200ULL},       {"llama-3-8b", 8'030'261'248ULL},
      {"llama-3-70b", 70'553'706'496ULL},  {"mistral-7b", 7'241'732'096ULL},
      {"mixtral-8x7b", 46'702'792'704ULL},
      // Llama 3.1 405B: embedding and lm_head 2 x 128256 x 16384 = 4,202,692,608; per layer q and o
      // 2 x 16384^2, k and v 2 x 1024 x 16384, MLP 3 x 53248 x 16384, two norms 2 x 16384 =
      // 3,187,703,808, times 126 = 401,650,679,808; final norm 16384. Total 405,853,388,800.
      {"llama-3.1-405b", 405'853'388'800ULL},
      // transformers 5.23 num_parameters() on the meta device from each Hub config.json
      // (tests/readers/hf_meta.py checks them where transformers is installed).
      {"qwen2.5-7b", 7'615'616'512ULL},    {"gemma-2-9b", 9'241'705'984ULL},
      // 671,026,404,352 parameters; its 58 x 256 router correction biases are buffers, counted apart
      // (in the state_dict and the checkpoint, not in num_parameters()).
      {"deepseek-v3", 671'026'404'352ULL},
  };
  for (const auto& [name, n] : expected) {
    const ModelSpec m = make_preset(name);
    EXPECT_EQ(m.parameter_count(), n) << name;
    EXPECT_EQ(m.name, name);
    EXPECT_NO_THROW(m.validate()) << name;
  }
}

TEST(Presets, EveryPresetValidates) {
  const auto all = preset_names();
  EXPECT_EQ(all.size(), 19u);
  for (const auto& name : all) {
    const ModelSpec m = make_preset(name);
    EXPECT_NO_THROW(m.validate()) << name;
    EXPECT_EQ(m.name, name);
  }
}

TEST(Presets, TinyPresetsAreSmallAndDeep) {
  for (const char* name : {"llama-tiny", "gpt2-tiny", "mixtral-tiny", "qwen2.5-tiny", "gemma-2-tiny", "deepseek-v3-tiny"}) {
    const ModelSpec m = make_preset(name);
    EXPECT_LT(m.parameter_count(), 10'000'000u) << name;
    EXPECT_GE(m.num_layers, 2u) << name;
  }
  EXPECT_EQ(make_preset("llama-tiny").family, "llama");
  EXPECT_EQ(make_preset("gpt2-tiny").family, "gpt2");
  EXPECT_EQ(make_preset("mixtral-tiny").family, "mixtral");
}

TEST(Presets, UnknownPresetListsNames) {
  try {
    make_preset("llama-4");
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "preset 'llama-4' is unknown (valid: mlp-deep, gpt2, gpt2-medium, gpt2-large, gpt2-xl, llama-3-8b, "
              "llama-3-70b, llama-3.1-405b, mistral-7b, mixtral-8x7b, qwen2.5-7b, gemma-2-9b, deepseek-v3, llama-tiny, gpt2-tiny, "
              "mixtral-tiny, qwen2.5-tiny, gemma-2-tiny, deepseek-v3-tiny)");
  }
}

TEST(Presets, MlpDeep) {
  const ModelSpec m = make_preset("mlp-deep");
  EXPECT_EQ(m.family, "mlp");
  EXPECT_EQ(m.num_layers, 10u);
  EXPECT_EQ(m.layer_prefix, "layers.");
  EXPECT_EQ(names(m.pre), (std::vector<std::string>{"input.weight", "input.bias"}));
  EXPECT_EQ(names(m.layer.tensors), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(names(m.post), (std::vector<std::string>{"output.weight", "output.bias"}));
  EXPECT_EQ(m.pre[0].shape, (Shape{1024, 2}));
  EXPECT_EQ(m.layer.tensors[0].shape, (Shape{1024, 1024}));
  EXPECT_EQ(m.post[0].shape, (Shape{1, 1024}));
  EXPECT_EQ(m.post[1].shape, (Shape{1}));
  EXPECT_EQ(m.canonical_name(9, m.layer.tensors[0]), "layers.9.weight");
  EXPECT_EQ(m.layer_parameter_count(), 1024u * 1024u + 1024u);
  EXPECT_EQ(m.post[0].role, TensorRole::head_weight);
  EXPECT_EQ(m.pre[1].role, TensorRole::linear_bias);
  EXPECT_EQ(m.pre[1].fan_in, 2u);
}

TEST(Presets, MlpFamilyShapes) {
  // No bias: 2*1024 + 10*1024^2 + 1024.
  EXPECT_EQ(mlp_spec("m", {2, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1}, false)
                .parameter_count(),
            2048u + 10u * 1024u * 1024u + 1024u);
  const ModelSpec one = mlp_spec("one", {3, 5}, true);  // a single linear map
  EXPECT_EQ(one.num_layers, 0u);
  EXPECT_EQ(names(one.post), (std::vector<std::string>{"output.weight", "output.bias"}));
  EXPECT_NO_THROW(one.validate());
  const ModelSpec shallow = mlp_spec("shallow", {3, 8, 1}, false);  // one hidden width: no repeated layer
  EXPECT_EQ(shallow.num_layers, 0u);
  EXPECT_NO_THROW(shallow.validate());
  EXPECT_EQ(shallow.parameter_count(), 24u + 8u);
  const ModelSpec uneven = mlp_spec("uneven", {3, 8, 16, 4, 1}, true);
  EXPECT_EQ(uneven.num_layers, 0u);
  EXPECT_EQ(names(uneven.pre), (std::vector<std::string>{"input.weight", "input.bias", "layers.0.weight",
                                                          "layers.0.bias", "layers.1.weight", "layers.1.bias"}));
  EXPECT_EQ(tensor(uneven.pre, "layers.1.weight").shape, (Shape{4, 16}));
  EXPECT_EQ(uneven.parameter_count(), (24u + 8u) + (128u + 16u) + (64u + 4u) + (4u + 1u));
  EXPECT_THROW(mlp_spec("bad", {3}, true), std::invalid_argument);
  EXPECT_THROW(mlp_spec("bad", {3, 0, 1}, true), std::invalid_argument);
}

TEST(Presets, Gpt2NamesShapesRoles) {
  const ModelSpec m = make_preset("gpt2");
  EXPECT_EQ(m.layer_prefix, "transformer.h.");
  EXPECT_EQ(m.num_layers, 12u);
  EXPECT_EQ(names(m.pre), (std::vector<std::string>{"transformer.wte.weight", "transformer.wpe.weight"}));
  EXPECT_EQ(names(m.post), (std::vector<std::string>{"transformer.ln_f.weight", "transformer.ln_f.bias"}));
  EXPECT_EQ(names(m.layer.tensors),
            (std::vector<std::string>{"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                                      "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                                      "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"}));
  EXPECT_EQ(m.pre[0].shape, (Shape{50257, 768}));
  EXPECT_EQ(m.pre[1].shape, (Shape{1024, 768}));
  EXPECT_EQ(m.pre[1].role, TensorRole::position_embedding);
  const auto& ts = m.layer.tensors;
  const auto& c_attn = tensor(ts, "attn.c_attn.weight");
  EXPECT_EQ(c_attn.shape, (Shape{768, 2304}));  // Conv1D: [in, out]
  EXPECT_FALSE(c_attn.transposable);
  EXPECT_EQ(c_attn.fan_in, 768u);
  EXPECT_EQ(c_attn.fan_out, 2304u);
  EXPECT_EQ(c_attn.role, TensorRole::linear_weight);
  EXPECT_EQ(tensor(ts, "attn.c_attn.bias").shape, (Shape{2304}));
  EXPECT_EQ(tensor(ts, "attn.c_proj.weight").role, TensorRole::output_weight);
  EXPECT_EQ(tensor(ts, "mlp.c_fc.weight").shape, (Shape{768, 3072}));
  const auto& proj = tensor(ts, "mlp.c_proj.weight");
  EXPECT_EQ(proj.shape, (Shape{3072, 768}));
  EXPECT_EQ(proj.role, TensorRole::output_weight);
  EXPECT_EQ(proj.fan_in, 3072u);
  EXPECT_EQ(tensor(ts, "ln_1.bias").role, TensorRole::norm_bias);
  EXPECT_EQ(m.canonical_name(11, c_attn), "transformer.h.11.attn.c_attn.weight");
  EXPECT_EQ(find_tensor(m.post, "lm_head.weight"), nullptr);  // tied
  EXPECT_TRUE(m.hyper.tie_word_embeddings);
  EXPECT_EQ(m.hyper.vocab_size, 50257u);
  EXPECT_EQ(m.hyper.intermediate_size, 3072u);
  EXPECT_EQ(m.hyper.head_dim, 64u);
  EXPECT_EQ(m.hyper.max_position_embeddings, 1024u);
  EXPECT_DOUBLE_EQ(m.hyper.norm_eps, 1e-5);
  EXPECT_EQ(make_preset("gpt2-xl").hyper.num_heads, 25u);
  EXPECT_EQ(make_preset("gpt2-xl").hyper.head_dim, 64u);
}

TEST(Presets, LlamaNamesShapesRoles) {
  const ModelSpec m = make_preset("llama-3-8b");
  EXPECT_EQ(m.layer_prefix, "model.layers.");
  EXPECT_EQ(m.num_layers, 32u);
  EXPECT_EQ(names(m.pre), (std::vector<std::string>{"model.embed_tokens.weight"}));
  EXPECT_EQ(names(m.post), (std::vector<std::string>{"model.norm.weight", "lm_head.weight"}));
  EXPECT_EQ(names(m.layer.tensors),
            (std::vector<std::string>{"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                                      "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                                      "mlp.down_proj.weight", "input_layernorm.weight",
                                      "post_attention_layernorm.weight"}));
  EXPECT_EQ(m.pre[0].shape, (Shape{128256, 4096}));
  EXPECT_EQ(m.post[1].shape, (Shape{128256, 4096}));
  EXPECT_EQ(m.post[1].role, TensorRole::head_weight);
  const auto& ts = m.layer.tensors;
  EXPECT_EQ(tensor(ts, "self_attn.q_proj.weight").shape, (Shape{4096, 4096}));
  const auto& k = tensor(ts, "self_attn.k_proj.weight");
  EXPECT_EQ(k.shape, (Shape{1024, 4096}));  // 8 kv heads x 128
  EXPECT_TRUE(k.transposable);
  EXPECT_EQ(k.fan_in, 4096u);
  EXPECT_EQ(k.fan_out, 1024u);
  EXPECT_EQ(tensor(ts, "self_attn.o_proj.weight").role, TensorRole::output_weight);
  EXPECT_EQ(tensor(ts, "mlp.gate_proj.weight").shape, (Shape{14336, 4096}));
  const auto& down = tensor(ts, "mlp.down_proj.weight");
  EXPECT_EQ(down.shape, (Shape{4096, 14336}));
  EXPECT_EQ(down.role, TensorRole::output_weight);
  EXPECT_EQ(down.fan_in, 14336u);
  EXPECT_EQ(tensor(ts, "input_layernorm.weight").shape, (Shape{4096}));
  EXPECT_EQ(m.hyper.num_kv_heads, 8u);
  EXPECT_EQ(m.hyper.head_dim, 128u);
  EXPECT_DOUBLE_EQ(m.hyper.rope_theta, 500000.0);
  EXPECT_EQ(m.hyper.max_position_embeddings, 8192u);
  EXPECT_FALSE(m.hyper.tie_word_embeddings);

  const ModelSpec big = make_preset("llama-3-70b");
  EXPECT_EQ(big.num_layers, 80u);
  EXPECT_EQ(tensor(big.layer.tensors, "self_attn.v_proj.weight").shape, (Shape{1024, 8192}));
  EXPECT_EQ(tensor(big.layer.tensors, "mlp.up_proj.weight").shape, (Shape{28672, 8192}));

  // meta-llama/Llama-3.1-405B: 126 layers of hidden 16384, 8 of its 128 heads for keys and values,
  // 131072 positions reached by llama3 rope scaling of 8192.
  const ModelSpec huge = make_preset("llama-3.1-405b");
  EXPECT_EQ(huge.family, "llama");
  EXPECT_EQ(huge.num_layers, 126u);
  EXPECT_EQ(huge.pre[0].shape, (Shape{128256, 16384}));
  EXPECT_EQ(tensor(huge.layer.tensors, "self_attn.q_proj.weight").shape, (Shape{16384, 16384}));
  EXPECT_EQ(tensor(huge.layer.tensors, "self_attn.k_proj.weight").shape, (Shape{1024, 16384}));
  EXPECT_EQ(tensor(huge.layer.tensors, "mlp.down_proj.weight").shape, (Shape{16384, 53248}));
  EXPECT_EQ(huge.post[1].name, "lm_head.weight");
  EXPECT_EQ(huge.post[1].shape, (Shape{128256, 16384}));
  EXPECT_EQ(huge.hyper.head_dim, 128u);
  EXPECT_EQ(huge.hyper.max_position_embeddings, 131072u);
  EXPECT_DOUBLE_EQ(huge.hyper.rope_theta, 500000.0);
  EXPECT_DOUBLE_EQ(huge.hyper.norm_eps, 1e-5);
  EXPECT_FALSE(huge.hyper.tie_word_embeddings);
  EXPECT_EQ(huge.hyper.rope_scaling, (RopeScaling{8.0, 1.0, 4.0, 8192}));
  EXPECT_EQ(m.hyper.rope_scaling, RopeScaling{});  // Llama 3 has none

  const ModelSpec mis = make_preset("mistral-7b");
  EXPECT_EQ(mis.family, "mistral");
  EXPECT_EQ(mis.pre[0].shape, (Shape{32000, 4096}));
  EXPECT_EQ(mis.hyper.max_position_embeddings, 32768u);
  EXPECT_DOUBLE_EQ(mis.hyper.rope_theta, 10000.0);
}

TEST(Presets, LlamaTiedAndBiasVariants) {
  Hyper h;
  h.vocab_size = 100;
  h.hidden_size = 32;
  h.intermediate_size = 64;
  h.num_heads = 4;
  h.num_kv_heads = 2;
  h.tie_word_embeddings = true;
  ModelSpec tied = llama_spec("t", h, 2);
  EXPECT_EQ(find_tensor(tied.post, "lm_head.weight"), nullptr);
  EXPECT_EQ(tied.hyper.head_dim, 8u);
  const std::uint64_t layer = 32 * 32 + 2 * (16 * 32) + 32 * 32 + 3 * 32 * 64 + 2 * 32;
  EXPECT_EQ(tied.parameter_count(), 100u * 32u + 2u * layer + 32u);
  h.bias = true;
  h.tie_word_embeddings = false;
  ModelSpec b = llama_spec("b", h, 2);
  EXPECT_EQ(tensor(b.layer.tensors, "self_attn.q_proj.bias").shape, (Shape{32}));
  EXPECT_EQ(tensor(b.layer.tensors, "self_attn.k_proj.bias").shape, (Shape{16}));
  EXPECT_EQ(tensor(b.layer.tensors, "self_attn.v_proj.bias").role, TensorRole::linear_bias);
  EXPECT_EQ(find_tensor(b.layer.tensors, "self_attn.o_proj.bias"), nullptr);
  EXPECT_EQ(b.parameter_count(), 2u * 100u * 32u + 2u * (layer + 32 + 16 + 16) + 32u);
  h.num_heads = 5;  // does not divide 32
  h.num_kv_heads = 0;
  EXPECT_THROW(llama_spec("x", h, 2), std::invalid_argument);
}

TEST(Presets, MixtralNamesShapesRoles) {
  const ModelSpec m = make_preset("mixtral-8x7b");
  EXPECT_EQ(m.num_layers, 32u);
  EXPECT_EQ(m.hyper.num_experts, 8u);
  EXPECT_EQ(m.hyper.experts_per_token, 2u);
  EXPECT_DOUBLE_EQ(m.hyper.rope_theta, 1e6);
  const auto& ts = m.layer.tensors;
  EXPECT_EQ(ts.size(), 4u + 1u + 8u * 3u + 2u);
  const auto& gate = tensor(ts, "block_sparse_moe.gate.weight");
  EXPECT_EQ(gate.shape, (Shape{8, 4096}));
  EXPECT_EQ(gate.role, TensorRole::router_weight);
  EXPECT_EQ(tensor(ts, "block_sparse_moe.experts.7.w1.weight").shape, (Shape{14336, 4096}));
  const auto& w2 = tensor(ts, "block_sparse_moe.experts.0.w2.weight");
  EXPECT_EQ(w2.shape, (Shape{4096, 14336}));
  EXPECT_EQ(w2.role, TensorRole::output_weight);
  EXPECT_EQ(tensor(ts, "block_sparse_moe.experts.3.w3.weight").role, TensorRole::linear_weight);
  EXPECT_EQ(m.canonical_name(31, w2), "model.layers.31.block_sparse_moe.experts.0.w2.weight");
  EXPECT_EQ(names(m.post), (std::vector<std::string>{"model.norm.weight", "lm_head.weight"}));
}

TEST(Presets, Qwen25NamesShapesRoles) {
  const ModelSpec m = make_preset("qwen2.5-7b");
  EXPECT_EQ(m.family, "qwen2");
  EXPECT_EQ(m.num_layers, 28u);
  EXPECT_EQ(names(m.layer.tensors),
            (std::vector<std::string>{"self_attn.q_proj.weight", "self_attn.q_proj.bias", "self_attn.k_proj.weight",
                                      "self_attn.k_proj.bias", "self_attn.v_proj.weight", "self_attn.v_proj.bias",
                                      "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                                      "mlp.down_proj.weight", "input_layernorm.weight",
                                      "post_attention_layernorm.weight"}));
  const auto& ts = m.layer.tensors;
  EXPECT_EQ(tensor(ts, "self_attn.q_proj.weight").shape, (Shape{3584, 3584}));
  EXPECT_EQ(tensor(ts, "self_attn.k_proj.weight").shape, (Shape{512, 3584}));  // 4 kv heads x 128
  EXPECT_EQ(tensor(ts, "self_attn.k_proj.bias").shape, (Shape{512}));
  EXPECT_EQ(tensor(ts, "self_attn.v_proj.bias").role, TensorRole::linear_bias);
  EXPECT_EQ(tensor(ts, "mlp.down_proj.weight").shape, (Shape{3584, 18944}));
  EXPECT_EQ(names(m.post), (std::vector<std::string>{"model.norm.weight", "lm_head.weight"}));  // untied
  EXPECT_EQ(m.post[1].shape, (Shape{152064, 3584}));
  EXPECT_DOUBLE_EQ(m.hyper.rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(m.hyper.norm_eps, 1e-6);
  EXPECT_EQ(m.hyper.head_dim, 128u);
}

TEST(Presets, Gemma2NamesShapesAndZeroNorms) {
  const ModelSpec m = make_preset("gemma-2-9b");
  EXPECT_EQ(m.family, "gemma2");
  EXPECT_EQ(m.num_layers, 42u);
  EXPECT_TRUE(m.hyper.tie_word_embeddings);
  EXPECT_EQ(names(m.pre), (std::vector<std::string>{"model.embed_tokens.weight"}));
  EXPECT_EQ(names(m.post), (std::vector<std::string>{"model.norm.weight"}));  // tied: no lm_head
  const auto& ts = m.layer.tensors;
  EXPECT_EQ(names(ts), (std::vector<std::string>{"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                                  "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                                                  "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
                                                  "input_layernorm.weight", "post_attention_layernorm.weight",
                                                  "pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight"}));
  // head_dim 256 x 16 heads = 4096, not the hidden size 3584.
  EXPECT_EQ(tensor(ts, "self_attn.q_proj.weight").shape, (Shape{4096, 3584}));
  EXPECT_EQ(tensor(ts, "self_attn.k_proj.weight").shape, (Shape{2048, 3584}));
  const auto& o = tensor(ts, "self_attn.o_proj.weight");
  EXPECT_EQ(o.shape, (Shape{3584, 4096}));
  EXPECT_EQ(o.fan_in, 4096u);
  // Gemma scales by (1 + weight): every norm is stored as zeros, an explicit init no recipe overrides.
  std::size_t norms = 0;
  for (const auto* list : {&ts, &m.post})
    for (const auto& t : *list)
      if (t.role == TensorRole::norm_weight) {
        ++norms;
        EXPECT_EQ(t.init, FillSpec::constant(0.0)) << t.name;
      }
  EXPECT_EQ(norms, 5u);
  EXPECT_FALSE(tensor(ts, "mlp.up_proj.weight").init.has_value());
}

TEST(Presets, DeepseekV3DenseThenMoeLayers) {
  const ModelSpec m = make_preset("deepseek-v3");
  EXPECT_EQ(m.family, "deepseek_v3");
  EXPECT_EQ(m.first_layer, 3u);
  EXPECT_EQ(m.num_layers, 58u);
  EXPECT_EQ(m.total_layers(), 61u);
  EXPECT_EQ(m.layer.expert_prefix, "mlp.experts.");
  EXPECT_EQ(num_experts(m.layer), 256u);
  // pre: the embedding, then the three dense layers under their canonical names.
  ASSERT_EQ(m.pre.size(), 1u + 3u * 12u);
  EXPECT_EQ(m.pre[0].name, "model.embed_tokens.weight");
  EXPECT_EQ(tensor(m.pre, "model.layers.2.mlp.down_proj.weight").shape, (Shape{7168, 18432}));
  EXPECT_EQ(tensor(m.pre, "model.layers.0.self_attn.kv_a_layernorm.weight").shape, (Shape{512}));
  EXPECT_EQ(find_tensor(m.pre, "model.layers.3.mlp.down_proj.weight"), nullptr);
  // The MoE block: latent attention, 256 x 3 routed experts, router, correction bias, shared
  // experts, two norms; layer i of the block is layer 3 + i of the model.
  const auto& ts = m.layer.tensors;
  EXPECT_EQ(ts.size(), 7u + 256u * 3u + 2u + 3u + 2u);
  EXPECT_EQ(tensor(ts, "self_attn.q_a_proj.weight").shape, (Shape{1536, 7168}));
  EXPECT_EQ(tensor(ts, "self_attn.q_a_layernorm.weight").shape, (Shape{1536}));
  const auto& qb = tensor(ts, "self_attn.q_b_proj.weight");
  EXPECT_EQ(qb.shape, (Shape{128u * 192u, 1536}));
  EXPECT_EQ(qb.fan_in, 1536u);
  EXPECT_EQ(tensor(ts, "self_attn.kv_a_proj_with_mqa.weight").shape, (Shape{576, 7168}));
  EXPECT_EQ(tensor(ts, "self_attn.kv_b_proj.weight").shape, (Shape{128u * 256u, 512}));
  EXPECT_EQ(tensor(ts, "self_attn.o_proj.weight").shape, (Shape{7168, 128u * 128u}));
  EXPECT_EQ(tensor(ts, "self_attn.o_proj.weight").role, TensorRole::output_weight);
  EXPECT_EQ(tensor(ts, "mlp.experts.255.up_proj.weight").shape, (Shape{2048, 7168}));
  EXPECT_EQ(tensor(ts, "mlp.experts.0.down_proj.weight").role, TensorRole::output_weight);
  EXPECT_EQ(tensor(ts, "mlp.gate.weight").shape, (Shape{256, 7168}));
  EXPECT_EQ(tensor(ts, "mlp.gate.weight").role, TensorRole::router_weight);
  const auto& bias = tensor(ts, "mlp.gate.e_score_correction_bias");
  EXPECT_EQ(bias.shape, (Shape{256}));
  EXPECT_EQ(bias.init, FillSpec::constant(0.0));
  EXPECT_EQ(tensor(ts, "mlp.shared_experts.down_proj.weight").shape, (Shape{7168, 2048}));
  EXPECT_EQ(m.canonical_name(0, ts[0]), "model.layers.3.self_attn.q_a_proj.weight");
  EXPECT_EQ(m.canonical_name(57, ts[0]), "model.layers.60.self_attn.q_a_proj.weight");
  EXPECT_EQ(names(m.post), (std::vector<std::string>{"model.norm.weight", "lm_head.weight"}));
  // Dense layers: 3 x (attention 187,107,328 + MLP 3 x 7168 x 18432 + norms 14,336).
  const std::uint64_t attention = 7168u * 1536u + 1536u + 24576u * 1536u + 576u * 7168u + 512u + 32768u * 512u + 7168u * 16384u;
  EXPECT_EQ(attention, 187'107'328u);
  std::uint64_t pre = 0;
  for (const auto& t : m.pre) pre += numel(t.shape);
  EXPECT_EQ(pre, 129280u * 7168u + 3u * (attention + 3u * 7168u * 18432u + 2u * 7168u));

  const ModelSpec tiny = make_preset("deepseek-v3-tiny");
  EXPECT_EQ(tiny.first_layer, 1u);
  EXPECT_EQ(tiny.num_layers, 2u);
  EXPECT_EQ(num_experts(tiny.layer), 4u);
  EXPECT_EQ(tensor(tiny.layer.tensors, "self_attn.q_b_proj.weight").shape, (Shape{4u * 24u, 32}));
}

// A model description made into a spec by one set of rules (init/describe.hpp): roles by module kind
// and the recipes' names, the layer index and the repeated block, ties, the Flax kernel convention,
// and the refusal of what a recipe needs and the description does not tell.
#include <gtest/gtest.h>

#include <map>

#include <stdexcept>
#include <string>

#include <layerinit/init/describe.hpp>
#include <layerinit/init/presets.hpp>
#include <layerinit/init/spec_json.hpp>

#include "../init/json_documents.hpp"
#include "../init/json_read.hpp"

using namespace layerinit;

namespace {

ParameterDescription param(std::string name, Shape shape, ModuleKind module = ModuleKind::unknown) {
  ParameterDescription p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.module = module;
  if (module == ModuleKind::linear && p.shape.size() == 2) p.storage = WeightStorage::out_in;
  return p;
}

const DescribedParameter& of(const DescribedModel& m, const std::string& name) {
  for (const auto& p : m.parameters)
    if (p.name == name) return p;
  throw std::out_of_range(name);
}

std::string refusal(const ModelDescription& d, const char* recipe) {
  const Recipe r = make_recipe(recipe);
  try {
    describe(d, &r);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// A llama-like model as torch describes it: embedding, 3 layers of wq/wo/w1/w2 and norms, norm, output.
ModelDescription llama_like(std::uint64_t layers = 3) {
  ModelDescription d;
  d.parameters.push_back(param("tok_embeddings.weight", {100, 16}, ModuleKind::embedding));
  for (std::uint64_t l = 0; l < layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    d.parameters.push_back(param(p + "attention_norm.weight", {16}, ModuleKind::norm));
    d.parameters.push_back(param(p + "attention.wq.weight", {16, 16}, ModuleKind::linear));
    d.parameters.push_back(param(p + "attention.wo.weight", {16, 16}, ModuleKind::linear));
    d.parameters.push_back(param(p + "feed_forward.w1.weight", {32, 16}, ModuleKind::linear));
    d.parameters.push_back(param(p + "feed_forward.w2.weight", {16, 32}, ModuleKind::linear));
  }
  d.parameters.push_back(param("norm.weight", {16}, ModuleKind::norm));
  d.parameters.push_back(param("output.weight", {100, 16}, ModuleKind::linear));
  return d;
}

TEST(Describe, RolesFromModuleKindsAndTheRecipesNames) {
  const DescribedModel m = describe(llama_like());
  EXPECT_EQ(of(m, "tok_embeddings.weight").role, TensorRole::embedding);
  EXPECT_EQ(of(m, "layers.1.attention.wq.weight").role, TensorRole::linear_weight);
  EXPECT_EQ(of(m, "layers.1.attention.wo.weight").role, TensorRole::output_weight);
  EXPECT_EQ(of(m, "layers.2.feed_forward.w2.weight").role, TensorRole::output_weight);
  EXPECT_EQ(of(m, "output.weight").role, TensorRole::head_weight);
  EXPECT_EQ(of(m, "norm.weight").role, TensorRole::norm_weight);
  EXPECT_TRUE(of(m, "layers.0.attention.wq.weight").transposable);
  EXPECT_EQ(of(m, "layers.2.feed_forward.w2.weight").layer, 2u);
  EXPECT_FALSE(of(m, "output.weight").layer);
  EXPECT_EQ(m.spec.hyper.hidden_size, 16u);  // the token embedding's width
}

// Megatron-core's GPTModel as layerinit.torch describes it (megatron/core/models/gpt/gpt_model.py,
// transformer/attention.py, transformer/mlp.py): embeddings, 2 layers, final norm, output layer; its
// parallel linears are linear maps.
ModelDescription megatron_like() {
  ModelDescription d;
  d.parameters.push_back(param("embedding.word_embeddings.weight", {128, 16}, ModuleKind::embedding));
  d.parameters.push_back(param("embedding.position_embeddings.weight", {32, 16}, ModuleKind::embedding));
  for (const char* l : {"0", "1"}) {
    const std::string p = std::string("decoder.layers.") + l + ".";
    d.parameters.push_back(param(p + "self_attention.linear_qkv.weight", {48, 16}, ModuleKind::linear));
    d.parameters.push_back(param(p + "self_attention.linear_proj.weight", {16, 16}, ModuleKind::linear));
    d.parameters.push_back(param(p + "mlp.linear_fc1.weight", {32, 16}, ModuleKind::linear));
    d.parameters.push_back(param(p + "mlp.linear_fc2.weight", {16, 32}, ModuleKind::linear));
  }
  d.parameters.push_back(param("decoder.final_layernorm.weight", {16}, ModuleKind::norm));
  d.parameters.push_back(param("output_layer.weight", {128, 16}, ModuleKind::linear));
  return d;
}

TEST(Describe, MegatronCoresNames) {
  const ModelDescription d = megatron_like();
  const DescribedModel m = describe(d);
  EXPECT_EQ(of(m, "embedding.position_embeddings.weight").role, TensorRole::position_embedding);
  EXPECT_EQ(of(m, "decoder.layers.1.self_attention.linear_qkv.weight").role, TensorRole::linear_weight);
  EXPECT_EQ(of(m, "decoder.layers.1.self_attention.linear_proj.weight").role, TensorRole::output_weight);
  EXPECT_EQ(of(m, "decoder.layers.0.mlp.linear_fc2.weight").role, TensorRole::output_weight);
  EXPECT_EQ(of(m, "output_layer.weight").role, TensorRole::head_weight);
  EXPECT_EQ(m.spec.num_layers, 2u);
  EXPECT_EQ(refusal(d, "megatron"), "");
}

TEST(Describe, MegatronInitFieldsAreTransformerConfigs) {
  EXPECT_EQ(megatron_init_field(TensorRole::linear_weight, "decoder.layers.0.mlp.linear_fc1.weight"), "init_method");
  EXPECT_EQ(megatron_init_field(TensorRole::head_weight, "output_layer.weight"), "init_method");
  EXPECT_EQ(megatron_init_field(TensorRole::router_weight, "decoder.layers.0.mlp.router.weight"), "init_method");
  EXPECT_EQ(megatron_init_field(TensorRole::linear_bias, "decoder.layers.0.mlp.router.bias"), "init_method");
  EXPECT_EQ(megatron_init_field(TensorRole::linear_bias, "decoder.layers.0.mlp.linear_fc1.bias"), "");
  EXPECT_EQ(megatron_init_field(TensorRole::output_weight, "decoder.layers.0.mlp.linear_fc2.weight"), "output_layer_init_method");
  EXPECT_EQ(megatron_init_field(TensorRole::embedding, "embedding.word_embeddings.weight"), "embedding_init_method");
  EXPECT_EQ(megatron_init_field(TensorRole::position_embedding, "embedding.position_embeddings.weight"), "embedding_init_method");
  EXPECT_EQ(megatron_init_field(TensorRole::norm_weight, "decoder.final_layernorm.weight"), "layernorm_zero_centered_gamma");
  EXPECT_EQ(megatron_init_field(TensorRole::norm_bias, "decoder.final_layernorm.bias"), "");
}

// check_megatron_config against recipe megatron's fills of megatron_like() (init_method_std 0.02, 2 layers).
std::string megatron_conflicts(const MegatronConfig& c, const std::vector<std::string>& overrides = {}) {
  ModelDescription d = megatron_like();
  d.parameters.push_back(param("output_layer.weight.copy", {128, 16}, ModuleKind::linear));
  d.parameters.back().tied_to = "output_layer.weight";  // checked once, under its first name
  const Recipe r = make_recipe("megatron");
  const DescribedModel m = describe(d);
  const auto fill = [&m, &r](const std::string& tensor) {
    for (const auto* list : {&m.spec.pre, &m.spec.post})
      for (const auto& t : *list)
        if (t.name == tensor) return r.rule_for(tensor_context(m.spec, t, std::nullopt));
    for (std::uint64_t l = 0; l < m.spec.num_layers; ++l)
      for (const auto& t : m.spec.layer.tensors)
        if (m.spec.canonical_name(l, t) == tensor) return r.rule_for(tensor_context(m.spec, t, l));
    throw std::out_of_range(tensor);
  };
  try {
    check_megatron_config(c, m.parameters, fill, overrides);
  } catch (const bad_input& e) {
    EXPECT_EQ(e.argument(), "recipe");
    return e.what();
  }
  return "";
}

TEST(Describe, AMegatronConfigTheRecipeIsNotIsRefusedWithItsFills) {
  const MegatronConfig defaults{{{"init_method", 0.02, ""}, {"output_layer_init_method", 0.01, ""},
                                 {"embedding_init_method", 0.02, ""}}, false};
  EXPECT_EQ(megatron_conflicts(defaults), "");
  MegatronConfig c = defaults;
  c.methods[2].sigma = 0.5;  // embedding_init_method_std
  const std::string embeddings =
      "recipe 'megatron' is Megatron-core's default init, and this model's TransformerConfig draws 2 parameter(s) "
      "otherwise: embedding.word_embeddings.weight (config.embedding_init_method: normal(0, 0.5); the recipe's normal(0, "
      "0.02)), embedding.position_embeddings.weight (config.embedding_init_method: normal(0, 0.5); the recipe's normal(0, "
      "0.02)); give them the config's fills with overrides= (a name glob -> fill) such as "
      "{'embedding.word_embeddings.weight': 'normal(0, 0.5)', 'embedding.position_embeddings.weight': 'normal(0, 0.5)'}";
  EXPECT_EQ(megatron_conflicts(c), embeddings);
  EXPECT_EQ(megatron_conflicts(c, {"embedding.*"}), "");
  // An init method of the config's own: named as the config shows it, no fill suggested for it.
  c = defaults;
  c.methods[0] = {"init_method", std::nullopt, "<function xavier_uniform_>"};
  c.layernorm_zero_centered_gamma = true;
  EXPECT_EQ(megatron_conflicts(c),
            "recipe 'megatron' is Megatron-core's default init, and this model's TransformerConfig draws 6 parameter(s) "
            "otherwise: decoder.layers.0.self_attention.linear_qkv.weight (config.init_method: <function xavier_uniform_>, "
            "which layerinit does not read; the recipe's normal(0, 0.02)), decoder.layers.0.mlp.linear_fc1.weight "
            "(config.init_method: <function xavier_uniform_>, which layerinit does not read; the recipe's normal(0, 0.02)), "
            "decoder.layers.1.self_attention.linear_qkv.weight (config.init_method: <function xavier_uniform_>, which "
            "layerinit does not read; the recipe's normal(0, 0.02)), decoder.layers.1.mlp.linear_fc1.weight "
            "(config.init_method: <function xavier_uniform_>, which layerinit does not read; the recipe's normal(0, 0.02)), "
            "decoder.final_layernorm.weight (config.layernorm_zero_centered_gamma: constant(0); the recipe's constant(1)) "
            "and 1 more; give them the config's fills with overrides= (a name glob -> fill) such as "
            "{'decoder.final_layernorm.weight': 'constant(0)'}");
}

TEST(Describe, TheRepeatedBlockIsTheLongestRunOfIdenticalLastLayers) {
  ModelDescription d = llama_like(4);
  d.parameters[1].init = FillSpec::constant(2);  // layer 0's attention_norm differs
  const DescribedModel m = describe(d);
  EXPECT_EQ(m.spec.layer_prefix, "layers.");
  EXPECT_EQ(m.spec.first_layer, 1u);
  EXPECT_EQ(m.spec.num_layers, 3u);
  EXPECT_EQ(m.spec.total_layers(), 4u);
  EXPECT_EQ(m.spec.layer.tensors.size(), 5u);
  EXPECT_EQ(m.spec.layer.tensors[2].name, "attention.wo.weight");
  ASSERT_EQ(m.spec.pre.size(), 6u);  // the embedding, then layer 0 under its names
  EXPECT_EQ(m.spec.pre[1].name, "layers.0.attention_norm.weight");
  ASSERT_EQ(m.spec.post.size(), 2u);
}

TEST(Describe, LayersNotNumberedFromZeroAreNoDepth) {
  ModelDescription d;
  d.parameters.push_back(param("blocks.1.wo.weight", {4, 4}, ModuleKind::linear));
  d.parameters.push_back(param("blocks.2.wo.weight", {4, 4}, ModuleKind::linear));
  d.parameters.push_back(param("0.wo.weight", {4, 4}, ModuleKind::linear));  // an nn.Sequential's
  const DescribedModel m = describe(d);
  EXPECT_EQ(m.spec.num_layers, 0u);
  EXPECT_FALSE(of(m, "blocks.1.wo.weight").depth_known);
  EXPECT_FALSE(of(m, "0.wo.weight").depth_known);
  // torchtitan scales an output projection by its layer: none of them has one.
  EXPECT_NE(refusal(d, "torchtitan").find("so their layer is unknown: blocks.1.wo.weight, blocks.2.wo.weight, 0.wo.weight"),
            std::string::npos);
}

TEST(Describe, FlaxKernelsAreStoredInOut) {
  ModelDescription d;
  d.parameters.push_back(param("params.Dense_0.kernel", {8, 3}));       // [in, out]
  d.parameters.push_back(param("params.Dense_0.bias", {3}));
  d.parameters.push_back(param("params.Conv_0.kernel", {3, 3, 2, 4}));  // [kh, kw, in, out]
  d.parameters.push_back(param("params.LayerNorm_0.scale", {3}));
  d.parameters.push_back(param("params.LayerNorm_0.bias", {3}));
  d.parameters.push_back(param("params.Embed_0.embedding", {10, 3}));
  const DescribedModel m = describe(d);
  const auto& k = of(m, "params.Dense_0.kernel");
  EXPECT_EQ(k.role, TensorRole::linear_weight);
  EXPECT_FALSE(k.role_known);
  EXPECT_TRUE(k.stored_in_out);
  EXPECT_EQ(k.logical, (Shape{3, 8}));
  EXPECT_EQ(of(m, "params.Dense_0.bias").role, TensorRole::linear_bias);
  const auto& c = of(m, "params.Conv_0.kernel");
  EXPECT_EQ(c.fan_in, 18u);   // 3 * 3 * 2
  EXPECT_EQ(c.fan_out, 36u);  // 3 * 3 * 4
  EXPECT_FALSE(c.transposable);
  EXPECT_EQ(of(m, "params.LayerNorm_0.scale").role, TensorRole::norm_weight);
  EXPECT_EQ(of(m, "params.LayerNorm_0.bias").role, TensorRole::norm_bias);
  d.parameters.push_back(param("lnx.weight", {3, 3}));  // 2-D: not a norm's, whatever its module's name
  EXPECT_EQ(of(describe(d), "lnx.weight").role, TensorRole::other);
  d.parameters.pop_back();
  EXPECT_EQ(of(m, "params.Embed_0.embedding").role, TensorRole::embedding);
  // A caller's storage wins over the convention.
  d.parameters[0].storage = WeightStorage::out_in;
  EXPECT_EQ(of(describe(d), "params.Dense_0.kernel").logical, (Shape{8, 3}));
}

TEST(Describe, AFlaxKernelOfMoreDimensionsOutsideAConvIsRefused) {
  // linen's DenseGeneral kernel [64, 4, 16]: read as a convolution's, its fans would be 4 * 64 and 4 * 16.
  ModelDescription d;
  d.parameters.push_back(param("params.attn.query.kernel", {64, 4, 16}));
  try {
    describe(d, nullptr);
    FAIL() << "a 3-D kernel outside a Conv was read";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("params.attn.query.kernel"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("outside a Conv module"), std::string::npos) << e.what();
  }
  // told: its fans, or its init (a recording of the initializer)
  d.parameters[0].fan_in = 64;
  d.parameters[0].fan_out = 64;
  EXPECT_EQ(of(describe(d), "params.attn.query.kernel").fan_in, 64u);
  d.parameters[0].fan_in = d.parameters[0].fan_out = 0;
  d.parameters[0].init = FillSpec::normal(0, 0.1);
  EXPECT_NO_THROW(describe(d));
  // in a Conv it is a convolution's kernel [..., in, out]
  ModelDescription c;
  c.parameters.push_back(param("params.Conv_0.kernel", {3, 3, 2, 4}));
  EXPECT_EQ(of(describe(c), "params.Conv_0.kernel").fan_in, 18u);
}

TEST(Describe, AnEmbeddingTiedToTheHeadIsOneTensorWithTheHeadsRule) {
  ModelDescription d;
  d.parameters.push_back(param("transformer.wte.weight", {100, 16}, ModuleKind::embedding));
  d.parameters.push_back(param("transformer.h.0.mlp.c_fc.weight", {64, 16}, ModuleKind::linear));
  ParameterDescription head = param("lm_head.weight", {100, 16}, ModuleKind::linear);
  head.tied_to = "transformer.wte.weight";
  d.parameters.push_back(head);
  const DescribedModel m = describe(d);
  EXPECT_TRUE(m.spec.hyper.tie_word_embeddings);
  EXPECT_EQ(of(m, "lm_head.weight").tensor, "transformer.wte.weight");
  EXPECT_EQ(of(m, "lm_head.weight").role, TensorRole::embedding);
  EXPECT_EQ(m.spec.parameter_count(), 100u * 16 + 64u * 16);
  const Recipe r = make_recipe("pytorch-default");
  const TensorContext c = tensor_context(m.spec, m.spec.pre.at(0), std::nullopt);
  EXPECT_EQ(r.rule_for(c), FillSpec::uniform(-0.25, 0.25));  // the head's U(+-1/sqrt(16)), not normal(0, 1)
}

TEST(Describe, TiesThatDisagreeOrNameNothingAreRefused) {
  ModelDescription d;
  d.parameters.push_back(param("a.weight", {4}, ModuleKind::norm));
  ParameterDescription b = param("b.bias", {4}, ModuleKind::linear);
  b.tied_to = "a.weight";
  d.parameters.push_back(b);
  EXPECT_THROW(describe(d), std::invalid_argument);
  d.parameters[1].tied_to = "c.weight";
  EXPECT_THROW(describe(d), std::invalid_argument);
  d.parameters[1].tied_to.clear();
  d.parameters.push_back(d.parameters[0]);  // described twice
  EXPECT_THROW(describe(d), std::invalid_argument);
}

TEST(Describe, ARawParameterTiedToAMapsTakesItsRole) {
  // BERT's cls.predictions.bias is cls.predictions.decoder.bias: the raw parameter's name tells no
  // role (other), the decoder's Linear does; in either order the tensor is the map's bias.
  for (bool raw_first : {true, false}) {
    ModelDescription d;
    ParameterDescription raw = param("cls.predictions.bias", {16});
    ParameterDescription lin = param("cls.predictions.decoder.bias", {16}, ModuleKind::linear);
    lin.fan_in = 8;
    lin.fan_out = 16;
    if (raw_first) {
      lin.tied_to = raw.name;
      d.parameters = {raw, lin};
    } else {
      raw.tied_to = lin.name;
      d.parameters = {lin, raw};
    }
    const DescribedModel m = describe(d);
    EXPECT_EQ(of(m, "cls.predictions.bias").role, TensorRole::linear_bias) << raw_first;
    EXPECT_EQ(of(m, "cls.predictions.decoder.bias").tensor, of(m, "cls.predictions.bias").tensor);
    EXPECT_EQ(of(m, "cls.predictions.bias").fan_in, 8u);
  }
}

TEST(Describe, WhatARecipeNeedsAndTheDescriptionDoesNotTellIsRefused) {
  ModelDescription d = llama_like(2);
  d.parameters.push_back(param("layers.1.feed_forward.proj.weight", {16, 16}, ModuleKind::linear));
  d.parameters.push_back(param("extra.0.wo.weight", {16, 16}, ModuleKind::linear));
  d.parameters.push_back(param("gain", {16}));
  const std::string why = refusal(d, "torchtitan");
  EXPECT_NE(why.find("recipe 'torchtitan' cannot tell the fill of 3 parameter(s): no rule for: gain (role other); "
                     "linear maps whose names do not say input, output projection, head or router: "
                     "layers.1.feed_forward.proj.weight; numbered outside the model's layers (layers.), so their "
                     "layer is unknown: extra.0.wo.weight; tell it per name"),
            std::string::npos)
      << why;
  // Where every possibility gives one fill, nothing needs telling but the rule-less parameter.
  EXPECT_NE(refusal(d, "pytorch-default").find("cannot tell the fill of 1 parameter(s): no rule for: gain"), std::string::npos);
  // The advice is the causes': names of maps only where a role is missing, layers only where a layer is.
  EXPECT_NE(why.find("or name the maps"), std::string::npos) << why;
  EXPECT_NE(why.find("numbered layers"), std::string::npos) << why;
  const std::string raw_only = refusal(d, "pytorch-default");
  EXPECT_EQ(raw_only.find("name the maps"), std::string::npos) << raw_only;
  EXPECT_EQ(raw_only.find("numbered layers"), std::string::npos) << raw_only;
  // An explicit init tells it.
  for (auto& p : d.parameters)
    if (p.name != "layers.0.attention.wq.weight") p.init = FillSpec::constant(0);
  EXPECT_EQ(refusal(d, "torchtitan"), "");
}

TEST(Describe, ReadFromJsonWithErrorsNamingTheField) {
  const ModelDescription d = description_from_json(R"j({"name": "m", "hyper": {"hidden_size": 8},
    "parameters": [{"name": "w.kernel", "shape": [8, 4], "storage": "in-out", "role": "output_weight",
                    "init": "normal(0, 0.123456789)", "tp_replicated": true},
                   {"name": "e.weight", "shape": [4, 8], "module": "embedding", "tied_to": "w.kernel", "buffer": false}]})j");
  ASSERT_EQ(d.parameters.size(), 2u);
  EXPECT_TRUE(d.hyper_hidden);
  EXPECT_EQ(d.parameters[0].storage, WeightStorage::in_out);
  EXPECT_EQ(d.parameters[0].role, TensorRole::output_weight);
  EXPECT_EQ(d.parameters[0].init, FillSpec::normal(0, 0.123456789));
  EXPECT_EQ(d.parameters[1].module, ModuleKind::embedding);
  EXPECT_EQ(d.parameters[1].tied_to, "w.kernel");
  EXPECT_TRUE(d.parameters[0].tp_replicated);
  EXPECT_FALSE(d.parameters[1].tp_replicated);
  // Tensor parallelism reads the mark from the spec.
  const ModelSpec spec = describe(description_from_json(R"j({"parameters": [
    {"name": "attn.qkv.weight", "shape": [24, 8], "module": "linear", "tp_replicated": true},
    {"name": "attn.proj.weight", "shape": [8, 8], "module": "linear"}]})j")).spec;
  std::map<std::string, bool> marked;
  for (const auto* list : {&spec.pre, &spec.layer.tensors, &spec.post})
    for (const TensorSpec& t : *list) marked[t.name] = t.tp_replicated;
  EXPECT_EQ(marked, (std::map<std::string, bool>{{"attn.qkv.weight", true}, {"attn.proj.weight", false}}));
  auto error = [](const char* text) {
    try {
      description_from_json(text);
    } catch (const spec_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error(R"({"parameters": [{"name": "a", "shape": [2], "module": "conv"}]})"),
            "spec: parameters[0].module: module kind 'conv' is unknown (valid: unknown, linear, embedding, norm)");
  EXPECT_EQ(error(R"({"parameters": [{"name": "a", "shape": [2], "storage": "in-out"}]})"),
            "spec: parameters[0].storage: applies to a 2-D weight");
  EXPECT_EQ(error(R"j({"parameters": [{"name": "a", "shape": [2], "init": "gauss(1)"}]})j").rfind("spec: parameters[0].init: ", 0), 0u);
  EXPECT_EQ(error(R"({"name": "m"})"), "spec: top level: missing key 'parameters'");
}

// A document built without text (the Python binding's dicts) reads as its text does, errors and the
// limits parsing a text applies included; a spec's document reads back as the spec.
TEST(Describe, ADocumentReadsAsItsText) {
  const nlohmann::json doc = {{"name", "m"},
                              {"parameters", {{{"name", "w.kernel"}, {"shape", {8, 4}}, {"storage", "in-out"}},
                                              {{"name", "e.weight"}, {"shape", {4, 8}}, {"module", "embedding"}}}}};
  const ModelDescription a = description_from_document(doc), b = description_from_json(doc.dump());
  ASSERT_EQ(a.parameters.size(), 2u);
  EXPECT_EQ(describe(a).spec, describe(b).spec);
  EXPECT_EQ(a.parameters[0].storage, WeightStorage::in_out);
  auto error = [](auto read) {
    try {
      read();
    } catch (const spec_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  nlohmann::json bad = doc;
  bad["parameters"][1]["module"] = "conv";
  EXPECT_EQ(error([&] { description_from_document(bad); }), error([&] { description_from_json(bad.dump()); }));
  EXPECT_NE(error([&] { description_from_document(bad); }), "");
  nlohmann::json deep = nullptr;
  for (int i = 0; i < 70; ++i) deep = nlohmann::json{{"a", deep}};
  bad = doc;
  bad["hyper"] = deep;
  EXPECT_EQ(error([&] { description_from_document(bad); }).rfind("spec: hyper.a.a.", 0), 0u);
  EXPECT_NE(error([&] { description_from_document(bad); }).find(": nesting deeper than 64 levels"), std::string::npos);
  EXPECT_NE(error([&] { spec_from_document(bad); }).find(": nesting deeper than 64 levels"), std::string::npos);
  const ModelSpec llama = make_preset("llama-tiny");
  EXPECT_EQ(spec_from_document(nlohmann::json::parse(spec_document(llama).dump())), llama);
  EXPECT_EQ(spec_document(llama).dump(2) + "\n", spec_to_json(llama));
}

// Regions are given in the coordinates of the parameter as stored: describe() puts them on the spec's
// tensor in its logical ones, transposed with a 2-D weight stored [in, out]; a tie group's tensor has
// its first name's (an embedding tied to a head: the embedding's shape, so its boxes as they are).
TEST(Describe, RegionsAsStoredBecomeLogical) {
  const ModelDescription d = description_from_json(R"j({"parameters": [
    {"name": "embed.embedding", "shape": [10, 4], "regions": [{"offset": [3, 0], "shape": [1, 4], "init": {"constant": {"value": 0}}}]},
    {"name": "layers.0.mlp.kernel", "shape": [4, 6], "regions": [{"offset": [1, 2], "shape": [2, 3], "init": {"uniform": {"lo": -1, "hi": 1}}},
                                                                {"offset": [0, 5], "shape": [4, 1], "init": {"constant": {"value": 2}}}]},
    {"name": "layers.0.out.weight", "shape": [4, 6], "module": "linear", "regions": [{"offset": [1, 2], "shape": [2, 3], "init": {"constant": {"value": 1}}}]},
    {"name": "head.weight", "shape": [10, 4], "module": "linear", "tied_to": "embed.embedding",
     "regions": [{"offset": [0, 0], "shape": [1, 1], "init": {"constant": {"value": 5}}}]}]})j");
  EXPECT_EQ(d.parameters[1].regions[0], (FillRegion{{1, 2}, {2, 3}, FillSpec::uniform(-1, 1)}));  // as stored
  const DescribedModel m = describe(d);
  std::map<std::string, std::vector<FillRegion>> regions;
  for (const auto* list : {&m.spec.pre, &m.spec.layer.tensors, &m.spec.post})
    for (const TensorSpec& t : *list) regions[t.name] = t.regions;
  // The Flax kernel [in, out] = [4, 6] is [6, 4] in the spec: box [1, 2] of [2, 3] is [2, 1] of [3, 2].
  EXPECT_TRUE(of(m, "layers.0.mlp.kernel").stored_in_out);
  EXPECT_EQ(regions.at("mlp.kernel"), (std::vector<FillRegion>{{{2, 1}, {3, 2}, FillSpec::uniform(-1, 1)},
                                                                {{5, 0}, {1, 4}, FillSpec::constant(2)}}));
  // A torch Linear [out, in]: as it is.
  EXPECT_EQ(regions.at("out.weight"), (std::vector<FillRegion>{{{1, 2}, {2, 3}, FillSpec::constant(1)}}));
  // The tie: the embedding's (first name's) regions; the head's own are not the tensor's.
  EXPECT_EQ(regions.at("embed.embedding"), (std::vector<FillRegion>{{{3, 0}, {1, 4}, FillSpec::constant(0)}}));
  EXPECT_EQ(spec_from_json(spec_to_json(m.spec)), m.spec);
  // A region outside the stored shape is refused with its path.
  try {
    description_from_json(R"j({"parameters": [{"name": "w", "shape": [4, 6],
      "regions": [{"offset": [4, 0], "shape": [1, 6], "init": {"constant": {"value": 0}}}]}]})j");
    ADD_FAILURE() << "not refused";
  } catch (const spec_error& e) {
    EXPECT_STREQ(e.what(), "spec: parameters[0].regions[0]: at [4, 0] of [1, 6] lies outside [4, 6]");
  }
}

// Haiku's names (naming haiku): a params dict of an hk.transform as layerinit.jax describes it.
ModelDescription haiku_model(bool stacked) {
  ModelDescription d;
  d.naming = Naming::haiku;
  const std::string stack = "__layer_stack_no_per_layer.";
  for (int l = 0; l < 2; ++l) {
    // Stacked: slice l of hk.layer_stack's leaves; a loop: Haiku's block, block_1.
    const std::string b = stacked ? stack + std::to_string(l) + ".block/" : l ? "block_1/" : "block/";
    d.parameters.push_back(param(b + "layer_norm.offset", {8}));
    d.parameters.push_back(param(b + "layer_norm.scale", {8}));
    d.parameters.push_back(param(b + "linear.b", {32}));
    d.parameters.push_back(param(b + "linear.w", {8, 32}));  // [in, out]
    d.parameters.push_back(param(b + "multi_head_attention/linear.w", {8, 8}));
    d.parameters.push_back(param(b + "multi_head_attention/query.w", {8, 8}));
  }
  d.parameters.push_back(param("conv2_d_1.w", {3, 3, 4, 6}));
  d.parameters.push_back(param("batch_norm.scale", {1, 1, 6}));
  d.parameters.push_back(param("batch_norm/~/mean_ema.average", {1, 1, 6}));
  d.parameters.push_back(param("batch_norm/~/mean_ema.hidden", {1, 1, 6}));
  d.parameters.push_back(param("embed.embeddings", {50, 8}));
  d.parameters.push_back(param("head.w", {8, 50}));
  return d;
}

TEST(Describe, HaikusNames) {
  const DescribedModel m = describe(haiku_model(true));
  EXPECT_EQ(m.spec.layer_prefix, "__layer_stack_no_per_layer.");
  EXPECT_EQ(m.spec.num_layers, 2u);
  const auto& w = of(m, "__layer_stack_no_per_layer.1.block/linear.w");
  EXPECT_EQ(w.role, TensorRole::linear_weight);
  EXPECT_FALSE(w.role_known);  // a Linear's own name says nothing
  EXPECT_TRUE(w.stored_in_out);
  EXPECT_EQ(w.logical, (Shape{32, 8}));
  EXPECT_EQ(w.layer, 1u);
  const auto& b = of(m, "__layer_stack_no_per_layer.1.block/linear.b");
  EXPECT_EQ(b.role, TensorRole::linear_bias);
  EXPECT_EQ(b.fan_in, 8u);  // its w's
  EXPECT_EQ(of(m, "__layer_stack_no_per_layer.0.block/multi_head_attention/linear.w").role, TensorRole::output_weight);
  EXPECT_EQ(of(m, "__layer_stack_no_per_layer.0.block/multi_head_attention/query.w").role, TensorRole::linear_weight);
  EXPECT_EQ(of(m, "__layer_stack_no_per_layer.0.block/layer_norm.offset").role, TensorRole::norm_bias);
  EXPECT_EQ(of(m, "batch_norm.scale").role, TensorRole::norm_weight);  // [1, 1, C]: BatchNorm's own shape
  const auto& conv = of(m, "conv2_d_1.w");
  EXPECT_EQ(conv.role, TensorRole::linear_weight);
  EXPECT_EQ(conv.logical, (Shape{3, 3, 4, 6}));
  EXPECT_EQ(conv.fan_in, 36u);  // conv.py: prod(w_shape[:-1])
  EXPECT_EQ(of(m, "embed.embeddings").role, TensorRole::embedding);
  EXPECT_EQ(of(m, "head.w").role, TensorRole::head_weight);
  std::map<std::string, const TensorSpec*> post;
  for (const auto& t : m.spec.post) post[t.name] = &t;
  const TensorSpec* hidden = post.at("batch_norm/~/mean_ema.hidden");
  EXPECT_EQ(hidden->init, FillSpec::constant(0));  // moving_averages.py: zeros
  EXPECT_TRUE(hidden->buffer);
  // t.init stores the example's statistics in the average: no recipe can tell it, and the refusal says why.
  const TensorSpec* average = post.at("batch_norm/~/mean_ema.average");
  EXPECT_FALSE(average->init.has_value());
  EXPECT_TRUE(average->buffer);
  const std::string why = refusal(haiku_model(true), "pytorch-default");
  EXPECT_NE(why.find("cannot tell the fill of 1 parameter(s): no rule for: batch_norm/~/mean_ema.average (role other) "
                     "(Haiku's t.init stores the example input's statistics in a moving average's average"),
            std::string::npos)
      << why;
  // A MultiHeadAttention under its user's name: its linear beside query, key and value.
  ModelDescription renamed;
  renamed.naming = Naming::haiku;
  for (const char* n : {"attention/query.w", "attention/key.w", "attention/value.w", "attention/linear.w", "attn/query.w",
                        "attn/linear.w"})
    renamed.parameters.push_back(param(n, {8, 8}));
  const DescribedModel r = describe(renamed);
  EXPECT_EQ(of(r, "attention/linear.w").role, TensorRole::output_weight);
  EXPECT_FALSE(of(r, "attn/linear.w").role_known);  // no key, no value: a Linear named linear
  // The same names without naming haiku: Haiku's w, b and embeddings say nothing.
  ModelDescription generic = haiku_model(true);
  generic.naming = Naming::generic;
  EXPECT_EQ(of(describe(generic), "head.w").role, TensorRole::other);
}

TEST(Describe, HaikusRepeatedModulesHaveNoKnownLayer) {
  const DescribedModel m = describe(haiku_model(false));
  EXPECT_FALSE(of(m, "block_1/multi_head_attention/linear.w").depth_known);
  EXPECT_FALSE(of(m, "block/linear.w").depth_known);
  EXPECT_TRUE(of(m, "head.w").depth_known);  // once: outside any layer
  const std::string why = refusal(haiku_model(false), "torchtitan");
  EXPECT_NE(why.find("modules Haiku numbers as repeats (block, block_1, ...) outside a layer stack, so their layer is "
                     "unknown: block/multi_head_attention/linear.w, block_1/multi_head_attention/linear.w"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("or make the layers with hk.layer_stack"), std::string::npos) << why;
  // Stacked, the layers are known and the output projections' depth too: only the unnamed maps are asked.
  const std::string stacked = refusal(haiku_model(true), "torchtitan");
  EXPECT_EQ(stacked.find("repeats"), std::string::npos) << stacked;
  EXPECT_NE(stacked.find("linear maps whose names do not say"), std::string::npos) << stacked;
}

TEST(Describe, WhatAFrameworkAlwaysMakesALeaf) {
  EXPECT_EQ(framework_fill("batch_norm/~/mean_ema.hidden", Naming::haiku), FillSpec::constant(0));
  EXPECT_EQ(framework_fill("ema_2/~/exponential_moving_average_1.hidden", Naming::haiku), FillSpec::constant(0));
  EXPECT_EQ(framework_fill("bn/~/var_ema.counter", Naming::haiku), FillSpec::constant(0));
  // A bare moving average's counter starts at -warmup_length, which the name does not say; its average
  // is the forward pass's.
  EXPECT_FALSE(framework_fill("exponential_moving_average.counter", Naming::haiku));
  EXPECT_FALSE(framework_fill("batch_norm/~/mean_ema.average", Naming::haiku));
  EXPECT_FALSE(framework_fill("batch_norm/~/mean_ema.hidden", Naming::generic));
  EXPECT_FALSE(framework_fill("hidden", Naming::haiku));
}

TEST(Describe, AHaikuWeightOfAnotherRankIsRefused) {
  ModelDescription d;
  d.naming = Naming::haiku;
  d.parameters.push_back(param("layers/linear.w", {4, 8, 8}));  // a named hk.layer_stack, not told
  try {
    describe(d);
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("parameter 'layers/linear.w' is [4, 8, 8]: a Haiku w is a Linear's [in, out]", 0), 0u)
        << e.what();
  }
  d.parameters[0].role = TensorRole::linear_weight;  // a caller's rule says what it is
  EXPECT_NO_THROW(describe(d));
  EXPECT_EQ(description_from_json(R"({"naming": "haiku", "parameters": []})").naming, Naming::haiku);
  EXPECT_THROW(description_from_json(R"({"naming": "torch", "parameters": []})"), spec_error);
}

FrameworkLeaf leaf(std::vector<std::string> parts, Shape shape, std::optional<Shape> expected = std::nullopt) {
  FrameworkLeaf lf;
  lf.parts = std::move(parts);
  lf.shape = std::move(shape);
  lf.expected = std::move(expected);
  lf.owner = "eqx.nn.Linear";
  return lf;
}

std::string slices_refusal(const std::vector<FrameworkLeaf>& leaves, const std::optional<std::vector<std::string>>& stacked,
                           Naming naming = Naming::generic) {
  try {
    leaf_slices(leaves, stacked, naming);
  } catch (const bad_input& e) {
    return e.argument() + " | " + e.what();
  }
  return "";
}

// filter_vmap's blocks: a leaf with more leading dimensions than its module stores is stacked at the
// highest node where every such leaf has that size; the leaves its module does not own under it too.
TEST(LeafSlices, ModulesTellTheStackedAxis) {
  std::vector<FrameworkLeaf> leaves = {leaf({"embed", "weight"}, {100, 8}, Shape{100, 8}),
                                       leaf({"blocks", "attn", "wq", "weight"}, {3, 16, 8}, Shape{16, 8}),
                                       leaf({"blocks", "scale"}, {3, 8}),
                                       leaf({"head", "{w}"}, {8, 100})};
  const auto s = leaf_slices(leaves, std::nullopt, Naming::generic);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_TRUE(s[0].lead.empty());
  EXPECT_EQ(s[0].names, std::vector<std::string>{"embed.weight"});
  using Lead = std::vector<std::pair<std::size_t, std::uint64_t>>;
  EXPECT_EQ(s[1].lead, (Lead{{1, 3}}));
  EXPECT_EQ(s[1].dims, std::vector<std::size_t>{0});
  EXPECT_EQ(s[1].stored, (Shape{16, 8}));
  EXPECT_EQ(s[1].names, (std::vector<std::string>{"blocks.0.attn.wq.weight", "blocks.1.attn.wq.weight", "blocks.2.attn.wq.weight"}));
  EXPECT_EQ(s[1].name_template, "blocks.{0}.attn.wq.weight");
  EXPECT_EQ(s[2].names, (std::vector<std::string>{"blocks.0.scale", "blocks.1.scale", "blocks.2.scale"}));
  EXPECT_EQ(s[3].name_template, "head.{{w}}");  // the path's own braces doubled
  EXPECT_EQ(s[3].names, std::vector<std::string>{"head.{w}"});

  leaves[2].shape = {4, 8};  // under the stacked blocks with another number of slices
  EXPECT_EQ(slices_refusal(leaves, std::nullopt), "tree | leaf 'blocks.scale' lies under the stacked 'blocks' (3 slices) but is (4, 8)");
  leaves[1].shape = {3, 8, 16};
  EXPECT_EQ(slices_refusal(leaves, std::nullopt), "tree | leaf 'blocks.attn.wq.weight' is (3, 8, 16), but eqx.nn.Linear stores it as (16, 8)");
}

// stacked="layers": one leading axis per prefix for the leaves under it, one size under each prefix.
TEST(LeafSlices, GivenPrefixesStackTheirLeaves) {
  const std::vector<FrameworkLeaf> leaves = {leaf({"layers", "w"}, {2, 4, 4}), leaf({"layers", "b"}, {2, 4}), leaf({"out"}, {4})};
  const auto s = leaf_slices(leaves, std::vector<std::string>{"layers"}, Naming::generic);
  EXPECT_EQ(s[0].names, (std::vector<std::string>{"layers.0.w", "layers.1.w"}));
  EXPECT_EQ(s[1].stored, Shape{4});
  EXPECT_EQ(s[2].names, std::vector<std::string>{"out"});
  EXPECT_EQ(slices_refusal(leaves, std::vector<std::string>{"blocks"}),
            "stacked | stacked: no leaf lies under 'blocks' (leaves: layers.w, layers.b, out)");
  std::vector<FrameworkLeaf> uneven = leaves;
  uneven[1].shape = {3, 4};
  EXPECT_EQ(slices_refusal(uneven, std::vector<std::string>{"layers"}),
            "stacked | stacked: the leaves under 'layers' have leading axes of sizes [2, 3], not one number of layers");
  uneven[1].shape = {};
  EXPECT_EQ(slices_refusal(uneven, std::vector<std::string>{"layers"}),
            "tree | leaf 'layers.b' of shape () has no stacked axis 0 for 'layers'");
}

// Recorded transforms: a group's leaves at their deepest common node, a recorded constant there too;
// two nested vmaps give two axes, outer first.
TEST(LeafSlices, RecordedTransformsPlaceTheAxes) {
  std::vector<FrameworkLeaf> leaves = {leaf({"blocks", "mlp", "w1"}, {3, 2, 8, 8}), leaf({"blocks", "attn", "wq"}, {3, 8, 8}),
                                       leaf({"blocks", "attn", "bias"}, {3, 8}), leaf({"other", "bias"}, {3, 8})};
  leaves[0].recorded = {{1, 2, 7}, {0, 3, 5}};  // inner vmap (group 7) listed first
  leaves[1].recorded = {{0, 3, 5}};
  leaves[2].recorded_constant = leaves[3].recorded_constant = true;
  const auto s = leaf_slices(leaves, std::nullopt, Naming::generic);
  using Lead = std::vector<std::pair<std::size_t, std::uint64_t>>;
  EXPECT_EQ(s[0].lead, (Lead{{1, 3}, {2, 2}}));
  EXPECT_EQ(s[0].dims, (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(s[0].names.front(), "blocks.0.mlp.0.w1");
  EXPECT_EQ(s[0].names.back(), "blocks.2.mlp.1.w1");
  EXPECT_EQ(s[0].name_template, "blocks.{0}.mlp.{1}.w1");
  EXPECT_EQ(s[2].names.size(), 3u);  // a constant under blocks with 3 at dim 0
  EXPECT_TRUE(s[3].lead.empty());    // not under blocks
  EXPECT_EQ(s[3].stored, (Shape{3, 8}));
}

// An unnamed hk.layer_stack stacks every leaf under it; its index goes after the module, Haiku's
// separators kept.
TEST(LeafSlices, AnUnnamedHaikuLayerStackIsFound) {
  FrameworkLeaf w = leaf({"__layer_stack_no_per_layer_1", "block", "linear", "w"}, {4, 8, 8});
  w.seps = {"/", "/", "."};
  const auto s = leaf_slices({w}, std::nullopt, Naming::haiku);
  EXPECT_EQ(s[0].names.front(), "__layer_stack_no_per_layer_1.0.block/linear.w");
  EXPECT_EQ(s[0].stored, (Shape{8, 8}));
  EXPECT_TRUE(leaf_slices({w}, std::nullopt, Naming::generic)[0].lead.empty());  // only Haiku's names say it
  w.shape = {};
  EXPECT_EQ(slices_refusal({w}, std::nullopt, Naming::haiku),
            "tree | leaf '__layer_stack_no_per_layer_1/block/linear.w' lies under the hk.layer_stack "
            "'__layer_stack_no_per_layer_1' but is (), without a layer axis");
  w.parts[0] = "__layer_stack_no_per_layer_x";
  EXPECT_TRUE(leaf_slices({w}, std::nullopt, Naming::haiku)[0].lead.empty());
  // stacked="transformer/layers" splits at '/' with Haiku's names
  FrameworkLeaf named = leaf({"transformer", "layers", "linear", "w"}, {2, 4, 4});
  named.seps = {"/", "/", "."};
  EXPECT_EQ(leaf_slices({named}, std::vector<std::string>{"transformer/layers"}, Naming::haiku)[0].names.back(),
            "transformer/layers.1.linear.w");
}

std::string rules_refusal(const std::vector<LeafRule>& rules, const std::vector<RuledLeaf>& leaves) {
  try {
    apply_rules(rules, leaves);
  } catch (const bad_input& e) {
    return e.argument() + " | " + e.what();
  }
  return "";
}

// A rule matches a leaf by its name or a slice's, in order, the last match winning per field; an
// orientation orients every slice of a leaf it names; a rule that matches nothing is listed.
TEST(LeafRules, TheLastMatchWinsPerSliceAndAnOrientationPerLeaf) {
  const FillSpec small = FillSpec::normal(0, 0.02), one = FillSpec::constant(1);
  std::vector<LeafRule> rules = {{.pattern = "blocks.*", .fill = small},
                                 {.pattern = "blocks.1.*", .role = TensorRole::output_weight, .fan_in = 7},
                                 {.pattern = "blocks.1.w", .storage = WeightStorage::in_out},
                                 {.pattern = "*.nope", .fill = one},
                                 {.pattern = "head", .fill = one, .fan_out = 3}};
  const std::vector<RuledLeaf> leaves = {
      {.name = "blocks.w", .shape = {2, 4, 8}, .slice = {4, 8}, .slices = {"blocks.0.w", "blocks.1.w"}},
      {.name = "head", .shape = {8, 4}, .slice = {8, 4}, .slices = {"head"}, .storage = WeightStorage::out_in}};
  const RulesOutcome o = apply_rules(rules, leaves);
  ASSERT_EQ(o.leaves.size(), 2u);
  EXPECT_EQ(o.leaves[0].storage, WeightStorage::in_out);  // named by one slice, applied to both
  ASSERT_EQ(o.leaves[0].slices.size(), 2u);
  EXPECT_EQ(o.leaves[0].slices[0].fill, small);
  EXPECT_FALSE(o.leaves[0].slices[0].role.has_value());
  EXPECT_FALSE(o.leaves[0].slices[0].fan_in.has_value());
  EXPECT_EQ(o.leaves[0].slices[1].fill, small);  // a later rule without a fill keeps the earlier fill
  EXPECT_EQ(o.leaves[0].slices[1].role, TensorRole::output_weight);
  EXPECT_EQ(o.leaves[0].slices[1].fan_in, 7u);
  EXPECT_EQ(o.leaves[1].storage, WeightStorage::out_in);  // its module's
  EXPECT_EQ(o.leaves[1].slices[0].fill, one);
  EXPECT_EQ(o.leaves[1].slices[0].fan_out, 3u);
  EXPECT_FALSE(o.leaves[1].constant.has_value());
  EXPECT_EQ(o.unused, std::vector<std::string>{"*.nope"});

  rules.push_back({.pattern = "blocks.w", .fill = one});  // by the leaf's name: every slice
  const RulesOutcome later = apply_rules(rules, leaves);
  EXPECT_EQ(later.leaves[0].slices[0].fill, one);
  EXPECT_EQ(later.leaves[0].slices[1].fill, one);
}

// An integer leaf is made only as an integer constant; an orientation applies to 2-D slices.
TEST(LeafRules, IntegerConstantsAndOrientationsAreChecked) {
  const std::vector<RuledLeaf> steps = {{.name = "steps", .shape = {3}, .slice = {3}, .integer = "int32"}};
  const RulesOutcome o = apply_rules({{.pattern = "st*", .fill = FillSpec::constant(1)},
                                      {.pattern = "steps", .fill = FillSpec::constant(-3)}}, steps);
  EXPECT_EQ(o.leaves[0].constant, -3.0);
  EXPECT_TRUE(o.leaves[0].slices.empty());
  EXPECT_TRUE(o.unused.empty());
  EXPECT_FALSE(apply_rules({}, steps).leaves[0].constant.has_value());
  EXPECT_EQ(rules_refusal({{.pattern = "steps", .fill = FillSpec::constant(0.5)}}, steps),
            "tree | leaf 'steps' is int32: a rule gives an integer leaf an integer constant (\"constant(0)\"), not constant(0.5)");
  EXPECT_EQ(rules_refusal({{.pattern = "steps", .role = TensorRole::norm_weight}}, steps),
            "tree | leaf 'steps' is int32: a rule gives an integer leaf an integer constant (\"constant(0)\"), not norm_weight");
  EXPECT_EQ(rules_refusal({{.pattern = "steps", .fan_in = 2}}, steps),
            "tree | leaf 'steps' is int32: a rule gives an integer leaf an integer constant (\"constant(0)\"), not a rule without a fill");

  const std::vector<RuledLeaf> gain = {{.name = "blocks.gain", .shape = {2, 4}, .slice = {4}, .slices = {"blocks.0.gain", "blocks.1.gain"}}};
  EXPECT_EQ(rules_refusal({{.pattern = "*.1.gain", .storage = WeightStorage::out_in}}, gain),
            "tree | leaf 'blocks.gain' is (2, 4): an orientation applies to 2-D weights");
  std::vector<RuledLeaf> scalar = {{.name = "s", .shape = {}, .slice = {}, .slices = {"s"}, .storage = WeightStorage::in_out}};
  EXPECT_EQ(rules_refusal({}, scalar), "tree | leaf 's' is (): an orientation applies to 2-D weights");  // its module's
}

DescribedParameter described(std::string name, Shape logical, TensorRole role) {
  DescribedParameter e;
  e.name = e.tensor = std::move(name);
  e.logical = std::move(logical);
  e.role = role;
  if (e.logical.size() >= 2) e.fan_in = e.logical.back(), e.fan_out = e.logical[e.logical.size() - 2];
  return e;
}

// torchtitan's llama3-like model with a fused wqkv and stacked experts, as its adapter's from_hf loads it.
TorchtitanModel titan_model() {
  TorchtitanModel m;
  m.package = "llama3";
  m.adapter = "Llama3StateDictAdapter";
  m.to_hf = {{"tok_embeddings.weight", "model.embed_tokens.weight"},
             {"layers.{}.attention.wq.weight", "model.layers.{}.self_attn.q_proj.weight"},
             {"layers.{}.attention.wk.weight", "model.layers.{}.self_attn.k_proj.weight"},
             {"layers.{}.attention.wv.weight", "model.layers.{}.self_attn.v_proj.weight"},
             {"layers.{}.attention.wo.weight", "model.layers.{}.self_attn.o_proj.weight"},
             {"layers.{}.moe.experts.w1", "model.layers.{}.mlp.experts.{}.gate_proj.weight"},
             {"layers.{}.moe.expert_bias", "model.layers.{}.mlp.gate.e_score_correction_bias"},
             {"output.weight", "lm_head.weight"}};
  m.rope_interleaved = true;
  m.heads = 4, m.kv_heads = 2, m.width = 16;
  m.fused_qkv = {{"layers.0.attention", 4, 2}};  // hd 4, 2 q heads per kv head: [2 * (2 + 2) * 4, 16]
  m.parameters = {described("tok_embeddings.weight", {100, 16}, TensorRole::embedding),
                  described("layers.0.attention.wqkv.weight", {32, 16}, TensorRole::linear_weight),
                  described("layers.0.attention.wo.weight", {16, 16}, TensorRole::output_weight),
                  described("layers.0.moe.experts.w1", {3, 8, 16}, TensorRole::linear_weight),
                  described("output.weight", {100, 16}, TensorRole::head_weight)};
  m.buffers = {{"layers.0.moe.expert_bias", {3}}, {"layers.0.attention.freqs_cis", {64, 2}}};
  return m;
}

TEST(Torchtitan, ParametersAreTheTensorsItsAdapterLoads) {
  ModelDescription d;
  const auto parts = torchtitan_parameters(titan_model(), d);
  std::vector<std::string> names;
  for (const auto& p : d.parameters) names.push_back(p.name + " " + shape_string(p.shape));
  EXPECT_EQ(names, (std::vector<std::string>{
                       "model.embed_tokens.weight [100, 16]", "model.layers.0.self_attn.q_proj.weight [16, 16]",
                       "model.layers.0.self_attn.k_proj.weight [8, 16]", "model.layers.0.self_attn.v_proj.weight [8, 16]",
                       "model.layers.0.self_attn.o_proj.weight [16, 16]", "model.layers.0.mlp.experts.0.gate_proj.weight [8, 16]",
                       "model.layers.0.mlp.experts.1.gate_proj.weight [8, 16]",
                       "model.layers.0.mlp.experts.2.gate_proj.weight [8, 16]", "lm_head.weight [100, 16]",
                       "model.layers.0.mlp.gate.e_score_correction_bias [3]"}));
  EXPECT_EQ(d.parameters[2].fan_out, 8u);  // k's rows, not the fused wqkv's
  EXPECT_EQ(d.parameters[4].role, TensorRole::output_weight);
  EXPECT_EQ(d.parameters.back().init, FillSpec::constant(0));  // MoE._init_self_buffers
  EXPECT_EQ(d.parameters.back().fan_in, 16u);
  ASSERT_EQ(parts.size(), 6u);
  const TorchtitanPart& qkv = parts[1];
  EXPECT_EQ(qkv.name, "layers.0.attention.wqkv.weight");
  EXPECT_EQ(qkv.templates, (std::vector<std::string>{"model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
                                                     "model.layers.0.self_attn.v_proj.weight"}));
  EXPECT_EQ(qkv.rows, (std::vector<std::optional<std::string>>{"rope_interleave(4)", "rope_interleave(4)", std::nullopt}));
  EXPECT_EQ(qkv.groups, 2u);
  EXPECT_TRUE(parts[2].whole);
  EXPECT_EQ(parts[2].templates, std::vector<std::string>{"model.layers.0.self_attn.o_proj.weight"});
  EXPECT_EQ(parts[3].templates, std::vector<std::string>{"model.layers.0.mlp.experts.{0}.gate_proj.weight"});
  EXPECT_EQ(parts[3].stack, std::vector<std::uint64_t>{3});
  EXPECT_EQ(parts[5].name, "layers.0.moe.expert_bias");
}

TEST(Torchtitan, WhatItsAdapterDoesNotNameIsRefused) {
  TorchtitanModel m = titan_model();
  m.to_hf.pop_back();  // no output.weight
  ModelDescription d;
  try {
    torchtitan_parameters(m, d);
    FAIL() << "accepted";
  } catch (const bad_input& e) {
    EXPECT_EQ(e.argument(), "module");
    EXPECT_STREQ(e.what(), "torchtitan's Llama3StateDictAdapter names no Hugging Face tensor for 1 parameter(s): output.weight");
  }
  m = titan_model();
  m.to_hf.push_back({"layers.{}.attention.freqs_cis", "model.layers.{}.rotary.freqs"});  // a buffer it knows no init of
  EXPECT_THROW(torchtitan_parameters(m, d), bad_input);
  m = titan_model();
  m.fused_qkv[0].head_dim = 0;  // q's rows cannot be split into heads: refused, not a division by zero
  EXPECT_THROW(torchtitan_parameters(m, d), bad_input);
  m = titan_model();
  m.parameters[2].role_known = false;
  try {
    torchtitan_parameters(m, d);
    FAIL() << "accepted";
  } catch (const bad_input& e) {
    EXPECT_STREQ(e.what(), "torchtitan llama3: no role for 1 linear map(s): layers.0.attention.wo.weight; pass spec= and name_map=");
  }
}

}  // namespace

// The JSON spec: round trips, error messages with paths, and a fuzz run that only ever sees spec_error.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include <layerinit/init/presets.hpp>
#include <layerinit/init/spec_json.hpp>

#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace layerinit;

namespace {

// A small custom model: a documented example of the schema (docs/spec.md uses the same text).
const char* kExample = R"({
  "name": "toy",
  "family": "custom",
  "hyper": {"hidden_size": 64, "num_heads": 4, "initializer_range": 0.02},
  "pre": [
    {"name": "embed.weight", "shape": [1000, 64], "role": "embedding"}
  ],
  "layer": {
    "prefix": "blocks.",
    "count": 2,
    "tensors": [
      {"name": "norm.weight", "shape": [64], "role": "norm_weight"},
      {"name": "mix.weight", "shape": [256, 64], "role": "linear_weight", "fan_in": 64, "fan_out": 256,
       "transposable": true},
      {"name": "out.weight", "shape": [64, 256], "role": "output_weight", "fan_in": 256, "fan_out": 64,
       "transposable": true, "init": {"trunc_normal_std": {"mean": 0, "std": 0.01, "a": -3, "b": 3}}}
    ]
  },
  "post": [
    {"name": "head.weight", "shape": [1000, 64], "role": "head_weight", "fan_in": 64, "fan_out": 1000,
     "transposable": true, "init": {"normal": {"std": 0.02}}}
  ]
})";

std::string error_of(const std::string& text) {
  try {
    spec_from_json(text);
  } catch (const spec_error& e) {
    return e.what();
  }
  return "(valid)";
}

// kExample with the first occurrence of `from` replaced by `to`.
std::string edit(std::string_view from, std::string_view to) {
  std::string s = kExample;
  const auto at = s.find(from);
  if (at == std::string::npos) throw std::runtime_error("edit: no " + std::string(from));
  s.replace(at, from.size(), to);
  return s;
}

}  // namespace

TEST(SpecJson, Example) {
  const ModelSpec m = spec_from_json(kExample);
  EXPECT_EQ(m.name, "toy");
  EXPECT_EQ(m.layer_prefix, "blocks.");
  EXPECT_EQ(m.num_layers, 2u);
  ASSERT_EQ(m.layer.tensors.size(), 3u);
  EXPECT_EQ(m.layer.tensors[1].shape, (Shape{256, 64}));
  EXPECT_EQ(m.layer.tensors[1].role, TensorRole::linear_weight);
  EXPECT_TRUE(m.layer.tensors[1].transposable);
  EXPECT_EQ(m.layer.tensors[2].init, FillSpec::trunc_normal_std(0, 0.01, -3, 3));
  EXPECT_EQ(m.post[0].init, FillSpec::normal(0, 0.02));
  EXPECT_FALSE(m.pre[0].init.has_value());
  EXPECT_EQ(m.hyper.hidden_size, 64u);
  EXPECT_EQ(m.hyper.vocab_size, 0u);
  EXPECT_EQ(m.parameter_count(), 64000u + 2u * (64u + 2u * 16384u) + 64000u);
  EXPECT_EQ(spec_from_json(spec_to_json(m)), m);
}

TEST(SpecJson, Defaults) {
  const ModelSpec m = spec_from_json(R"({"name": "m", "post": [{"name": "w", "shape": [3, 2]}]})");
  EXPECT_EQ(m.family, "custom");
  EXPECT_EQ(m.num_layers, 0u);
  EXPECT_EQ(m.layer_prefix, "model.layers.");
  EXPECT_EQ(m.post[0].role, TensorRole::other);
  EXPECT_EQ(m.hyper, Hyper{});
  const ModelSpec u = spec_from_json(R"({"name": "u", "post": [{"name": "w", "shape": [3],
      "init": {"trunc_normal": {"std": 1}}}, {"name": "c", "shape": [1], "init": {"constant": {"value": 5}}},
      {"name": "v", "shape": [2], "init": {"uniform": {"lo": -1, "hi": 1.5}}}]})");
  EXPECT_EQ(u.post[0].init, FillSpec::trunc_normal(0, 1, -2, 2));
  EXPECT_EQ(u.post[1].init, FillSpec::constant(5));
  EXPECT_EQ(u.post[2].init, FillSpec::uniform(-1, 1.5));
  EXPECT_EQ(spec_from_json(spec_to_json(u)), u);
}

// A zero dimension is a tensor of zero elements, as torch makes them (DeepseekV3MoE's shared experts
// at n_shared_experts 0): read, and written back, as any shape. The other dimensions' product must
// still fit 64 bits (strides and slabs use it).
TEST(SpecJson, ZeroDimensions) {
  const ModelSpec m = spec_from_json(R"({"name": "z", "post": [{"name": "w", "shape": [0, 64]},
      {"name": "v", "shape": [64, 0, 4]}]})");
  EXPECT_EQ(m.post[0].shape, (Shape{0, 64}));
  EXPECT_EQ(m.post[1].shape, (Shape{64, 0, 4}));
  EXPECT_EQ(m.parameter_count(), 0u);
  EXPECT_EQ(spec_from_json(spec_to_json(m)), m);
  try {
    spec_from_json(R"({"name": "z", "post": [{"name": "w", "shape": [64, 0, 4294967296, 4294967296]}]})");
    ADD_FAILURE() << "not refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "spec: post[0].shape: element count overflows 64 bits");
  }
}

TEST(SpecJson, RoundTripEveryPreset) {
  for (const auto& name : preset_names()) {
    const ModelSpec m = make_preset(name);
    const std::string text = spec_to_json(m);
    const ModelSpec back = spec_from_json(text);
    EXPECT_EQ(back, m) << name;
    EXPECT_EQ(spec_to_json(back), text) << name;
  }
}

// rope_scaling is written only when set (Llama 3.1), as config.json's object, and read back.
// load_spec_file: the file through read_input_file (core/input_file.hpp), then spec_from_json.
TEST(SpecJson, LoadSpecFile) {
  layerinit::testing::TempDir dir;
  const ModelSpec m = make_preset("llama-tiny");
  layerinit::testing::write_file(dir / "tiny.json", spec_to_json(m));
  EXPECT_EQ(load_spec_file((dir / "tiny.json").string()), m);
  const std::string missing = (dir / "nope.json").string();
  try {
    load_spec_file(missing);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "spec file '" + missing + "' cannot be read: No such file or directory");
  }
  try {
    load_spec_file("/dev/zero");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "spec file '/dev/zero' is not a regular file");
  }
  layerinit::testing::write_file(dir / "bad.json", "{");
  EXPECT_THROW(load_spec_file((dir / "bad.json").string()), spec_error);
}

TEST(SpecJson, RopeScalingRoundTrips) {
  const ModelSpec m = make_preset("llama-3.1-405b");
  const std::string text = spec_to_json(m);
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["hyper"]["rope_scaling"], nlohmann::json::parse(R"({"factor": 8.0, "low_freq_factor": 1.0,
      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"})"));
  EXPECT_EQ(spec_from_json(text).hyper.rope_scaling, (RopeScaling{8.0, 1.0, 4.0, 8192}));
  EXPECT_EQ(spec_to_json(make_preset("llama-3-8b")).find("rope_scaling"), std::string::npos);
}

// first_layer and the expert prefix are written only when set, and read back.
TEST(SpecJson, FirstLayerAndExpertPrefixRoundTrip) {
  const ModelSpec d = make_preset("deepseek-v3-tiny");
  const std::string text = spec_to_json(d);
  EXPECT_NE(text.find("\"first\": 1"), std::string::npos);
  EXPECT_NE(text.find("\"expert_prefix\": \"mlp.experts.\""), std::string::npos);
  EXPECT_EQ(spec_from_json(text), d);
  const std::string llama = spec_to_json(make_preset("llama-tiny"));
  EXPECT_EQ(llama.find("\"first\""), std::string::npos);
  EXPECT_EQ(llama.find("expert_prefix"), std::string::npos);
}

TEST(SpecJson, RoundTripExtremes) {
  ModelSpec m = make_preset("llama-tiny");
  m.hyper.initializer_range = 0.1 + 0.2;  // not exactly representable in a short decimal
  m.hyper.norm_eps = 1e-300;
  m.post[0].init = FillSpec::uniform(-1.0 / 3, 2.0 / 7);
  m.pre[0].shape = {18446744073709551615ULL / 4096 / 8, 4096};  // large but valid: 2^61 - ... elements
  EXPECT_NO_THROW(m.validate());
  EXPECT_EQ(spec_from_json(spec_to_json(m)), m);
}

TEST(SpecJson, ErrorMessages) {
  const std::pair<std::string, std::string> cases[] = {
      {edit("[256, 64]", "[256, -64]"), "spec: layer.tensors[1].shape[1]: must be a non-negative integer"},
      {edit("[256, 64]", "[256, 6.5]"), "spec: layer.tensors[1].shape[1]: must be a non-negative integer"},
      {edit("[256, 64]", "[256, \"64\"]"), "spec: layer.tensors[1].shape[1]: must be a non-negative integer"},
      {edit("[256, 64]", "[256, 18446744073709551616]"),
       "spec: layer.tensors[1].shape[1]: must be a non-negative integer below 2^64"},
      {edit("[256, 64]", "[4294967296, 4294967296]"), "spec: layer.tensors[1].shape: element count overflows 64 bits"},
      {edit("[256, 64]", "[]"), "spec: layer.tensors[1].shape: must be a non-empty array of non-negative integers"},
      {edit("\"shape\": [64]", "\"shpe\": [64]"),
       "spec: layer.tensors[0].shpe: unknown key (valid: name, shape, role, fan_in, fan_out, transposable, init, buffer, tp_replicated, "
       "regions)"},
      {edit("\"name\": \"norm.weight\", \"shape\": [64], ", ""), "spec: layer.tensors[0]: missing key 'name'"},
      {edit("\"role\": \"norm_weight\"", "\"role\": \"norm\""),
       "spec: layer.tensors[0].role: tensor role 'norm' is unknown (valid: embedding, position_embedding, "
       "linear_weight, output_weight, linear_bias, norm_weight, norm_bias, router_weight, head_weight, other)"},
      {edit("\"fan_in\": 64", "\"fan_in\": -1"), "spec: layer.tensors[1].fan_in: must be a non-negative integer"},
      {edit("\"transposable\": true", "\"transposable\": 1"), "spec: layer.tensors[1].transposable: must be true or false"},
      {edit("\"count\": 2", "\"count\": 2.5"), "spec: layer.count: must be a non-negative integer"},
      {edit("\"count\": 2,", ""), "spec: layer: missing key 'count'"},
      {edit("\"prefix\"", "\"prefx\""), "spec: layer.prefx: unknown key (valid: prefix, first, count, expert_prefix, tensors)"},
      {edit("\"name\": \"toy\"", "\"name\": \"\""), "spec: name: must be a non-empty string"},
      {edit("\"name\": \"toy\",", ""), "spec: top level: missing key 'name'"},
      {edit("\"family\"", "\"familly\""),
       "spec: familly: unknown key (valid: name, family, hyper, pre, layer, post, hf_config)"},
      {edit("\"num_heads\": 4", "\"num_heads\": 5"),
       "spec: hyper.num_heads: 5 does not divide hidden_size 64 (set head_dim if that is intended)"},
      {edit("\"num_heads\": 4", "\"num_heads\": 4, \"num_kv_heads\": 3"),
       "spec: hyper.num_kv_heads: 3 does not divide num_heads 4"},
      {edit("\"num_heads\": 4", "\"num_heads\": 4, \"heads\": 3"),
       "spec: hyper.heads: unknown key (valid: vocab_size, hidden_size, intermediate_size, num_heads, num_kv_heads, "
       "head_dim, max_position_embeddings, num_experts, experts_per_token, initializer_range, norm_eps, rope_theta, "
       "rope_scaling, tie_word_embeddings, bias)"},
      {edit("\"num_heads\": 4", "\"num_heads\": 4, \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2}"),
       "spec: hyper.rope_scaling.rope_type: must be \"llama3\" (the only rope scaling layerinit carries)"},
      {edit("\"num_heads\": 4", "\"num_heads\": 4, \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8}"),
       "spec: hyper.rope_scaling: missing key 'low_freq_factor'"},
      {edit("\"num_heads\": 4", "\"num_heads\": 4, \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, "
                                  "\"low_freq_factor\": 4, \"high_freq_factor\": 1, \"original_max_position_embeddings\": 8}"),
       "spec: hyper.rope_scaling.high_freq_factor: must be finite and above low_freq_factor"},
      {edit("\"num_heads\": 4", "\"num_heads\": 4, \"max_position_embeddings\": 64, \"rope_scaling\": {\"rope_type\": "
                                  "\"llama3\", \"factor\": 8, \"low_freq_factor\": 1, \"high_freq_factor\": 4, "
                                  "\"original_max_position_embeddings\": 128}"),
       "spec: hyper.rope_scaling.original_max_position_embeddings: must be positive and at most max_position_embeddings 64"},
      {edit("\"num_heads\": 4", "\"num_heads\": 4, \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 0.5, "
                                  "\"low_freq_factor\": 1, \"high_freq_factor\": 4, \"original_max_position_embeddings\": 8}"),
       "spec: hyper.rope_scaling.factor: must be finite and >= 1"},
      {edit("\"initializer_range\": 0.02", "\"initializer_range\": -0.02"),
       "spec: hyper.initializer_range: must not be negative"},
      {edit("\"initializer_range\": 0.02", "\"initializer_range\": 1e999"),
       "spec: malformed JSON at line 4, column 69: number overflow parsing '1e999'"},
      {edit("\"std\": 0.02", "\"std\": -0.02"),
       "spec: post[0].init.normal: fill 'normal(0, -0.02)' is invalid: std must be positive"},
      {edit("{\"normal\": {\"std\": 0.02}}", "{\"normal\": {\"mean\": 0}}"),
       "spec: post[0].init.normal: missing key 'std'"},
      {edit("{\"normal\": {\"std\": 0.02}}", "{\"gaussian\": {\"std\": 0.02}}"),
       "spec: post[0].init.gaussian: unknown key (valid: constant, normal, trunc_normal, trunc_normal_std, uniform)"},
      {edit("{\"normal\": {\"std\": 0.02}}", "{}"),
       "spec: post[0].init: must hold exactly one of constant, normal, trunc_normal, trunc_normal_std, uniform"},
      {edit("{\"normal\": {\"std\": 0.02}}", "{\"normal\": {\"std\": 0.02}, \"uniform\": {\"lo\": 0, \"hi\": 1}}"),
       "spec: post[0].init: must hold exactly one of constant, normal, trunc_normal, trunc_normal_std, uniform"},
      {edit("\"a\": -3, \"b\": 3", "\"a\": 3, \"b\": -3"),
       "spec: layer.tensors[2].init.trunc_normal_std: fill 'trunc_normal(0, 0.01, 3 std, -3 std)' is invalid: lower "
       "bound must be below upper bound"},
      {edit("{\"normal\": {\"std\": 0.02}}", "{\"normal\": {\"std\": 1e300}}"),
       "spec: post[0].init.normal: fill 'normal(0, 1e+300)' is invalid: numbers must be finite and within float range"},
      {edit("\"mix.weight\"", "\"norm.weight\""),
       "spec: layer.tensors[1].name: duplicate name 'norm.weight' (also layer.tensors[0])"},
      {edit("\"head.weight\"", "\"embed.weight\""), "spec: post[0].name: duplicate name 'embed.weight' (also pre[0])"},
      {edit("\"name\": \"head.weight\", \"shape\": [1000, 64]", "\"name\": \"blocks.1.norm.weight\", \"shape\": [1000, 64]"),
       "spec: model 'toy': duplicate tensor name 'blocks.1.norm.weight' (post tensor 0 'blocks.1.norm.weight' and "
       "layer 1)"},
      {edit("\"shape\": [64]", "\"shape\": [64], \"transposable\": true"),
       "spec: layer.tensors[0].transposable: requires a 2-D shape"},
      {edit("\"count\": 2", "\"count\": 2, \"count\": 3"), "spec: layer.count: duplicate key"},
      {edit("\"fan_in\": 64,", "\"fan_in\": 64, \"fan_in\": 64,"), "spec: layer.tensors[1].fan_in: duplicate key"},
      {edit("\"pre\": [", "\"pre\": {"), "spec: malformed JSON at line 6, column 5: syntax error while parsing object "
                                          "key - unexpected '{'; expected string literal"},
      {R"({"name": "m", "pre": [], "post": []})", "spec: model 'm': has no tensors"},
      {R"({"name": "m", "layer": {"count": 3, "tensors": []}, "post": [{"name": "w", "shape": [1]}]})",
       "spec: model 'm': num_layers is 3 but the layer has no tensors"},
      {R"({"name": "m", "post": [{"name": "w", "shape": [2147483648, 1073741824]}],
          "layer": {"count": 8, "tensors": [{"name": "x", "shape": [2147483648, 1073741824]}]}})",
       "spec: model 'm': parameter count overflows 64 bits"},
      {"[1, 2]", "spec: top level: must be an object"},
      {"", "spec: malformed JSON at line 1, column 1: syntax error while parsing value - unexpected end of input; "
           "expected '[', '{', or a literal"},
      {"{\"name\": \"m\",\n  \"pre\": [\n    {\"name\": \"x\" \"shape\": [1]}]}",
       "spec: malformed JSON at line 3, column 24: syntax error while parsing object - unexpected string literal; "
       "expected '}'"},
      {"{\"name\": \"a\x01\"}", "spec: malformed JSON at line 1, column 12: syntax error while parsing value - "
                                "invalid string: control character U+0001 (SOH) must be escaped to \\u0001; last read: "
                                "'\"a<U+0001>'"},
      {std::string(100, '[') + std::string(100, ']'),
       "spec: malformed JSON at line 1, column 65: nesting deeper than 64 levels"},
  };
  for (const auto& [text, msg] : cases) EXPECT_EQ(error_of(text), msg) << text;
}

// An array longer than a spec's tensor cap is refused while the text is read: 300,000 tensors reached
// the cap's check only after 30 s (nlohmann's callback parser rescanned the array at every element).
TEST(SpecJson, AnArrayPastTheTensorCapIsRefusedWhileRead) {
  auto spec_with = [](std::uint64_t n, const char* where) {
    std::string t = "{\"name\": \"m\", \"layer\": {\"count\": 1, \"tensors\": [";
    std::string list;
    for (std::uint64_t i = 0; i < n; ++i) list += (i ? ",{\"name\":\"" : "{\"name\":\"") + std::to_string(i) + "\",\"shape\":[1]}";
    if (std::string(where) == "layer") return t + list + "]}}";
    return t + "{\"name\":\"w\",\"shape\":[1]}]}, \"" + where + "\": [" + list + "]}";
  };
  EXPECT_EQ(error_of(spec_with(kMaxSpecTensors + 1, "pre")), "spec: pre: has more than 262144 elements");
  EXPECT_EQ(error_of(spec_with(kMaxSpecTensors + 1, "layer")), "spec: layer.tensors: has more than 262144 elements");
  EXPECT_EQ(error_of(spec_with(300000, "post")), "spec: post: has more than 262144 elements");
  // At the cap the array is read; the model's total is the spec's rule.
  EXPECT_EQ(error_of(spec_with(kMaxSpecTensors, "pre")), "spec: model 'm': lists 262145 tensors; a spec lists at most 262144");
  EXPECT_EQ(error_of("{\"name\": \"m\", \"post\": [{\"name\": \"w\", \"shape\": [1]}, {\"name\": \"w\", \"shape\": [1], \"shape\": [2]}]}"),
            "spec: post[1].shape: duplicate key");
}

TEST(SpecJson, ControlCharactersInKeysStayOnOneLine) {
  const std::string e = error_of("{\"name\": \"m\", \"a\\nb\": 1}");
  EXPECT_EQ(e, "spec: a\\x0ab: unknown key (valid: name, family, hyper, pre, layer, post, hf_config)");
  EXPECT_EQ(e.find('\n'), std::string::npos);
  const std::string n = error_of(R"({"name": "m\u0000x", "post": [{"name": "w", "shape": [1]}]})");
  EXPECT_EQ(n, "spec: model 'm\\x00x': name contains control characters");
}

// A tensor's regions: boxes of its logical shape with fills of their own, read with a path in every
// error, written back exactly.
TEST(SpecJson, Regions) {
  const ModelSpec m = spec_from_json(R"({"name": "r", "pre": [{"name": "embed.weight", "shape": [10, 4], "role": "embedding",
      "regions": [{"offset": [3, 0], "shape": [1, 4], "init": {"constant": {"value": 0}}},
                  {"offset": [0, 1], "shape": [10, 2], "init": {"normal": {"mean": 1, "std": 0.5}}},
                  {"offset": [2, 2], "shape": [0, 1], "init": {"uniform": {"lo": -1, "hi": 1}}}]}]})");
  ASSERT_EQ(m.pre[0].regions.size(), 3u);
  EXPECT_EQ(m.pre[0].regions[0], (FillRegion{{3, 0}, {1, 4}, FillSpec::constant(0)}));
  EXPECT_EQ(m.pre[0].regions[1], (FillRegion{{0, 1}, {10, 2}, FillSpec::normal(1, 0.5)}));
  EXPECT_EQ(m.pre[0].regions[2], (FillRegion{{2, 2}, {0, 1}, FillSpec::uniform(-1, 1)}));  // empty: fills nothing
  EXPECT_EQ(spec_from_json(spec_to_json(m)), m);
  ModelSpec other = m;  // regions are part of a spec's equality
  other.pre[0].regions.pop_back();
  EXPECT_NE(other, m);
  // Absent: no key written.
  EXPECT_EQ(spec_to_json(make_preset("llama-tiny")).find("regions"), std::string::npos);
  auto with = [](const std::string& regions) {
    return error_of(R"({"name": "r", "pre": [{"name": "e", "shape": [10, 4], "regions": )" + regions + "}]}");
  };
  const std::pair<std::string, std::string> cases[] = {
      {R"([{"offset": [9, 0], "shape": [2, 4], "init": {"constant": {"value": 0}}}])",
       "spec: pre[0].regions[0]: at [9, 0] of [2, 4] lies outside [10, 4]"},
      {R"([{"offset": [9], "shape": [1], "init": {"constant": {"value": 0}}}])",
       "spec: pre[0].regions[0]: at [9] of [1] has rank 1 for a tensor of rank 2 [10, 4]"},
      {R"([{"offset": [0, 0], "shape": [1, 4], "fill": {"constant": {"value": 0}}}])",
       "spec: pre[0].regions[0].fill: unknown key (valid: offset, shape, init)"},
      {R"([{"offset": [0, 0], "shape": [1, 4]}])", "spec: pre[0].regions[0]: missing key 'init'"},
      {R"([{"offset": [0, 0], "shape": [1, 4], "init": {"normal": {"std": -1}}}])",
       "spec: pre[0].regions[0].init.normal: fill 'normal(0, -1)' is invalid: std must be positive"},
      {R"({"offset": [0, 0]})", "spec: pre[0].regions: must be an array of {\"offset\", \"shape\", \"init\"} objects"},
      {R"([{"offset": [0, -1], "shape": [1, 4], "init": {"constant": {"value": 0}}}])",
       "spec: pre[0].regions[0].offset[1]: must be a non-negative integer"},
  };
  for (const auto& [regions, want] : cases) EXPECT_EQ(with(regions), want) << regions;
}

// Thousands of mutated, truncated, spliced and random inputs (fixed seed): each either parses, and then
// round-trips, or throws spec_error. Nothing else may come out, and nothing may crash.
TEST(SpecJson, Fuzz) {
  std::vector<std::string> seeds = {kExample};
  for (const char* p : {"llama-tiny", "gpt2-tiny", "mixtral-tiny"}) seeds.push_back(spec_to_json(make_preset(p)));
  const std::vector<std::string> tokens = {
      "-1", "0", "1e999", "-1e999", "18446744073709551616", "18446744073709551615", "4294967296", "1.5", "null",
      "true", "\"\"", "{}", "[]", "[[[[", "}}}}", "\"\\u0000\"", "\"\\ud800\"", "\xff\xfe", ",", ":", "\"",
      "\"role\": \"other\"", "\"init\": {\"normal\": {\"std\": 0}}", "\"count\": 99999999999", "NaN", "-0",
      "\"shape\": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]"};
  std::mt19937_64 rng(20240531);
  auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % (n ? n : 1)); };
  std::size_t parsed = 0, rejected = 0;
  for (int iter = 0; iter < 6000; ++iter) {
    std::string s = seeds[pick(seeds.size())];
    const int kind = static_cast<int>(pick(6));
    const int edits = 1 + static_cast<int>(pick(4));
    for (int e = 0; e < edits && !s.empty(); ++e) {
      const std::size_t at = pick(s.size());
      switch (kind) {
        case 0: s[at] = static_cast<char>(rng()); break;                          // flip a byte
        case 1: s.erase(at, 1 + pick(8)); break;                                   // delete a run
        case 2: s.insert(at, tokens[pick(tokens.size())]); break;                  // splice a token
        case 3: s.resize(at); break;                                               // truncate
        case 4: {                                                                  // replace a number
          const auto d = s.find_first_of("0123456789", at);
          if (d != std::string::npos) s.replace(d, 1, tokens[pick(9)]);
          break;
        }
        default: {                                                                 // random bytes
          s.assign(pick(64), '\0');
          for (auto& c : s) c = static_cast<char>(rng());
          break;
        }
      }
    }
    try {
      const ModelSpec m = spec_from_json(s);
      ++parsed;
      ASSERT_EQ(spec_from_json(spec_to_json(m)), m) << s;
    } catch (const spec_error& e) {
      ++rejected;
      const std::string w = e.what();
      ASSERT_EQ(w.rfind("spec: ", 0), 0u) << w;
      ASSERT_EQ(w.find('\n'), std::string::npos) << w;
    } catch (const std::exception& e) {
      FAIL() << "non-spec_error " << typeid(e).name() << ": " << e.what() << "\ninput: " << s;
    }
  }
  EXPECT_EQ(parsed + rejected, 6000u);
  EXPECT_GT(parsed, 0u);    // some mutations stay valid (numbers replaced by other numbers)
  EXPECT_GT(rejected, 0u);
}

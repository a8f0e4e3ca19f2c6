// The build options as users write them (init/options.hpp): what the CLI and the Python package read
// through the same two functions, with each bad value named as each of them spells the option.
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <layerinit/init/hf_spec.hpp>
#include <layerinit/init/options.hpp>
#include <layerinit/init/presets.hpp>

using namespace layerinit;

namespace {

// A model without a config.json: its dtype, when none is given, is bf16.
const ModelSpec& plain() {
  static const ModelSpec s = make_preset("llama-tiny");
  return s;
}

// The message of f's std::invalid_argument, or "accepted".
std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST(Options, GoodTextGivesTheBuildOptionsAndRecipe) {
  OptionsText t;
  t.dtype = "float16";
  t.dtype_overrides = {{"*norm*", "fp32"}, {"lm_head.weight", "bfloat16"}};
  t.recipe = "mup:base_width=32";
  t.init_overrides = {{"*", "constant(1)"}, {"*.o_proj.weight", "normal(0, 0.01)"}};
  t.seed = 18446744073709551615ull;
  t.layout = "stacked";
  t.orientation = "in-out";
  t.experts = "per-expert";
  for (OptionNames n : {OptionNames::cli, OptionNames::python}) {
    const BuildOptions o = checked_build_options(t, n, plain());
    EXPECT_EQ(o.dtype, DType::f16);
    ASSERT_EQ(o.dtype_overrides.size(), 2u);
    EXPECT_EQ(o.dtype_overrides[0].pattern, "*norm*");
    EXPECT_EQ(o.dtype_overrides[0].dtype, DType::f32);
    EXPECT_EQ(o.dtype_overrides[1].pattern, "lm_head.weight");
    EXPECT_EQ(o.dtype_overrides[1].dtype, DType::bf16);
    EXPECT_EQ(o.seed, 18446744073709551615ull);
    EXPECT_EQ(o.layout, Layout::stacked);
    EXPECT_EQ(o.orientation, Orientation::in_out);
    EXPECT_EQ(o.experts, ExpertLayout::per_expert);
    EXPECT_TRUE(o.layer_order.empty());
    EXPECT_FALSE(o.after_part);

    const Recipe r = checked_recipe(t, n);
    EXPECT_EQ(r.name(), "mup:base_width=32");
    EXPECT_EQ(r.params().at("base_width"), 32.0);
    // In the order given: the last match wins.
    ASSERT_EQ(r.overrides().size(), 2u);
    EXPECT_EQ(r.overrides()[0].first, "*");
    EXPECT_EQ(r.overrides()[0].second, FillSpec::constant(1));
    EXPECT_EQ(r.overrides()[1].first, "*.o_proj.weight");
    EXPECT_EQ(r.overrides()[1].second, FillSpec::normal(0, 0.01));
  }
}

TEST(Options, DefaultsAreBuildOptionsDefaults) {
  const BuildOptions o = checked_build_options(OptionsText{}, OptionNames::cli, plain());
  const BuildOptions d;
  EXPECT_EQ(o.dtype, d.dtype);
  EXPECT_TRUE(o.dtype_overrides.empty());
  EXPECT_EQ(o.seed, d.seed);
  EXPECT_EQ(o.layout, d.layout);
  EXPECT_EQ(o.orientation, d.orientation);
  EXPECT_EQ(o.experts, d.experts);
  const Recipe r = checked_recipe(OptionsText{}, OptionNames::python);
  EXPECT_EQ(r.name(), "hf");
  EXPECT_TRUE(r.overrides().empty());
}

// Each option's bad value: one line that starts with the option as the CLI and as Python name it,
// then the library's reason (with the valid names where there is a list).
TEST(Options, EachBadValueIsRefusedNamingTheOption) {
  struct Case {
    std::function<void(OptionsText&)> set;
    std::string cli, python, reason;
  };
  const std::vector<Case> cases = {
      {[](OptionsText& t) { t.dtype = "fp8"; }, "--dtype: ", "dtype: ", "dtype 'fp8' is unknown (valid: fp32, fp16, bf16)"},
      {[](OptionsText& t) { t.dtype_overrides = {{"*norm*", "fp32"}, {"*ln*", "fp9"}}; }, "--dtype-override '*ln*=fp9': ",
       "dtype_overrides['*ln*']: ", "dtype 'fp9' is unknown (valid: fp32, fp16, bf16)"},
      {[](OptionsText& t) { t.dtype_overrides = {{"", "fp32"}}; }, "--dtype-override '=fp32': ", "dtype_overrides['']: ",
       "the pattern is empty (it would match no tensor)"},
      {[](OptionsText& t) { t.recipe = "lecun"; }, "--recipe: ", "recipe: ", "recipe 'lecun' is unknown (valid: hf, "},
      {[](OptionsText& t) { t.recipe = "mup:width=3"; }, "--recipe: ", "recipe: ",
       "recipe 'mup': parameter 'width' is unknown (valid: base_width; write name:key=value)"},
      {[](OptionsText& t) { t.init_overrides = {{"*", "normal(0,-1)"}}; }, "--init-override '*=normal(0,-1)': ",
       "overrides['*']: ", "fill 'normal(0, -1)' is invalid: std must be positive"},
      {[](OptionsText& t) { t.init_overrides = {{"*", "gaussian(0,1)"}}; }, "--init-override '*=gaussian(0,1)': ",
       "overrides['*']: ", "fill 'gaussian(0,1)': fill 'gaussian' is unknown (valid: constant, "},
      // "Tell it per name with a role", read as an override: the error says where a role goes.
      {[](OptionsText& t) { t.init_overrides = {{"*.proj.weight", "output_weight"}}; },
       "--init-override '*.proj.weight=output_weight': ", "overrides['*.proj.weight']: ",
       "fill 'output_weight' is a role, and an override is a fill (e.g. normal(0,0.02)); a role is given in a spec "
       "(docs/spec.md: \"role\"; layerinit.torch: spec=) or layerinit.jax's rules="},
      {[](OptionsText& t) { t.init_overrides = {{"", "constant(1)"}}; }, "--init-override '=constant(1)': ",
       "overrides['']: ", "the pattern is empty (it would match no tensor)"},
      {[](OptionsText& t) { t.layout = "restack"; }, "--layout: ", "layout: ",
       "layout 'restack' is unknown (valid: per-layer, stacked)"},
      {[](OptionsText& t) { t.orientation = "sideways"; }, "--orientation: ", "orientation: ",
       "orientation 'sideways' is unknown (valid: out-in, in-out)"},
      {[](OptionsText& t) { t.experts = "fused"; }, "--experts: ", "experts: ",
       "expert layout 'fused' is unknown (valid: per-expert, stacked)"},
      // User text is escaped, in the name and in the reason: one line.
      {[](OptionsText& t) { t.dtype_overrides = {{"a\nb", "x\ny"}}; }, "--dtype-override 'a\\x0ab=x\\x0ay': ",
       "dtype_overrides['a\\x0ab']: ", "dtype 'x\\x0ay' is unknown"},
  };
  for (const Case& c : cases) {
    OptionsText t;
    c.set(t);
    for (const auto& [names, prefix] : {std::pair{OptionNames::cli, c.cli}, std::pair{OptionNames::python, c.python}}) {
      const std::string m = refusal([&] {
        (void)checked_build_options(t, names, plain());
        (void)checked_recipe(t, names);
      });
      SCOPED_TRACE(m);
      EXPECT_EQ(m.rfind(prefix + c.reason, 0), 0u);
      EXPECT_EQ(m.find('\n'), std::string::npos);
    }
  }
}

// The recipe and its overrides do not read the build options' fields, nor the other way round: a
// bad value of one is refused only by the function that reads it.
TEST(Options, EachFunctionReadsItsOwnFields) {
  OptionsText bad_build;
  bad_build.dtype = "fp8";
  EXPECT_EQ(refusal([&] { (void)checked_recipe(bad_build, OptionNames::cli); }), "accepted");
  OptionsText bad_recipe;
  bad_recipe.recipe = "lecun";
  EXPECT_EQ(refusal([&] { (void)checked_build_options(bad_recipe, OptionNames::cli, plain()); }), "accepted");
}

// Without a dtype, the model's: a Hugging Face config's dtype (else torch_dtype), else bf16; a config's
// dtype layerinit does not write is refused, ending with the option that would choose one.
TEST(Options, WithoutADtypeTheModelsIsTaken) {
  const auto config = [](const std::string& dtype) {
    return spec_from_hf_config(R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, )"
                               R"("num_attention_heads": 4, "vocab_size": 256)" + dtype + "}");
  };
  EXPECT_EQ(checked_build_options(OptionsText{}, OptionNames::cli, config("")).dtype, DType::bf16);
  EXPECT_EQ(checked_build_options(OptionsText{}, OptionNames::cli, config(R"(, "torch_dtype": "float32")")).dtype, DType::f32);
  EXPECT_EQ(checked_build_options(OptionsText{}, OptionNames::python, config(R"(, "dtype": "float16", "torch_dtype": "float32")")).dtype,
            DType::f16);
  OptionsText given;
  given.dtype = "bf16";
  EXPECT_EQ(checked_build_options(given, OptionNames::cli, config(R"(, "torch_dtype": "float64")")).dtype, DType::bf16);
  for (const auto& [names, option] : {std::pair{OptionNames::cli, "--dtype"}, std::pair{OptionNames::python, "dtype"}})
    EXPECT_EQ(refusal([&] { (void)checked_build_options(OptionsText{}, names, config(R"(, "torch_dtype": "float64")")); }),
              std::string("config.json: torch_dtype: 'float64' is not a dtype layerinit writes (float32, float16, bfloat16): "
                          "give the dtype to write (") + option + ")");
}

// What emit_checkpoint records about a model besides its tensors: the file's metadata (seed, dtype,
// recipe, layout, orientation, model spec) comes from the Builder itself, and a Hugging Face
// config.json is written only for the one layout transformers loads (per-layer, out-in), with token
// ids inside the vocabulary.
#include <hdf5.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include <layerinit/checkpoint/hf_config.hpp>
#include <layerinit/checkpoint/emit.hpp>
#include <layerinit/init/presets.hpp>
#include <layerinit/init/recipes.hpp>
#include <layerinit/init/spec_json.hpp>
#include <layerinit/config.hpp>
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace layerinit;
using json = nlohmann::json;
using layerinit::testing::slurp;
using layerinit::testing::TempDir;

namespace {

std::map<std::string, std::string> hdf5_root_attributes(const fs::path& file) {
  std::map<std::string, std::string> out;
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(f, 0) << file;
  if (f < 0) return out;
  for (const char* key : {"format_version", "library_version", "dtype", "seed", "recipe", "layout", "orientation",
                          "model_spec", "init_overrides", "note"}) {
    if (H5Aexists(f, key) <= 0) continue;
    hid_t a = H5Aopen(f, key, H5P_DEFAULT);
    hid_t t = H5Aget_type(a);
    char* p = nullptr;
    H5Aread(a, t, &p);
    out[key] = p ? p : "";
    H5free_memory(p);
    H5Tclose(t);
    H5Aclose(a);
  }
  H5Fclose(f);
  return out;
}

std::map<std::string, std::string> safetensors_metadata(const fs::path& file) {
  const std::string all = slurp(file);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(all.at(static_cast<std::size_t>(i)));
  std::map<std::string, std::string> out;
  const json header = json::parse(all.substr(8, n));
  for (const auto& [k, v] : header.at("__metadata__").items()) out[k] = v.get<std::string>();
  return out;
}

BuildOptions options(Layout layout, Orientation orientation) {
  BuildOptions o;
  o.dtype = DType::f16;
  o.seed = 1234;
  o.layout = layout;
  o.orientation = orientation;
  return o;
}

}  // namespace

// emit_checkpoint wrote empty seed, dtype, recipe, layout, orientation and model_spec unless its
// caller (only the CLI did) filled EmitOptions::meta by hand.
TEST(EmitMetadata, ComesFromTheBuilder) {
  auto be = make_host_backend(2);
  const ModelSpec spec = make_preset("llama-tiny");
  const Builder b(spec, make_recipe("megatron"), options(Layout::stacked, Orientation::in_out), *be, be->memory());
  EXPECT_EQ(b.recipe().name(), "megatron");
  TempDir dir;
  const std::map<std::string, std::string> expected = {
      {"format_version", "1"}, {"library_version", LAYERINIT_VERSION}, {"dtype", "fp16"}, {"seed", "1234"},
      {"recipe", "megatron"}, {"layout", "stacked"}, {"orientation", "in-out"}, {"model_spec", spec_to_json(spec)}};
  EmitOptions eo;  // meta left empty
  eo.format = CheckpointFormat::hdf5;
  emit_checkpoint(b, *be, dir / "m.h5", eo);
  EXPECT_EQ(hdf5_root_attributes(dir / "m.h5"), expected);
  eo.format = CheckpointFormat::safetensors;
  emit_checkpoint(b, *be, dir / "m", eo);
  auto st = safetensors_metadata(dir / "m" / "model.safetensors");
  EXPECT_EQ(st["format"], "pt");
  st.erase("format");
  EXPECT_EQ(st, expected);
}

// The recipe's --init-override fills, in order and exact, so the file says how to make it again
// (they were not recorded: the metadata named the recipe only). No overrides, no key (above).
TEST(EmitMetadata, RecordsTheInitOverridesExactly) {
  auto be = make_host_backend(2);
  Recipe rec = make_recipe("hf");
  rec.add_override("*norm*", FillSpec::normal(1, 0.123456789123));
  rec.add_override("model.embed_tokens.weight", FillSpec::trunc_normal_std(0, 1.0 / 3, -3, 3));
  const Builder b(make_preset("llama-tiny"), rec, options(Layout::per_layer, Orientation::out_in), *be, be->memory());
  const std::string want = R"j([["*norm*","normal(1,0.123456789123)"],["model.embed_tokens.weight","trunc_normal_std(0,0.3333333333333333,-3,3)"]])j";
  TempDir dir;
  EmitOptions eo;
  eo.format = CheckpointFormat::hdf5;
  emit_checkpoint(b, *be, dir / "m.h5", eo);
  EXPECT_EQ(hdf5_root_attributes(dir / "m.h5")["init_overrides"], want);
  eo.format = CheckpointFormat::safetensors;
  emit_checkpoint(b, *be, dir / "m", eo);
  EXPECT_EQ(safetensors_metadata(dir / "m" / "model.safetensors")["init_overrides"], want);
  eo.meta.init_overrides = "[]";  // a caller's value that is not the builder's
  EXPECT_THROW(emit_checkpoint(b, *be, dir / "other", eo), std::invalid_argument);
  EXPECT_FALSE(fs::exists(dir / "other"));
}

// A caller's own values stay where they agree with the builder (the CLI passes the same strings) and
// `extra` keys pass through; a value that contradicts the builder would make the file lie: refused
// before anything is written.
TEST(EmitMetadata, CallerValuesMustAgreeWithTheBuilder) {
  auto be = make_host_backend(2);
  const ModelSpec spec = make_preset("gpt2-tiny");
  const Builder b(spec, make_recipe("hf"), options(Layout::per_layer, Orientation::out_in), *be, be->memory());
  TempDir dir;
  EmitOptions eo;
  eo.meta.seed = "1234";
  eo.meta.recipe = "hf";
  eo.meta.extra["note"] = "kept";
  emit_checkpoint(b, *be, dir / "ok.h5", eo);
  const auto attrs = hdf5_root_attributes(dir / "ok.h5");
  EXPECT_EQ(attrs.at("note"), "kept");
  EXPECT_EQ(attrs.at("dtype"), "fp16");
  EXPECT_EQ(attrs.at("seed"), "1234");
  fs::remove(dir / "ok.h5");
  struct Wrong {
    std::string CheckpointMetadata::*field;
    std::string value, message;
  };
  for (const Wrong& w : {Wrong{&CheckpointMetadata::seed, "5", "emit: metadata seed '5' contradicts the builder's '1234'"},
                         Wrong{&CheckpointMetadata::dtype, "bf16", "emit: metadata dtype 'bf16' contradicts the builder's 'fp16'"},
                         Wrong{&CheckpointMetadata::recipe, "torchtitan", "emit: metadata recipe 'torchtitan' contradicts the builder's 'hf'"},
                         Wrong{&CheckpointMetadata::layout, "stacked", "emit: metadata layout 'stacked' contradicts the builder's 'per-layer'"},
                         Wrong{&CheckpointMetadata::orientation, "in-out", "emit: metadata orientation 'in-out' contradicts the builder's 'out-in'"},
                         Wrong{&CheckpointMetadata::model_spec, "{}", "emit: metadata model_spec '{}' contradicts the builder's"}}) {
    EmitOptions bad;
    bad.meta.*w.field = w.value;
    try {
      emit_checkpoint(b, *be, dir / "bad.h5", bad);
      ADD_FAILURE() << w.message << ": accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).rfind(w.message, 0), 0u) << e.what();
    }
    EXPECT_TRUE(dir.entries().empty());
  }
}

// A config.json beside a stacked or in-out checkpoint made transformers' from_pretrained load the
// directory, report missing and unexpected keys and initialize them anew (or, for a square weight
// stored transposed, load it silently wrong). emit_checkpoint refuses it; the per-layer out-in
// layout gets it.
TEST(EmitConfigJson, OnlyForThePerLayerOutInLayout) {
  auto be = make_host_backend(2);
  const ModelSpec spec = make_preset("llama-tiny");
  TempDir dir;
  for (const auto& [layout, orientation] : {std::pair{Layout::stacked, Orientation::out_in},
                                            std::pair{Layout::per_layer, Orientation::in_out},
                                            std::pair{Layout::stacked, Orientation::in_out}}) {
    const Builder b(spec, make_recipe("hf"), options(layout, orientation), *be, be->memory());
    EmitOptions eo;
    eo.format = CheckpointFormat::safetensors;
    eo.writer.config_json = config_json(spec, DType::f16);
    try {
      emit_checkpoint(b, *be, dir / "m", eo);
      ADD_FAILURE() << "config.json written for " << layout_name(layout) << ", " << orientation_name(orientation);
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()),
                "emit: a Hugging Face config.json describes the per-layer, out-in layout; this checkpoint is " +
                    std::string(layout_name(layout)) + ", " + std::string(orientation_name(orientation)));
    }
    EXPECT_TRUE(dir.entries().empty());
  }
  const Builder b(spec, make_recipe("hf"), options(Layout::per_layer, Orientation::out_in), *be, be->memory());
  EmitOptions eo;
  eo.format = CheckpointFormat::safetensors;
  eo.writer.config_json = config_json(spec, DType::f16);
  emit_checkpoint(b, *be, dir / "m", eo);
  EXPECT_EQ(slurp(dir / "m" / "config.json"), eo.writer.config_json);
}

// transformers' GPT2Config defaults bos/eos to 50256, outside gpt2-tiny's 512-token vocabulary (it
// warns). GPT-2's end-of-text token is the last one: vocab_size - 1 for every GPT-2 preset. Every
// token id any config.json names lies inside its vocabulary.
TEST(EmitConfigJson, TokenIdsLieInsideTheVocabulary) {
  const json tiny = json::parse(config_json(make_preset("gpt2-tiny"), DType::bf16));
  EXPECT_EQ(tiny["vocab_size"], 512u);
  EXPECT_EQ(tiny["bos_token_id"], 511u);
  EXPECT_EQ(tiny["eos_token_id"], 511u);
  const json gpt2 = json::parse(config_json(make_preset("gpt2"), DType::bf16));
  EXPECT_EQ(gpt2["bos_token_id"], 50256u);
  EXPECT_EQ(gpt2["eos_token_id"], 50256u);
  for (const auto& name : preset_names()) {
    const ModelSpec spec = make_preset(name);
    if (!has_config_json(spec)) continue;  // mlp-deep
    SCOPED_TRACE(name);
    const json c = json::parse(config_json(spec, DType::bf16));
    for (const auto& [key, value] : c.items())
      if (key.ends_with("_token_id") && value.is_number()) EXPECT_LT(value.get<std::uint64_t>(), c["vocab_size"].get<std::uint64_t>()) << key;
  }
}

// safetensors writer: a minimal independent reader (header length, padding, offsets that tile the
// data), the Python `safetensors` package, sharding and its index, config.json, atomic directory
// replacement, kill and full-filesystem behaviour.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include <layerinit/checkpoint/hf_config.hpp>
#include <layerinit/init/presets.hpp>
#include <layerinit/init/spec.hpp>
#include <layerinit/checkpoint/writer.hpp>
#include <layerinit/init/family_record.hpp>
#include "safetensors_reader.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace layerinit;
using nlohmann::json;

using layerinit::testing::slurp;
using layerinit::testing::ChildOutcome;
using layerinit::testing::in_child;
using layerinit::testing::in_child_with_message;
using layerinit::testing::TempDir;
using layerinit::testing::parse_safetensors;
using File = layerinit::testing::SafetensorsFile;

namespace {

std::string bytes_of(const void* p, std::size_t n) { return std::string(static_cast<const char*>(p), n); }

CheckpointMetadata test_meta() {
  CheckpointMetadata m;
  m.dtype = "bf16";
  m.seed = "7";
  m.recipe = "hf";
  m.layout = "per-layer";
  m.orientation = "out-in";
  m.model_spec = R"({"name":"tiny"})";
  return m;
}

std::string python() { return std::string(LAYERINIT_SOURCE_DIR) + "/.venv/bin/python"; }

json python_read(const fs::path& p) {
  std::string cmd = python() + " " + LAYERINIT_SOURCE_DIR + "/tests/readers/read_checkpoint.py safetensors '" +
                    p.string() + "'";
  FILE* f = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  EXPECT_EQ(::pclose(f), 0) << cmd;
  return json::parse(out);
}

std::uint32_t fbits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

struct Fixture {
  std::vector<std::uint16_t> pat;
  std::vector<std::uint16_t> half = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x8000, 0x3555};
  std::vector<float> f32 = {1.f, -2.f, 0.25f, 1e-20f, 3.f};
  Fixture() : pat(65536) {
    for (std::uint32_t i = 0; i < 65536; ++i) pat[i] = static_cast<std::uint16_t>(i);
  }
  std::vector<DatasetSpec> specs() const {
    return {{"model.embed_tokens.weight", {256, 256}, DType::bf16},
            {"model.layers.0.mlp.up_proj.weight", {2, 3}, DType::f16},
            {"model.norm.weight", {5}, DType::f32}};
  }
  void write(CheckpointWriter& w, std::uint64_t slab = 10000) const {
    for (std::uint64_t at = 0; at < pat.size(); at += slab)
      w.write(0, at, pat.data() + at, std::min<std::uint64_t>(slab, pat.size() - at));
    w.write(1, 0, half.data(), 6);
    w.write(2, 0, f32.data(), 5);
  }
};

ModelSpec llama_spec() {
  ModelSpec s;
  s.name = "tiny-llama";
  s.family = "llama";
  s.num_layers = 2;
  s.hyper.vocab_size = 256;
  s.hyper.hidden_size = 64;
  s.hyper.intermediate_size = 172;
  s.hyper.num_heads = 4;
  s.hyper.num_kv_heads = 2;
  s.hyper.max_position_embeddings = 128;
  s.hyper.norm_eps = 1e-6;
  s.hyper.rope_theta = 500000.0;
  return s;
}

}  // namespace

TEST(CheckpointSafetensors, SingleFileFollowsTheFormat) {
  TempDir dir;
  const fs::path out = dir.path() / "model";
  Fixture fx;
  WriterOptions o;
  o.config_json = config_json(llama_spec(), DType::bf16);
  auto w = open_safetensors_writer(out, fx.specs(), test_meta(), o);
  fx.write(*w);
  EXPECT_FALSE(fs::exists(out));
  w->commit();
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"model"});
  EXPECT_EQ(TempDir::list(out), (std::vector<std::string>{"config.json", "model.safetensors"}));
  File f = parse_safetensors(out / "model.safetensors");
  EXPECT_EQ(f.metadata["format"], "pt");
  EXPECT_EQ(f.metadata["seed"], "7");
  EXPECT_EQ(f.metadata["layout"], "per-layer");
  EXPECT_EQ(f.metadata["model_spec"], R"({"name":"tiny"})");
  for (const auto& [k, v] : f.metadata.items()) EXPECT_TRUE(v.is_string()) << k;
  ASSERT_EQ(f.tensors.size(), 3u);
  const auto& e = f.tensors["model.embed_tokens.weight"];
  EXPECT_EQ(e.dtype, "BF16");
  EXPECT_EQ(e.shape, (std::vector<std::uint64_t>{256, 256}));
  EXPECT_EQ(e.bytes, bytes_of(fx.pat.data(), 131072));
  EXPECT_EQ(f.tensors["model.layers.0.mlp.up_proj.weight"].dtype, "F16");
  EXPECT_EQ(f.tensors["model.layers.0.mlp.up_proj.weight"].bytes, bytes_of(fx.half.data(), 12));
  EXPECT_EQ(f.tensors["model.norm.weight"].dtype, "F32");
  EXPECT_EQ(f.tensors["model.norm.weight"].bytes, bytes_of(fx.f32.data(), 20));
  const json cfg = json::parse(slurp(out / "config.json"));
  EXPECT_EQ(cfg["model_type"], "llama");
  EXPECT_EQ(cfg["torch_dtype"], "bfloat16");
}

TEST(CheckpointSafetensors, StackedTensorsGetOneSlicePerWrite) {
  TempDir dir;
  const std::uint64_t L = 4;
  std::vector<DatasetSpec> specs = {{"model.layers.self_attn.q_proj.weight", {L, 3, 5}, DType::bf16, 15},
                                    {"model.layers.input_layernorm.weight", {L, 5}, DType::bf16, 5}};
  auto w = open_safetensors_writer(dir.path() / "s", specs, test_meta(), {});
  std::vector<std::uint16_t> a(L * 15), b(L * 5);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::uint16_t>(i + 1);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::uint16_t>(1000 + i);
  for (std::uint64_t l = 0; l < L; ++l) {
    w->write(1, l * 5, b.data() + l * 5, 5);
    w->write(0, l * 15, a.data() + l * 15, 15);
  }
  w->commit();
  File f = parse_safetensors(dir.path() / "s" / "model.safetensors");
  EXPECT_EQ(f.tensors[specs[0].name].shape, (std::vector<std::uint64_t>{L, 3, 5}));
  EXPECT_EQ(f.tensors[specs[0].name].bytes, bytes_of(a.data(), a.size() * 2));
  EXPECT_EQ(f.tensors[specs[1].name].bytes, bytes_of(b.data(), b.size() * 2));
}

TEST(CheckpointSafetensors, AKeyMayHoldSlashesWhereHdf5RefusesThem) {
  // DM-Haiku's names ("mlp/~/linear_0.w") are module paths: a safetensors key is any string.
  TempDir dir;
  std::vector<DatasetSpec> specs = {{"mlp/~/linear_0.w", {2, 3}, DType::f32, 0}};
  auto w = open_safetensors_writer(dir.path() / "s", specs, test_meta(), {});
  const float v[6] = {1, 2, 3, 4, 5, 6};
  w->write(0, 0, v, 6);
  w->commit();
  EXPECT_EQ(parse_safetensors(dir.path() / "s" / "model.safetensors").tensors["mlp/~/linear_0.w"].bytes, bytes_of(v, sizeof v));
  try {
    open_hdf5_writer(dir.path() / "h.h5", specs, test_meta(), {});
    FAIL() << "HDF5 accepted a '/' in a dataset name";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "checkpoint dataset name 'mlp/~/linear_0.w' is not allowed in HDF5 (no '/': HDF5 reads it as "
                           "groups); write safetensors");
  }
  EXPECT_FALSE(fs::exists(dir.path() / "h.h5"));
  EXPECT_THROW(open_safetensors_writer(dir.path() / "m", {{"__metadata__", {1}, DType::f32, 0}}, test_meta(), {}),
               std::invalid_argument);
}

TEST(CheckpointSafetensors, ShardsAtTheSizeLimitWithAnIndex) {
  TempDir dir;
  const fs::path out = dir.path() / "sharded";
  // Bytes: a 100, b 100, c 100, d 250, e 50. Limit 200: {a,b} {c} {d} (alone: over the limit) {e}.
  std::vector<DatasetSpec> specs = {{"a", {50}, DType::bf16},
                                    {"b", {50}, DType::bf16},
                                    {"c", {25}, DType::f32},
                                    {"d", {5, 25}, DType::bf16},
                                    {"e", {25}, DType::f16}};
  WriterOptions o;
  o.max_shard_size = 200;
  auto w = open_safetensors_writer(out, specs, test_meta(), o);
  std::vector<std::uint8_t> data(1000);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::uint8_t>(i * 7 + 3);
  std::uint64_t at = 0;
  std::vector<std::string> expect_bytes;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    std::uint64_t n = 1;
    for (auto d : specs[i].shape) n *= d;
    w->write(i, 0, data.data() + at, n);
    expect_bytes.push_back(bytes_of(data.data() + at, n * dtype_size(specs[i].dtype)));
    at += n * dtype_size(specs[i].dtype);
  }
  w->commit();
  EXPECT_EQ(TempDir::list(out),
            (std::vector<std::string>{"model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
                                      "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors",
                                      "model.safetensors.index.json"}));
  const json index = json::parse(slurp(out / "model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], 600);
  const json want_map = {{"a", "model-00001-of-00004.safetensors"}, {"b", "model-00001-of-00004.safetensors"},
                         {"c", "model-00002-of-00004.safetensors"}, {"d", "model-00003-of-00004.safetensors"},
                         {"e", "model-00004-of-00004.safetensors"}};
  EXPECT_EQ(index["weight_map"], want_map);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    File f = parse_safetensors(out / want_map[specs[i].name].get<std::string>());
    EXPECT_EQ(f.metadata["format"], "pt");
    EXPECT_EQ(f.tensors.at(specs[i].name).bytes, expect_bytes[i]) << specs[i].name;
  }
  EXPECT_EQ(parse_safetensors(out / "model-00001-of-00004.safetensors").order, (std::vector<std::string>{"a", "b"}));
}

TEST(CheckpointSafetensors, PythonSafetensorsReadsTheSameValues) {
  if (!fs::exists(python()))
    GTEST_SKIP() << "no " << python() << " (run scripts/python-env to create it)";
  TempDir dir;
  Fixture fx;
  WriterOptions o;
  o.max_shard_size = 100000;  // the bf16 tensor alone, then the two small ones
  auto w = open_safetensors_writer(dir.path() / "m", fx.specs(), test_meta(), o);
  fx.write(*w, 4096);
  w->commit();
  const json j = python_read(dir.path() / "m");
  EXPECT_EQ(j["metadata"]["format"], "pt");
  EXPECT_EQ(j["metadata"]["recipe"], "hf");
  EXPECT_EQ(j["index"]["metadata"]["total_size"], 131072 + 12 + 20);
  const auto& bf = j["tensors"]["model.embed_tokens.weight"];
  EXPECT_EQ(bf["shape"], json({256, 256}));
  int bad = 0;
  for (std::uint32_t i = 0; i < 65536; ++i)
    if (bf["bits"][i].get<std::uint32_t>() != i << 16 && bad++ < 5) ADD_FAILURE() << "bf16 " << std::hex << i;
  EXPECT_EQ(bad, 0);
  const auto& hf = j["tensors"]["model.layers.0.mlp.up_proj.weight"];
  EXPECT_EQ(hf["shape"], json({2, 3}));
  for (std::size_t i = 0; i < 6; ++i) EXPECT_EQ(hf["bits"][i].get<std::uint32_t>(), fbits(f16_bits_to_float(fx.half[i])));
  const auto& f = j["tensors"]["model.norm.weight"];
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(f["bits"][i].get<std::uint32_t>(), fbits(fx.f32[i]));
}

TEST(CheckpointSafetensors, OverwriteRefusedThenReplacesTheWholeDirectory) {
  TempDir dir;
  const fs::path out = dir.path() / "model";
  Fixture fx;
  WriterOptions sharded;
  sharded.max_shard_size = 1000;
  {
    auto w = open_safetensors_writer(out, fx.specs(), test_meta(), sharded);
    fx.write(*w);
    w->commit();
  }
  ASSERT_TRUE(fs::exists(out / "model.safetensors.index.json"));
  try {
    open_safetensors_writer(out, fx.specs(), test_meta(), {});
    FAIL() << "overwrote without --force";
  } catch (const checkpoint_error& e) {
    EXPECT_NE(std::string(e.what()).find("refusing to overwrite existing " + out.string()), std::string::npos)
        << e.what();
  }
  WriterOptions o;
  o.overwrite = true;
  auto w = open_safetensors_writer(out, fx.specs(), test_meta(), o);
  fx.write(*w);
  w->commit();
  // The new set replaced the old one as a whole: no stale shards or index.
  EXPECT_EQ(TempDir::list(out), std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"model"});
}

TEST(CheckpointSafetensors, OverwriteReplacesOnlyADirectoryLayerinitWrote) {
  TempDir dir;
  Fixture fx;
  auto emit = [&](const fs::path& out, const WriterOptions& o) {
    auto w = open_safetensors_writer(out, fx.specs(), test_meta(), o);
    fx.write(*w);
    w->commit();
  };
  WriterOptions force;
  force.overwrite = true;
  force.config_json = "{}\n";
  force.max_shard_size = 1000;  // shards, their index and config.json: all of it may be replaced
  const fs::path ours = dir.path() / "ours", notes = dir.path() / "notes", sub = dir.path() / "sub",
                 foreign = dir.path() / "foreign", file = dir.path() / "file", empty = dir.path() / "empty";
  for (const fs::path& d : {ours, notes, sub}) emit(d, force);
  { std::ofstream(notes / "notes.txt") << "mine"; }
  fs::create_directory(sub / "sub");
  fs::create_directory(foreign);
  {  // a safetensors file as other tools write it: no layerinit metadata
    const std::string h = R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
    std::string bytes(8, '\0');
    bytes[0] = static_cast<char>(h.size());
    std::ofstream(foreign / "model.safetensors", std::ios::binary) << bytes << h << std::string(4, '\0');
  }
  { std::ofstream(file) << "old"; }
  fs::create_directory(empty);
  const std::map<fs::path, std::string> refused = {
      {notes, "it holds notes.txt, which layerinit does not write"},
      {sub, "it holds sub, which is not a file layerinit writes"},
      {foreign, "it holds model.safetensors, which layerinit did not write (no format_version and library_version in its "
                "__metadata__)"},
      {file, "it is a file, and this checkpoint is a directory"}};
  for (const auto& [target, why] : refused) {
    SCOPED_TRACE(target.string());
    const auto before = fs::is_directory(target) ? TempDir::list(target) : std::vector<std::string>{};
    try {
      open_safetensors_writer(target, fx.specs(), test_meta(), force);
      ADD_FAILURE() << "replaced";
    } catch (const checkpoint_refused& e) {
      EXPECT_EQ(std::string(e.what()), "checkpoint: refusing to replace " + target.string() +
                                           " (--force replaces only what layerinit wrote): " + why);
    }
    if (fs::is_directory(target)) EXPECT_EQ(TempDir::list(target), before);
  }
  EXPECT_EQ(slurp(file), "old");
  WriterOptions plain;
  plain.overwrite = true;
  for (const fs::path& d : {ours, empty}) {
    SCOPED_TRACE(d.string());
    emit(d, plain);
    EXPECT_EQ(TempDir::list(d), std::vector<std::string>{"model.safetensors"});
  }
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"empty", "file", "foreign", "notes", "ours", "sub"}));
}

TEST(CheckpointSafetensors, OverwriteChecksTheTargetAgainAtCommit) {
  // A file put into the old directory while the new one is written would be deleted with it: the
  // commit checks the target again and refuses, leaving both as they are.
  TempDir dir;
  const fs::path out = dir.path() / "model";
  Fixture fx;
  {
    auto w = open_safetensors_writer(out, fx.specs(), test_meta(), {});
    fx.write(*w);
    w->commit();
  }
  const std::string before = slurp(out / "model.safetensors");
  WriterOptions o;
  o.overwrite = true;
  auto w = open_safetensors_writer(out, fx.specs(), test_meta(), o);
  fx.write(*w);
  { std::ofstream(out / "notes.txt") << "written meanwhile"; }
  try {
    w->commit();
    ADD_FAILURE() << "replaced";
  } catch (const checkpoint_refused& e) {
    EXPECT_EQ(std::string(e.what()), "checkpoint: refusing to replace " + out.string() +
                                         " (--force replaces only what layerinit wrote): it holds notes.txt, which "
                                         "layerinit does not write");
  }
  EXPECT_EQ(TempDir::list(out), (std::vector<std::string>{"model.safetensors", "notes.txt"}));
  EXPECT_EQ(slurp(out / "model.safetensors"), before);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"model"}) << "temporary left";
}

TEST(CheckpointSafetensors, KilledMidWayLeavesTheOldDirectoryIntact) {
  TempDir dir;
  const fs::path out = dir.path() / "model";
  Fixture fx;
  int st = in_child([&] {
    auto w = open_safetensors_writer(out, fx.specs(), test_meta(), {});
    w->write(0, 0, fx.pat.data(), 30000);
    ::kill(::getpid(), SIGKILL);
    return 0;
  });
  ASSERT_TRUE(WIFSIGNALED(st));
  EXPECT_FALSE(fs::exists(out));
  {
    auto w = open_safetensors_writer(out, fx.specs(), test_meta(), {});
    fx.write(*w);
    w->commit();
  }
  const std::string before = slurp(out / "model.safetensors");
  st = in_child([&] {
    WriterOptions o;
    o.overwrite = true;
    auto w = open_safetensors_writer(out, fx.specs(), test_meta(), o);
    std::vector<std::uint16_t> other(65536, 0x4000);
    w->write(0, 0, other.data(), other.size());
    ::kill(::getpid(), SIGKILL);
    return 0;
  });
  ASSERT_TRUE(WIFSIGNALED(st));
  EXPECT_EQ(slurp(out / "model.safetensors"), before);
  EXPECT_EQ(TempDir::list(out), std::vector<std::string>{"model.safetensors"});
}

TEST(CheckpointSafetensors, FullFilesystemFailsClearlyAndLeavesNothing) {
  TempDir dir;
  const fs::path out = dir.path() / "model";
  const ChildOutcome child = in_child_with_message([&](std::string& message) {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {50000, 50000};  // the bf16 tensor alone is 128 KiB
    ::setrlimit(RLIMIT_FSIZE, &rl);
    Fixture fx;
    try {
      auto w = open_safetensors_writer(out, fx.specs(), test_meta(), {});
      fx.write(*w);
      w->commit();
    } catch (const checkpoint_error& e) {
      message = e.what();
      return 0;
    }
    return 1;
  });
  const int st = child.status;
  ASSERT_TRUE(WIFEXITED(st)) << "killed by signal " << WTERMSIG(st);
  EXPECT_EQ(WEXITSTATUS(st), 0) << "the write did not fail";
  const std::string& msg = child.message;
  EXPECT_EQ(msg, "checkpoint: cannot write " + (out / "model.safetensors").string() + ": File too large");
  EXPECT_TRUE(dir.entries().empty());
}

TEST(CheckpointSafetensors, ConfigJsonForEachFamily) {
  ModelSpec s = llama_spec();
  json j = json::parse(config_json(s, DType::bf16));
  EXPECT_EQ(j["architectures"], json({"LlamaForCausalLM"}));
  EXPECT_EQ(j["vocab_size"], 256);
  EXPECT_EQ(j["hidden_size"], 64);
  EXPECT_EQ(j["intermediate_size"], 172);
  EXPECT_EQ(j["num_hidden_layers"], 2);
  EXPECT_EQ(j["num_attention_heads"], 4);
  EXPECT_EQ(j["num_key_value_heads"], 2);
  EXPECT_EQ(j["hidden_act"], "silu");
  EXPECT_EQ(j["max_position_embeddings"], 128);
  EXPECT_EQ(j["rms_norm_eps"], 1e-6);
  EXPECT_EQ(j["rope_theta"], 500000.0);
  EXPECT_EQ(j["tie_word_embeddings"], false);
  EXPECT_EQ(j["initializer_range"], 0.02);
  s.family = "mistral";
  j = json::parse(config_json(s, DType::f16));
  EXPECT_EQ(j["model_type"], "mistral");
  EXPECT_EQ(j["torch_dtype"], "float16");
  s.family = "mixtral";
  s.hyper.num_experts = 8;
  s.hyper.experts_per_token = 2;
  j = json::parse(config_json(s, DType::bf16));
  EXPECT_EQ(j["architectures"], json({"MixtralForCausalLM"}));
  EXPECT_EQ(j["num_local_experts"], 8);
  EXPECT_EQ(j["num_experts_per_tok"], 2);
  EXPECT_FALSE(j.contains("rope_scaling"));  // none set: Llama 3's configs have none
  // Llama 3.1's rope_scaling, as meta-llama/Llama-3.1-405B's config.json writes it.
  j = json::parse(config_json(make_preset("llama-3.1-405b"), DType::bf16));
  EXPECT_EQ(j["rope_scaling"], json::parse(R"({"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192, "rope_type": "llama3"})"));
  EXPECT_EQ(j["max_position_embeddings"], 131072);
  EXPECT_EQ(j["num_hidden_layers"], 126);
  EXPECT_EQ(j["rope_theta"], 500000.0);
  // Qwen2.5 and Gemma 2 from their tiny presets: the fields transformers reads beyond Llama's.
  j = json::parse(config_json(make_preset("qwen2.5-tiny"), DType::bf16));
  EXPECT_EQ(j["architectures"], json({"Qwen2ForCausalLM"}));
  EXPECT_EQ(j["model_type"], "qwen2");
  EXPECT_EQ(j["use_sliding_window"], false);
  EXPECT_EQ(j["max_window_layers"], 2);
  EXPECT_EQ(j["rope_theta"], 1e6);
  EXPECT_EQ(j["rms_norm_eps"], 1e-6);
  EXPECT_FALSE(j.contains("attention_bias"));  // Qwen2's q/k/v always have biases
  j = json::parse(config_json(make_preset("gemma-2-tiny"), DType::bf16));
  EXPECT_EQ(j["architectures"], json({"Gemma2ForCausalLM"}));
  EXPECT_EQ(j["head_dim"], 32);
  EXPECT_EQ(j["query_pre_attn_scalar"], 32);
  EXPECT_EQ(j["hidden_activation"], "gelu_pytorch_tanh");
  EXPECT_FALSE(j.contains("hidden_act"));
  EXPECT_EQ(j["tie_word_embeddings"], true);
  EXPECT_EQ(j["final_logit_softcapping"], 30.0);
  EXPECT_EQ(j["attn_logit_softcapping"], 50.0);
  EXPECT_EQ(json::parse(config_json(make_preset("gemma-2-9b"), DType::bf16))["query_pre_attn_scalar"], 256);
  // DeepSeek-V3's presets are config.json texts: written as they are.
  EXPECT_EQ(json::parse(config_json(make_preset("deepseek-v3-tiny"), DType::bf16))["model_type"], "deepseek_v3");
  s.family = "gpt2";
  s.hyper.intermediate_size = 256;
  j = json::parse(config_json(s, DType::f32));
  EXPECT_EQ(j["model_type"], "gpt2");
  EXPECT_EQ(j["n_embd"], 64);
  EXPECT_EQ(j["n_layer"], 2);
  EXPECT_EQ(j["n_head"], 4);
  EXPECT_EQ(j["n_positions"], 128);
  EXPECT_TRUE(j["n_inner"].is_null());
  EXPECT_EQ(j["torch_dtype"], "float32");
  s.family = "mlp";
  try {
    config_json(s, DType::bf16);
    FAIL();
  } catch (const std::invalid_argument& e) {
    // Every family whose record writes a config.json, in the records' order: their files', by model_type.
    std::string written;
    for (const hf::FamilyRecord& f : hf::family_records())
      if (f.write) written += (written.empty() ? "" : ", ") + std::string(f.model_type);
    EXPECT_EQ(written, "gemma2, gpt2, gpt_neox, llama, mistral, mixtral, qwen2");
    EXPECT_EQ(std::string(e.what()), "config.json: family 'mlp' has no Hugging Face model_type (supported: " + written +
                                     "); a spec read from a config.json carries its own");
  }
}

// A header past the format's 100,000,000 bytes is refused from its computed size before its JSON is built
// (a config of 87,000 experts a layer and enough layers would otherwise build it, then refuse it).
TEST(Safetensors, AHeaderTooLargeIsRefusedBeforeItIsBuilt) {
  TempDir dir;
  std::vector<DatasetSpec> specs;
  for (int i = 0; i < 101; ++i) specs.push_back({std::to_string(i) + std::string(1'000'000, 'w'), {1}, DType::f32});
  try {
    open_safetensors_writer(dir.path() / "s", specs, test_meta(), {});
    FAIL() << "accepted";
  } catch (const checkpoint_error& e) {
    EXPECT_EQ(std::string(e.what()), "checkpoint: " + (dir.path() / "s" / "model.safetensors").string() +
                                         ": safetensors header of 101005993 bytes (101 tensors) exceeds the "
                                         "format's 100000000");
  }
  EXPECT_FALSE(fs::exists(dir.path() / "s"));
}

// verify_checkpoint (checkpoint/verify.hpp): a model's own tensors verify; every change to them is
// found with its index and values; each diagnosis comes from applying its transformation to a real
// built tensor. The tensors reach verify through callback_reader, as the Python package's do; the
// file readers and the CLI have tests of their own (test_checkpoint_reader, test_cli_verify).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include <layerinit/checkpoint/detail.hpp>
#include <layerinit/checkpoint/emit.hpp>
#include <layerinit/checkpoint/verify.hpp>
#include <layerinit/init/presets.hpp>
#include <layerinit/init/spec_json.hpp>
#include "test_util.hpp"

using namespace layerinit;

namespace {

struct Held {
  std::string name;
  Shape shape;
  DType dtype = DType::bf16;
  std::string dtype_text;  // set for a dtype layerinit does not make
  std::vector<unsigned char> bytes;
  Shape global_shape, offset;
  std::uint64_t esize() const { return dtype_text.empty() ? dtype_size(dtype) : 8; }
};

// A model's tensors, built in memory, as a "checkpoint" a test can change.
struct Tensors {
  std::vector<Held> list;
  Held& at(std::string_view name) {
    for (Held& h : list)
      if (h.name == name) return h;
    ADD_FAILURE() << "no tensor " << name;
    return list.front();
  }
  void erase(std::string_view name) {
    std::erase_if(list, [&](const Held& h) { return h.name == name; });
  }
};

BuildOptions options(DType t = DType::bf16, std::uint64_t seed = 0, Layout layout = Layout::per_layer) {
  BuildOptions o;
  o.dtype = t;
  o.seed = seed;
  o.layout = layout;
  return o;
}

struct Subject {
  std::unique_ptr<backend> be = make_host_backend(2);
  tracking_resource tracker{be->memory()};
  ModelSpec spec;
  Builder b;
  Subject(const std::string& preset, BuildOptions o) : spec(make_preset(preset)), b(spec, make_recipe("hf"), std::move(o), *be, tracker) {}

  Tensors tensors() const {
    Tensors t;
    const Model m = b.build();
    m.for_each([&](const TensorView& v) {
      Held h{v.name, v.shape, v.dtype, "", std::vector<unsigned char>(v.bytes()), {}, {}};
      std::memcpy(h.bytes.data(), v.data, v.bytes());
      t.list.push_back(std::move(h));
    });
    return t;
  }

  VerifyReport verify(const Tensors& t, VerifyOptions opts = {}) const {
    auto r = reader(t);
    return verify_checkpoint(b, *r, opts);
  }

  static std::unique_ptr<CheckpointReader> reader(const Tensors& t, std::map<std::string, std::string> meta = {}) {
    std::vector<StoredTensor> stored;
    for (const Held& h : t.list) {
      StoredTensor s;
      s.name = h.name;
      s.shape = h.shape;
      if (h.dtype_text.empty()) s.dtype = h.dtype;
      // As a safetensors header spells them.
      s.dtype_text = !h.dtype_text.empty() ? h.dtype_text : h.dtype == DType::bf16 ? "BF16" : h.dtype == DType::f16 ? "F16" : "F32";
      s.global_shape = h.global_shape;
      s.offset = h.offset;
      stored.push_back(std::move(s));
    }
    return callback_reader("test", std::move(stored), std::move(meta), [&t](std::size_t k, std::uint64_t first, std::uint64_t n, void* out) {
      const Held& h = t.list[k];
      std::memcpy(out, h.bytes.data() + first * h.esize(), n * h.esize());
    });
  }
};

const TensorCheck& check(const VerifyReport& r, std::string_view name) {
  for (const TensorCheck& t : r.tensors)
    if (t.name == name) return t;
  ADD_FAILURE() << "no check of " << name;
  return r.tensors.front();
}

std::string kind(const VerifyReport& r, std::string_view name) {
  const TensorCheck& t = check(r, name);
  return t.diagnosis ? t.diagnosis->kind : "(no diagnosis)";
}

// Rows of a [rows, cols] tensor (any leading dimensions folded into rows) reordered: stored row i
// is row perm[i].
void permute_rows(Held& h, const std::vector<std::uint64_t>& perm) {
  const std::uint64_t row = h.shape.back() * h.esize();
  std::vector<unsigned char> out(h.bytes.size());
  for (std::uint64_t i = 0; i < perm.size(); ++i) std::memcpy(out.data() + i * row, h.bytes.data() + perm[i] * row, row);
  h.bytes = std::move(out);
}

// transformers' convert_llama_weights_to_hf permute: w.view(heads, rows / heads / 2, 2, cols)
// .transpose(1, 2).reshape(rows, cols). Stored row (h, i2, j) is row (h, j, i2).
std::vector<std::uint64_t> hf_permute(std::uint64_t rows, std::uint64_t heads) {
  const std::uint64_t d = rows / heads, half = d / 2;
  std::vector<std::uint64_t> p(rows);
  for (std::uint64_t h = 0; h < heads; ++h)
    for (std::uint64_t i2 = 0; i2 < 2; ++i2)
      for (std::uint64_t j = 0; j < half; ++j) p[h * d + i2 * half + j] = h * d + j * 2 + i2;
  return p;
}
std::vector<std::uint64_t> inverse(const std::vector<std::uint64_t>& p) {
  std::vector<std::uint64_t> q(p.size());
  for (std::uint64_t i = 0; i < p.size(); ++i) q[p[i]] = i;
  return q;
}

constexpr const char* kQ = "model.layers.1.self_attn.q_proj.weight";  // [64, 64]: 4 heads of 16
constexpr const char* kK = "model.layers.1.self_attn.k_proj.weight";  // [32, 64]: 2 heads
constexpr const char* kV = "model.layers.1.self_attn.v_proj.weight";

}  // namespace

TEST(Verify, ItsOwnTensorsAreEqual) {
  Subject s("llama-tiny", options());
  const Tensors t = s.tensors();
  const VerifyReport r = s.verify(t);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.equal, t.list.size());
  EXPECT_EQ(r.differs + r.missing + r.unexpected, 0u);
  std::uint64_t bytes = 0;
  for (const Held& h : t.list) bytes += h.bytes.size();
  EXPECT_EQ(r.bytes_read, bytes);
  for (const TensorCheck& c : r.tensors) {
    EXPECT_EQ(c.elements, numel(c.expected_shape)) << c.name;
    EXPECT_FALSE(c.diagnosis) << c.name;
  }
  // Chunks smaller than a row, of an odd element count, change nothing.
  VerifyOptions small;
  small.chunk_bytes = 102;
  EXPECT_TRUE(s.verify(t, small).ok());
}

TEST(Verify, AFlippedBitIsFoundWithItsIndexAndValues) {
  Subject s("llama-tiny", options());
  Tensors t = s.tensors();
  Held& q = t.at(kQ);
  const std::uint64_t i = 1234;  // [19, 18]
  const std::uint16_t was = static_cast<std::uint16_t>(q.bytes[2 * i] | q.bytes[2 * i + 1] << 8);
  q.bytes[2 * i] ^= 0x01;
  for (const std::uint64_t chunk : {std::uint64_t{64} << 20, std::uint64_t{102}}) {
    VerifyOptions o;
    o.chunk_bytes = chunk;
    const VerifyReport r = s.verify(t, o);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.differs, 1u);
    const TensorCheck& c = check(r, kQ);
    EXPECT_EQ(c.status, CheckStatus::differs);
    EXPECT_EQ(c.differing, 1u);
    EXPECT_EQ(c.elements, 4096u);
    ASSERT_TRUE(c.first_difference);
    EXPECT_EQ(c.first_difference->index, i);
    EXPECT_EQ(c.first_difference->coords, (Shape{19, 18}));
    EXPECT_EQ(c.first_difference->expected_bits, was);
    EXPECT_EQ(c.first_difference->stored_bits, was ^ 1u);
    EXPECT_EQ(c.first_difference->expected, bf16_bits_to_float(was));
    EXPECT_EQ(c.first_difference->stored, bf16_bits_to_float(was ^ 1));
    ASSERT_TRUE(c.diagnosis);
    EXPECT_EQ(c.diagnosis->kind, "none");
  }
}

TEST(Verify, MissingAndUnexpectedTensors) {
  Subject s("llama-tiny", options());
  Tensors t = s.tensors();
  t.erase("lm_head.weight");  // a tied head dropped by a converter
  Held extra{"model.rotary.inv_freq", {8}, DType::f32, "", std::vector<unsigned char>(32, 0x3f), {}, {}};
  t.list.push_back(extra);
  const VerifyReport r = s.verify(t);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.missing, 1u);
  EXPECT_EQ(r.unexpected, 1u);
  EXPECT_EQ(check(r, "lm_head.weight").status, CheckStatus::missing);
  EXPECT_EQ(check(r, "model.rotary.inv_freq").status, CheckStatus::unexpected);
  EXPECT_EQ(r.tensors.back().name, "model.rotary.inv_freq");  // the unexpected come last
  EXPECT_FALSE(check(r, "lm_head.weight").diagnosis);
  // A constant is said to be one, not a copy of the first norm of its size.
  EXPECT_EQ(kind(r, "model.rotary.inv_freq"), "constant");
}

// A diagnosis that cannot get its memory is skipped, saying so; the verdict stands (a 2^32-element
// tensor under a 4 GB limit, or a huge unexpected one, ended in out-of-memory with no report).
TEST(Verify, ADiagnosisThatCannotGetItsMemoryIsSkippedSayingSo) {
  Subject s("llama-tiny", options());
  Tensors t = s.tensors();
  t.at(kQ).bytes[10] ^= 1;  // [64, 64] bf16: 8 KiB stored, 8 KiB expected
  Held extra{"model.extra", {4096}, DType::f32, "", std::vector<unsigned char>(16384, 0x3f), {}, {}};
  t.list.push_back(extra);
  VerifyOptions tight;
  tight.diagnosis_memory = 40000;  // under 3 x 16 KiB for either
  const VerifyReport r = s.verify(t, tight);
  EXPECT_EQ(check(r, kQ).status, CheckStatus::differs);
  EXPECT_EQ(check(r, kQ).differing, 1u);
  ASSERT_TRUE(check(r, kQ).diagnosis);
  EXPECT_EQ(check(r, kQ).diagnosis->text, "not diagnosed: its diagnosis needs about 48.00 KiB (49152 bytes) of memory, "
                                          "39.06 KiB (40000 bytes) available");
  EXPECT_EQ(check(r, "model.extra").status, CheckStatus::unexpected);
  EXPECT_EQ(check(r, "model.extra").diagnosis->kind, "none");
  EXPECT_EQ(check(r, "model.extra").diagnosis->text.rfind("not diagnosed: its diagnosis needs about 48.00 KiB", 0), 0u);
  // With the memory, both are diagnosed.
  tight.diagnosis_memory = 49152;
  const VerifyReport d = s.verify(t, tight);
  EXPECT_EQ(check(d, kQ).diagnosis->text, "no known transformation gives the stored values");  // one flipped bit
  EXPECT_EQ(kind(d, "model.extra"), "constant");
}

TEST(Verify, Transposed) {
  Subject s("llama-tiny", options());
  Tensors t = s.tensors();
  for (const char* name : {kQ, kK}) {  // square [64, 64] and [32, 64] stored [64, 32]
    Held& h = t.at(name);
    const std::uint64_t rows = h.shape[0], cols = h.shape[1];
    std::vector<unsigned char> out(h.bytes.size());
    for (std::uint64_t i = 0; i < rows; ++i)
      for (std::uint64_t j = 0; j < cols; ++j) std::memcpy(&out[(j * rows + i) * 2], &h.bytes[(i * cols + j) * 2], 2);
    h.bytes = out;
    h.shape = {cols, rows};
  }
  const VerifyReport r = s.verify(t);
  EXPECT_EQ(kind(r, kQ), "transposed");
  EXPECT_EQ(kind(r, kK), "transposed");
  EXPECT_EQ(check(r, kK).stored_shape, (Shape{64, 32}));
  EXPECT_EQ(check(r, kK).diagnosis->text, "the expected values transposed: stored [64, 32] where [32, 64] was expected");
}

TEST(Verify, RopePermutationsPerHead) {
  Subject s("llama-tiny", options());
  Tensors t = s.tensors();
  permute_rows(t.at(kQ), hf_permute(64, 4));           // Meta -> HF applied to HF weights
  permute_rows(t.at(kK), inverse(hf_permute(32, 2)));  // HF -> Meta's interleave
  permute_rows(t.at(kV), {31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3,
                          2, 1, 0});
  const VerifyReport r = s.verify(t);
  const TensorCheck& q = check(r, kQ);
  ASSERT_TRUE(q.diagnosis);
  EXPECT_EQ(q.diagnosis->kind, "rope_permute");
  EXPECT_EQ(q.diagnosis->heads, 4u);
  EXPECT_EQ(q.diagnosis->text, "rows permuted per head as Meta-to-Hugging-Face conversion does (transformers' permute, torchtitan's "
                               "to_hf), 4 heads of 16 rows");
  EXPECT_EQ(kind(r, kK), "rope_unpermute");
  EXPECT_EQ(check(r, kK).diagnosis->heads, 2u);
  EXPECT_EQ(kind(r, kV), "rows_permuted");
  EXPECT_EQ(check(r, kV).diagnosis->text, "the expected rows in another order, by no known rule (stored row 0 is expected row 31)");
}

TEST(Verify, FusedAndStackedTensorsAreFoundAsSlices) {
  Subject s("llama-tiny", options());
  Tensors t = s.tensors();
  // qkv fused along dimension 0: [64 + 32 + 32, 64].
  Held qkv{"model.layers.1.self_attn.qkv_proj.weight", {128, 64}, DType::bf16, "", {}, {}, {}};
  for (const char* name : {kQ, kK, kV}) {
    const auto& b = t.at(name).bytes;
    qkv.bytes.insert(qkv.bytes.end(), b.begin(), b.end());
    t.erase(name);
  }
  t.list.push_back(qkv);
  // up_proj of every layer stacked [4, 176, 64].
  Held up{"model.layers.mlp.up_proj.weight", {4, 176, 64}, DType::bf16, "", {}, {}, {}};
  for (int l = 0; l < 4; ++l) {
    const std::string name = "model.layers." + std::to_string(l) + ".mlp.up_proj.weight";
    const auto& b = t.at(name).bytes;
    up.bytes.insert(up.bytes.end(), b.begin(), b.end());
    t.erase(name);
  }
  t.list.push_back(up);
  const VerifyReport r = s.verify(t);
  EXPECT_EQ(r.missing, 7u);
  EXPECT_EQ(r.unexpected, 2u);
  const TensorCheck& k = check(r, kK);
  EXPECT_EQ(k.status, CheckStatus::missing);
  ASSERT_TRUE(k.diagnosis);
  EXPECT_EQ(k.diagnosis->kind, "slice");
  EXPECT_EQ(k.diagnosis->tensor, "model.layers.1.self_attn.qkv_proj.weight");
  EXPECT_EQ(k.diagnosis->offset, 64u * 64);
  EXPECT_EQ(k.diagnosis->text, "found in model.layers.1.self_attn.qkv_proj.weight at [64:96] (fused or stacked into it)");
  EXPECT_EQ(check(r, kQ).diagnosis->offset, 0u);
  EXPECT_EQ(check(r, kV).diagnosis->offset, 96u * 64);
  const TensorCheck& up2 = check(r, "model.layers.2.mlp.up_proj.weight");
  ASSERT_TRUE(up2.diagnosis);
  EXPECT_EQ(up2.diagnosis->kind, "slice");
  EXPECT_EQ(up2.diagnosis->index, (Shape{2}));
  EXPECT_EQ(up2.diagnosis->offset, 2u * 176 * 64);
  EXPECT_EQ(up2.diagnosis->text, "found in model.layers.mlp.up_proj.weight at [2] (fused or stacked into it)");
  const TensorCheck& fused = check(r, "model.layers.1.self_attn.qkv_proj.weight");
  ASSERT_TRUE(fused.diagnosis);
  EXPECT_EQ(fused.diagnosis->kind, "slice");
  EXPECT_EQ(fused.diagnosis->text,
            "holds missing tensors: model.layers.1.self_attn.q_proj.weight at [0:64]; model.layers.1.self_attn.k_proj.weight at "
            "[64:96]; model.layers.1.self_attn.v_proj.weight at [96:128]");
}

TEST(Verify, RenamedSwappedAndTiedTensors) {
  Subject s("llama-tiny", options());
  Tensors t = s.tensors();
  t.at("model.layers.0.mlp.down_proj.weight").name = "model.layers.0.mlp.w2.weight";  // renamed
  std::swap(t.at(kQ).bytes, t.at("model.layers.1.self_attn.o_proj.weight").bytes);      // swapped
  t.at("lm_head.weight").bytes = t.at("model.embed_tokens.weight").bytes;               // tied
  const VerifyReport r = s.verify(t);
  EXPECT_EQ(kind(r, "model.layers.0.mlp.down_proj.weight"), "renamed");
  EXPECT_EQ(check(r, "model.layers.0.mlp.down_proj.weight").diagnosis->tensor, "model.layers.0.mlp.w2.weight");
  EXPECT_EQ(kind(r, "model.layers.0.mlp.w2.weight"), "renamed");
  EXPECT_EQ(kind(r, kQ), "other_tensor");
  EXPECT_EQ(check(r, kQ).diagnosis->tensor, "model.layers.1.self_attn.o_proj.weight");
  EXPECT_EQ(check(r, "lm_head.weight").diagnosis->tensor, "model.embed_tokens.weight");
  EXPECT_EQ(check(r, "lm_head.weight").diagnosis->text,
            "holds the values of model.embed_tokens.weight (swapped with it, or tied to it)");
}

TEST(Verify, OtherDtypes) {
  Subject bf16("llama-tiny", options(DType::bf16));
  Subject fp32("llama-tiny", options(DType::f32));
  const Tensors b = bf16.tensors(), f = fp32.tensors();
  {
    // The bf16 values widened to fp32 exactly.
    Tensors t = b;
    Held& q = t.at(kQ);
    std::vector<unsigned char> wide(q.bytes.size() * 2);
    for (std::size_t i = 0; i < q.bytes.size() / 2; ++i) {
      const float v = bf16_bits_to_float(static_cast<std::uint16_t>(q.bytes[2 * i] | q.bytes[2 * i + 1] << 8));
      std::memcpy(&wide[4 * i], &v, 4);
    }
    q.bytes = wide;
    q.dtype = DType::f32;
    const VerifyReport r = bf16.verify(t);
    EXPECT_EQ(kind(r, kQ), "converted");
    EXPECT_EQ(check(r, kQ).diagnosis->text, "the expected bf16 values exactly, stored as fp32");
    EXPECT_EQ(check(r, kQ).stored_dtype, "fp32");
  }
  // The fp32 init rounded to bf16: against an fp32 expectation "rounded", against bf16 "other_dtype"
  // (made in fp32, then cast) unless the bf16 init is that rounding itself.
  Tensors t = f;
  Held& q = t.at(kQ);
  std::vector<unsigned char> narrow(q.bytes.size() / 2);
  for (std::size_t i = 0; i < narrow.size() / 2; ++i) {
    float v;
    std::memcpy(&v, &q.bytes[4 * i], 4);
    const std::uint16_t h = float_to_bf16_bits(v);
    std::memcpy(&narrow[2 * i], &h, 2);
  }
  q.bytes = narrow;
  q.dtype = DType::bf16;
  const VerifyReport against_fp32 = fp32.verify(t);
  EXPECT_EQ(kind(against_fp32, kQ), "rounded");
  EXPECT_EQ(check(against_fp32, kQ).diagnosis->text, "the expected fp32 values rounded to bf16");
  Tensors only_q = b;
  ASSERT_NE(only_q.at(kQ).bytes, narrow) << "the bf16 init is the fp32 init rounded";
  only_q.at(kQ).bytes = narrow;
  const VerifyReport against_bf16 = bf16.verify(only_q);
  EXPECT_EQ(kind(against_bf16, kQ), "other_dtype");
  EXPECT_EQ(check(against_bf16, kQ).diagnosis->dtype, DType::f32);
  EXPECT_EQ(check(against_bf16, kQ).diagnosis->text, "the init made in fp32, then cast to bf16");
  // The whole fp32 tensor where bf16 was expected: the init made in the stored dtype.
  Tensors made_fp32 = b, from = f;
  made_fp32.at(kQ) = from.at(kQ);
  const VerifyReport r = bf16.verify(made_fp32);
  EXPECT_EQ(kind(r, kQ), "other_dtype");
  EXPECT_EQ(check(r, kQ).diagnosis->text, "the init made in fp32 (the stored dtype), not bf16");
}

TEST(Verify, AnotherSeed) {
  Subject seed0("llama-tiny", options(DType::bf16, 0));
  Subject seed7("llama-tiny", options(DType::bf16, 7));
  Subject seed5000("llama-tiny", options(DType::bf16, 5000));
  const VerifyReport r = seed0.verify(seed7.tensors());
  EXPECT_EQ(r.differs, r.tensors.size() - 0u - r.equal);
  for (const TensorCheck& c : r.tensors) {
    if (c.status == CheckStatus::equal) continue;  // constant fills (norms) do not depend on the seed
    ASSERT_TRUE(c.diagnosis) << c.name;
    EXPECT_EQ(c.diagnosis->kind, "other_seed") << c.name;
    EXPECT_EQ(c.diagnosis->seed, 7u) << c.name;
  }
  EXPECT_EQ(check(r, kQ).diagnosis->text, "the init of seed 7, not 0");
  // Past the seeds tried by default, a guess finds it.
  const Tensors t = seed5000.tensors();
  EXPECT_EQ(kind(seed0.verify(t), kQ), "none");
  VerifyOptions guess;
  guess.seeds = {5000};
  EXPECT_EQ(check(seed0.verify(t, guess), kQ).diagnosis->seed, 5000u);
  // So does the seed the checkpoint's metadata names.
  const auto claimed = Subject::reader(t, {{"seed", "5000"}});
  EXPECT_EQ(check(verify_checkpoint(seed0.b, *claimed), kQ).diagnosis->seed, 5000u);
}

TEST(Verify, ZerosConstantsAndNoise) {
  Subject s("llama-tiny", options());
  Tensors t = s.tensors();
  std::fill(t.at(kQ).bytes.begin(), t.at(kQ).bytes.end(), 0);
  Held& k = t.at(kK);
  for (std::size_t i = 0; i < k.bytes.size(); i += 2) k.bytes[i] = 0x80, k.bytes[i + 1] = 0x3f;  // bf16 1.0
  std::mt19937 rng(3);
  for (auto& byte : t.at(kV).bytes) byte = static_cast<unsigned char>(rng());
  const VerifyReport r = s.verify(t);
  EXPECT_EQ(kind(r, kQ), "zeros");
  EXPECT_EQ(kind(r, kK), "constant");
  EXPECT_EQ(check(r, kK).diagnosis->text, "every element is 1");
  EXPECT_EQ(kind(r, kV), "none");
  EXPECT_EQ(check(r, kV).diagnosis->text, "no known transformation gives the stored values");
  // Without diagnosis: the differences only.
  VerifyOptions quick;
  quick.diagnose = false;
  EXPECT_FALSE(check(s.verify(t, quick), kQ).diagnosis);
}

TEST(Verify, StackedLayout) {
  Subject s("mixtral-tiny", options(DType::bf16, 0, Layout::stacked));
  Tensors t = s.tensors();
  EXPECT_TRUE(s.verify(t).ok());
  // [L, E, out, in]: one element of layer 1, expert 2.
  Held* experts = nullptr;
  for (Held& h : t.list)
    if (h.shape.size() == 4) experts = &h;
  ASSERT_TRUE(experts);
  const Shape& sh = experts->shape;
  const Shape at{1, 2, 5, 7};
  const std::uint64_t i = ((at[0] * sh[1] + at[1]) * sh[2] + at[2]) * sh[3] + at[3];
  experts->bytes[2 * i + 1] ^= 0x40;
  const VerifyReport r = s.verify(t);
  const TensorCheck& c = check(r, experts->name);
  EXPECT_EQ(c.status, CheckStatus::differs);
  EXPECT_EQ(c.differing, 1u);
  EXPECT_EQ(c.first_difference->coords, at);
}

TEST(Verify, RankPiecesMustCoverTheTensor) {
  Subject s("llama-tiny", options());
  Tensors whole = s.tensors();
  // q_proj as two row halves (tp 2 on dimension 0) and a replica of its first half.
  Tensors t;
  const Held q = whole.at(kQ);
  for (const std::uint64_t first : {0u, 32u, 0u}) {
    Held piece{kQ, {32, 64}, DType::bf16, "", {}, {64, 64}, {first, 0}};
    piece.bytes.assign(q.bytes.begin() + static_cast<std::ptrdiff_t>(first * 64 * 2),
                       q.bytes.begin() + static_cast<std::ptrdiff_t>((first + 32) * 64 * 2));
    t.list.push_back(piece);
  }
  VerifyReport r = s.verify(t);
  EXPECT_EQ(check(r, kQ).status, CheckStatus::equal);
  EXPECT_EQ(check(r, kQ).pieces, 3u);
  EXPECT_EQ(check(r, kQ).elements, 3u * 32 * 64);
  t.list[1].bytes[2 * 65] ^= 1;  // row 33, column 1 of the whole tensor
  r = s.verify(t);
  EXPECT_EQ(check(r, kQ).status, CheckStatus::differs);
  EXPECT_EQ(check(r, kQ).first_difference->coords, (Shape{33, 1}));
  EXPECT_EQ(check(r, kQ).first_difference->index, 33u * 64 + 1);
  t.list.erase(t.list.begin() + 1);  // the second half's rank is gone
  r = s.verify(t);
  EXPECT_EQ(check(r, kQ).status, CheckStatus::missing);
  EXPECT_EQ(check(r, kQ).uncovered, 32u * 64);
}

TEST(Verify, AnotherModelIsRefused) {
  Subject llama("llama-tiny", options());
  Subject gpt2("gpt2-tiny", options());
  const Tensors t = gpt2.tensors();
  auto r = Subject::reader(t, {{"model_spec", spec_to_json(gpt2.spec)}, {"layout", "per-layer"}, {"orientation", "out-in"}});
  try {
    check_same_model(llama.spec, llama.b, *r, "out/");
    FAIL() << "not refused";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.substr(0, what.find(" (")),
              "verify: checkpoint 'out/' is not of model 'llama-tiny'");
    EXPECT_NE(what.find("0 of 39 of its tensors are there with their sizes (model.embed_tokens.weight [512, 64] is not; the file "
                        "has e.g. transformer.wte.weight [512, 64]); its metadata names model 'gpt2-tiny', layout per-layer, "
                        "orientation out-in: give the model, layout and orientation it was made with"),
              std::string::npos)
        << what;
  }
  // Its own model passes, and so does one with a few tensors gone.
  Tensors own = llama.tensors();
  EXPECT_NO_THROW(check_same_model(llama.spec, llama.b, *Subject::reader(own), "out/"));
  own.erase(kQ);
  EXPECT_NO_THROW(check_same_model(llama.spec, llama.b, *Subject::reader(own), "out/"));
}

TEST(Verify, ClaimFromEmitMetadata) {
  auto spec = make_preset("mixtral-tiny");
  auto be = make_host_backend(1);
  tracking_resource tracker(be->memory());
  BuildOptions o = options(DType::f16, 18446744073709551615ull, Layout::stacked);
  o.experts = ExpertLayout::per_expert;
  o.dtype_overrides = {{"*norm*", DType::f32}};
  OptionsText text;
  text.recipe = "mup:base_width=32";
  text.init_overrides = {{"*.o_proj.weight", "normal(0, 0.01)"}};
  const Builder b(spec, checked_recipe(text, OptionNames::cli), o, *be, tracker);
  std::map<std::string, std::string> meta;
  for (const auto& [k, v] : detail::metadata_pairs(builder_metadata(b, {}))) meta[k] = v;
  const auto claim = claim_from_metadata(meta);
  ASSERT_TRUE(claim);
  EXPECT_EQ(spec_to_json(claim->spec), spec_to_json(spec));
  EXPECT_EQ(claim->options.dtype, "fp16");
  EXPECT_EQ(claim->options.seed, 18446744073709551615ull);
  EXPECT_EQ(claim->options.recipe, "mup:base_width=32");
  EXPECT_EQ(claim->options.layout, "stacked");
  EXPECT_EQ(claim->options.orientation, "out-in");
  EXPECT_EQ(claim->options.experts, "per-expert");
  EXPECT_EQ(claim->options.dtype_overrides, (std::vector<std::pair<std::string, std::string>>{{"*norm*", "fp32"}}));
  ASSERT_EQ(claim->options.init_overrides.size(), 1u);
  EXPECT_EQ(claim->options.init_overrides[0].first, "*.o_proj.weight");
  // The options read back make the same builder.
  const BuildOptions back = checked_build_options(claim->options, OptionNames::cli, claim->spec);
  EXPECT_EQ(back.dtype, o.dtype);
  EXPECT_EQ(back.seed, o.seed);
  EXPECT_EQ(back.experts, o.experts);
  EXPECT_EQ(checked_recipe(claim->options, OptionNames::cli).overrides_text(), b.recipe().overrides_text());
  // What verify compares with: the options given, else the claim's, else the defaults.
  GivenOptions given;
  given.seed = 3;
  given.dtype_overrides = std::vector<std::pair<std::string, std::string>>{};
  const OptionsText merged = claimed_options(claim, given);
  EXPECT_EQ(merged.seed, 3u);
  EXPECT_TRUE(merged.dtype_overrides.empty());
  EXPECT_EQ(merged.dtype, "fp16");
  EXPECT_EQ(merged.experts, "per-expert");
  EXPECT_EQ(merged.init_overrides, claim->options.init_overrides);
  const OptionsText defaults = claimed_options(std::nullopt, given);
  EXPECT_EQ(defaults.seed, 3u);
  EXPECT_EQ(defaults.dtype, std::nullopt);
  EXPECT_EQ(defaults.recipe, "hf");
  EXPECT_EQ(defaults.layout, "per-layer");
    // No model_spec: not layerinit's. A broken one is refused naming the key.
  EXPECT_FALSE(claim_from_metadata({{"format", "pt"}}));
  try {
    claim_from_metadata({{"model_spec", "{}"}, {"seed", "12x"}});
    FAIL();
  } catch (const checkpoint_invalid& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint metadata model_spec does not parse: "), std::string::npos) << e.what();
  }
  meta["seed"] = "-1";
  try {
    claim_from_metadata(meta);
    FAIL();
  } catch (const checkpoint_invalid& e) {
    EXPECT_STREQ(e.what(), "checkpoint metadata seed '-1' is not a number from 0 to 2^64 - 1");
  }
}

TEST(Verify, ReportJsonAndText) {
  Subject s("gpt2-tiny", options());
  Tensors t = s.tensors();
  t.list.front().bytes[0] ^= 1;
  t.erase("lm_head.weight");
  const VerifyReport r = s.verify(t);
  const auto j = nlohmann::json::parse(verify_report_json(r));
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["differs"], 1);
  EXPECT_EQ(j["equal"], r.equal);
  const auto& first = j["tensors"][0];
  EXPECT_EQ(first["name"], t.list.front().name);
  EXPECT_EQ(first["status"], "differs");
  EXPECT_EQ(first["first_difference"]["index"], 0);
  EXPECT_EQ(first["first_difference"]["coords"], nlohmann::json::array({0, 0}));
  EXPECT_EQ(first["diagnosis"]["kind"], "none");
  const std::string text = verify_report_text(r);
  EXPECT_NE(text.find("differs    transformer.wte.weight [512, 64] bf16: 1 of 32768 elements differ, first [0, 0]: "), std::string::npos)
      << text;
  EXPECT_TRUE(text.ends_with(std::to_string(r.tensors.size()) + " tensors: " + std::to_string(r.equal) +
                             " equal, 1 differs, " + std::to_string(r.missing) + " missing, 0 unexpected\n"))
      << text;
}

// Files as emit writes them, verified from their own metadata: the claim makes the builder.
TEST(Verify, EmittedFilesVerifyFromTheirMetadata) {
  layerinit::testing::TempDir dir;
  auto be = make_host_backend(2);
  struct Case {
    const char* preset;
    CheckpointFormat format;
    Layout layout;
    Orientation orientation;
    std::uint64_t max_shard = 0;
  };
  int n = 0;
  for (const Case& c : {Case{"llama-tiny", CheckpointFormat::safetensors, Layout::per_layer, Orientation::out_in, 100000},
                        Case{"llama-tiny", CheckpointFormat::hdf5, Layout::per_layer, Orientation::in_out},
                        Case{"mixtral-tiny", CheckpointFormat::hdf5, Layout::stacked, Orientation::out_in},
                        Case{"mixtral-tiny", CheckpointFormat::safetensors, Layout::stacked, Orientation::in_out}}) {
    SCOPED_TRACE(std::string(c.preset) + " " + std::string(format_name(c.format)) + " " + std::string(layout_name(c.layout)));
    const ModelSpec spec = make_preset(c.preset);
    BuildOptions o = options(DType::bf16, 99, c.layout);
    o.orientation = c.orientation;
    o.dtype_overrides = {{"*norm*", DType::f32}};
    OptionsText text;
    text.init_overrides = {{"*.o_proj.weight", "uniform(-0.5, 0.5)"}};
    const Builder b(spec, checked_recipe(text, OptionNames::cli), o, *be, be->memory());
    EmitOptions eo;
    eo.format = c.format;
    eo.writer.max_shard_size = c.max_shard;
    const std::filesystem::path target = dir.path() / ("m" + std::to_string(n++) + (c.format == CheckpointFormat::hdf5 ? ".h5" : ""));
    emit_checkpoint(b, *be, target, eo);

    const auto r = open_checkpoint_reader(target);
    const auto claim = claim_from_metadata(r->metadata());
    ASSERT_TRUE(claim);
    const Builder again(claim->spec, checked_recipe(claim->options, OptionNames::cli),
                        checked_build_options(claim->options, OptionNames::cli, claim->spec), *be, be->memory());
    check_same_model(again.spec(), again, *r, target.string());
    const VerifyReport report = verify_checkpoint(again, *r);
    EXPECT_TRUE(report.ok()) << verify_report_text(report);
    EXPECT_EQ(report.equal, checkpoint_datasets(b).size());
    // Without the dtype overrides the file declares, the norms are another dtype.
    OptionsText plain = claim->options;
    plain.dtype_overrides.clear();
    const Builder without(claim->spec, checked_recipe(plain, OptionNames::cli), checked_build_options(plain, OptionNames::cli, claim->spec),
                          *be, be->memory());
    const VerifyReport wrong = verify_checkpoint(without, *r);
    EXPECT_GT(wrong.differs, 0u);
    for (const TensorCheck& t : wrong.tensors)
      if (t.status != CheckStatus::equal) EXPECT_NE(t.name.find("norm"), std::string::npos) << t.name;
  }
}

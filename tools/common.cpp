#include "common.hpp"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <regex>
#include <sstream>

#include <layerinit/core/bytes.hpp>
#include <layerinit/core/errors.hpp>
#include <layerinit/init/spec_json.hpp>
#include <layerinit/plan/plan.hpp>

namespace layerinit::cli {

std::uint64_t parse_decimal(std::string_view text, std::string_view option, std::uint64_t min, std::uint64_t max) {
  auto refuse = [&](const char* why) {
    const std::string range = min == 1 ? "a positive integer (decimal, at most " + std::to_string(max) + ")"
                                       : "a decimal integer from " + std::to_string(min) + " to " + std::to_string(max);
    throw usage_error(std::string(option) + " must be " + range + ", got '" + std::string(text) + "'" + why);
  };
  if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos) refuse("");
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v, 10);
  if (ec == std::errc::result_out_of_range || v < min || v > max) refuse(": out of range");
  if (ec != std::errc() || end != text.data() + text.size()) refuse("");
  return v;
}

CLI::Option* add_decimal_option(CLI::App& app, const std::string& name, std::uint64_t& target, std::uint64_t min,
                                std::uint64_t max, const std::string& help) {
  // The option takes the text; parse_decimal's usage_error leaves app.parse() as exit code 2.
  return app
      .add_option_function<std::string>(
          name, [&target, name, min, max](const std::string& s) { target = parse_decimal(s, name, min, max); }, help)
      ->type_name("UINT")
      ->default_str(std::to_string(target));
}

CLI::Option* add_decimal_option(CLI::App& app, const std::string& name, int& target, int min, int max,
                                const std::string& help) {
  if (min < 0 || max < min) throw std::logic_error("add_decimal_option: bad range for " + name);
  return app
      .add_option_function<std::string>(
          name,
          [&target, name, min, max](const std::string& s) {
            target = static_cast<int>(parse_decimal(s, name, static_cast<std::uint64_t>(min), static_cast<std::uint64_t>(max)));
          },
          help)
      ->type_name("UINT")
      ->default_str(std::to_string(target));
}

void ModelArgs::add_model_flags(CLI::App& app) {
  auto* p = app.add_option("--preset", preset, "Named model (" + [] {
                             std::string s;
                             for (const auto& n : preset_names()) s += (s.empty() ? "" : ", ") + n;
                             return s;
                           }() + ")");
  auto* s = app.add_option("--spec", spec_file, "JSON model spec file (docs/spec.md)");
  p->excludes(s);
  s->excludes(p);
}

void ModelArgs::add_build_flags(CLI::App& app, const std::string& layouts) {
  app.add_option("--dtype", dtype, "Element type: fp32, fp16, bf16")->capture_default_str();
  app.add_option("--dtype-override", dtype_overrides,
                 "PATTERN=DTYPE: dtype of tensors whose canonical name matches the glob, e.g. '*norm*=fp32' (repeatable)");
  app.add_option("--recipe", recipe, "Init recipe, NAME or NAME:KEY=VALUE,... (" + [] {
                   std::string s;
                   for (const auto& n : recipe_names()) s += (s.empty() ? "" : ", ") + n;
                   return s;
                 }() + ")")->capture_default_str();
  app.add_option("--init-override", init_overrides,
                 "PATTERN=FILL: fill of matching tensors, e.g. '*.o_proj.weight=normal(0,0.01)'; fills: normal(m,s), "
                 "trunc_normal(m,s,a,b), trunc_normal_std(m,s,a,b), uniform(lo,hi), constant(v) (repeatable)");
  add_decimal_option(app, "--seed", seed, 0, std::numeric_limits<std::uint64_t>::max(),
                     "Seed: values are a pure function of (seed, tensor name, element index)");
  app.add_flag("--strict", strict, "An --init-override or --dtype-override that matches no tensor is an error");
  app.add_option("--layout", layout, "Memory layout: " + layouts)->capture_default_str();
  app.add_option("--orientation", orientation, "Linear weights as [out, in] (out-in, PyTorch/HF) or [in, out] (in-out, JAX/Flax)")
      ->capture_default_str();
  app.add_option("--experts", experts,
                 "Stacked layout: MoE experts as one [L, E, out, in] buffer per expert weight (stacked) or one [L, out, in] "
                 "buffer per expert (per-expert)")
      ->capture_default_str();
}

void ModelArgs::add_backend_flags(CLI::App& app) {
  app.add_option("--backend", backend, "auto (CUDA when a GPU is usable), cpu or cuda")->capture_default_str();
  // More threads than any host has cores would only cost stacks: 4096 bounds the request.
  add_decimal_option(app, "--threads", threads, 0, 4096, "Host threads (0 = all cores)");
  app.add_flag("--no-memory-check", no_memory_check,
               "Allocate even when the predicted peak exceeds the memory this process may use (cgroup limit, "
               "MemAvailable, free GPU memory)");
}

void ModelArgs::add_parallel_flags(CLI::App& app) {
  constexpr std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  add_decimal_option(app, "--tp", parallel.tp, 1, max, "Tensor-parallel degree (docs/sharding.md)");
  add_decimal_option(app, "--pp", parallel.pp, 1, max, "Pipeline-parallel stages");
  add_decimal_option(app, "--ep", parallel.ep, 1, max, "Expert-parallel degree");
  add_decimal_option(app, "--fsdp", parallel.fsdp, 1, max, "FSDP degree (Shard(0) of every tensor)");
  app.add_option_function<std::string>(
         "--rank", [this](const std::string& s) { rank = parse_decimal(s, "--rank", 0, max); },
         "This rank's pieces only (0 .. tp*pp*ep*fsdp - 1; tp fastest, pp slowest)")
      ->type_name("UINT");
}

bool ModelArgs::sharded() const { return rank || parallel != ParallelDegrees{}; }

ParallelPlan ModelArgs::parallel_plan(const ModelSpec& spec) const {
  try {
    return ParallelPlan::checked(spec, parallel, rank, "--");
  } catch (const std::invalid_argument& e) {
    throw usage_error(e.what());
  }
}

std::uint64_t record_bytes(const ModelSpec& spec, const std::string& layout, bool hdf5_datasets) {
  // Measured with GNU time's max RSS over 80,000 one-element layers: build's tensors and reports and
  // emit's lists, reports and safetensors writer take about 1.5 KiB per tensor, HDF5 19.5 KiB more
  // per dataset (open dataset handles, its metadata cache); a stacked tensor's report holds a hash
  // per layer slice. Rounded up to 2 KiB, 22 KiB and 128 bytes.
  const std::uint64_t L = spec.num_layers, T = spec.layer.tensors.size(), outer = spec.pre.size() + spec.post.size();
  const bool stacked = layout == "stacked";
  const std::uint64_t tensors = saturating_add(outer, stacked ? T : saturating_mul(L, T));
  const std::uint64_t slices = layout == "per-layer" ? 0 : saturating_mul(L, T);
  return saturating_add(saturating_mul(tensors, hdf5_datasets ? (2u + 22u) << 10 : 2u << 10), saturating_mul(slices, 128));
}

void check_memory(const ModelArgs& args, backend& be, const MemoryNeed& need) {
  if (args.no_memory_check) return;
  std::optional<AvailableMemory> device, host;
  if (const char* hook = std::getenv("LAYERINIT_TEST_AVAILABLE_MEMORY")) {
    std::uint64_t bytes = 0;
    try {
      bytes = parse_byte_size(hook);
    } catch (const std::invalid_argument& e) {
      throw usage_error(std::string("LAYERINIT_TEST_AVAILABLE_MEMORY: ") + e.what());
    }
    device = host = AvailableMemory{bytes, "LAYERINIT_TEST_AVAILABLE_MEMORY, a test hook"};
  } else {
    device = be.available_memory();
    host = be.memory().kind() == MemoryKind::host ? device : available_host_memory();
  }
  auto refuse = [](const std::string& where, std::uint64_t total, const std::string& parts, const AvailableMemory& a) {
    throw usage_error("not enough memory" + where + ": needs " + format_bytes(total) + " at its peak (" + parts + "), " +
                      format_bytes(a.bytes) + " available (" + a.source + "); --no-memory-check to go ahead anyway");
  };
  const std::string peak = need.peak_what + " " + format_bytes(need.peak);
  const std::string records = "tensor records " + format_bytes(need.records);
  if (be.memory().kind() == MemoryKind::host) {
    const std::uint64_t total = saturating_add(need.peak, need.records);
    if (host && total > host->bytes) refuse("", total, peak + " + " + records, *host);
  } else {
    if (device && need.peak > device->bytes) refuse(" on " + be.describe(), need.peak, peak, *device);
    if (host && need.records > host->bytes) refuse(" on the host", need.records, records, *host);
  }
}

ModelSpec ModelArgs::load_spec() const {
  if (preset.empty() && spec_file.empty()) throw usage_error("one of --preset or --spec is required");
  if (!preset.empty()) return make_preset(preset);
  std::ifstream in(spec_file, std::ios::binary);
  if (!in) throw usage_error("cannot read spec file '" + spec_file + "'");
  // At most one byte past the cap: /dev/zero or a huge file is refused without reading it whole.
  std::string text(kMaxSpecFileBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) throw usage_error("cannot read spec file '" + spec_file + "'");
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > kMaxSpecFileBytes) throw usage_error("spec file '" + spec_file + "' is larger than 16 MiB");
  return spec_from_json(text);
}

namespace {
std::pair<std::string, std::string> split_assignment(const std::string& s, const char* flag) {
  const auto eq = s.rfind('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == s.size())
    throw usage_error(std::string(flag) + " expects PATTERN=VALUE, got '" + s + "'");
  return {s.substr(0, eq), s.substr(eq + 1)};
}
}  // namespace

Recipe ModelArgs::load_recipe() const {
  Recipe r = make_recipe(recipe);
  for (const auto& o : init_overrides) {
    // The fill itself contains '=' never, but may contain ',' and '(': split at the first '=' after the pattern.
    const auto eq = o.find('=');
    if (eq == std::string::npos || eq == 0) throw usage_error("--init-override expects PATTERN=FILL, got '" + o + "'");
    FillSpec f;
    try {
      f = parse_fill(o.substr(eq + 1));
    } catch (const std::invalid_argument& e) {
      throw usage_error(e.what());
    }
    prepare_fill(f, DType::f32);  // validates now, with the fill's own message
    r.add_override(o.substr(0, eq), f);
  }
  return r;
}

BuildOptions ModelArgs::build_options() const {
  BuildOptions o;
  o.dtype = parse_dtype(dtype);
  for (const auto& s : dtype_overrides) {
    auto [pattern, value] = split_assignment(s, "--dtype-override");
    o.dtype_overrides.push_back({pattern, parse_dtype(value)});
  }
  o.seed = seed;
  o.layout = layout == "restack" ? Layout::per_layer : parse_layout(layout);
  o.orientation = parse_orientation(orientation);
  o.experts = parse_expert_layout(experts);
  return o;
}

namespace {
// Whether a glob matches a canonical name of the spec. Layer names are prefix + i + "." + relative;
// a pattern without digits or bracket sets cannot tell two indices of the same length apart (only
// '*' and '?' match a digit there), so it is tried on one index per length: 0, 10, 100, ... Other
// patterns go through the indices until one matches.
bool matches_some_tensor(const ModelSpec& spec, const std::string& pattern) {
  for (const auto* list : {&spec.pre, &spec.post})
    for (const auto& t : *list)
      if (name_matches(pattern, t.name)) return true;
  if (spec.layer.tensors.empty()) return false;
  auto layer_matches = [&](std::uint64_t i) {
    for (const auto& t : spec.layer.tensors)
      if (name_matches(pattern, spec.canonical_name(i, t))) return true;
    return false;
  };
  if (pattern.find_first_of("0123456789[") == std::string::npos) {
    // One block layer per length of its number first_layer + i: the first, then the first with one
    // more digit.
    for (std::uint64_t i = 0; i < spec.num_layers;) {
      if (layer_matches(i)) return true;
      const std::uint64_t a = spec.first_layer + i;
      if (a >= 10'000'000'000'000'000'000ULL) break;  // 20 digits: the last length
      std::uint64_t p = 10;
      while (p <= a) p *= 10;
      i = p - spec.first_layer;
    }
    return false;
  }
  for (std::uint64_t i = 0; i < spec.num_layers; ++i)
    if (layer_matches(i)) return true;
  return false;
}
}  // namespace

void ModelArgs::check_overrides(const ModelSpec& spec, const Recipe& recipe, const BuildOptions& opts, bool warn) const {
  auto check = [&](const char* flag, const std::string& pattern) {
    if (matches_some_tensor(spec, pattern)) return;
    const std::string what = std::string(flag) + " pattern '" + printable(pattern) + "' matches no tensor of " + printable(spec.name);
    if (strict) throw usage_error(what + " (--strict)");
    if (warn) std::fprintf(stderr, "layerinit: warning: %s\n", what.c_str());
  };
  for (const auto& [pattern, fill] : recipe.overrides()) check("--init-override", pattern);
  for (const auto& o : opts.dtype_overrides) check("--dtype-override", o.pattern);
}


namespace {
// Length of the valid UTF-8 sequence at s[i] (RFC 3629: shortest form, no surrogates, at most
// U+10FFFF), or 0.
std::size_t utf8_length(const std::string& s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the allowed range of the second byte
  if (c >= 0xc2 && c <= 0xdf) n = 2;
  else if (c >= 0xe0 && c <= 0xef) n = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
  else if (c >= 0xf0 && c <= 0xf4) n = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
  else return 0;
  if (i + n > s.size() || b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if ((b(i + k) & 0xc0) != 0x80) return 0;
  return n;
}
}  // namespace

std::string escape_non_utf8(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    if (const std::size_t n = utf8_length(s, i)) {
      out.append(s, i, n);
      i += n;
    } else {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(s[i++]));
      out += buf;
    }
  }
  return out;
}

nlohmann::ordered_json shape_json(const Shape& s) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (auto d : s) j.push_back(d);
  return j;
}

nlohmann::ordered_json tensors_json(const std::vector<TensorReport>& tensors) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& t : tensors) {
    nlohmann::ordered_json j{{"name", t.name}};
    if (t.global_shape.empty()) {
      j["shape"] = shape_json(t.shape);
    } else {
      j["global_shape"] = shape_json(t.global_shape);
      j["offset"] = shape_json(t.offset);
      j["local_shape"] = shape_json(t.shape);
    }
    j["dtype"] = dtype_name(t.dtype);
    j["bytes"] = t.bytes;
    if (t.hashed) j["xxh3_64"] = hex64(t.hash);  // else no one process saw all its bytes: layers only
    if (!t.layer_hashes.empty()) {
      nlohmann::ordered_json layers = nlohmann::ordered_json::array();
      for (auto h : t.layer_hashes) layers.push_back(hex64(h));
      j["layers"] = layers;
    }
    out.push_back(std::move(j));
  }
  return out;
}

void add_rank_json(nlohmann::ordered_json& out, const ParallelPlan& plan, std::uint64_t rank) {
  const ParallelDegrees& d = plan.degrees();
  const ParallelPlan::Coords c = plan.coords(rank);
  const Range layers = plan.stage_layers(c.pp);
  out["parallel"] = {{"pp", d.pp}, {"fsdp", d.fsdp}, {"ep", d.ep}, {"tp", d.tp}};
  out["ranks"] = plan.ranks();
  out["rank"] = rank;
  out["coords"] = {{"pp", c.pp}, {"fsdp", c.fsdp}, {"ep", c.ep}, {"tp", c.tp}};
  out["layers"] = {layers.offset, layers.size};
}

nlohmann::ordered_json report_header(const ModelSpec& spec, const BuildOptions& opts, const Recipe& recipe,
                                     const std::string& layout, const backend& be) {
  return nlohmann::ordered_json{{"model", spec.name},
                                {"dtype", dtype_name(opts.dtype)},
                                {"seed", opts.seed},
                                {"recipe", recipe.name()},
                                {"layout", layout},
                                {"orientation", orientation_name(opts.orientation)},
                                {"experts", expert_layout_name(opts.experts)},
                                {"backend", be.describe()}};
}

// The reason of a failed write is the errno it left: cleared here, so nothing older is reported.
void begin_stdout() { errno = 0; }

void check_stdout() {
  // A report larger than stdout's buffer fails while it is written (std::cout then stops writing);
  // a smaller one fails in this fflush. std::cout writes through stdout's buffer (sync_with_stdio).
  const int earlier = errno;
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int e = errno ? errno : earlier;
  if (!flushed || std::ferror(stdout) || !std::cout.flush())
    throw std::runtime_error(std::string("cannot write to standard output: ") + (e ? std::strerror(e) : "write error"));
}

std::string hex64(std::uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace layerinit::cli

#include <layerinit/kernels/fill.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <layerinit/core/errors.hpp>
#include <layerinit/kernels/fill_element.hpp>

namespace layerinit {

std::string_view fill_kind_name(FillKind k) {
  switch (k) {
    case FillKind::constant: return "constant";
    case FillKind::normal: return "normal";
    case FillKind::trunc_normal: return "trunc_normal";
    case FillKind::uniform: return "uniform";
  }
  return "?";
}

FillSpec FillSpec::constant(double v) {
  FillSpec s;
  s.kind = FillKind::constant;
  s.value = v;
  return s;
}
FillSpec FillSpec::normal(double mean, double std) {
  FillSpec s;
  s.kind = FillKind::normal;
  s.mean = mean;
  s.std = std;
  return s;
}
FillSpec FillSpec::trunc_normal(double mean, double std, double a, double b) {
  FillSpec s = normal(mean, std);
  s.kind = FillKind::trunc_normal;
  s.a = a;
  s.b = b;
  return s;
}
FillSpec FillSpec::trunc_normal_std(double mean, double std, double a_std, double b_std) {
  FillSpec s = trunc_normal(mean, std, a_std, b_std);
  s.bounds_in_std = true;
  return s;
}
FillSpec FillSpec::uniform(double lo, double hi) {
  FillSpec s;
  s.kind = FillKind::uniform;
  s.lo = lo;
  s.hi = hi;
  return s;
}

const std::vector<FillSyntax>& fill_syntax() {
  static const std::vector<FillSyntax> table = {
      {"constant", {{"value", std::nullopt}}},
      {"normal", {{"mean", 0.0}, {"std", std::nullopt}}},
      {"trunc_normal", {{"mean", 0.0}, {"std", std::nullopt}, {"a", -2.0}, {"b", 2.0}}},
      {"trunc_normal_std", {{"mean", 0.0}, {"std", std::nullopt}, {"a", -2.0}, {"b", 2.0}}},
      {"uniform", {{"lo", std::nullopt}, {"hi", std::nullopt}}},
  };
  return table;
}

std::string fill_names() {
  std::string out;
  for (const auto& k : fill_syntax()) out += (out.empty() ? "" : ", ") + std::string(k.name);
  return out;
}

FillSpec make_fill(std::string_view name, std::span<const double> a) {
  const auto& table = fill_syntax();
  const auto it = std::find_if(table.begin(), table.end(), [&](const FillSyntax& k) { return k.name == name; });
  if (it == table.end()) bad_argument("fill", name, "is unknown (valid: " + fill_names() + ")");
  if (a.size() != it->params.size())
    bad_argument("fill", name, "takes " + std::to_string(it->params.size()) + " numbers, got " + std::to_string(a.size()));
  if (name == "constant") return FillSpec::constant(a[0]);
  if (name == "normal") return FillSpec::normal(a[0], a[1]);
  if (name == "trunc_normal") return FillSpec::trunc_normal(a[0], a[1], a[2], a[3]);
  if (name == "trunc_normal_std") return FillSpec::trunc_normal_std(a[0], a[1], a[2], a[3]);
  return FillSpec::uniform(a[0], a[1]);
}

FillSpec parse_fill(std::string_view text) {
  const std::string t(text);
  const auto open = t.find('('), close = t.rfind(')');
  auto trim = [](std::string s) {
    s.erase(0, std::min(s.find_first_not_of(" \t"), s.size()));
    s.erase(std::min(s.find_last_not_of(" \t") + 1, s.size()));
    return s;
  };
  if (open == std::string::npos || close == std::string::npos || close < open || !trim(t.substr(close + 1)).empty() ||
      t.find_first_of("()", open + 1) != close)
    bad_argument("fill", t, "cannot be parsed (e.g. normal(0,0.02))");
  const std::string name = trim(t.substr(0, open));
  std::vector<double> args;
  std::stringstream ss(t.substr(open + 1, close - open - 1));
  for (std::string item; std::getline(ss, item, ',');) {
    // std::from_chars: the exact double, in any locale, subnormals included (std::stod throws for
    // them, so a fill's own text() did not read back).
    const std::string number = trim(item);
    const char* first = number.data();
    const char* const last = first + number.size();
    if (number.size() > 1 && number[0] == '+' && number[1] != '-') ++first;  // std::stod took a '+'
    double v = 0;
    const auto [ptr, ec] = std::from_chars(first, last, v);
    if (first == last || ec != std::errc{} || ptr != last || !std::isfinite(v))
      bad_argument("fill", t, ": " + quote(item) + " is not a finite number");
    args.push_back(v);
  }
  try {
    return make_fill(name, args);
  } catch (const std::invalid_argument& e) {
    bad_argument("fill", t, std::string(": ") + e.what());
  }
}

std::string FillSpec::describe() const {
  std::ostringstream o;
  o.precision(6);
  switch (kind) {
    case FillKind::constant: o << "constant(" << value << ")"; break;
    case FillKind::normal: o << "normal(" << mean << ", " << std << ")"; break;
    case FillKind::trunc_normal:
      o << "trunc_normal(" << mean << ", " << std << ", " << a << (bounds_in_std ? " std" : "") << ", " << b
        << (bounds_in_std ? " std" : "") << ")";
      break;
    case FillKind::uniform: o << "uniform(" << lo << ", " << hi << ")"; break;
  }
  return o.str();
}

std::string FillSpec::text() const {
  auto exact = [](double v) {
    char buf[32];  // std::to_chars's shortest round-trip form of a double fits in 24
    return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
  };
  switch (kind) {
    case FillKind::constant: return "constant(" + exact(value) + ")";
    case FillKind::normal: return "normal(" + exact(mean) + "," + exact(std) + ")";
    case FillKind::trunc_normal:
      return std::string(bounds_in_std ? "trunc_normal_std(" : "trunc_normal(") + exact(mean) + "," + exact(std) + "," +
             exact(a) + "," + exact(b) + ")";
    case FillKind::uniform: return "uniform(" + exact(lo) + "," + exact(hi) + ")";
  }
  LAYERINIT_FAIL("FillSpec::text: unknown fill kind " + std::to_string(static_cast<int>(kind)));
}

namespace {
void require(bool ok, const FillSpec& s, const std::string& what) {
  if (!ok) bad_argument("fill", s.describe(), "is invalid: " + what);
}
bool finite(double x) { return std::isfinite(x); }
// A random fill that can produce one value of the dtype only.
[[noreturn]] void one_value(const FillSpec& s, float v, DType t) {
  std::ostringstream o;
  o.precision(9);  // every float exactly
  o << v;
  bad_argument("fill", s.describe(),
               "is invalid: every value rounds to " + o.str() + " in " + std::string(dtype_name(t)) +
                   " (too narrow for the dtype; write constant(" + o.str() + ") for a constant)");
}
}  // namespace

namespace {

// The smallest x in [lo, hi] with up(x), for up false-then-true over [lo, hi]; nullopt if up(hi) is false.
template <class Pred>
std::optional<std::uint64_t> first_true(std::uint64_t lo, std::uint64_t hi, Pred up) {
  if (!up(hi)) return std::nullopt;
  while (lo < hi) {
    const std::uint64_t mid = lo + (hi - lo) / 2;
    if (up(mid)) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

// trunc_normal's positions: the span of positions whose value (before rounding) lies in [a', b'], by
// bisection over the fill's own arithmetic (value(P) is non-decreasing in P). So the fill samples the
// normal truncated to [a', b'] and rounds it: a bound gets the half of its rounding interval inside, no
// more. fp16/bf16 positions run over the 16-bit nodes [0, 65535 * 2^16]; fp32 positions are
// probabilities times 2^64 in [1, 2^64 - 1].
void place_trunc_span(FillParams& p, const FillSpec& s, DType t, float a_t, float b_t) {
  const FillTables tab = host_fill_tables();
  const bool half = t != DType::f32;
  const std::uint64_t first = half ? 0 : 1;
  const std::uint64_t last = half ? node16_last_position : UINT64_MAX;
  auto value = [&](std::uint64_t pos) {
    const float z = half ? node16_at(tab.node16, static_cast<std::uint32_t>(pos))
                         : quantile::normal_quantile64(tab.cubic, pos);
    return transforms::fmaf_(p.scale, z, p.shift);
  };
  const auto lo = first_true(first, last, [&](std::uint64_t pos) { return value(pos) >= a_t; });
  const auto above = first_true(first, last, [&](std::uint64_t pos) { return value(pos) > b_t; });
  const std::uint64_t hi = above ? *above - 1 : last;  // above == first: nothing <= b'
  const char* range = half ? "the 16-bit quantiles reach |z| <= 4.32 std in fp16 and bf16"
                           : "the 64-bit positions reach |z| <= 9.08 std in fp32";
  require(lo && (!above || *above > first) && *lo <= hi, s,
          std::string("the bounds lie beyond the normal's reach in ") + std::string(dtype_name(t)) + " (" + range + ")");
  p.p_lo = *lo;
  p.span = hi - *lo + 1;  // hi - lo < 2^64 - 1 for fp32 (first = 1), so no wrap
}

// Whether every value normal(mean, std) can produce in t lies in [a', b']: then trunc_normal is that
// normal, bit for bit (PyTorch's default bounds, +-2 absolute, around a std of 0.02).
bool bounds_hold_every_normal_value(const FillParams& p, DType t, float a_t, float b_t) {
  const FillTables tab = host_fill_tables();
  float extremes[2];
  if (t == DType::f32) {
    extremes[0] = transforms::fmaf_(p.scale, quantile::normal_quantile32(tab.cubic, 0), p.shift);
    extremes[1] = transforms::fmaf_(p.scale, quantile::normal_quantile32(tab.cubic, 0xffffffffu), p.shift);
  } else {
    extremes[0] = round_to_dtype(transforms::fmaf_(p.scale, node16(tab.node16, 0), p.shift), t);
    extremes[1] = round_to_dtype(transforms::fmaf_(p.scale, node16(tab.node16, 65535), p.shift), t);
  }
  return extremes[0] >= a_t && extremes[1] <= b_t;
}

}  // namespace

FillTables host_fill_tables() {
  static const std::vector<float> nodes = [] {
    const float* h = quantile::normal_node16_table;
    std::vector<float> t(node16_entries);
    t[0] = -h[0];
    std::copy(h, h + 32768, t.begin() + 1);
    t[32769] = h[32767];
    return t;
  }();
  static const std::vector<quantile::CubicRow> cubic = [] {
    std::vector<quantile::CubicRow> c(quantile::normal_cubic_table, quantile::normal_cubic_table + quantile::kCubicRows);
    c.push_back(quantile::normal_cubic_table[quantile::kCenterPointRow]);
    return c;
  }();
  return {nodes.data(), cubic.data()};
}

FillParams prepare_fill(const FillSpec& s, DType t) {
  FillParams p;
  p.kind = s.kind;
  switch (s.kind) {
    case FillKind::constant:
      require(finite(s.value), s, "value must be finite");
      p.shift = static_cast<float>(s.value);
      break;
    case FillKind::normal:
    case FillKind::trunc_normal:
      require(finite(s.mean) && finite(s.std), s, "mean and std must be finite");
      require(s.std > 0, s, "std must be positive");
      require(static_cast<float>(s.std) > 0, s, "std underflows float");
      p.scale = static_cast<float>(s.std);
      p.shift = static_cast<float>(s.mean);
      require(std::isfinite(p.scale) && std::isfinite(p.shift), s, "its constants overflow float");
      if (s.kind == FillKind::trunc_normal) {
        require(finite(s.a) && finite(s.b), s, "bounds must be finite");
        require(s.a < s.b, s, "lower bound must be below upper bound");
        const double a = s.bounds_in_std ? s.mean + s.a * s.std : s.a;
        const double b = s.bounds_in_std ? s.mean + s.b * s.std : s.b;
        require(std::isfinite(a) && std::isfinite(b), s, "its bounds overflow");
        const float a_t = dtype_ceil(static_cast<float>(a) < a ? std::nextafter(static_cast<float>(a), INFINITY)
                                                               : static_cast<float>(a), t);
        const float b_t = dtype_floor(static_cast<float>(b) > b ? std::nextafter(static_cast<float>(b), -INFINITY)
                                                                : static_cast<float>(b), t);
        require(a_t <= b_t, s, "no value of the dtype lies between the bounds");
        if (a_t == b_t) one_value(s, a_t, t);
        p.lo = a_t;
        p.hi = b_t;
        if (bounds_hold_every_normal_value(p, t, a_t, b_t)) {
          p.kind = FillKind::normal;
        } else {
          place_trunc_span(p, s, t, a_t, b_t);
        }
      }
      break;
    case FillKind::uniform:
      require(finite(s.lo) && finite(s.hi), s, "bounds must be finite");
      require(s.lo < s.hi, s, "lo must be below hi");
      p.scale = static_cast<float>(s.hi - s.lo);
      p.shift = static_cast<float>(s.lo);
      p.lo = p.shift;
      p.hi = static_cast<float>(s.hi);
      break;
    default:
      LAYERINIT_FAIL("prepare_fill: unknown fill kind " + std::to_string(static_cast<int>(s.kind)));
  }
  // Finite in double is not enough: the constants are floats, and every value must fit the dtype.
  require(std::isfinite(p.scale) && std::isfinite(p.shift) && std::isfinite(p.lo) && std::isfinite(p.hi), s,
          "its constants overflow float");
  // Every value is non-decreasing in its random input, so the extreme inputs give the extreme values.
  float lowest = INFINITY, highest = -INFINITY;
  const FillTables tab = host_fill_tables();
  for (std::uint32_t in : {0u, 0xffffffffu}) {
    const rng::Block blk{{in, in, in, in}};
    float r = 0;
    switch (t) {
      case DType::f32: r = block_element<DType::f32>(p, blk, 0, tab); break;
      case DType::f16: r = f16_bits_to_float(block_element<DType::f16>(p, blk, 0, tab)); break;
      case DType::bf16: r = bf16_bits_to_float(block_element<DType::bf16>(p, blk, 0, tab)); break;
    }
    require(std::isfinite(r), s, "values would overflow " + std::string(dtype_name(t)));
    lowest = std::min(lowest, r);
    highest = std::max(highest, r);
  }
  // A random fill whose extremes round to one value writes that value everywhere (a std too small
  // for the dtype, e.g. normal(0, 1e-10) in fp16 or normal(1, 1e-5) in bf16): refused, since
  // rounding is monotone too. A constant is meant to be one value.
  if (s.kind != FillKind::constant && lowest == highest) one_value(s, highest + 0.0f, t);  // -0 + 0 = +0
  return p;
}

FillJob make_fill_job(void* dst, DType t, std::uint64_t numel, std::uint64_t seed, std::string_view name,
                      const FillSpec& spec) {
  return make_fill_job(dst, t, numel, seed, name, prepare_fill(spec, t));
}

FillJob make_fill_job(void* dst, DType t, std::uint64_t numel, std::uint64_t seed, std::string_view name,
                      const FillParams& params) {
  FillJob j;
  j.dst = dst;
  j.key = rng::philox_key(seed, rng::tensor_key(name));
  j.begin = 0;
  j.end = numel;
  j.rows = 1;
  j.cols = numel;
  j.params = params;
  j.dtype = t;
  return j;
}

}  // namespace layerinit

namespace layerinit {

FillJob run_job(const FillJob& j, std::uint64_t r) {
  FillJob out = j;
  out.runs = 1;
  out.begin = j.begin + r * j.stride;
  out.end = j.end + r * j.stride;
  out.dst = static_cast<unsigned char*>(j.dst) + r * dst_pitch(j) * dtype_size(j.dtype);
  out.dst_stride = 0;
  return out;
}

void check_fill_job(const FillJob& j, std::string_view who) {
  // A job is the library's own work order (or a C++ caller's): a bad one is misuse, not input.
  const auto in = [&](const std::string& what) { return std::string(who) + ": " + what; };
  LAYERINIT_EXPECTS(j.end >= j.begin, in("job with end < begin"));
  if (j.runs == 0 || j.end == j.begin) return;
  LAYERINIT_EXPECTS(j.dtype == DType::f32 || j.dtype == DType::f16 || j.dtype == DType::bf16, in("job with an unknown dtype"));
  const std::uint64_t len = j.end - j.begin;
  // The last run's end, begin + (runs - 1) * stride + len, below 2^64.
  std::uint64_t last_end = j.end;
  if (j.runs > 1) {
    LAYERINIT_EXPECTS(j.stride >= len, in("job of " + std::to_string(j.runs) + " runs of " + std::to_string(len) +
                                          " elements with stride " + std::to_string(j.stride) +
                                          ": runs overlap (stride < run length)"));
    LAYERINIT_EXPECTS(j.stride <= (UINT64_MAX - j.end) / (j.runs - 1),
                      in("job of " + std::to_string(j.runs) + " runs with stride " + std::to_string(j.stride) +
                         " from element " + std::to_string(j.begin) + ": its last run ends past 2^64"));
    last_end = j.end + (j.runs - 1) * j.stride;
    LAYERINIT_EXPECTS(j.dst_stride == 0 || j.dst_stride >= len,
                      in("job of " + std::to_string(j.runs) + " runs of " + std::to_string(len) + " elements with dst_stride " +
                         std::to_string(j.dst_stride) + ": their places at dst overlap (dst_stride < run length)"));
    // (runs - 1) * pitch + len elements at dst, in bytes, below 2^64.
    const std::uint64_t max_elements = UINT64_MAX / dtype_size(j.dtype);
    LAYERINIT_EXPECTS(j.end - j.begin <= max_elements && dst_pitch(j) <= (max_elements - len) / (j.runs - 1),
                      in("job of " + std::to_string(j.runs) + " runs of " + std::to_string(len) +
                         " elements: more than 2^64 bytes"));
  }
  LAYERINIT_EXPECTS(j.dst != nullptr, in("job with a null dst"));
  LAYERINIT_EXPECTS(reinterpret_cast<std::uintptr_t>(j.dst) % dtype_size(j.dtype) == 0,
                    in("dst is not aligned to its element size"));
  LAYERINIT_EXPECTS(!j.transposed || (j.rows != 0 && j.cols != 0 && j.rows <= UINT64_MAX / j.cols && j.rows * j.cols >= last_end),
                    in("transposed job needs rows * cols >= end (without overflow)"));
}

}  // namespace layerinit

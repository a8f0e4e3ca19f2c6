#include <layerinit/kernels/fill.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include <layerinit/core/text.hpp>
#include <layerinit/kernels/philox.hpp>

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
  if (it == table.end()) throw std::invalid_argument("unknown fill '" + std::string(name) + "' (valid: " + fill_names() + ")");
  if (a.size() != it->params.size())
    throw std::invalid_argument(std::string(name) + " takes " + std::to_string(it->params.size()) + " numbers, got " +
                                std::to_string(a.size()));
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
    throw std::invalid_argument("cannot parse fill '" + printable(t) + "' (e.g. normal(0,0.02))");
  const std::string name = trim(t.substr(0, open));
  std::vector<double> args;
  std::stringstream ss(t.substr(open + 1, close - open - 1));
  for (std::string item; std::getline(ss, item, ',');) {
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || item.find_first_not_of(" \t", used) != std::string::npos || !std::isfinite(v))
      throw std::invalid_argument("fill '" + printable(t) + "': '" + printable(item) + "' is not a finite number");
    args.push_back(v);
  }
  try {
    return make_fill(name, args);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("fill '" + printable(t) + "': " + e.what());
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

namespace {
void require(bool ok, const FillSpec& s, const std::string& what) {
  if (!ok) throw std::invalid_argument("invalid fill " + s.describe() + ": " + what);
}
bool finite(double x) { return std::isfinite(x); }
// A random fill that can produce one value of the dtype only.
[[noreturn]] void one_value(const FillSpec& s, float v, DType t) {
  std::ostringstream o;
  o.precision(9);  // every float exactly
  o << v;
  throw std::invalid_argument("invalid fill " + s.describe() + ": every value rounds to " + o.str() + " in " +
                              std::string(dtype_name(t)) + " (too narrow for the dtype; write constant(" + o.str() +
                              ") for a constant)");
}
}  // namespace

FillParams prepare_fill(const FillSpec& s, DType t) {
  FillParams p;
  p.kind = s.kind;
  switch (s.kind) {
    case FillKind::constant:
      require(finite(s.value), s, "value must be finite");
      p.shift = static_cast<float>(s.value);
      break;
    case FillKind::normal:
      require(finite(s.mean) && finite(s.std), s, "mean and std must be finite");
      require(s.std > 0, s, "std must be positive");
      require(static_cast<float>(s.std * std::sqrt(2.0)) > 0, s, "std * sqrt(2) underflows float");
      p.scale = static_cast<float>(s.std * std::sqrt(2.0));
      p.shift = static_cast<float>(s.mean);
      break;
    case FillKind::trunc_normal: {
      require(finite(s.mean) && finite(s.std), s, "mean and std must be finite");
      require(s.std > 0, s, "std must be positive");
      require(static_cast<float>(s.std * std::sqrt(2.0)) > 0, s, "std * sqrt(2) underflows float");
      require(finite(s.a) && finite(s.b), s, "bounds must be finite");
      require(s.a < s.b, s, "lower bound must be below upper bound");
      const double a = s.bounds_in_std ? s.mean + s.a * s.std : s.a;
      const double b = s.bounds_in_std ? s.mean + s.b * s.std : s.b;
      const float a_t = dtype_ceil(static_cast<float>(a) < a ? std::nextafter(static_cast<float>(a), INFINITY)
                                                             : static_cast<float>(a), t);
      const float b_t = dtype_floor(static_cast<float>(b) > b ? std::nextafter(static_cast<float>(b), -INFINITY)
                                                              : static_cast<float>(b), t);
      require(a_t <= b_t, s, "no value of the dtype lies between the bounds");
      if (a_t == b_t) one_value(s, a_t, t);
      const double ea = std::erf((a_t - s.mean) / (s.std * std::sqrt(2.0)));
      const double eb = std::erf((b_t - s.mean) / (s.std * std::sqrt(2.0)));
      require(eb > ea, s, "bounds lie too far in one tail of the normal");
      p.scale = static_cast<float>(s.std * std::sqrt(2.0));
      p.shift = static_cast<float>(s.mean);
      p.half_width = static_cast<float>((eb - ea) / 2);
      p.center = static_cast<float>((eb + ea) / 2);
      p.lo = a_t;
      p.hi = b_t;
      break;
    }
    case FillKind::uniform:
      require(finite(s.lo) && finite(s.hi), s, "bounds must be finite");
      require(s.lo < s.hi, s, "lo must be below hi");
      p.scale = static_cast<float>(s.hi - s.lo);
      p.shift = static_cast<float>(s.lo);
      p.hi = static_cast<float>(s.hi);
      break;
    default:
      throw std::invalid_argument("unknown fill kind");
  }
  // Finite in double is not enough: the constants are floats, and every value must fit the dtype.
  require(std::isfinite(p.scale) && std::isfinite(p.shift) && std::isfinite(p.half_width) &&
              std::isfinite(p.center) && std::isfinite(p.lo) && std::isfinite(p.hi),
          s, "its constants overflow float");
  // element_value is monotone in the random word's unit_open / unit_01 value, so the extreme words
  // give the extreme values the fill can produce.
  float lowest = INFINITY, highest = -INFINITY;
  for (std::uint32_t bits : {0x7fffffffu, 0x80000000u, 0x00000000u, 0xffffffffu}) {
    const float v = element_value(p, bits);
    const float r = round_to_dtype(v, t);
    require(std::isfinite(r), s,
            "values would overflow " + std::string(dtype_name(t)) + " (reaching " + std::to_string(v) + ")");
    lowest = std::min(lowest, r);
    highest = std::max(highest, r);
  }
  // A random fill whose extremes round to one value writes that value everywhere (a std too small
  // for the dtype, e.g. normal(0, 1e-10) in fp16 or normal(1, 1e-5) in bf16): refused, since
  // rounding is monotone too. A constant is meant to be one value.
  if (s.kind != FillKind::constant && lowest == highest) one_value(s, lowest, t);
  return p;
}

FillJob make_fill_job(void* dst, DType t, std::uint64_t numel, std::uint64_t seed, std::string_view name,
                      const FillSpec& spec) {
  FillJob j;
  j.dst = dst;
  j.key = rng::philox_key(seed, rng::tensor_key(name));
  j.begin = 0;
  j.end = numel;
  j.rows = 1;
  j.cols = numel;
  j.params = prepare_fill(spec, t);
  j.dtype = t;
  return j;
}

}  // namespace layerinit

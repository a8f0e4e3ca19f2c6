// Statistical helpers for tests of fills: reference distributions, their exact CDF after rounding to a
// dtype, a Kolmogorov-Smirnov test that is correct for discrete samples, moments, Poisson tails and
// correlation. Header-only, for tests (tests/test_fill_stats.cpp; reusable by any other test).
//
// The rounded reference: an output X = round_to_nearest_t(Y) with Y continuous with CDF F takes the
// value v exactly when Y falls in v's rounding bin, between the midpoints to v's neighbours, so
// P(X <= v) = F(midpoint(v, next_up(v))) and P(X < v) = F(midpoint(next_down(v), v)). Ties have
// probability zero for a continuous F.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <span>
#include <stdexcept>
#include <vector>

#include <layerinit/dtypes/dtype.hpp>

namespace layerinit::stats {

// ---- continuous references ------------------------------------------------------------------------

inline double normal_cdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }
inline double normal_sf(double z) { return 0.5 * std::erfc(z / std::sqrt(2.0)); }  // 1 - normal_cdf(z)
inline double normal_pdf(double z) { return std::exp(-0.5 * z * z) / std::sqrt(2.0 * M_PI); }

using Cdf = std::function<double(double)>;

inline Cdf normal_dist(double mean, double std) {
  return [=](double x) { return normal_cdf((x - mean) / std); };
}

// The normal(mean, std) truncated to [a, b]. Upper-tail intervals use the survival function so that
// their probabilities keep their precision.
inline Cdf trunc_normal_dist(double mean, double std, double a, double b) {
  const double za = (a - mean) / std, zb = (b - mean) / std;
  if (za > 0) {
    const double sa = normal_sf(za), z = sa - normal_sf(zb);
    return [=](double x) {
      if (x <= a) return 0.0;
      if (x >= b) return 1.0;
      return std::clamp((sa - normal_sf((x - mean) / std)) / z, 0.0, 1.0);
    };
  }
  const double ca = normal_cdf(za), z = normal_cdf(zb) - ca;
  return [=](double x) {
    if (x <= a) return 0.0;
    if (x >= b) return 1.0;
    return std::clamp((normal_cdf((x - mean) / std) - ca) / z, 0.0, 1.0);
  };
}

inline Cdf uniform_dist(double lo, double hi) {
  return [=](double x) { return std::clamp((x - lo) / (hi - lo), 0.0, 1.0); };
}

struct Moments {
  double mean = 0;
  double var = 0;  // central second moment
  double m4 = 0;   // central fourth moment (0 where not computed)
  std::uint64_t n = 0;
};

inline Moments normal_moments(double mean, double std) { return {mean, std * std, 3 * std * std * std * std, 0}; }

inline Moments trunc_normal_moments(double mean, double std, double a, double b) {
  const double al = (a - mean) / std, be = (b - mean) / std;
  const double z = al > 0 ? normal_sf(al) - normal_sf(be) : normal_cdf(be) - normal_cdf(al);
  const double d = (normal_pdf(al) - normal_pdf(be)) / z;
  const double var = std * std * (1 + (al * normal_pdf(al) - be * normal_pdf(be)) / z - d * d);
  return {mean + std * d, var, 0, 0};
}

inline Moments uniform_moments(double lo, double hi) {
  const double w = hi - lo;
  return {(lo + hi) / 2, w * w / 12, w * w * w * w / 80, 0};
}

// ---- values of a dtype ----------------------------------------------------------------------------

inline float bits16_to_float(std::uint16_t b, DType t) {
  return t == DType::f16 ? f16_bits_to_float(b) : bf16_bits_to_float(b);
}
inline std::uint16_t float_to_bits16(float v, DType t) {
  return t == DType::f16 ? float_to_f16_bits(v) : float_to_bf16_bits(v);
}

// Element i of an array of dtype t, as float.
inline float load_value(const void* data, std::size_t i, DType t) {
  if (t == DType::f32) {
    float f;
    std::memcpy(&f, static_cast<const char*>(data) + 4 * i, 4);
    return f;
  }
  std::uint16_t b;
  std::memcpy(&b, static_cast<const char*>(data) + 2 * i, 2);
  return bits16_to_float(b, t);
}
inline std::vector<float> load_values(const void* data, std::size_t n, DType t) {
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = load_value(data, i, t);
  return out;
}

// The neighbours of a finite value v of dtype t. Past the largest finite value, the "next" value is
// where the next would be with the same spacing (the overflow threshold is their midpoint).
inline double next_up(float v, DType t) {
  if (t == DType::f32) {
    const float n = std::nextafter(v, INFINITY);
    return std::isinf(n) ? 2.0 * v - std::nextafter(v, -INFINITY) : n;
  }
  std::uint16_t b = float_to_bits16(v, t);
  if (v == 0) b = 1;
  else if (v > 0) b = static_cast<std::uint16_t>(b + 1);
  else b = static_cast<std::uint16_t>(b - 1);
  const float n = bits16_to_float(b, t);
  if (std::isinf(n)) return 2.0 * v - bits16_to_float(static_cast<std::uint16_t>(float_to_bits16(v, t) - 1), t);
  return n;
}
inline double next_down(float v, DType t) { return -next_up(-v, t); }

// P(X <= v) and P(X < v) for X = F rounded to nearest in t, v a finite value of t.
inline double rounded_cdf_at(const Cdf& F, float v, DType t) { return F(0.5 * (v + next_up(v, t))); }
inline double rounded_cdf_below(const Cdf& F, float v, DType t) { return F(0.5 * (next_down(v, t) + v)); }

// ---- samples --------------------------------------------------------------------------------------

// Distinct values of a sample in increasing order with their counts; +0 and -0 are one value.
struct Histogram {
  std::vector<float> values;
  std::vector<std::uint64_t> counts;
  std::uint64_t n = 0;          // finite samples
  std::uint64_t non_finite = 0;  // NaN and infinities (not in values)
  std::uint64_t count_of(float v) const {
    auto it = std::lower_bound(values.begin(), values.end(), v);
    return it != values.end() && *it == v ? counts[it - values.begin()] : 0;
  }
};

inline Histogram histogram(const void* data, std::size_t n, DType t) {
  Histogram h;
  if (t == DType::f32) {
    std::vector<float> v = load_values(data, n, t);
    std::vector<float> finite;  // NaNs would break the sort: set them aside first
    finite.reserve(n);
    for (float x : v)
      if (std::isfinite(x)) finite.push_back(x == 0 ? 0.0f : x);
      else ++h.non_finite;
    std::sort(finite.begin(), finite.end());
    for (std::size_t i = 0; i < finite.size();) {
      std::size_t j = i;
      while (j < finite.size() && finite[j] == finite[i]) ++j;
      h.values.push_back(finite[i]);
      h.counts.push_back(j - i);
      i = j;
    }
    h.n = finite.size();
    return h;
  }
  std::vector<std::uint64_t> c(65536, 0);
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint16_t b;
    std::memcpy(&b, p + 2 * i, 2);
    ++c[b];
  }
  c[0] += c[0x8000];
  c[0x8000] = 0;
  std::vector<std::pair<float, std::uint64_t>> vc;
  for (std::uint32_t b = 0; b < 65536; ++b) {
    if (!c[b]) continue;
    const float v = bits16_to_float(static_cast<std::uint16_t>(b), t);
    if (!std::isfinite(v)) {
      h.non_finite += c[b];
      continue;
    }
    vc.emplace_back(v, c[b]);
    h.n += c[b];
  }
  std::sort(vc.begin(), vc.end());
  for (auto& [v, k] : vc) {
    h.values.push_back(v);
    h.counts.push_back(k);
  }
  return h;
}

// Kolmogorov-Smirnov distance between the sample and the rounded reference: the supremum over x of
// |F_n(x) - G(x)|, with G the CDF of F rounded to t. Both are step functions that only jump at values
// of t, so the supremum is reached at a sampled value v, either at v (F_n(v) vs G(v)) or just below it
// (F_n(v-) vs G(v-)); between two sampled values F_n is flat and G monotone, so its ends are covered.
struct KsResult {
  double d = 0;     // the statistic
  float at = 0;     // where it is reached
  std::uint64_t n = 0;
};

inline KsResult ks_discrete(const Histogram& h, const Cdf& F, DType t) {
  KsResult r;
  r.n = h.n;
  std::uint64_t cum = 0;
  const double n = static_cast<double>(h.n);
  for (std::size_t k = 0; k < h.values.size(); ++k) {
    const float v = h.values[k];
    const double below = std::abs(cum / n - rounded_cdf_below(F, v, t));
    cum += h.counts[k];
    const double at = std::abs(cum / n - rounded_cdf_at(F, v, t));
    if (below > r.d) r.d = below, r.at = v;
    if (at > r.d) r.d = at, r.at = v;
  }
  return r;
}

// The asymptotic KS critical value for false-alarm rate alpha, sqrt(-ln(alpha / 2) / 2) / sqrt(n)
// (1.63/sqrt(n) for alpha = 0.01, 1.95/sqrt(n) for 0.001). For a discrete reference distribution the
// test is conservative: the true false-alarm rate is at most alpha.
inline double ks_threshold(std::uint64_t n, double alpha) {
  return std::sqrt(-std::log(alpha / 2) / 2) / std::sqrt(static_cast<double>(n));
}

inline Moments sample_moments(const Histogram& h) {
  Moments m;
  m.n = h.n;
  double s = 0;
  for (std::size_t k = 0; k < h.values.size(); ++k) s += static_cast<double>(h.values[k]) * h.counts[k];
  m.mean = s / h.n;
  double s2 = 0, s4 = 0;
  for (std::size_t k = 0; k < h.values.size(); ++k) {
    const double d = h.values[k] - m.mean, d2 = d * d;
    s2 += d2 * h.counts[k];
    s4 += d2 * d2 * h.counts[k];
  }
  m.var = s2 / h.n;
  m.m4 = s4 / h.n;
  return m;
}

// Exact mean, variance and fourth central moment of F rounded to a 16-bit dtype: a sum over every
// finite value of the dtype, with the probability of its rounding bin.
inline Moments rounded_moments(const Cdf& F, DType t) {
  if (t == DType::f32) throw std::invalid_argument("rounded_moments: 16-bit dtypes only");
  std::vector<std::pair<double, double>> vp;  // value, probability
  for (std::uint32_t b = 0; b < 65536; ++b) {
    if (b == 0x8000) continue;  // -0 is +0
    const float v = bits16_to_float(static_cast<std::uint16_t>(b), t);
    if (!std::isfinite(v)) continue;
    const double p = rounded_cdf_at(F, v, t) - rounded_cdf_below(F, v, t);
    if (p > 0) vp.emplace_back(v, p);
  }
  Moments m;
  for (auto [v, p] : vp) m.mean += v * p;
  for (auto [v, p] : vp) {
    const double d2 = (v - m.mean) * (v - m.mean);
    m.var += d2 * p;
    m.m4 += d2 * d2 * p;
  }
  return m;
}

// ---- counts ---------------------------------------------------------------------------------------

// P(K <= k) and P(K >= k) for K ~ Poisson(lambda), by summing terms in log space.
inline double poisson_cdf(std::uint64_t k, double lambda) {
  if (lambda <= 0) return 1.0;
  double s = 0;
  for (std::uint64_t i = 0; i <= k; ++i) s += std::exp(i * std::log(lambda) - lambda - std::lgamma(i + 1.0));
  return std::min(1.0, s);
}
inline double poisson_sf(std::uint64_t k, double lambda) {
  if (k == 0) return 1.0;
  if (lambda <= 0) return 0.0;
  if (static_cast<double>(k) < lambda) return std::max(0.0, 1.0 - poisson_cdf(k - 1, lambda));
  double s = 0;  // upper tail directly, so small tails keep their precision
  for (std::uint64_t i = k; i < k + 100000; ++i) {
    const double term = std::exp(i * std::log(lambda) - lambda - std::lgamma(i + 1.0));
    s += term;
    if (term < s * 1e-17) break;
  }
  return std::min(1.0, s);
}
// A count consistent with a Poisson(lambda) expectation: neither tail beyond alpha / 2.
inline bool poisson_consistent(std::uint64_t k, double lambda, double alpha) {
  return poisson_cdf(k, lambda) > alpha / 2 && poisson_sf(k, lambda) > alpha / 2;
}

// Pearson correlation of x[i] and y[i + lag] over the overlap.
inline double pearson(std::span<const float> x, std::span<const float> y, std::size_t lag = 0) {
  const std::size_t n = std::min(x.size(), y.size() - std::min(lag, y.size()));
  double mx = 0, my = 0;
  for (std::size_t i = 0; i < n; ++i) mx += x[i], my += y[i + lag];
  mx /= n;
  my /= n;
  double sxy = 0, sxx = 0, syy = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double a = x[i] - mx, b = y[i + lag] - my;
    sxy += a * b;
    sxx += a * a;
    syy += b * b;
  }
  return sxy / std::sqrt(sxx * syy);
}

}  // namespace layerinit::stats

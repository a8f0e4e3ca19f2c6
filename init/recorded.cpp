// Replaying a recorded init (init/recorded.hpp): each tensor as disjoint boxes, each box with the
// distribution its elements hold, updated write by write.
#include <layerinit/init/recorded.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>
#include <utility>

#include <layerinit/core/errors.hpp>
#include <layerinit/core/text.hpp>

#include "json_documents.hpp"
#include "json_read.hpp"

namespace layerinit {

namespace {

constexpr std::size_t kNone = static_cast<std::size_t>(-1);

// Row-major strides of a box's extents.
Shape box_strides(const Box& b) {
  Shape st(b.shape.size(), 1);
  for (std::size_t d = b.shape.size(); d-- > 1;) st[d - 1] = st[d] * b.shape[d];
  return st;
}

// Elements [start, start + count) of `outer` in its row-major order, as a box of the tensor, when they
// are one: whole slabs of one dimension, at one place of the dimensions before it.
std::optional<Box> run_box(const Box& outer, std::uint64_t start, std::uint64_t count) {
  const Shape st = box_strides(outer);
  for (std::size_t j = 0; j < st.size(); ++j) {
    if (count % st[j] != 0 || start % st[j] != 0) continue;
    const std::uint64_t first = (start / st[j]) % outer.shape[j], m = count / st[j];
    if (first + m > outer.shape[j]) continue;
    Box b = outer;
    for (std::size_t d = 0; d < j; ++d) {
      b.offset[d] = outer.offset[d] + (start / st[d]) % outer.shape[d];
      b.shape[d] = 1;
    }
    b.offset[j] = outer.offset[j] + first;
    b.shape[j] = m;
    return b;
  }
  return std::nullopt;
}

// A box inside `outer` as runs of outer's row-major order: (start, length) each, in order; nothing
// when it would be more than `limit` runs (a column of a tall matrix).
std::optional<std::vector<std::pair<std::uint64_t, std::uint64_t>>> runs_of(const Box& outer, const Box& inner,
                                                                            std::uint64_t limit) {
  const Shape st = box_strides(outer);
  const std::size_t n = inner.shape.size();
  std::size_t k = n;  // dimensions after k are whole in `inner`
  while (k > 0 && inner.shape[k - 1] == outer.shape[k - 1]) --k;
  if (k == 0) return std::vector<std::pair<std::uint64_t, std::uint64_t>>{{0, inner.numel()}};
  const std::size_t partial = k - 1;  // the last partial dimension: one run per index of the ones before it
  const std::uint64_t length = inner.shape[partial] * st[partial];
  std::uint64_t runs = 1;
  for (std::size_t d = 0; d < partial; ++d) runs *= inner.shape[d];
  if (runs > limit) return std::nullopt;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
  Shape idx(partial, 0);
  for (std::uint64_t r = 0; r < runs; ++r) {
    std::uint64_t start = (inner.offset[partial] - outer.offset[partial]) * st[partial];
    for (std::size_t d = 0; d < partial; ++d) start += (inner.offset[d] - outer.offset[d] + idx[d]) * st[d];
    out.push_back({start, length});
    next_index(idx, inner.shape);
  }
  return out;
}

std::string box_text(const Box& b) {
  std::string s;
  for (std::size_t d = 0; d < b.offset.size(); ++d)
    s += (d ? ", " : "") + std::to_string(b.offset[d]) + ":" + std::to_string(b.offset[d] + b.shape[d]);
  return "[" + s + "]";
}

enum class Kind : std::uint8_t {
  unwritten,
  constant,  // p0
  normal,    // mean p0, std p1
  uniform,   // [p0, p1)
  trunc,     // normal(p0, p1) cut to [p2, p3]
  erfinv,    // p3 + p2 * erfinv(u), u uniform in [p0, p1): torch's old trunc_normal_ before its clamp_
  copy,      // the values of parameter `src`
  data,      // values the code computed without randomness: element i of data `src` (its place in the frame)
  none,      // values no fill gives: `why`
};

bool random(Kind k) { return k == Kind::normal || k == Kind::uniform || k == Kind::trunc || k == Kind::erfinv; }
// Kinds whose elements are placed: each value belongs to one place of a frame.
bool placed_kind(Kind k) { return random(k) || k == Kind::copy || k == Kind::data; }

struct Dist {
  Kind kind = Kind::unwritten;
  double p[4] = {0, 0, 0, 0};
  std::string why;
  // Random values: the write that drew them (its index) and the box of its tensor they come from;
  // `frame` is where coordinates are known: the draw itself, or a copy that reshaped them (its write
  // index), with this box's place there (frame_box, and the shift from this box's coordinates to the
  // frame's). Within one frame a box narrows exactly; across frames the origin box stays whole.
  std::size_t origin = kNone, frame = kNone;
  Box origin_box, frame_box;
  std::vector<std::int64_t> shift;
  // copy: parameter `src` at write count `version`; frame_box and shift in src's coordinates.
  std::size_t src = kNone;
  std::uint64_t version = 0;
};

struct Piece {
  Box box;
  Dist d;
};

// The dist of a sub-box `sub` of a piece's box: its place in the frame narrows with it.
Dist narrowed(const Dist& d, const Box& sub) {
  Dist out = d;
  if (placed_kind(d.kind)) {
    out.frame_box = sub;
    for (std::size_t k = 0; k < sub.offset.size(); ++k)
      out.frame_box.offset[k] = static_cast<std::uint64_t>(static_cast<std::int64_t>(sub.offset[k]) + d.shift[k]);
    if (d.frame == d.origin) out.origin_box = out.frame_box;
  }
  return out;
}

// Places `d` (narrowed to the source box it was read from) at box `to` of another tensor, its frame
// kept when the coordinates map one to one (`same_rank`), else a new frame `frame` at `to`.
Dist placed(Dist d, const Box& to, bool same_rank, std::size_t frame) {
  if (!placed_kind(d.kind)) return d;
  if (!same_rank) {
    d.frame = frame;
    d.frame_box = to;
  }
  d.shift.assign(to.offset.size(), 0);
  for (std::size_t k = 0; k < to.offset.size(); ++k)
    d.shift[k] = static_cast<std::int64_t>(d.frame_box.offset[k]) - static_cast<std::int64_t>(to.offset[k]);
  return d;
}

Dist none(std::string why) {
  Dist d;
  d.kind = Kind::none;
  d.why = std::move(why);
  return d;
}

double erfinv(double y) {
  // Newton on std::erf from a rough start: only compares a clamp_'s bounds with the interval's ends.
  if (y <= -1) return -HUGE_VAL;
  if (y >= 1) return HUGE_VAL;
  double x = y * 0.886226925;  // sqrt(pi)/2: erf's slope at 0
  if (std::fabs(y) > 0.7) {
    const double t = std::sqrt(-std::log((1 - std::fabs(y)) / 2));
    x = std::copysign(t - (2.515517 + 0.802853 * t + 0.010328 * t * t) /
                              (1 + 1.432788 * t + 0.189269 * t * t + 0.001308 * t * t * t),
                      y) / std::sqrt(2.0);
  }
  for (int i = 0; i < 60; ++i) {
    const double step = (std::erf(x) - y) / (1.1283791670955126 * std::exp(-x * x));
    x -= step;
    if (std::fabs(step) <= 1e-15 * std::max(1.0, std::fabs(x))) break;
  }
  return x;
}

std::string op_text(const RecordedWrite& w) {
  return w.op + (w.where.empty() ? "" : " (" + w.where + ")");
}

// Why an op has no fill, where the reason is more than its name.
std::string no_fill(const RecordedWrite& w) {
  static const std::map<std::string, std::string, std::less<>> why = {
      {"orthogonal", "nn.init.orthogonal_: a QR decomposition of a random matrix, whose elements depend on each other"},
      {"sparse", "nn.init.sparse_: zeros at random places per column"},
      {"eye", "nn.init.eye_ / torch.eye: the identity"},
      {"dirac", "nn.init.dirac_: a Dirac delta per channel"},
      {"random", "random_: random integers"},
      {"bernoulli", "bernoulli_"},
      {"exponential", "exponential_"},
      {"cauchy", "cauchy_"},
      {"log_normal", "log_normal_"},
      {"geometric", "geometric_"},
  };
  const auto it = why.find(w.op);
  return (it != why.end() ? it->second : w.op + ": no fill gives its values") + (w.where.empty() ? "" : " (" + w.where + ")");
}

// A box's dist after an elementwise op; nothing when the op is not elementwise (the caller handles it).
Dist transformed(const Dist& in, const RecordedWrite& w) {
  Dist d = in;
  const std::string& op = w.op;
  if (d.kind == Kind::unwritten || d.kind == Kind::none) return d;
  if (d.kind == Kind::copy) return none(op_text(w) + " of values copied from another parameter");
  if (d.kind == Kind::data) return none(op_text(w) + " of values computed from data");
  double* p = d.p;
  // Times c, or divided by c (each as torch computes it): the interval of a negative c mirrored.
  auto scale = [&](double c, bool divide) {
    const auto by = [&](double x, double k) { return divide ? x / k : x * k; };
    const double m = std::fabs(c);
    switch (d.kind) {
      case Kind::constant: p[0] = by(p[0], c); break;
      case Kind::normal: p[0] = by(p[0], c); p[1] = by(p[1], m); break;
      case Kind::uniform: p[0] = by(p[0], c); p[1] = by(p[1], c); if (p[0] > p[1]) std::swap(p[0], p[1]); break;
      case Kind::trunc:
        p[0] = by(p[0], c);
        p[1] = by(p[1], m);
        p[2] = by(p[2], c);
        p[3] = by(p[3], c);
        if (p[2] > p[3]) std::swap(p[2], p[3]);
        break;
      case Kind::erfinv:
        p[2] = by(p[2], c);
        p[3] = by(p[3], c);
        if (p[2] < 0) {  // erfinv is odd: a negative scale is the mirrored interval
          p[2] = -p[2];
          std::swap(p[0], p[1]);
          p[0] = -p[0];
          p[1] = -p[1];
        }
        break;
      default: break;
    }
    if (c == 0 && !divide) {
      d = Dist{};
      d.kind = Kind::constant;
    }
  };
  auto shift = [&](double c) {
    switch (d.kind) {
      case Kind::constant: case Kind::normal: p[0] += c; break;
      case Kind::uniform: p[0] += c; p[1] += c; break;
      case Kind::trunc: p[0] += c; p[2] += c; p[3] += c; break;
      case Kind::erfinv: p[3] += c; break;
      default: break;
    }
  };
  if (op == "mul") {
    scale(w.args[0], false);
  } else if (op == "div") {
    if (w.args[0] == 0) return none(op_text(w) + " by 0");
    scale(w.args[0], true);
  } else if (op == "neg") {
    scale(-1, false);
  } else if (op == "add") {
    shift(w.args[0]);
  } else if (op == "erfinv") {
    if (d.kind != Kind::uniform || p[0] < -1 || p[1] > 1)
      return none(op_text(w) + " of values other than a uniform within [-1, 1]");
    d.kind = Kind::erfinv;
    p[2] = 1;
    p[3] = 0;
  } else if (op == "clamp") {
    const double lo = w.args[0], hi = w.args[1];
    switch (d.kind) {
      case Kind::constant: p[0] = std::min(std::max(p[0], lo), hi); break;
      case Kind::uniform:
        if (lo > p[0] || hi < p[1]) return none(op_text(w) + " inside a uniform's range piles values at its bounds");
        break;
      case Kind::trunc:
        if (lo > p[2] || hi < p[3]) return none(op_text(w) + " inside a truncated normal's bounds piles values at them");
        break;
      case Kind::normal:
        return none(op_text(w) + " of a normal piles values at its bounds (torch's trunc_normal_ draws again instead)");
      case Kind::erfinv: {
        // torch's old trunc_normal_: uniform_(2 Phi(a') - 1, 2 Phi(b') - 1), erfinv_, mul_(std sqrt 2),
        // add_(mean), clamp_(a, b): the normal(mean, std) cut to [a, b], when the clamp's bounds are
        // the interval's ends (to rounding; the clamp's own bounds are kept, exact on every machine).
        const double a = p[3] + p[2] * erfinv(p[0]), b = p[3] + p[2] * erfinv(p[1]);
        const double tol = 1e-6 * p[2];
        if (!(std::fabs(lo - a) <= tol && std::fabs(hi - b) <= tol))
          return none(op_text(w) + " with bounds other than the ends of the erfinv_ of a uniform it clamps");
        const double mean = p[3], sd = p[2] / std::sqrt(2.0);
        d.kind = Kind::trunc;
        p[0] = mean;
        p[1] = sd;
        p[2] = lo;
        p[3] = hi;
        break;
      }
      default: break;
    }
  } else {
    LAYERINIT_EXPECTS(false, "transformed: not an elementwise op: " + op);
  }
  return d;
}

bool elementwise(std::string_view op) {
  return op == "mul" || op == "div" || op == "neg" || op == "add" || op == "erfinv" || op == "clamp";
}

std::size_t arg_count(std::string_view op) {
  if (op == "normal" || op == "uniform") return 2;
  if (op == "trunc_normal") return 4;
  if (op == "fill" || op == "mul" || op == "div" || op == "add" || op == "data") return 1;
  if (op == "clamp") return 2;
  if (op == "neg" || op == "erfinv" || op == "copy") return 0;
  return kNone;  // an op with no fill: any arguments
}

class Replay {
 public:
  explicit Replay(const RecordedInit& r) : r_(r), pieces_(r.tensors.size()), versions_(r.tensors.size(), 0) {
    for (std::size_t t = 0; t < r.tensors.size(); ++t) {
      const Box whole{Shape(r.tensors[t].shape.size(), 0), r.tensors[t].shape};
      if (!whole.empty()) pieces_[t].push_back({whole, Dist{}});
    }
  }

  void run() {
    for (std::size_t i = 0; i < r_.writes.size(); ++i) write(i);
  }

  std::vector<ReplayedTensor> result() const;

 private:
  Box box_of(std::size_t t, const Shape& off, const Shape& ext, const std::string& what) const {
    const Shape& s = r_.tensors[t].shape;
    if (off.empty() && ext.empty()) return Box{Shape(s.size(), 0), s};
    if (off.size() != s.size() || ext.size() != s.size())
      bad_argument(what, shape_string(ext), "is a box of rank " + std::to_string(ext.size()) + " in tensor " +
                                                 std::to_string(t) + " of shape " + shape_string(s));
    for (std::size_t d = 0; d < s.size(); ++d)
      if (off[d] > s[d] || ext[d] > s[d] - off[d])
        bad_argument(what, shape_string(ext), "at " + shape_string(off) + " lies outside tensor " + std::to_string(t) +
                                                   " of shape " + shape_string(s));
    return Box{off, ext};
  }

  // Replaces box b of tensor t by `with` (pieces inside b).
  void put(std::size_t t, const Box& b, std::vector<Piece> with) {
    std::vector<Piece> next;
    for (const Piece& p : pieces_[t])
      for (const Box& rest : subtract(p.box, b)) next.push_back({rest, narrowed(p.d, rest)});
    for (Piece& p : with)
      if (!p.box.empty()) next.push_back(std::move(p));
    pieces_[t] = std::move(next);
    ++versions_[t];
  }

  // The pieces of tensor t inside box b.
  std::vector<Piece> inside(std::size_t t, const Box& b) const {
    std::vector<Piece> out;
    for (const Piece& p : pieces_[t])
      if (const auto x = intersect(p.box, b)) out.push_back({*x, narrowed(p.d, *x)});
    return out;
  }

  void write(std::size_t i) {
    const RecordedWrite& w = r_.writes[i];
    const std::string where = "writes[" + std::to_string(i) + "]";
    if (w.tensor >= r_.tensors.size())
      bad_argument(where + ".tensor", static_cast<unsigned long long>(w.tensor),
                   "is past the " + std::to_string(r_.tensors.size()) + " tensors");
    const std::size_t n = arg_count(w.op);
    if (n != kNone && w.args.size() != n)
      bad_argument(where + ".args", static_cast<unsigned long long>(w.args.size()),
                   "arguments for " + w.op + ", which takes " + std::to_string(n));
    for (std::size_t k = 0; k < w.args.size(); ++k)
      if (std::isnan(w.args[k]) || (std::isinf(w.args[k]) && w.op != "clamp"))
        bad_argument(where + ".args[" + std::to_string(k) + "]", w.args[k], "is not a finite number");
    const Box b = box_of(w.tensor, w.offset, w.shape, where + ".shape");
    if (w.op == "data" && !(w.args[0] >= 0 && w.args[0] == std::floor(w.args[0]) && w.args[0] < 9007199254740992.0))
      bad_argument(where + ".args[0]", w.args[0], "is not a data index (a non-negative integer)");
    if (b.empty()) return;
    Dist d;
    if (w.op == "normal" || w.op == "uniform" || w.op == "trunc_normal") {
      d.kind = w.op == "normal" ? Kind::normal : w.op == "uniform" ? Kind::uniform : Kind::trunc;
      std::copy(w.args.begin(), w.args.end(), d.p);
      if (d.kind == Kind::trunc && !(d.p[2] < d.p[3]))
        d = none(op_text(w) + " with bounds a >= b");
      if (d.kind == Kind::uniform && d.p[0] > d.p[1]) d = none(op_text(w) + " with from > to");
      if (random(d.kind)) {
        d.origin = d.frame = i;
        d.origin_box = d.frame_box = b;
        d.shift.assign(b.offset.size(), 0);
      }
      put(w.tensor, b, {{b, d}});
    } else if (w.op == "data") {
      d.kind = Kind::data;
      d.src = static_cast<std::size_t>(w.args[0]);
      d.frame = i;
      d.frame_box = Box{Shape(b.offset.size(), 0), b.shape};  // element i of the box is element i of the data
      d.shift.assign(b.offset.size(), 0);
      for (std::size_t k = 0; k < b.offset.size(); ++k) d.shift[k] = -static_cast<std::int64_t>(b.offset[k]);
      put(w.tensor, b, {{b, d}});
    } else if (w.op == "fill") {
      d.kind = Kind::constant;
      d.p[0] = w.args[0];
      put(w.tensor, b, {{b, d}});
    } else if (elementwise(w.op)) {
      std::vector<Piece> now = inside(w.tensor, b);
      for (Piece& p : now) p.d = transformed(p.d, w);
      put(w.tensor, b, std::move(now));
    } else if (w.op == "copy") {
      copy(i, w, b);
    } else {
      put(w.tensor, b, {{b, none(no_fill(w))}});
    }
  }

  void copy(std::size_t i, const RecordedWrite& w, const Box& dst) {
    const std::string where = "writes[" + std::to_string(i) + "]";
    if (w.from >= r_.tensors.size())
      bad_argument(where + ".from", static_cast<unsigned long long>(w.from),
                   "is past the " + std::to_string(r_.tensors.size()) + " tensors");
    const Box src = box_of(w.from, w.from_offset, w.from_shape, where + ".from_shape");
    const std::vector<Piece> from = inside(w.from, src);  // before the write: the source may be the target
    const bool named = !r_.tensors[w.from].name.empty();
    const std::string from_name = named ? quote(r_.tensors[w.from].name) : "a temporary";
    if (src.numel() != dst.numel()) {  // a broadcast: one value repeated, or values repeated
      if (dst.numel() % std::max<std::uint64_t>(src.numel(), 1) != 0)
        bad_argument(where + ".from_shape", shape_string(src.shape),
                     "has " + std::to_string(src.numel()) + " elements for a box of " + std::to_string(dst.numel()));
      if (from.size() == 1 && from[0].d.kind == Kind::constant) return put(w.tensor, dst, {{dst, from[0].d}});
      return put(w.tensor, dst, {{dst, none(op_text(w) + " broadcasts values of " + from_name + ", which repeats them")}});
    }
    // How a source coordinate becomes a target coordinate: dimension pairs of the extents other than 1.
    std::vector<std::pair<std::size_t, std::size_t>> dims;
    {
      std::size_t a = 0, b = 0;
      const std::size_t ra = src.shape.size(), rb = dst.shape.size();
      bool ok = true;
      while (ok) {
        while (a < ra && src.shape[a] == 1) ++a;
        while (b < rb && dst.shape[b] == 1) ++b;
        if (a == ra || b == rb) {
          ok = a == ra && b == rb;
          break;
        }
        if (src.shape[a] != dst.shape[b]) ok = false;
        else dims.emplace_back(a++, b++);
      }
      if (!ok) dims.clear(), dims.emplace_back(kNone, kNone);  // a reshape: no coordinate map
    }
    const bool reshaped = !dims.empty() && dims[0].first == kNone;
    const bool same_rank = src.shape.size() == dst.shape.size() && !reshaped &&
                           std::all_of(dims.begin(), dims.end(), [](auto p) { return p.first == p.second; });
    // Each source piece (or, reshaped, each run of one in row-major order) and the box it lands on.
    std::vector<std::pair<Piece, Box>> moves;
    for (const Piece& p : from) {
      if (!reshaped) {
        Box to = dst;
        for (auto [sd, dd] : dims) {
          to.offset[dd] = dst.offset[dd] + (p.box.offset[sd] - src.offset[sd]);
          to.shape[dd] = p.box.shape[sd];
        }
        moves.push_back({p, to});
        continue;
      }
      // Runs of one element place anything; more than this many boxes would cost more fill jobs than values.
      constexpr std::uint64_t kMaxRuns = 4096;
      const auto runs = runs_of(src, p.box, kMaxRuns - std::min<std::uint64_t>(moves.size(), kMaxRuns));
      std::size_t placed_runs = 0;
      for (std::size_t r = 0; runs && r < runs->size(); ++r, ++placed_runs) {
        const auto to = run_box(dst, (*runs)[r].first, (*runs)[r].second);
        const auto part = run_box(src, (*runs)[r].first, (*runs)[r].second);
        if (!to || !part) break;
        moves.push_back({{*part, narrowed(p.d, *part)}, *to});
      }
      if (!runs || placed_runs != runs->size())
        return put(w.tensor, dst, {{dst, none(op_text(w) + " reshapes values of several fills from " + from_name)}});
    }
    std::vector<Piece> out;
    for (const auto& [p, to] : moves) {
      Dist d = p.d;
      // A parameter copied into another whole holds equal values: a tie. Copied into a temporary (p / c,
      // a cast) its values go on as the draw they are, wherever they land.
      if (named && random(d.kind) && !r_.tensors[w.tensor].name.empty()) {
        d = Dist{};
        d.kind = Kind::copy;
        d.src = w.from;
        d.version = versions_[w.from];
        d.frame_box = p.box;
      }
      if (d.kind == Kind::copy && !same_rank)
        d = none(op_text(w) + " copies part of " + quote(r_.tensors[d.src].name) + " reshaped");
      if (d.kind == Kind::data && !same_rank) d = none(op_text(w) + " reshapes values computed from data");
      out.push_back({to, placed(std::move(d), to, same_rank, i)});
    }
    put(w.tensor, dst, std::move(out));
  }

  const RecordedInit& r_;
  std::vector<std::vector<Piece>> pieces_;
  std::vector<std::uint64_t> versions_;
};

std::optional<FillSpec> fill_of(const Dist& d) {
  switch (d.kind) {
    case Kind::constant: return FillSpec::constant(d.p[0]);
    case Kind::normal: return d.p[1] == 0 ? FillSpec::constant(d.p[0]) : FillSpec::normal(d.p[0], d.p[1]);
    case Kind::uniform: return d.p[0] == d.p[1] ? FillSpec::constant(d.p[0]) : FillSpec::uniform(d.p[0], d.p[1]);
    case Kind::trunc: return FillSpec::trunc_normal(d.p[0], d.p[1], d.p[2], d.p[3]);
    default: return std::nullopt;
  }
}

std::vector<ReplayedTensor> Replay::result() const {
  std::vector<ReplayedTensor> out(r_.tensors.size());
  // The same random values in two places of the parameters (a temporary copied twice): both refused.
  std::map<std::size_t, std::vector<std::pair<std::size_t, const Piece*>>> by_origin;
  for (std::size_t t = 0; t < r_.tensors.size(); ++t)
    if (!r_.tensors[t].name.empty())
      for (const Piece& p : pieces_[t])
        if (random(p.d.kind)) by_origin[p.d.origin].push_back({t, &p});
  std::map<const Piece*, std::string> twice;
  for (const auto& [origin, list] : by_origin)
    for (std::size_t a = 0; a < list.size(); ++a)
      for (std::size_t b = a + 1; b < list.size(); ++b) {
        const Dist &x = list[a].second->d, &y = list[b].second->d;
        if (x.frame == y.frame ? intersect(x.frame_box, y.frame_box).has_value() : intersect(x.origin_box, y.origin_box).has_value()) {
          twice[list[a].second] = r_.tensors[list[b].first].name;
          twice[list[b].second] = r_.tensors[list[a].first].name;
        }
      }
  for (std::size_t t = 0; t < r_.tensors.size(); ++t) {
    ReplayedTensor& res = out[t];
    const auto& ps = pieces_[t];
    const bool whole = ps.size() == 1 && ps[0].box.shape == r_.tensors[t].shape;
    auto at = [&](const Piece& p) { return whole ? std::string() : " in " + box_text(p.box); };
    std::vector<std::string> why;
    std::optional<std::size_t> copy_of, data;
    bool copies = false, fills = false, computed = false;
    for (const Piece& p : ps) {
      if (const auto it = twice.find(&p); it != twice.end()) {
        why.push_back("the same random values as " + quote(it->second) + at(p) +
                      " (one random tensor copied into both; tie them to keep them equal)");
        continue;
      }
      switch (p.d.kind) {
        case Kind::unwritten: why.push_back("never written by its init code" + at(p)); break;
        case Kind::none: why.push_back(p.d.why + at(p)); break;
        case Kind::erfinv: why.push_back("erfinv_ of a uniform without the clamp_ that ends torch's trunc_normal_" + at(p)); break;
        case Kind::copy: {
          copies = true;
          const bool aligned = std::all_of(p.d.shift.begin(), p.d.shift.end(), [](std::int64_t s) { return s == 0; });
          if (p.d.version != versions_[p.d.src]) {
            why.push_back("a copy of " + quote(r_.tensors[p.d.src].name) + " written again after it was copied" + at(p));
          } else if (!aligned || (copy_of && *copy_of != p.d.src) || r_.tensors[p.d.src].shape != r_.tensors[t].shape) {
            why.push_back("part of " + quote(r_.tensors[p.d.src].name) + " copied" + at(p));
          } else {
            copy_of = p.d.src;
          }
          break;
        }
        case Kind::data: {
          computed = true;
          const bool aligned = std::all_of(p.d.shift.begin(), p.d.shift.end(), [](std::int64_t s) { return s == 0; });
          if (!aligned || (data && *data != p.d.src) || p.d.frame_box.shape != p.box.shape || !(p.box.shape == r_.tensors[t].shape))
            why.push_back("part of values computed from data" + at(p));
          else
            data = p.d.src;
          break;
        }
        default: fills = true;
      }
    }
    if (int(copies) + int(fills) + int(computed) > 1)
      why.push_back("partly a copy of another parameter, partly computed data, partly a fill of its own");
    if (!why.empty()) {
      std::string all;
      for (const std::string& s : why) all += (all.empty() ? "" : "; ") + s;
      res.refusal = all;
      continue;
    }
    if (copies) {
      res.copy_of = copy_of;
      continue;
    }
    if (computed) {
      res.data = data;
      continue;
    }
    // The fill of the most elements is the tensor's, the others are regions.
    std::vector<std::pair<FillSpec, std::uint64_t>> totals;
    for (const Piece& p : ps) {
      const FillSpec f = *fill_of(p.d);
      auto it = std::find_if(totals.begin(), totals.end(), [&](const auto& x) { return x.first == f; });
      if (it == totals.end()) totals.push_back({f, p.box.numel()});
      else it->second += p.box.numel();
    }
    if (totals.empty()) {  // a tensor of no elements
      res.fill = FillSpec::constant(0);
      continue;
    }
    const auto most = std::max_element(totals.begin(), totals.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
    try {
      for (const auto& [f, _] : totals) validate_fill(f);
    } catch (const std::invalid_argument& e) {
      res.refusal = e.what();
      continue;
    }
    res.fill = most->first;
    std::vector<const Piece*> rest;
    for (const Piece& p : ps)
      if (!(*fill_of(p.d) == *res.fill)) rest.push_back(&p);
    std::sort(rest.begin(), rest.end(), [](const Piece* a, const Piece* b) { return a->box.offset < b->box.offset; });
    for (const Piece* p : rest) res.regions.push_back({p->box.offset, p->box.shape, *fill_of(p->d)});
  }
  return out;
}

}  // namespace

std::vector<ReplayedTensor> replay_init(const RecordedInit& r) {
  Replay replay(r);
  replay.run();
  return replay.result();
}

ModelSpec spec_with_inits(const ModelSpec& spec, const std::map<std::string, TensorInit, std::less<>>& inits) {
  ModelSpec out = spec;
  std::size_t used = 0;
  auto set = [&](TensorSpec& t, const std::string& name) {
    const auto it = inits.find(name);
    if (it == inits.end()) return;
    t.init = it->second.fill;
    t.regions = it->second.regions;
    ++used;
  };
  for (auto* list : {&out.pre, &out.post})
    for (TensorSpec& t : *list) set(t, t.name);
  // A layer tensor: one init for every layer on the block, else the layers one by one.
  bool unroll = false;
  for (const TensorSpec& t : spec.layer.tensors) {
    std::optional<TensorInit> first;
    std::uint64_t given = 0;
    for (std::uint64_t l = 0; l < spec.num_layers; ++l) {
      const auto it = inits.find(spec.canonical_name(l, t));
      if (it == inits.end()) continue;
      if (given++ == 0) first = it->second;
      else if (!(it->second == *first)) unroll = true;
    }
    if (given != 0 && given != spec.num_layers) unroll = true;
  }
  if (unroll) {
    std::vector<TensorSpec> layers;
    for (std::uint64_t l = 0; l < spec.num_layers; ++l)
      for (const TensorSpec& t : spec.layer.tensors) {
        TensorSpec u = t;
        u.name = spec.canonical_name(l, t);
        set(u, u.name);
        layers.push_back(std::move(u));
      }
    out.pre.insert(out.pre.end(), layers.begin(), layers.end());
    out.layer = LayerSpec{};
    out.num_layers = 0;
    out.first_layer = 0;
  } else {
    for (TensorSpec& t : out.layer.tensors) {
      const std::size_t before = used;
      for (std::uint64_t l = 0; l < spec.num_layers; ++l) set(t, spec.canonical_name(l, t));
      if (used != before) {  // counted once per layer above; the block's tensor is one init
        const auto it = inits.find(spec.canonical_name(0, t));
        t.init = it->second.fill;
        t.regions = it->second.regions;
      }
    }
  }
  if (used != inits.size()) {
    std::set<std::string, std::less<>> names;
    for (const TensorSpec& t : out.pre) names.insert(t.name);
    for (const TensorSpec& t : out.post) names.insert(t.name);
    for (std::uint64_t l = 0; l < out.num_layers; ++l)
      for (const TensorSpec& t : out.layer.tensors) names.insert(out.canonical_name(l, t));
    for (const auto& [name, _] : inits)
      if (!names.count(name)) bad_argument("tensor", name, "is not in " + quote(spec.name));
  }
  out.validate();
  return out;
}

namespace {

const JsonReader reader("recording");

Shape shape_field(const json& j, const std::string& path) {
  if (!j.is_array()) reader.fail(path, "must be an array of non-negative integers");
  Shape s;
  for (std::size_t i = 0; i < j.size(); ++i) s.push_back(reader.to_uint(j[i], at(path, i), false));
  return s;
}

RecordedInit recorded_init_read(const json& doc) {
  reader.check_object(doc, "", {"tensors", "writes"});
  RecordedInit r;
  const json& tensors = reader.require(doc, "", "tensors");
  if (!tensors.is_array()) reader.fail("tensors", "must be an array");
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::string path = at("tensors", i);
    reader.check_object(tensors[i], path, {"name", "shape"});
    RecordedTensor t;
    if (const json* n = find(tensors[i], "name")) t.name = reader.to_string(*n, join(path, "name"), true);
    t.shape = shape_field(reader.require(tensors[i], path, "shape"), join(path, "shape"));
    r.tensors.push_back(std::move(t));
  }
  if (const json* writes = find(doc, "writes")) {
    if (!writes->is_array()) reader.fail("writes", "must be an array");
    for (std::size_t i = 0; i < writes->size(); ++i) {
      const std::string path = at("writes", i);
      const json& j = (*writes)[i];
      reader.check_object(j, path, {"tensor", "op", "args", "offset", "shape", "from", "from_offset", "from_shape", "where"});
      RecordedWrite w;
      w.tensor = reader.to_uint(reader.require(j, path, "tensor"), join(path, "tensor"), false);
      w.op = reader.to_string(reader.require(j, path, "op"), join(path, "op"), true);
      if (const json* a = find(j, "args")) {
        if (!a->is_array()) reader.fail(join(path, "args"), "must be an array of numbers");
        for (std::size_t k = 0; k < a->size(); ++k) {
          const json& v = (*a)[k];
          // null: an absent clamp bound
          w.args.push_back(v.is_null() ? (k == 0 ? -HUGE_VAL : HUGE_VAL) : reader.to_double(v, at(join(path, "args"), k)));
        }
      }
      if (const json* o = find(j, "offset")) w.offset = shape_field(*o, join(path, "offset"));
      if (const json* s = find(j, "shape")) w.shape = shape_field(*s, join(path, "shape"));
      if (const json* f = find(j, "from")) w.from = reader.to_uint(*f, join(path, "from"), false);
      if (const json* o = find(j, "from_offset")) w.from_offset = shape_field(*o, join(path, "from_offset"));
      if (const json* s = find(j, "from_shape")) w.from_shape = shape_field(*s, join(path, "from_shape"));
      if (const json* s = find(j, "where")) w.where = reader.to_string(*s, join(path, "where"), false);
      r.writes.push_back(std::move(w));
    }
  }
  return r;
}

}  // namespace

// The text's limits are parse's; a document's, check_limits's: one pass over either.
RecordedInit recorded_init_from_json(std::string_view text) { return recorded_init_read(reader.parse(text)); }

RecordedInit recorded_init_from_document(const json& doc) {
  reader.check_limits(doc);
  return recorded_init_read(doc);
}

}  // namespace layerinit

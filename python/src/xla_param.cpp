#include "xla_param.hpp"

#include <charconv>
#include <mutex>
#include <stdexcept>

#include <layerinit/core/text.hpp>
#include <layerinit/shard/box_fill.hpp>

namespace layerinit::jax {

namespace {

constexpr std::string_view kHeader = "layerinit-param 0";

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument("fill parameter: " + what); }

void put(std::string& out, double x) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);  // shortest form that reads back exactly
  out.append(buf, r.ptr);
}

// Splits off the next space-separated word of `line`.
std::string_view word(std::string_view& line) {
  const std::size_t sp = line.find(' ');
  const std::string_view w = line.substr(0, sp);
  line = sp == std::string_view::npos ? std::string_view{} : line.substr(sp + 1);
  return w;
}

template <class T> T number(std::string_view w, const char* what) {
  T v{};
  const auto r = std::from_chars(w.data(), w.data() + w.size(), v);
  if (r.ec != std::errc{} || r.ptr != w.data() + w.size() || w.empty()) bad(std::string(what) + " '" + printable(w) + "' is not a number");
  return v;
}

void check(const Param& p) {
  if (p.lead > p.shape.size()) bad("lead " + std::to_string(p.lead) + " exceeds the rank of " + shape_string(p.shape));
  std::uint64_t n = 1;
  for (std::size_t d = 0; d < p.lead; ++d) n *= p.shape[d];
  if (p.slices.size() != n)
    bad(std::to_string(p.slices.size()) + " slices for the " + std::to_string(n) + " of " + shape_string(p.shape) +
        " with " + std::to_string(p.lead) + " leading dimensions");
  if (p.transposed && p.shape.size() - p.lead != 2) bad("a transposed slice must be 2-D, not " + shape_string(p.slice_shape()));
  for (const auto& s : p.slices)
    if (s.name.empty() || s.name.find_first_of("\n\r") != std::string::npos)
      bad("slice name '" + printable(s.name) + "' is empty or has a line break");
}

}  // namespace

Shape Param::slice_shape() const { return Shape(shape.begin() + static_cast<std::ptrdiff_t>(lead), shape.end()); }

PlannedTensor Param::planned(std::size_t i) const {
  PlannedTensor t;
  t.name = slices[i].name;
  t.fill = slices[i].fill;
  t.dtype = dtype;
  t.memory_shape = slice_shape();
  t.shape = t.memory_shape;
  t.transposed = transposed;
  if (transposed) std::swap(t.shape[0], t.shape[1]);
  return t;
}

std::string param_text(const Param& p) {
  check(p);
  std::string out(kHeader);
  out += "\ndtype ";
  out += dtype_name(p.dtype);
  out += "\nshape";
  for (auto d : p.shape) {
    out += ' ';
    out += std::to_string(d);
  }
  out += "\nlead ";
  out += std::to_string(p.lead);
  out += p.transposed ? "\ntransposed 1" : "\ntransposed 0";
  for (const auto& s : p.slices) {
    const FillSpec& f = s.fill;
    out += "\nfill ";
    out += std::to_string(static_cast<int>(f.kind));
    for (double x : {f.mean, f.std, f.a, f.b, f.bounds_in_std ? 1.0 : 0.0, f.lo, f.hi, f.value}) {
      out += ' ';
      put(out, x);
    }
    out += ' ';
    out += s.name;
  }
  return out;
}

Param parse_param(std::string_view text) {
  Param p;
  bool have_shape = false;
  std::size_t line_no = 0;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (line_no++ == 0) {
      if (line != kHeader) bad("expected '" + std::string(kHeader) + "', got '" + printable(line, 40) + "'");
      continue;
    }
    const std::string_view key = word(line);
    if (key == "dtype") {
      p.dtype = parse_dtype(line);
    } else if (key == "shape") {
      while (!line.empty()) p.shape.push_back(number<std::uint64_t>(word(line), "shape entry"));
      have_shape = true;
    } else if (key == "lead") {
      p.lead = number<std::size_t>(line, "lead");
    } else if (key == "transposed") {
      p.transposed = number<int>(line, "transposed") != 0;
    } else if (key == "fill") {
      Slice s;
      FillSpec& f = s.fill;
      const int kind = number<int>(word(line), "fill kind");
      if (kind < 0 || kind > static_cast<int>(FillKind::uniform)) bad("unknown fill kind " + std::to_string(kind));
      f.kind = static_cast<FillKind>(kind);
      f.mean = number<double>(word(line), "mean");
      f.std = number<double>(word(line), "std");
      f.a = number<double>(word(line), "a");
      f.b = number<double>(word(line), "b");
      f.bounds_in_std = number<double>(word(line), "bounds_in_std") != 0;
      f.lo = number<double>(word(line), "lo");
      f.hi = number<double>(word(line), "hi");
      f.value = number<double>(word(line), "value");
      s.name = std::string(line);
      p.slices.push_back(std::move(s));
    } else {
      bad("unknown line '" + printable(key, 40) + "'");
    }
  }
  if (line_no == 0) bad("empty text");
  if (!have_shape) bad("no shape");
  check(p);
  return p;
}

void check_fills(const Param& p) {
  for (const auto& s : p.slices) {
    try {
      validate_fill(s.fill);
      prepare_fill(s.fill, p.dtype);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("tensor '" + printable(s.name) + "': " + e.what());
    }
  }
}

void param_jobs(const Param& p, const Box& box, void* dst, std::uint64_t seed, std::vector<FillJob>& out) {
  const std::size_t n = p.shape.size();
  if (box.offset.size() != n || box.shape.size() != n)
    bad("a box of rank " + std::to_string(box.shape.size()) + " for a parameter of rank " + std::to_string(n));
  for (std::size_t d = 0; d < n; ++d)
    if (box.offset[d] > p.shape[d] || box.shape[d] > p.shape[d] - box.offset[d])
      bad(std::string("'") + printable(p.slices.empty() ? "" : p.slices.front().name) + "': a piece of " + shape_string(box.shape) +
          " at " + shape_string(box.offset) + " lies outside " + shape_string(p.shape));
  if (box.empty()) return;
  const Box inner{Shape(box.offset.begin() + static_cast<std::ptrdiff_t>(p.lead), box.offset.end()),
                  Shape(box.shape.begin() + static_cast<std::ptrdiff_t>(p.lead), box.shape.end())};
  if (p.lead == 0) {
    box_fill_jobs(p.planned(0), inner, dst, seed, out);
    return;
  }
  // The slices the box covers, in its row-major order: each one's part is a dense block of the output.
  const std::uint64_t slice_bytes = inner.numel() * dtype_size(p.dtype);
  std::uint64_t count = 1;
  for (std::size_t d = 0; d < p.lead; ++d) count *= box.shape[d];
  Shape index(p.lead, 0);  // within the box's lead dimensions
  for (std::uint64_t k = 0; k < count; ++k) {
    std::uint64_t slice = 0;
    for (std::size_t d = 0; d < p.lead; ++d) slice = slice * p.shape[d] + box.offset[d] + index[d];
    box_fill_jobs(p.planned(slice), inner, static_cast<unsigned char*>(dst) + k * slice_bytes, seed, out);
    for (std::size_t d = p.lead; d-- > 0;) {
      if (++index[d] < box.shape[d]) break;
      index[d] = 0;
    }
  }
}

namespace {
std::mutex writes_mu;
bool writes_on = false;
std::vector<Written> writes;
}  // namespace

void record_writes(bool on) {
  std::lock_guard lock(writes_mu);
  writes_on = on;
  writes.clear();
}

std::vector<Written> take_writes() {
  std::lock_guard lock(writes_mu);
  return std::exchange(writes, {});
}

std::vector<FillJob> piece_jobs(const PieceCall& c) {
  const Param p = parse_param(c.param);
  const std::size_t n = p.shape.size();
  if (c.dtype != p.dtype)
    bad(std::string("'") + printable(p.slices.front().name) + "' is " + std::string(dtype_name(p.dtype)) + " but the output buffer is " +
        std::string(dtype_name(c.dtype)));
  if (c.dims.size() != n) bad("an output of rank " + std::to_string(c.dims.size()) + " for " + shape_string(p.shape));
  Box box{Shape(n, 0), Shape(n, 0)};
  for (std::size_t d = 0; d < n; ++d) box.shape[d] = static_cast<std::uint64_t>(c.dims[d]);
  if (!c.table.empty()) {
    if (c.table.size() % (n + 1) != 0) bad("a device table of " + std::to_string(c.table.size()) + " numbers for rank " + std::to_string(n));
    bool found = false;
    for (std::size_t r = 0; r < c.table.size() && !found; r += n + 1) {
      if (c.table[r] != c.ordinal) continue;
      for (std::size_t d = 0; d < n; ++d) box.offset[d] = static_cast<std::uint64_t>(c.table[r + 1 + d]);
      found = true;
    }
    if (!found) bad(std::string("'") + printable(p.slices.front().name) + "': device " + std::to_string(c.ordinal) + " holds no piece");
  }
  std::vector<FillJob> jobs;
  param_jobs(p, box, c.dst, c.seed, jobs);
  {
    std::lock_guard lock(writes_mu);
    if (writes_on)
      writes.push_back({p.slices.front().name, reinterpret_cast<std::uintptr_t>(c.dst), box.numel() * dtype_size(p.dtype)});
  }
  return jobs;
}

}  // namespace layerinit::jax

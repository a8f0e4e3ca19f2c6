#include <layerinit/shard/composite.hpp>
#include <layerinit/shard/composite_document.hpp>

#include <algorithm>
#include <unordered_set>
#include <charconv>
#include <limits>
#include <stdexcept>
#include <string>

#include <layerinit/core/errors.hpp>
#include <layerinit/core/text.hpp>
#include <layerinit/init/json_read.hpp>
#include <layerinit/init/spec_json.hpp>

#include <nlohmann/json.hpp>

namespace layerinit {

namespace {

constexpr std::size_t kMaxParts = 1u << 16;  // validate() compares parts pairwise
constexpr std::size_t kMaxNameInMessage = 120;

// A composite's description is wrong: the same type whether it came as text or was built in C++.
[[noreturn]] void fail(const std::string& what) { throw spec_error("composite", what); }

std::string part_label(const CompositePart& p, std::size_t i) {
  return "part " + std::to_string(i) + " ('" + printable(p.name, kMaxNameInMessage) + "')";
}

// Walks a name template: lit(text) for literal text, axis(k) for "{k}". Throws naming the template.
template <class Lit, class Axis>
void walk_template(std::string_view t, Lit lit, Axis axis) {
  auto bad = [&](const std::string& why) { bad_argument("name template", printable(t, kMaxNameInMessage), ": " + why); };
  for (std::size_t i = 0; i < t.size();) {
    const char c = t[i];
    if ((c == '{' || c == '}') && i + 1 < t.size() && t[i + 1] == c) {
      lit(t.substr(i, 1));
      i += 2;
    } else if (c == '}') {
      bad("a lone '}' (write '}}' for a brace)");
    } else if (c == '{') {
      const std::size_t close = t.find('}', i);
      if (close == std::string_view::npos) bad("a '{' without its '}' (write '{{' for a brace)");
      const std::string_view digits = t.substr(i + 1, close - i - 1);
      std::size_t k = 0;
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), k);
      if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size())
        bad(quote("{" + printable(digits, 20) + "}") + " is not a stack axis ({0}, {1}, ...)");
      axis(k);
      i = close + 1;
    } else {
      const std::size_t next = std::min(t.find_first_of("{}", i), t.size());
      lit(t.substr(i, next - i));
      i = next;
    }
  }
}

// Why the stack axes cannot sit where they say among `rank` dimensions (`of` says whose): an axis's
// dimension outside them, two axes at one dimension; or nothing.
std::optional<std::string> stack_dims_problem(const std::vector<StackAxis>& stack, std::size_t rank, const std::string& of) {
  std::vector<std::optional<std::size_t>> axis_at(rank);
  for (std::size_t k = 0; k < stack.size(); ++k) {
    const std::size_t d = stack[k].dim.value_or(k);
    if (d >= rank)
      return "stack axis " + std::to_string(k) + " at dimension " + std::to_string(d) + " is outside " + of;
    if (axis_at[d])
      return "stack axes " + std::to_string(*axis_at[d]) + " and " + std::to_string(k) + " both at dimension " + std::to_string(d);
    axis_at[d] = k;
  }
  return std::nullopt;
}

// The extent of part p's box in a slice of rank n: its source box's shape after n - r leading 1s.
Shape placed_extent(const CompositePart& p, std::size_t n) {
  Shape e(n - p.source.shape.size(), 1);
  e.insert(e.end(), p.source.shape.begin(), p.source.shape.end());
  return e;
}

}  // namespace

namespace {

// The tensor a part stands for at the stack position whose indices (first included) are `names`.
PlannedTensor part_tensor(const CompositePart& part, std::span<const std::uint64_t> names, const FillSpec& fill) {
  PlannedTensor t;
  t.name = expand_template(part.name, names);
  t.shape = part.shape;
  t.memory_shape = part.stored_shape();
  t.dtype = part.dtype;
  t.transposed = part.transposed;
  t.fill = fill;
  for (const FillRegion& r : part.regions) t.regions.push_back({r, std::nullopt});
  return t;
}

}  // namespace

// ---- row permutations ----

std::uint64_t RowPermutation::source_row(std::uint64_t row) const {
  if (kind == Kind::none) return row;
  const std::uint64_t w = row % group;
  return row - w + (w % 2) * (group / 2) + w / 2;
}

std::string RowPermutation::describe() const {
  return kind == Kind::none ? "none" : "rope_interleave(" + std::to_string(group) + ")";
}

RowPermutation parse_row_permutation(std::string_view text) {
  if (text == "none") return {};
  constexpr std::string_view rope = "rope_interleave(";
  if (text.starts_with(rope) && text.ends_with(")")) {
    const std::string_view digits = text.substr(rope.size(), text.size() - rope.size() - 1);
    std::uint64_t v = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (!digits.empty() && ec == std::errc() && end == digits.data() + digits.size()) return RowPermutation::rope_interleave(v);
  }
  bad_argument("row permutation", printable(text, kMaxNameInMessage), "is unknown (valid: none, rope_interleave(HEAD_DIM))");
}

// ---- names ----

std::string expand_template(std::string_view name, std::span<const std::uint64_t> index) {
  std::string out;
  walk_template(
      name, [&](std::string_view s) { out += s; },
      [&](std::size_t k) {
        if (k >= index.size())
          bad_argument("name template", printable(name, kMaxNameInMessage),
                       ": {" + std::to_string(k) + "} names no stack axis (" + std::to_string(index.size()) + " axes)");
        out += std::to_string(index[k]);
      });
  return out;
}

// ---- the description ----

Shape CompositePart::stored_shape() const {
  Shape s = shape;
  if (transposed && s.size() == 2) std::swap(s[0], s[1]);
  return s;
}

std::size_t Composite::stack_dim(std::size_t k) const { return stack.at(k).dim.value_or(k); }

bool Composite::leading() const {
  for (std::size_t k = 0; k < stack.size(); ++k)
    if (stack_dim(k) != k) return false;
  return true;
}

bool Composite::operator==(const Composite& o) const {
  if (dtype != o.dtype || shape != o.shape || stack.size() != o.stack.size() || parts != o.parts) return false;
  for (std::size_t k = 0; k < stack.size(); ++k)
    if (stack[k].size != o.stack[k].size || stack[k].first != o.stack[k].first || stack_dim(k) != o.stack_dim(k)) return false;
  return true;
}

Shape Composite::slice_shape() const {
  std::vector<bool> stacked(shape.size(), false);
  for (std::size_t k = 0; k < stack.size(); ++k)
    if (const std::size_t d = stack_dim(k); d < shape.size()) stacked[d] = true;
  Shape s;
  for (std::size_t d = 0; d < shape.size(); ++d)
    if (!stacked[d]) s.push_back(shape[d]);
  return s;
}

std::uint64_t Composite::slices() const {
  std::uint64_t n = 1;
  for (const StackAxis& a : stack) n = checked_mul(n, a.size, "stack positions");
  return n;
}

std::vector<std::string> Composite::tensor_names() const {
  std::vector<std::string> out;
  std::unordered_set<std::string> seen;
  const std::uint64_t n = slices();
  Shape sizes;
  for (const StackAxis& a : stack) sizes.push_back(a.size);
  for (std::size_t p = 0; p < parts.size(); ++p) {
    Shape index(stack.size(), 0);
    for (std::uint64_t flat = 0; flat < n; ++flat, next_index(index, sizes)) {
      std::string name = tensor(p, index).name;
      if (seen.insert(name).second) out.push_back(std::move(name));
    }
  }
  return out;
}

bool Composite::whole() const {
  if (parts.size() != 1 || !stack.empty()) return false;
  const CompositePart& p = parts[0];
  return !p.transposed && p.rows.kind == RowPermutation::Kind::none && p.source.shape == p.shape && p.shape == shape &&
         std::all_of(p.source.offset.begin(), p.source.offset.end(), [](std::uint64_t o) { return o == 0; });
}

PlannedTensor Composite::tensor(std::size_t p, std::span<const std::uint64_t> index) const {
  if (p >= parts.size()) throw std::out_of_range("composite: part " + std::to_string(p) + " of " + std::to_string(parts.size()));
  if (index.size() != stack.size())
    bad_argument("composite", ": " + std::to_string(index.size()) + " stack indices for " + std::to_string(stack.size()) + " axes");
  const CompositePart& part = parts[p];
  std::uint64_t flat = 0;
  Shape names(stack.size());
  for (std::size_t k = 0; k < stack.size(); ++k) {
    if (index[k] >= stack[k].size)
      throw std::out_of_range("composite: index " + std::to_string(index[k]) + " of stack axis " + std::to_string(k) +
                              " (size " + std::to_string(stack[k].size) + ")");
    flat = flat * stack[k].size + index[k];
    names[k] = stack[k].first + index[k];
  }
  for (const FillRun& r : part.fills) {
    if (flat < r.count) return part_tensor(part, names, r.fill);
    flat -= r.count;
  }
  // validate() makes the fills cover every position: a composite without is one it never saw.
  LAYERINIT_FAIL("composite: " + part_label(part, p) + " has no fill for stack position " + std::to_string(flat));
}

void Composite::validate() const {
  const std::size_t K = stack.size();
  if (shape.size() < K)
    fail("shape " + shape_string(shape) + " has fewer dimensions than its " + std::to_string(K) + " stack axes");
  if (const auto why = stack_dims_problem(stack, shape.size(), "shape " + shape_string(shape))) fail(*why);
  for (std::size_t k = 0; k < K; ++k) {
    const std::size_t d = stack_dim(k);
    if (shape[d] != stack[k].size)
      fail("stack axis " + std::to_string(k) + " has " + std::to_string(stack[k].size) + " positions but shape " +
           shape_string(shape) + " says " + std::to_string(shape[d]) + (d == k ? "" : " at dimension " + std::to_string(d)));
    if (stack[k].first > std::numeric_limits<std::uint64_t>::max() - stack[k].size)
      fail("stack axis " + std::to_string(k) + ": first " + std::to_string(stack[k].first) + " + size overflows 64 bits");
  }
  // A zero dimension is allowed: a tensor of zero elements (DeepseekV3MoE's shared experts at
  // n_shared_experts 0), made of parts of zero elements, with nothing to fill.
  try {
    (void)numel(shape);
  } catch (const std::overflow_error&) {
    fail("shape " + shape_string(shape) + ": element count overflows 64 bits");
  }
  if (parts.empty()) fail("no parts");
  if (parts.size() > kMaxParts) fail(std::to_string(parts.size()) + " parts (at most " + std::to_string(kMaxParts) + ")");
  const std::uint64_t positions = slices();
  const Shape slice = slice_shape();
  const std::size_t n = slice.size();
  std::vector<Shape> extents(parts.size());
  std::uint64_t covered = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const CompositePart& p = parts[i];
    const std::string label = part_label(p, i);
    auto bad = [&](const std::string& why) { fail(label + ": " + why); };
    if (p.dtype != dtype)
      bad("dtype " + std::string(dtype_name(p.dtype)) + " in a composite of " + std::string(dtype_name(dtype)));
    try {
      (void)numel(p.shape);
    } catch (const std::overflow_error&) {
      bad("shape " + shape_string(p.shape) + ": element count overflows 64 bits");
    }
    if (p.transposed && p.shape.size() != 2) bad("transposed needs a 2-D tensor, not " + shape_string(p.shape));
    const Shape stored = p.stored_shape();
    const std::size_t r = stored.size();
    if (p.source.offset.size() != r || p.source.shape.size() != r)
      bad("its box has rank " + std::to_string(p.source.shape.size()) + " for a stored tensor of rank " + std::to_string(r));
    for (std::size_t d = 0; d < r; ++d) {
      if (p.source.shape[d] == 0 && stored[d] != 0) bad("its box " + shape_string(p.source.shape) + " is empty");
      if (p.source.offset[d] > stored[d] || p.source.shape[d] > stored[d] - p.source.offset[d])
        bad("its box at " + shape_string(p.source.offset) + " of " + shape_string(p.source.shape) + " lies outside the stored " +
            shape_string(stored));
    }
    if (r > n) bad("rank " + std::to_string(r) + " in a slice of rank " + std::to_string(n) + " " + shape_string(slice));
    if (p.at.size() != n) bad("'at' " + shape_string(p.at) + " needs one entry per slice dimension " + shape_string(slice));
    extents[i] = placed_extent(p, n);
    for (std::size_t d = 0; d < n; ++d)
      if (p.at[d] > slice[d] || extents[i][d] > slice[d] - p.at[d])
        bad("placed at " + shape_string(p.at) + " with extent " + shape_string(extents[i]) + " it leaves the slice " +
            shape_string(slice));
    if (p.rows.kind != RowPermutation::Kind::none) {
      if (p.transposed) bad(p.rows.describe() + " permutes rows of the tensor as stored; a transposed tensor has none to permute");
      if (r == 0) bad(p.rows.describe() + " needs a tensor with rows");
      if (p.rows.group == 0 || p.rows.group % 2 != 0) bad(p.rows.describe() + ": the head size must be even and positive");
      if (stored[0] % p.rows.group != 0)
        bad(p.rows.describe() + ": " + std::to_string(stored[0]) + " rows are not whole heads of " + std::to_string(p.rows.group));
    }
    std::uint64_t filled = 0;
    for (const FillRun& run : p.fills) {
      if (run.count == 0) bad("a fill run of 0 positions");
      if (run.count > positions - filled) bad("fills for more than the stack's " + std::to_string(positions) + " positions");
      filled += run.count;
      try {
        validate_fill(run.fill);
        (void)prepare_fill(run.fill, dtype);
      } catch (const std::invalid_argument& e) {
        bad(e.what());
      }
    }
    if (filled != positions)
      bad("fills for " + std::to_string(filled) + " of the stack's " + std::to_string(positions) + " positions");
    for (std::size_t k = 0; k < p.regions.size(); ++k) {
      const FillRegion& region = p.regions[k];
      if (const auto why = region_problem(region, p.shape)) bad(region_label(k, region) + " " + *why);
      try {
        validate_fill(region.fill);
        (void)prepare_fill(region.fill, dtype);
      } catch (const std::invalid_argument& e) {
        bad(region_label(k, region) + ": " + e.what());
      }
    }
    std::vector<bool> seen(K, false);
    try {
      walk_template(
          p.name, [](std::string_view) {},
          [&](std::size_t k) {
            if (k >= K) bad_argument("{" + std::to_string(k) + "}", "names no stack axis (" + std::to_string(K) + " axes)");
            seen[k] = true;
          });
    } catch (const std::invalid_argument& e) {
      bad(e.what());
    }
    for (std::size_t k = 0; k < K; ++k)
      if (!seen[k]) bad("the name does not use stack axis {" + std::to_string(k) + "}: every position would be one tensor");
    covered = checked_add(covered, numel(extents[i]), "composite element count");
  }
  // Parts tile the slice: none overlaps another, and together they hold every element.
  for (std::size_t i = 0; i < parts.size(); ++i)
    for (std::size_t j = 0; j < i; ++j) {
      bool overlap = true;
      for (std::size_t d = 0; overlap && d < n; ++d)
        overlap = parts[i].at[d] < parts[j].at[d] + extents[j][d] && parts[j].at[d] < parts[i].at[d] + extents[i][d];
      if (overlap) fail(part_label(parts[i], i) + " overlaps " + part_label(parts[j], j));
    }
  if (covered != numel(slice))
    fail("the parts cover " + std::to_string(covered) + " of the " + std::to_string(numel(slice)) + " elements of a slice " +
         shape_string(slice) + ": they must tile it");
}

CompositePart whole_part(const PlannedTensor& p, Shape at, RowPermutation rows) {
  CompositePart part;
  part.name = escape_template(p.name);
  part.shape = p.shape;
  part.dtype = p.dtype;
  part.transposed = p.transposed;
  part.fills = {{1, p.fill}};
  part.rows = rows;
  part.source = whole_box(p.memory_shape);
  part.at = std::move(at);
  for (const PlannedRegion& r : p.regions) part.regions.push_back(r.region);
  return part;
}

Composite whole_tensor(const PlannedTensor& p) {
  Composite c;
  c.dtype = p.dtype;
  c.shape = p.memory_shape;
  c.parts.push_back(whole_part(p, Shape(p.memory_shape.size(), 0)));
  c.validate();
  return c;
}

Composite concatenate(std::vector<CompositePart> parts, std::size_t dim, std::vector<StackAxis> stack, std::uint64_t groups) {
  if (parts.empty()) fail("nothing to concatenate");
  if (groups == 0) fail("concatenation in 0 groups");
  const Shape first = parts[0].source.shape;
  if (dim >= first.size()) fail("dimension " + std::to_string(dim) + " of parts of rank " + std::to_string(first.size()));
  Composite c;
  c.dtype = parts[0].dtype;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const Shape& s = parts[i].source.shape;
    bool fits = s.size() == first.size();
    for (std::size_t d = 0; fits && d < s.size(); ++d) fits = d == dim || s[d] == first[d];
    if (!fits)
      fail(part_label(parts[i], i) + ": its box " + shape_string(s) + " does not concatenate with " + shape_string(first) +
           " along dimension " + std::to_string(dim));
    if (s[dim] % groups != 0)
      fail(part_label(parts[i], i) + ": its box " + shape_string(s) + " does not split into " + std::to_string(groups) +
           " groups along dimension " + std::to_string(dim));
  }
  // Slab g of part i: the box's rows [g, g + 1) * extent / groups along dim, placed after every
  // earlier slab.
  std::vector<CompositePart> placed;
  placed.reserve(parts.size() * groups);
  Shape slice = first;
  slice[dim] = 0;
  for (std::uint64_t g = 0; g < groups; ++g) {
    for (const CompositePart& part : parts) {
      CompositePart slab = part;
      const std::uint64_t extent = part.source.shape[dim] / groups;
      slab.source.offset[dim] += g * extent;
      slab.source.shape[dim] = extent;
      slab.at = Shape(first.size(), 0);
      slab.at[dim] = slice[dim];
      slice[dim] = checked_add(slice[dim], extent, "concatenated extent");
      placed.push_back(std::move(slab));
    }
  }
  // The slice's dimensions in order, each stack axis's size at its dimension.
  const std::size_t rank = slice.size() + stack.size();
  if (const auto why = stack_dims_problem(stack, rank, "the " + std::to_string(rank) + " dimensions of a slice " +
                                                          shape_string(slice) + " under " + std::to_string(stack.size()) +
                                                          (stack.size() == 1 ? " stack axis" : " stack axes")))
    fail(*why);
  std::vector<std::optional<std::uint64_t>> sizes(rank);
  for (std::size_t k = 0; k < stack.size(); ++k) sizes[stack[k].dim.value_or(k)] = stack[k].size;
  for (std::size_t d = 0, i = 0; d < rank; ++d) c.shape.push_back(sizes[d] ? *sizes[d] : slice[i++]);
  c.stack = std::move(stack);
  c.parts = std::move(placed);
  c.validate();
  return c;
}

Composite concatenate(std::span<const PlannedTensor> tensors, std::size_t dim, std::span<const RowPermutation> rows) {
  if (!rows.empty() && rows.size() != tensors.size())
    fail(std::to_string(rows.size()) + " row permutations for " + std::to_string(tensors.size()) + " tensors");
  std::vector<CompositePart> parts;
  for (std::size_t i = 0; i < tensors.size(); ++i) parts.push_back(whole_part(tensors[i], {}, rows.empty() ? RowPermutation{} : rows[i]));
  return concatenate(std::move(parts), dim);
}

// ---- fill jobs ----

namespace {

// Jobs writing `box` (stored, row-permuted coordinates) of tensor `p` whose stored rows are permuted
// by `rows`, into a region with explicit strides. A row of the box is a box of the tensor in its own
// memory coordinates (its source row), so the tensor's regions cut it as any box; rows are grouped
// into one job only for a tensor without regions.
void permuted_jobs(const PlannedTensor& p, const TensorFill& f, const RowPermutation& rows, const Box& box,
                   const Region& dst, std::vector<FillJob>& out) {
  if (rows.kind == RowPermutation::Kind::none) return region_fill_jobs(p, f, box, dst, out);
  if (box.empty()) return;
  const Shape& g = p.memory_shape;
  const std::size_t n = g.size();
  const Shape ms = dense_strides(g);
  const std::uint64_t m = box.shape[0], esize = dtype_size(p.dtype);
  auto* base = static_cast<unsigned char*>(dst.data);

  // A row's part of the box is one run of source memory when the dimensions before its last partial
  // one (after the row) hold one index each; the region's rows are then runs dst.strides[0] apart.
  std::size_t last_partial = 0;
  for (std::size_t d = 1; d < n; ++d)
    if (box.offset[d] != 0 || box.shape[d] != g[d]) last_partial = d;
  bool one_run = true;
  for (std::size_t d = 1; d < last_partial; ++d) one_run = one_run && box.shape[d] == 1;
  const std::uint64_t run = last_partial == 0 ? ms[0] : box.shape[last_partial] * ms[last_partial];
  std::uint64_t rest = 0;  // memory offset of the box's first element within its row
  for (std::size_t d = 1; d < n; ++d) rest += box.offset[d] * ms[d];
  const bool grouped =
      f.regions.empty() && one_run && dense_from(box.shape, dst.strides) <= 1 && (m == 1 || dst.strides[0] >= run);
  const std::uint64_t row_pitch = m == 1 ? run : dst.strides[0];

  for (std::uint64_t i = 0; i < m;) {
    const std::uint64_t src = rows.source_row(box.offset[0] + i);
    if (!grouped) {
      Box row = box;
      row.offset[0] = src;
      row.shape[0] = 1;
      region_fill_jobs(p, f, row, Region{base + i * dst.strides[0] * esize, dst.strides}, out);
      ++i;
      continue;
    }
    // Rows i, i + 1, ... whose source rows step evenly upward: one job of that many runs.
    std::uint64_t count = 1, step = 0;
    if (i + 1 < m) {
      const std::uint64_t next = rows.source_row(box.offset[0] + i + 1);
      if (next > src) {
        step = next - src;
        count = 2;
        while (i + count < m && rows.source_row(box.offset[0] + i + count) == src + count * step) ++count;
      }
    }
    FillJob j = f.whole;
    j.begin = src * ms[0] + rest;
    j.end = j.begin + run;
    j.runs = count;
    j.stride = count > 1 ? step * ms[0] : 0;
    j.dst_stride = count > 1 ? row_pitch : 0;
    j.dst = base + i * row_pitch * esize;
    out.push_back(j);
    i += count;
  }
}

}  // namespace

void composite_fill_jobs(const Composite& c, const Box& box, const Region& dst, std::uint64_t seed,
                         std::vector<FillJob>& out) {
  const std::size_t n = c.shape.size(), K = c.stack.size();
  auto what = [&] { return "composite of shape " + shape_string(c.shape); };
  if (box.offset.size() != n || box.shape.size() != n) bad_argument(what(), ": a box of rank " + std::to_string(box.shape.size()));
  for (std::size_t d = 0; d < n; ++d)
    if (box.offset[d] > c.shape[d] || box.shape[d] > c.shape[d] - box.offset[d])
      bad_argument(what(), ": box at " + shape_string(box.offset) + " of " + shape_string(box.shape) + " lies outside it");
  // The region's strides are its array's, as the box's shape is: a count apart is the caller's mistake.
  LAYERINIT_EXPECTS(dst.strides.empty() || dst.strides.size() == n,
                    "composite: " + std::to_string(dst.strides.size()) + " strides for a box of rank " + std::to_string(n));
  if (box.empty()) return;
  const Shape strides = dst.strides.empty() ? dense_strides(box.shape) : dst.strides;
  if (n > 0 && box.shape[n - 1] > 1 && strides[n - 1] != 1)
    bad_argument("composite", ": the region's last dimension is not contiguous (stride " + std::to_string(strides[n - 1]) + ")");
  const std::uint64_t esize = dtype_size(c.dtype);
  // The stack axes' dimensions and the slice's (the others, in order): a position of the stack is an
  // index in each stack dimension, a part's box a box of the slice dimensions, each with its stride.
  std::vector<std::size_t> axis_dim(K);
  std::vector<bool> stacked(n, false);
  for (std::size_t k = 0; k < K; ++k) stacked[axis_dim[k] = c.stack_dim(k)] = true;
  Shape slice_off, slice_ext, slice_strides;
  for (std::size_t d = 0; d < n; ++d)
    if (!stacked[d]) {
      slice_off.push_back(box.offset[d]);
      slice_ext.push_back(box.shape[d]);
      slice_strides.push_back(strides[d]);
    }
  const std::size_t ns = slice_off.size();  // slice rank

  // Each part's run of fills at the current stack position: positions only grow in row-major order.
  struct Cursor {
    std::size_t run = 0;
    std::uint64_t end = 0;  // first position past the run
  };
  std::vector<Cursor> cursor(c.parts.size());
  for (std::size_t p = 0; p < c.parts.size(); ++p) cursor[p].end = c.parts[p].fills.empty() ? 0 : c.parts[p].fills[0].count;

  Shape pos(K), names(K);
  for (std::size_t k = 0; k < K; ++k) pos[k] = box.offset[axis_dim[k]];
  while (true) {
    std::uint64_t flat = 0, elem = 0;
    for (std::size_t k = 0; k < K; ++k) {
      flat = flat * c.stack[k].size + pos[k];
      elem += (pos[k] - box.offset[axis_dim[k]]) * strides[axis_dim[k]];
      names[k] = c.stack[k].first + pos[k];
    }
    for (std::size_t p = 0; p < c.parts.size(); ++p) {
      const CompositePart& part = c.parts[p];
      const std::size_t r = part.source.shape.size(), lead = ns - r;
      // The part's box within the queried box, in slice coordinates.
      Box local{part.source.offset, part.source.shape};
      std::uint64_t part_elem = elem;
      bool empty = false;
      for (std::size_t d = 0; d < ns && !empty; ++d) {
        const std::uint64_t extent = d < lead ? 1 : part.source.shape[d - lead];
        const std::uint64_t lo = std::max(part.at[d], slice_off[d]);
        const std::uint64_t hi = std::min(part.at[d] + extent, slice_off[d] + slice_ext[d]);
        if (lo >= hi) {
          empty = true;
          break;
        }
        part_elem += (lo - slice_off[d]) * slice_strides[d];
        if (d >= lead) {
          local.offset[d - lead] += lo - part.at[d];
          local.shape[d - lead] = hi - lo;
        }
      }
      if (empty) continue;
      Cursor& cur = cursor[p];
      while (flat >= cur.end) cur.end += part.fills[++cur.run].count;
      const PlannedTensor t = part_tensor(part, names, part.fills[cur.run].fill);
      const TensorFill fill = tensor_fill(t, seed);
      const Shape part_strides(slice_strides.end() - static_cast<std::ptrdiff_t>(r), slice_strides.end());
      // A stack axis after the slice's last dimension leaves that dimension strided in the region:
      // runs of one element (region_fill_jobs).
      permuted_jobs(t, fill, part.rows, local, Region{static_cast<unsigned char*>(dst.data) + part_elem * esize, part_strides}, out);
    }
    std::size_t k = K;
    while (k-- > 0) {  // next stack position in the box, the last axis fastest
      const std::size_t d = axis_dim[k];
      if (++pos[k] < box.offset[d] + box.shape[d]) break;
      pos[k] = box.offset[d];
    }
    if (k == static_cast<std::size_t>(-1)) break;
  }
}

// ---- text ----

namespace {

using ojson = nlohmann::ordered_json;

constexpr std::uint64_t kVersion = 1;
constexpr std::size_t kMaxText = 16u << 20;
constexpr std::size_t kMaxDepth = 8;  // the format nests 6 deep: the text, parts, a part, regions, a region, its offset

// The spec reader's rules (init/json_read.hpp): errors spec_error("composite", "<path>: <what>"), as
// fail()'s are.
const JsonReader reader("composite", kMaxDepth);

ojson shape_json(const Shape& s) {
  ojson a = ojson::array();
  for (std::uint64_t d : s) a.push_back(d);
  return a;
}

Shape shape_of(const json& j, const std::string& path) {
  if (!j.is_array()) reader.fail(path, "must be an array of non-negative integers");
  Shape s;
  for (std::size_t i = 0; i < j.size(); ++i) s.push_back(reader.to_uint(j[i], at(path, i), false));
  return s;
}

FillSpec fill_of(const json& j, const std::string& path) {
  return reader.parsed(j, path, [](const std::string& t) { return parse_fill(t); });
}

}  // namespace

ojson composite_document(const Composite& c) {
  ojson o;
  o["layerinit_composite"] = kVersion;
  o["dtype"] = std::string(dtype_name(c.dtype));
  o["shape"] = shape_json(c.shape);
  if (!c.stack.empty()) {
    ojson stack = ojson::array();
    for (std::size_t k = 0; k < c.stack.size(); ++k) {
      ojson a{{"size", c.stack[k].size}, {"first", c.stack[k].first}};
      if (c.stack_dim(k) != k) a["dim"] = c.stack_dim(k);  // only off the leading layout: its text is as before
      stack.push_back(a);
    }
    o["stack"] = stack;
  }
  ojson parts = ojson::array();
  for (const CompositePart& p : c.parts) {
    ojson j;
    j["name"] = p.name;
    j["shape"] = shape_json(p.shape);
    j["at"] = shape_json(p.at);
    if (p.fills.size() == 1) {
      j["fill"] = p.fills[0].fill.text();
    } else {
      ojson runs = ojson::array();
      for (const FillRun& r : p.fills) runs.push_back(ojson::array({r.count, r.fill.text()}));
      j["fill"] = runs;
    }
    if (p.transposed) j["transposed"] = true;
    if (p.rows.kind != RowPermutation::Kind::none) j["rows"] = p.rows.describe();
    const Shape stored = p.stored_shape();
    if (std::any_of(p.source.offset.begin(), p.source.offset.end(), [](std::uint64_t o) { return o != 0; }))
      j["from"] = shape_json(p.source.offset);
    if (p.source.shape != stored) j["size"] = shape_json(p.source.shape);
    if (!p.regions.empty()) {
      ojson regions = ojson::array();
      for (const FillRegion& r : p.regions)
        regions.push_back(ojson{{"offset", shape_json(r.offset)}, {"shape", shape_json(r.shape)}, {"fill", r.fill.text()}});
      j["regions"] = regions;
    }
    parts.push_back(j);
  }
  o["parts"] = parts;
  return o;
}

std::string composite_to_text(const Composite& c) {
  try {
    return composite_document(c).dump();
  } catch (const json::exception&) {
    fail("a part's name is not valid UTF-8");
  }
}

Composite composite_from_text(std::string_view text) {
  if (text.size() > kMaxText) fail("text of " + std::to_string(text.size()) + " bytes (at most 16 MiB)");
  const json o = reader.parse(text);
  if (!o.is_object()) reader.fail("", "must be a JSON object");
  // The version first: a later version may have keys this one does not know.
  const std::uint64_t version = reader.to_uint(reader.require(o, "", "layerinit_composite"), "layerinit_composite", false);
  if (version != kVersion)
    reader.fail("layerinit_composite",
                "version " + std::to_string(version) + " (this layerinit reads version " + std::to_string(kVersion) + ")");
  reader.check_object(o, "", {"layerinit_composite", "dtype", "shape", "stack", "parts"});
  Composite c;
  c.dtype = reader.parsed(reader.require(o, "", "dtype"), "dtype", [](const std::string& t) { return parse_dtype(t); });
  c.shape = shape_of(reader.require(o, "", "shape"), "shape");
  if (const json* stack = find(o, "stack")) {
    if (!stack->is_array()) reader.fail("stack", "must be an array of {\"size\", \"first\", \"dim\"} objects");
    for (std::size_t k = 0; k < stack->size(); ++k) {
      const json& a = (*stack)[k];
      const std::string path = at("stack", k);
      reader.check_object(a, path, {"size", "first", "dim"});
      StackAxis axis;
      axis.size = reader.to_uint(reader.require(a, path, "size"), join(path, "size"), false);
      if (const json* f = find(a, "first")) axis.first = reader.to_uint(*f, join(path, "first"), false);
      // A dimension outside the shape, or another axis's, is validate()'s to name.
      if (const json* d = find(a, "dim")) axis.dim = reader.to_uint(*d, join(path, "dim"), false);
      c.stack.push_back(axis);
    }
  }
  const json& parts = reader.require(o, "", "parts");
  if (!parts.is_array()) reader.fail("parts", "must be an array");
  if (parts.size() > kMaxParts)
    reader.fail("parts", std::to_string(parts.size()) + " parts (at most " + std::to_string(kMaxParts) + ")");
  std::uint64_t positions = 1;
  for (const StackAxis& a : c.stack) positions = saturating_mul(positions, a.size);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const json& j = parts[i];
    const std::string path = at("parts", i);
    reader.check_object(j, path, {"name", "shape", "at", "fill", "transposed", "rows", "from", "size", "regions"});
    CompositePart p;
    p.name = reader.to_string(reader.require(j, path, "name"), join(path, "name"), false);
    p.shape = shape_of(reader.require(j, path, "shape"), join(path, "shape"));
    p.dtype = c.dtype;
    p.at = shape_of(reader.require(j, path, "at"), join(path, "at"));
    if (const json* t = find(j, "transposed")) p.transposed = reader.to_bool(*t, join(path, "transposed"));
    if (const json* r = find(j, "rows"))
      p.rows = reader.parsed(*r, join(path, "rows"), [](const std::string& t) { return parse_row_permutation(t); });
    const Shape stored = p.stored_shape();
    p.source.offset = Shape(stored.size(), 0);
    p.source.shape = stored;
    if (const json* f = find(j, "from")) p.source.offset = shape_of(*f, join(path, "from"));
    if (const json* s = find(j, "size")) p.source.shape = shape_of(*s, join(path, "size"));
    const json& fill = reader.require(j, path, "fill");
    const std::string fill_path = join(path, "fill");
    if (fill.is_string()) {
      p.fills.push_back({positions, fill_of(fill, fill_path)});
    } else if (fill.is_array()) {
      for (std::size_t r = 0; r < fill.size(); ++r) {
        const json& run = fill[r];
        const std::string run_path = at(fill_path, r);
        if (!run.is_array() || run.size() != 2) reader.fail(run_path, "must be [count, fill]");
        p.fills.push_back({reader.to_uint(run[0], at(run_path, 0), false), fill_of(run[1], at(run_path, 1))});
      }
    } else {
      reader.fail(fill_path, "must be a fill like \"normal(0,0.02)\" or runs [[count, fill], ...]");
    }
    if (const json* regions = find(j, "regions")) {
      const std::string regions_path = join(path, "regions");
      if (!regions->is_array()) reader.fail(regions_path, "must be an array of {\"offset\", \"shape\", \"fill\"} objects");
      for (std::size_t k = 0; k < regions->size(); ++k) {
        const json& rj = (*regions)[k];
        const std::string region_path = at(regions_path, k);
        reader.check_object(rj, region_path, {"offset", "shape", "fill"});
        p.regions.push_back({shape_of(reader.require(rj, region_path, "offset"), join(region_path, "offset")),
                             shape_of(reader.require(rj, region_path, "shape"), join(region_path, "shape")),
                             fill_of(reader.require(rj, region_path, "fill"), join(region_path, "fill"))});
      }
    }
    c.parts.push_back(std::move(p));
  }
  c.validate();
  return c;
}

}  // namespace layerinit

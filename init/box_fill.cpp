#include <layerinit/init/box_fill.hpp>

#include <algorithm>
#include <stdexcept>

#include <layerinit/core/errors.hpp>
#include <layerinit/core/text.hpp>

namespace layerinit {

namespace {

void check_box(const PlannedTensor& p, const Box& box) {
  const Shape& g = p.memory_shape;
  const std::size_t n = g.size();
  if (box.offset.size() != n || box.shape.size() != n)
    bad_argument("tensor", p.name, ": a box of rank " + std::to_string(box.shape.size()) + " for a tensor of rank " + std::to_string(n));
  for (std::size_t d = 0; d < n; ++d)
    if (box.offset[d] > g[d] || box.shape[d] > g[d] - box.offset[d])
      bad_argument("tensor", p.name,
                   ": box at " + shape_string(box.offset) + " of " + shape_string(box.shape) + " lies outside " + shape_string(g));
}

// The jobs of a box already checked, all with one fill (`whole_job`'s), dense at dst.
void box_jobs(const PlannedTensor& p, const FillJob& whole_job, const Box& box, void* dst, std::vector<FillJob>& out) {
  const Shape& g = p.memory_shape;
  const std::size_t n = g.size();
  if (n == 0) {  // a 0-d tensor: its one element
    FillJob j = whole_job;
    j.begin = 0;
    j.end = 1;
    j.dst = dst;
    out.push_back(j);
    return;
  }
  if (box.empty()) return;

  // Dimensions after k are whole in the box, so one index of dimensions 0..k-1 is one contiguous run
  // of box.shape[k] * (elements per index of dimension k) memory elements. Dimensions a..k-1 index the
  // runs of one job, evenly spaced stride[k - 1] apart, when a + 1..k - 1 are whole (dimension a may
  // be partial: its offset moves the first run); dimensions 0..a-1 index the jobs.
  std::size_t k = n - 1;
  while (k > 0 && box.offset[k] == 0 && box.shape[k] == g[k]) --k;
  std::size_t a = k == 0 ? 0 : k - 1;
  while (a > 0 && box.offset[a] == 0 && box.shape[a] == g[a]) --a;
  const Shape stride = dense_strides(g);  // of the whole tensor's memory, in elements
  const std::uint64_t run = box.shape[k] * stride[k];
  std::uint64_t runs = 1, jobs = 1;
  for (std::size_t d = a; d < k; ++d) runs *= box.shape[d];
  for (std::size_t d = 0; d < a; ++d) jobs *= box.shape[d];

  FillJob whole = whole_job;
  whole.runs = runs;
  whole.stride = k == 0 ? 0 : stride[k - 1];
  const std::uint64_t esize = dtype_size(p.dtype);
  std::uint64_t first = 0;  // memory element of the box's first element
  for (std::size_t d = a; d <= k; ++d) first += box.offset[d] * stride[d];
  auto* base = static_cast<unsigned char*>(dst);
  Shape index(a, 0);  // of the current job, within the box's dimensions 0..a-1
  out.reserve(out.size() + jobs);
  for (std::uint64_t i = 0; i < jobs; ++i) {
    std::uint64_t begin = first;
    for (std::size_t d = 0; d < a; ++d) begin += (box.offset[d] + index[d]) * stride[d];
    FillJob j = whole;
    j.begin = begin;
    j.end = begin + run;
    j.dst = base + i * runs * run * esize;
    out.push_back(j);
    next_index(index, box.shape);
  }
}

// The jobs of a box already checked, all with one fill (`job`'s), into a region of explicit strides
// whose last dimension is contiguous.
void strided_jobs(const PlannedTensor& p, const FillJob& job, const Box& box, const Region& dst, std::vector<FillJob>& out) {
  if (box.empty()) return;
  const std::size_t k = dst.strides.empty() ? 0 : dense_from(box.shape, dst.strides);
  if (k == 0) return box_jobs(p, job, box, dst.data, out);
  const std::uint64_t esize = dtype_size(p.dtype);
  const Shape& g = p.memory_shape;
  const std::size_t n = g.size();
  // Dimensions k.. are dense at dst and k - 1 is not. When the box is whole in memory past dimension
  // k, an index of dimensions 0..k-1 is one run of memory, so the indices of dimension k - 1 are runs
  // evenly spaced in memory and at dst: one job of box.shape[k - 1] runs per index of dimensions
  // 0..k-2 (a layer's [in, out] of a stack [in, L, out]: one job, not one per row; k = n, a strided
  // last dimension, runs of one element: a layer's [E] of norm scales [E, L]).
  bool whole_after = true;
  for (std::size_t d = k + 1; d < n; ++d) whole_after = whole_after && box.offset[d] == 0 && box.shape[d] == g[d];
  const Shape stride = dense_strides(g);
  const std::uint64_t run = k < n ? box.shape[k] * stride[k] : 1;
  if (whole_after && dst.strides[k - 1] >= run) {
    FillJob j = job;
    j.runs = box.shape[k - 1];
    j.stride = stride[k - 1];
    j.dst_stride = dst.strides[k - 1];
    Shape index(k - 1, 0);  // of the current job, within the box's dimensions 0..k-2
    do {
      std::uint64_t begin = 0, elem = 0;
      for (std::size_t d = 0; d < n; ++d) begin += (box.offset[d] + (d + 1 < k ? index[d] : 0)) * stride[d];
      for (std::size_t d = 0; d + 1 < k; ++d) elem += index[d] * dst.strides[d];
      j.begin = begin;
      j.end = begin + run;
      j.dst = static_cast<unsigned char*>(dst.data) + elem * esize;
      out.push_back(j);
    } while (next_index(index, box.shape));
    return;
  }
  // One dense sub-box per index of dimensions 0..k-1.
  Box sub = box;
  for (std::size_t d = 0; d < k; ++d) sub.shape[d] = 1;
  Shape index(k, 0);
  do {
    std::uint64_t elem = 0;
    for (std::size_t d = 0; d < k; ++d) {
      sub.offset[d] = box.offset[d] + index[d];
      elem += index[d] * dst.strides[d];
    }
    box_jobs(p, job, sub, static_cast<unsigned char*>(dst.data) + elem * esize, out);
  } while (next_index(index, box.shape));
}

// A part of a box filled with one fill: 0 the tensor's, r + 1 region r's.
struct Cut {
  Box box;
  std::size_t fill = 0;
};

// `box` as disjoint parts, each with the fill that wins there: the regions from the last (which wins
// over all before it), each taking its part of what no later region took; what is left has the
// tensor's fill. A box less a region is cut dimension by dimension, outermost first (the rows above
// and below it whole, then the columns beside it), so parts keep long runs. In memory order.
std::vector<Cut> cut(const Box& box, const std::vector<RegionParams>& regions) {
  std::vector<Cut> out;
  std::vector<Box> rest{box};
  for (std::size_t r = regions.size(); r-- > 0;) {
    std::vector<Box> left;
    for (const Box& b : rest) {
      if (const auto in = intersect(b, regions[r].box)) out.push_back({*in, r + 1});
      for (Box& part : subtract(b, regions[r].box)) left.push_back(std::move(part));
    }
    rest = std::move(left);
  }
  for (Box& b : rest) out.push_back({std::move(b), 0});
  std::sort(out.begin(), out.end(), [](const Cut& a, const Cut& b) { return a.box.offset < b.box.offset; });
  return out;
}

// The jobs of a box already checked into a region whose strides are checked: cut along the regions.
void cut_jobs(const PlannedTensor& p, const TensorFill& f, const Box& box, const Region& dst, std::vector<FillJob>& out) {
  if (f.regions.empty()) return strided_jobs(p, f.whole, box, dst, out);
  if (box.empty()) return;
  const Shape strides = dst.strides.empty() ? dense_strides(box.shape) : dst.strides;
  const std::uint64_t esize = dtype_size(p.dtype);
  for (const Cut& c : cut(box, f.regions)) {
    std::uint64_t at = 0;  // the part's first element in the region
    for (std::size_t d = 0; d < box.shape.size(); ++d) at += (c.box.offset[d] - box.offset[d]) * strides[d];
    FillJob job = f.whole;
    if (c.fill > 0) job.params = f.regions[c.fill - 1].params;
    strided_jobs(p, job, c.box, Region{static_cast<unsigned char*>(dst.data) + at * esize, strides}, out);
  }
}

}  // namespace

Shape dense_strides(const Shape& shape) {
  Shape s(shape.size(), 1);
  for (std::size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

std::size_t dense_from(const Shape& box_shape, const Shape& strides) {
  std::uint64_t expect = 1;
  for (std::size_t d = box_shape.size(); d-- > 0;) {
    if (box_shape[d] != 1 && strides[d] != expect) return d + 1;
    expect *= box_shape[d];
  }
  return 0;
}

TensorFill tensor_fill(const PlannedTensor& p, std::uint64_t seed) {
  TensorFill f{fill_job_for(p, nullptr, seed), {}};
  f.regions.reserve(p.regions.size());
  for (std::size_t k = 0; k < p.regions.size(); ++k) {
    const FillRegion& r = p.regions[k].region;
    if (const auto why = region_problem(r, p.shape)) bad_argument("tensor", p.name, ": " + region_label(k, r) + " " + *why);
    RegionParams rp{{r.offset, r.shape}, {}};
    try {
      rp.params = p.regions[k].params ? *p.regions[k].params : prepare_fill(r.fill, p.dtype);
    } catch (const std::invalid_argument& e) {
      bad_argument("tensor", p.name, ": " + region_label(k, r) + ": " + e.what());
    }
    if (p.transposed) {  // logical [out, in], memory [in, out]
      std::swap(rp.box.offset[0], rp.box.offset[1]);
      std::swap(rp.box.shape[0], rp.box.shape[1]);
    }
    f.regions.push_back(std::move(rp));
  }
  return f;
}

void tensor_fill_jobs(const PlannedTensor& p, void* dst, std::uint64_t seed, std::vector<FillJob>& out) {
  if (p.regions.empty()) {
    out.push_back(fill_job_for(p, dst, seed));
    return;
  }
  box_fill_jobs(p, tensor_fill(p, seed), whole_box(p.memory_shape), dst, out);
}

void box_fill_jobs(const PlannedTensor& p, const Box& box, void* dst, std::uint64_t seed, std::vector<FillJob>& out) {
  check_box(p, box);
  cut_jobs(p, tensor_fill(p, seed), box, Region{dst, {}}, out);
}

void box_fill_jobs(const PlannedTensor& p, const TensorFill& f, const Box& box, void* dst, std::vector<FillJob>& out) {
  check_box(p, box);
  cut_jobs(p, f, box, Region{dst, {}}, out);
}

void region_fill_jobs(const PlannedTensor& p, const Box& box, const Region& dst, std::uint64_t seed,
                      std::vector<FillJob>& out) {
  region_fill_jobs(p, tensor_fill(p, seed), box, dst, out);
}

void region_fill_jobs(const PlannedTensor& p, const TensorFill& f, const Box& box, const Region& dst,
                      std::vector<FillJob>& out) {
  check_box(p, box);
  const std::size_t n = box.shape.size();
  // The region's strides are its array's, as the box's shape is: a count apart is the caller's mistake.
  LAYERINIT_EXPECTS(dst.strides.empty() || dst.strides.size() == n,
                    "tensor " + quote(p.name) + ": " + std::to_string(dst.strides.size()) + " strides for a box of rank " +
                        std::to_string(n));
  if (box.empty()) return;
  cut_jobs(p, f, box, dst, out);
}

void range_fill_jobs(const PlannedTensor& p, const TensorFill& f, std::uint64_t first, std::uint64_t count, void* dst,
                     std::vector<FillJob>& out) {
  const Shape& g = p.memory_shape;
  const std::uint64_t total = numel(g);
  if (first > total || count > total - first)
    bad_argument("tensor", p.name,
                 ": elements " + std::to_string(first) + " .. " + std::to_string(first + count) + " of " + std::to_string(total));
  if (count == 0) return;
  if (f.regions.empty()) {
    FillJob j = f.whole;
    j.dst = dst;
    j.begin = first;
    j.end = first + count;
    out.push_back(j);
    return;
  }
  const std::size_t n = g.size();
  if (n == 0) return box_fill_jobs(p, f, Box{}, dst, out);
  // Greedily the longest box starting at `at`: the outermost dimension d whose blocks (stride[d]
  // elements) `at` starts and the range holds, as many of them as the range and dimension d allow.
  const Shape stride = dense_strides(g);
  const std::uint64_t esize = dtype_size(p.dtype);
  for (std::uint64_t at = first, end = first + count; at < end;) {
    std::size_t d = 0;
    while (d + 1 < n && (at % stride[d] != 0 || stride[d] > end - at)) ++d;
    Box b{Shape(n, 0), Shape(n, 1)};
    std::uint64_t rest = at;
    for (std::size_t e = 0; e < n; ++e) {
      b.offset[e] = rest / stride[e];
      rest %= stride[e];
    }
    b.shape[d] = std::min((end - at) / stride[d], g[d] - b.offset[d]);
    for (std::size_t e = d + 1; e < n; ++e) b.shape[e] = g[e];
    box_fill_jobs(p, f, b, static_cast<unsigned char*>(dst) + (at - first) * esize, out);
    at += b.shape[d] * stride[d];
  }
}

}  // namespace layerinit

#include <layerinit/shard/box_fill.hpp>

#include <stdexcept>

#include <layerinit/core/errors.hpp>

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

// box_fill_jobs of a box already checked.
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
    for (std::size_t d = a; d-- > 0;) {  // next index, the last dimension fastest
      if (++index[d] < box.shape[d]) break;
      index[d] = 0;
    }
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

void box_fill_jobs(const PlannedTensor& p, const Box& box, void* dst, std::uint64_t seed, std::vector<FillJob>& out) {
  check_box(p, box);
  box_jobs(p, fill_job_for(p, nullptr, seed), box, dst, out);
}

void box_fill_jobs(const PlannedTensor& p, const FillJob& whole, const Box& box, void* dst, std::vector<FillJob>& out) {
  check_box(p, box);
  box_jobs(p, whole, box, dst, out);
}

void region_fill_jobs(const PlannedTensor& p, const Box& box, const Region& dst, std::uint64_t seed,
                      std::vector<FillJob>& out) {
  region_fill_jobs(p, fill_job_for(p, nullptr, seed), box, dst, out);
}

void region_fill_jobs(const PlannedTensor& p, const FillJob& whole, const Box& box, const Region& dst,
                      std::vector<FillJob>& out) {
  check_box(p, box);
  const std::size_t n = box.shape.size();
  // The region's strides are its array's, as the box's shape is: a count apart is the caller's mistake.
  LAYERINIT_EXPECTS(dst.strides.empty() || dst.strides.size() == n,
                    "tensor " + quote(p.name) + ": " + std::to_string(dst.strides.size()) + " strides for a box of rank " +
                        std::to_string(n));
  if (box.empty()) return;
  const std::size_t k = dst.strides.empty() ? 0 : dense_from(box.shape, dst.strides);
  if (k == 0) return box_jobs(p, whole, box, dst.data, out);
  if (k == n)
    bad_argument("tensor", p.name, ": the region's last dimension is not contiguous (stride " + std::to_string(dst.strides[n - 1]) + ")");
  // One dense sub-box per index of dimensions 0..k-1.
  const std::uint64_t esize = dtype_size(p.dtype);
  Box sub = box;
  for (std::size_t d = 0; d < k; ++d) sub.shape[d] = 1;
  Shape index(k, 0);
  while (true) {
    std::uint64_t elem = 0;
    for (std::size_t d = 0; d < k; ++d) {
      sub.offset[d] = box.offset[d] + index[d];
      elem += index[d] * dst.strides[d];
    }
    box_jobs(p, whole, sub, static_cast<unsigned char*>(dst.data) + elem * esize, out);
    std::size_t d = k;
    while (d-- > 0) {  // next index, the last dimension fastest
      if (++index[d] < box.shape[d]) break;
      index[d] = 0;
    }
    if (d == static_cast<std::size_t>(-1)) break;
  }
}

}  // namespace layerinit

#include <layerinit/shard/box_fill.hpp>

#include <stdexcept>

#include <layerinit/core/text.hpp>

namespace layerinit {

void box_fill_jobs(const PlannedTensor& p, const Box& box, void* dst, std::uint64_t seed, std::vector<FillJob>& out) {
  const Shape& g = p.memory_shape;
  const std::size_t n = g.size();
  if (box.offset.size() != n || box.shape.size() != n)
    throw std::invalid_argument("tensor '" + printable(p.name) + "': a box of rank " + std::to_string(box.shape.size()) +
                                " for a tensor of rank " + std::to_string(n));
  for (std::size_t d = 0; d < n; ++d)
    if (box.offset[d] > g[d] || box.shape[d] > g[d] - box.offset[d])
      throw std::invalid_argument("tensor '" + printable(p.name) + "': box at " + shape_string(box.offset) + " of " +
                                  shape_string(box.shape) + " lies outside " + shape_string(g));
  if (n == 0 || box.empty()) return;

  // Dimensions after k are whole in the box, so one index of dimensions 0..k-1 is one contiguous run
  // of box.shape[k] * (elements per index of dimension k) memory elements. Dimensions a..k-1 index the
  // runs of one job, evenly spaced stride[k - 1] apart, when a + 1..k - 1 are whole (dimension a may
  // be partial: its offset moves the first run); dimensions 0..a-1 index the jobs.
  std::size_t k = n - 1;
  while (k > 0 && box.offset[k] == 0 && box.shape[k] == g[k]) --k;
  std::size_t a = k == 0 ? 0 : k - 1;
  while (a > 0 && box.offset[a] == 0 && box.shape[a] == g[a]) --a;
  Shape stride(n, 1);  // of the whole tensor's memory, in elements
  for (std::size_t d = n - 1; d-- > 0;) stride[d] = stride[d + 1] * g[d + 1];
  const std::uint64_t run = box.shape[k] * stride[k];
  std::uint64_t runs = 1, jobs = 1;
  for (std::size_t d = a; d < k; ++d) runs *= box.shape[d];
  for (std::size_t d = 0; d < a; ++d) jobs *= box.shape[d];

  FillJob whole = fill_job_for(p, nullptr, seed);
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

}  // namespace layerinit

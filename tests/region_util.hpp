// Helpers of the region tests (test_regions and the tests whose paths regions must pass: shard builds,
// parallel emits, composites): regions put on every tensor of a spec, and a tensor's bytes made the
// long way, independently of the region jobs under test.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include <layerinit/init/box_fill.hpp>
#include <layerinit/init/builder.hpp>

namespace layerinit::testing {

// `s` with regions on every tensor large enough: three on a 2-D tensor (a uniform box, a constant band
// of two rows across it, a trunc_normal column; each overlaps the one before it) and on a token
// embedding a zero pad row after them; a constant pair of elements on a 1-D one. Every fill is one
// each dtype holds, so the spec builds in fp32, fp16 and bf16.
inline ModelSpec with_regions(ModelSpec s) {
  auto add = [](TensorSpec& t) {
    if (t.shape.size() == 2 && t.shape[0] >= 4 && t.shape[1] >= 4) {
      const std::uint64_t R = t.shape[0], C = t.shape[1];
      t.regions.push_back({{1, 2}, {R / 2, C - 3}, FillSpec::uniform(-1, 1)});
      t.regions.push_back({{R / 4, 0}, {2, C}, FillSpec::constant(0.25)});
      t.regions.push_back({{R / 2, C / 2}, {R - R / 2, 1}, FillSpec::trunc_normal(0.5, 0.2, 0.2, 0.9)});
      if (t.role == TensorRole::embedding) t.regions.push_back({{3, 0}, {1, C}, FillSpec::constant(0)});
    } else if (t.shape.size() == 1 && t.shape[0] >= 4) {
      t.regions.push_back({{1}, {2}, FillSpec::constant(-3)});
    }
  };
  for (auto* list : {&s.pre, &s.layer.tensors, &s.post})
    for (TensorSpec& t : *list) add(t);
  return s;
}

// Tensor p's bytes in memory order as the contract says, made apart from the region jobs: the tensor
// filled whole with its own fill (fill_job_for: one job, its regions aside), then for each region in
// order the tensor filled whole with the region's fill, copied over the elements inside the region
// (in logical coordinates; their memory index is the transposed one when p is stored transposed).
inline std::vector<unsigned char> reference_fill(const PlannedTensor& p, std::uint64_t seed, backend& be) {
  const std::uint64_t es = dtype_size(p.dtype), n = p.numel();
  auto whole = [&](const FillSpec& f) {
    PlannedTensor q = p;
    q.fill = f;
    q.regions.clear();
    q.unprepare();
    std::vector<unsigned char> b(n * es);
    if (n == 0) return b;
    const FillJob j = fill_job_for(q, b.data(), seed);
    be.fill(std::span(&j, 1));
    be.synchronize();
    return b;
  };
  std::vector<unsigned char> out = whole(p.fill);
  const Shape& L = p.shape;
  const std::size_t r = L.size();
  const Shape ls = dense_strides(L);
  for (const PlannedRegion& pr : p.regions) {
    const std::vector<unsigned char> w = whole(pr.region.fill);
    for (std::uint64_t i = 0; i < n; ++i) {
      std::uint64_t rest = i;
      bool inside = true;
      Shape x(r);
      for (std::size_t d = 0; d < r; ++d) {
        x[d] = rest / ls[d];
        rest %= ls[d];
        inside = inside && x[d] >= pr.region.offset[d] && x[d] - pr.region.offset[d] < pr.region.shape[d];
      }
      if (!inside) continue;
      const std::uint64_t m = p.transposed ? x[1] * L[0] + x[0] : i;
      std::memcpy(out.data() + m * es, w.data() + m * es, es);
    }
  }
  return out;
}

}  // namespace layerinit::testing

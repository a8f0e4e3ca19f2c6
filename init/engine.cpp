#include <layerinit/init/engine.hpp>

#include <stdexcept>
#include <string>

#include <layerinit/core/errors.hpp>
#include <layerinit/core/text.hpp>
#include <layerinit/init/box_fill.hpp>

namespace layerinit {

void PlannedTensor::unprepare() {
  params.reset();
  for (PlannedRegion& r : regions) r.params.reset();
}

FillJob fill_job_for(const PlannedTensor& p, void* dst, std::uint64_t seed) {
  FillJob j = make_fill_job(dst, p.dtype, p.numel(), seed, p.name, p.params ? *p.params : prepare_fill(p.fill, p.dtype));
  if (p.transposed) {
    j.rows = p.shape[0];
    j.cols = p.shape[1];
    j.transposed = true;
  }
  return j;
}

std::vector<PartTensor> whole_tensors(std::span<const PlannedTensor> planned) {
  std::vector<PartTensor> out;
  out.reserve(planned.size());
  for (const auto& p : planned) out.push_back({&p, p.memory_shape, nullptr, std::nullopt});
  return out;
}

// builder.cpp's walk refuses a plan with such a slice too, before anything is made.
void check_stack_slot(const PlannedTensor& t, const StackSlot& slot) {
  if (slot.dtype != t.dtype)
    bad_argument("tensor", t.name,
                 "is " + std::string(dtype_name(t.dtype)) + " but its stacked buffer " + quote(slot.name) + " is " +
                     std::string(dtype_name(slot.dtype)) + " (a stacked layout needs one dtype per stacked buffer)");
}

std::vector<Tensor> Engine::fill_part(std::span<const PartTensor> part, const PartJobs& jobs) const {
  for (const PartTensor& t : part)
    if (t.stack) check_stack_slot(*t.tensor, *t.stack);
  std::vector<Tensor> made;
  std::vector<FillJob> fill;
  fill.reserve(part.size());
  for (std::size_t k = 0; k < part.size(); ++k) {
    void* dst = part[k].dst;
    if (dst == nullptr) {
      made.push_back(Tensor::allocate(*memory, part[k].tensor->name, part[k].shape, part[k].tensor->dtype));
      dst = made.back().view.data;
    }
    if (jobs) jobs(k, dst, fill);
    else tensor_fill_jobs(*part[k].tensor, dst, seed, fill);
  }
  be->fill(fill);
  if (after_part) after_part();
  return made;
}

}  // namespace layerinit

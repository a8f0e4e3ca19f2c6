#include "init/plan.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <stdexcept>

namespace layerinit {

namespace {
std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, const char* what) {
  if (a != 0 && b > UINT64_MAX / a) throw std::overflow_error(std::string(what) + " overflows 64 bits");
  return a * b;
}
}  // namespace

MemoryPlan make_memory_plan(const Builder& b) {
  const ModelSpec& spec = b.spec();
  MemoryPlan p;
  p.parameters = spec.parameter_count();
  p.bytes_fp32 = checked_mul(p.parameters, 4, "fp32 bytes");
  p.bytes_fp16 = p.bytes_bf16 = checked_mul(p.parameters, 2, "16-bit bytes");
  auto see = [&](const PlannedTensor& t) {
    if (t.bytes() > p.largest_tensor_bytes) p.largest_tensor_bytes = t.bytes(), p.largest_tensor = t.name;
    return t.bytes();
  };
  // Naive per-part strategy: after each part, every target-dtype part so far plus that part in fp32.
  std::uint64_t so_far = 0, per_part_peak = 0, largest_outside = 0;
  auto part = [&](std::uint64_t bytes, std::uint64_t fp32_bytes) {
    so_far += bytes;
    per_part_peak = std::max(per_part_peak, so_far + fp32_bytes);
  };
  std::uint64_t pre_fp32 = 0, post_fp32 = 0, layers_fp32 = 0;
  for (const auto& t : b.plan_pre()) {
    p.pre_bytes += see(t);
    pre_fp32 += t.numel() * 4;
    largest_outside = std::max(largest_outside, t.bytes());
  }
  part(p.pre_bytes, pre_fp32);
  for (std::uint64_t i = 0; i < spec.num_layers; ++i) {
    std::uint64_t layer = 0, layer_fp32 = 0;
    for (const auto& t : b.plan_layer(i)) layer += see(t), layer_fp32 += t.numel() * 4;
    p.layer_bytes.push_back(layer);
    p.largest_layer_bytes = std::max(p.largest_layer_bytes, layer);
    layers_fp32 += layer_fp32;
    part(layer, layer_fp32);
  }
  for (const auto& t : b.plan_post()) {
    p.post_bytes += see(t);
    post_fp32 += t.numel() * 4;
    largest_outside = std::max(largest_outside, t.bytes());
  }
  part(p.post_bytes, post_fp32);
  std::uint64_t layers = 0;
  for (auto l : p.layer_bytes) layers += l;
  p.weight_bytes = p.pre_bytes + layers + p.post_bytes;

  p.peak_stacked = p.weight_bytes;
  p.peak_per_layer = p.weight_bytes;
  p.peak_restack = p.weight_bytes + p.largest_layer_bytes;
  p.peak_streamed = std::max(p.largest_layer_bytes, largest_outside);
  p.peak_naive[0] = pre_fp32 + layers_fp32 + post_fp32 + p.weight_bytes;  // fp32 tree + cast tree
  p.peak_naive[1] = per_part_peak;
  p.peak_naive[2] = p.weight_bytes + layers;  // the list and the stack
  return p;
}

std::string_view training_setup_name(TrainingSetup s) {
  switch (s) {
    case TrainingSetup::mixed: return "mixed";
    case TrainingSetup::fp32: return "fp32";
    case TrainingSetup::pure_bf16: return "pure-bf16";
  }
  return "?";
}

TrainingSetup parse_training_setup(std::string_view s) {
  if (s == "mixed") return TrainingSetup::mixed;
  if (s == "fp32") return TrainingSetup::fp32;
  if (s == "pure-bf16") return TrainingSetup::pure_bf16;
  throw std::invalid_argument("unknown training precision '" + printable(s) + "' (valid: mixed, fp32, pure-bf16)");
}

std::string_view recompute_name(Recompute r) {
  switch (r) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
  }
  return "?";
}

namespace {
// Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", eq. (1)
// and section 5: bytes of 16-bit activations of one transformer layer.
std::optional<std::uint64_t> activation_bytes(const ModelSpec& spec, std::uint64_t b, std::uint64_t s, Recompute r) {
  const Hyper& h = spec.hyper;
  if (h.num_heads == 0 || h.hidden_size == 0) return std::nullopt;
  const double sbh = static_cast<double>(s) * static_cast<double>(b) * static_cast<double>(h.hidden_size);
  double bytes = 0;
  switch (r) {
    case Recompute::none:
      bytes = sbh * (34.0 + 5.0 * static_cast<double>(h.num_heads) * static_cast<double>(s) / static_cast<double>(h.hidden_size));
      break;
    case Recompute::selective: bytes = 34.0 * sbh; break;
    case Recompute::full: bytes = 2.0 * sbh; break;
  }
  if (!(bytes < 1.8e19)) throw std::overflow_error("activation bytes overflow 64 bits");
  return static_cast<std::uint64_t>(std::llround(bytes));
}
}  // namespace

TrainingEstimate estimate_training(const ModelSpec& spec, TrainingSetup setup, std::uint64_t batch, std::uint64_t seq) {
  const std::uint64_t n = spec.parameter_count();
  TrainingEstimate e;
  switch (setup) {
    case TrainingSetup::mixed:
      e.weights = checked_mul(n, 2, "weights"), e.gradients = checked_mul(n, 2, "gradients");
      e.optimizer = checked_mul(n, 8, "optimizer"), e.master = checked_mul(n, 4, "master weights");
      break;
    case TrainingSetup::fp32:
      e.weights = checked_mul(n, 4, "weights"), e.gradients = checked_mul(n, 4, "gradients");
      e.optimizer = checked_mul(n, 8, "optimizer");
      break;
    case TrainingSetup::pure_bf16:
      e.weights = checked_mul(n, 2, "weights"), e.gradients = checked_mul(n, 2, "gradients");
      e.optimizer = checked_mul(n, 4, "optimizer");
      break;
  }
  for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
    const auto per = activation_bytes(spec, batch, seq, r);
    e.activation_per_layer[static_cast<int>(r)] = per;
    if (per) e.activation_total[static_cast<int>(r)] = checked_mul(*per, spec.num_layers, "activation bytes");
  }
  return e;
}

std::uint64_t largest_batch(const ModelSpec& spec, TrainingSetup setup, std::uint64_t seq, Recompute r, std::uint64_t memory) {
  const TrainingEstimate one = estimate_training(spec, setup, 1, seq);
  const auto act = one.activation_total[static_cast<int>(r)];
  if (!act || *act == 0 || one.states() >= memory) return 0;
  // Activations are linear in the batch.
  return (memory - one.states()) / *act;
}

std::uint64_t parse_byte_size(std::string_view text) {
  std::string t(text);
  t.erase(std::remove_if(t.begin(), t.end(), [](unsigned char c) { return std::isspace(c); }), t.end());
  // A decimal number (digits, at most one '.', an optional exponent: 1.5, 1e3), then a unit. stod
  // alone also took hex ("0x10GiB" was 16 GiB), a sign, "inf" and "nan".
  std::size_t used = std::min(t.find_first_not_of("0123456789."), t.size());
  if (used > 0 && used < t.size() && (t[used] == 'e' || t[used] == 'E')) {
    std::size_t k = used + 1;
    if (k < t.size() && (t[k] == '+' || t[k] == '-')) ++k;
    const std::size_t digits_end = std::min(t.find_first_not_of("0123456789", k), t.size());
    if (digits_end > k) used = digits_end;
  }
  const std::string number = t.substr(0, used);
  double v = -1;
  if (number.find_first_of("0123456789") != std::string::npos && std::count(number.begin(), number.end(), '.') <= 1) {
    try {
      v = std::stod(number);
    } catch (const std::out_of_range&) {  // hundreds of digits: too large, refused below
      v = INFINITY;
    }
  }
  if (v < 0) throw std::invalid_argument("cannot read byte size '" + printable(text) + "' (e.g. 80GiB, 500MB, 1048576)");
  std::string unit = t.substr(used);
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "kb") scale = 1e3;
  else if (unit == "mb") scale = 1e6;
  else if (unit == "gb") scale = 1e9;
  else if (unit == "tb") scale = 1e12;
  else if (unit == "kib") scale = 1024.0;
  else if (unit == "mib") scale = 1024.0 * 1024;
  else if (unit == "gib") scale = 1024.0 * 1024 * 1024;
  else if (unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
  const double bytes = v * scale;
  if (scale == 0 || !std::isfinite(bytes) || bytes < 0 || bytes >= 1.8e19)
    throw std::invalid_argument("cannot read byte size '" + printable(text) + "' (e.g. 80GiB, 500MB, 1048576)");
  return static_cast<std::uint64_t>(bytes);
}

}  // namespace layerinit

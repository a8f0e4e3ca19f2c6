#include "report.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <stdexcept>

#include <layerinit/core/text.hpp>

namespace layerinit::cli {

std::string escape_non_utf8(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    if (const std::size_t n = utf8_sequence_length(s, i)) {
      out.append(s, i, n);
      i += n;
    } else {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(s[i++]));
      out += buf;
    }
  }
  return out;
}

std::string parameters_text(std::uint64_t parameters, std::uint64_t buffers) {
  return std::to_string(parameters) + " parameters" + (buffers ? ", " + std::to_string(buffers) + " buffer elements" : "");
}

nlohmann::ordered_json shape_json(const Shape& s) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (auto d : s) j.push_back(d);
  return j;
}

nlohmann::ordered_json tensors_json(const std::vector<TensorReport>& tensors) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& t : tensors) {
    nlohmann::ordered_json j{{"name", t.name}};
    if (t.global_shape.empty()) {
      j["shape"] = shape_json(t.shape);
    } else {
      j["global_shape"] = shape_json(t.global_shape);
      j["offset"] = shape_json(t.offset);
      j["local_shape"] = shape_json(t.shape);
    }
    j["dtype"] = dtype_name(t.dtype);
    j["bytes"] = t.bytes;
    if (t.hashed) j["xxh3_64"] = hex64(t.hash);  // else no one process saw all its bytes: layers only
    if (!t.layer_hashes.empty()) {
      nlohmann::ordered_json layers = nlohmann::ordered_json::array();
      for (auto h : t.layer_hashes) layers.push_back(hex64(h));
      j["layers"] = layers;
    }
    out.push_back(std::move(j));
  }
  return out;
}

void add_rank_json(nlohmann::ordered_json& out, const ParallelPlan& plan, std::uint64_t rank) {
  const ParallelDegrees& d = plan.degrees();
  const ParallelPlan::Coords c = plan.coords(rank);
  const Range layers = plan.stage_layers(c.pp);
  out["parallel"] = {{"pp", d.pp}, {"fsdp", d.fsdp}, {"ep", d.ep}, {"tp", d.tp}};
  out["ranks"] = plan.ranks();
  out["rank"] = rank;
  out["coords"] = {{"pp", c.pp}, {"fsdp", c.fsdp}, {"ep", c.ep}, {"tp", c.tp}};
  out["layers"] = {layers.offset, layers.size};
}

nlohmann::ordered_json report_header(const ModelSpec& spec, const BuildOptions& opts, const Recipe& recipe,
                                     const std::string& layout, const backend& be) {
  return nlohmann::ordered_json{{"model", spec.name},
                                {"dtype", dtype_name(opts.dtype)},
                                {"seed", opts.seed},
                                {"recipe", recipe.name()},
                                {"layout", layout},
                                {"orientation", orientation_name(opts.orientation)},
                                {"experts", expert_layout_name(opts.experts)},
                                {"backend", be.describe()}};
}

// The reason of a failed write is the errno it left: cleared here, so nothing older is reported.
void begin_stdout() { errno = 0; }

void check_stdout() {
  // A report larger than stdout's buffer fails while it is written (std::cout then stops writing);
  // a smaller one fails in this fflush. std::cout writes through stdout's buffer (sync_with_stdio).
  const int earlier = errno;
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int e = errno ? errno : earlier;
  if (!flushed || std::ferror(stdout) || !std::cout.flush())
    throw std::runtime_error(std::string("cannot write to standard output: ") + (e ? std::strerror(e) : "write error"));
}

std::string hex64(std::uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

void draw_progress(const char* unit, std::uint64_t done, std::uint64_t total, std::uint64_t bytes_done, std::uint64_t bytes_total,
                   double seconds) {
  const double frac = bytes_total ? static_cast<double>(bytes_done) / static_cast<double>(bytes_total) : 1.0;
  const double rate = seconds > 0 ? static_cast<double>(bytes_done) / seconds : 0.0;
  const double eta = rate > 0 ? static_cast<double>(bytes_total - bytes_done) / rate : 0.0;
  const int width = 30, filled = static_cast<int>(frac * width);
  std::fprintf(stderr, "\r[%.*s%*s] %s %llu/%llu  %.2f/%.2f GiB  %.0f MiB/s  ETA %.0f s ", filled, "##############################",
               width - filled, "", unit, static_cast<unsigned long long>(done), static_cast<unsigned long long>(total),
               static_cast<double>(bytes_done) / (1u << 30), static_cast<double>(bytes_total) / (1u << 30), rate / (1u << 20), eta);
  std::fflush(stderr);
}

}  // namespace layerinit::cli

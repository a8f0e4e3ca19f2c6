#include "report.hpp"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <utility>

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

namespace {

// A byte count in `unit` (1, 1e3, 1e6 or 1e9 bytes); the unit a count is shown in, and its name.
double in_unit(std::uint64_t bytes, double unit) { return static_cast<double>(bytes) / unit; }
std::pair<double, const char*> decimal_unit(double bytes) {
  if (bytes >= 1e9) return {1e9, "GB"};
  if (bytes >= 1e6) return {1e6, "MB"};
  if (bytes >= 1e3) return {1e3, "kB"};
  return {1, "B"};
}

// "12 s", "14 min", "3 h": rounded up, so a line never says 0 s while work is left.
std::string duration_text(double seconds) {
  const auto up = [](double x) { return static_cast<unsigned long long>(std::ceil(x)); };
  if (seconds < 120) return std::to_string(up(seconds)) + " s";
  if (seconds < 120 * 60) return std::to_string(up(seconds / 60)) + " min";
  return std::to_string(up(seconds / 3600)) + " h";
}

double interval_seconds(ProgressMode mode) {
  if (mode != ProgressMode::automatic) return 0;
  // A test hook: the interval of automatic lines, so a test sees them without a long run.
  if (const char* s = std::getenv("LAYERINIT_TEST_PROGRESS_INTERVAL")) return std::atof(s);
  return 5;
}

}  // namespace

Progress::Progress(const char* command, const char* unit, ProgressMode mode, bool speaks)
    : command_(command), unit_(unit), interval_(interval_seconds(mode)) {
  if (!speaks || mode == ProgressMode::never) return;
  style_ = isatty(STDERR_FILENO) ? Style::bar : Style::lines;
  // Lines count the interval from the start: a run shorter than it prints none.
  drawn_at_ = style_ == Style::bar ? -1.0 : 0.0;
}

void Progress::update(std::uint64_t done, std::uint64_t total, std::uint64_t bytes_done, std::uint64_t bytes_total,
                      double seconds) {
  const bool last = bytes_done >= bytes_total;
  const double frac = bytes_total ? static_cast<double>(bytes_done) / static_cast<double>(bytes_total) : 1.0;
  const double rate = seconds > 0 ? static_cast<double>(bytes_done) / seconds : 0.0;
  const double eta = rate > 0 ? static_cast<double>(bytes_total - std::min(bytes_done, bytes_total)) / rate : 0.0;
  if (style_ == Style::bar) {
    // Called after every part or chunk (tens of thousands for a MoE model): redrawn at most every 0.1 s.
    if (seconds - drawn_at_ < 0.1 && !last) return;
    drawn_at_ = seconds;
    const int width = 30, filled = static_cast<int>(frac * width);
    std::fprintf(stderr, "\r[%.*s%*s] %s %llu/%llu  %.2f/%.2f GiB  %.0f MiB/s  ETA %.0f s ", filled,
                 "##############################", width - filled, "", unit_, static_cast<unsigned long long>(done),
                 static_cast<unsigned long long>(total), static_cast<double>(bytes_done) / (1u << 30),
                 static_cast<double>(bytes_total) / (1u << 30), rate / (1u << 20), eta);
    std::fflush(stderr);
    bar_open_ = true;
    return;
  }
  if (style_ != Style::lines) return;
  // A line per 10% reached (a part that covers several tenths prints one), and not more often than
  // the interval: a log of a day-long emit stays short. The 100% line always closes what was begun.
  const int decile = last ? 10 : std::min(9, static_cast<int>(frac * 10));
  if (decile <= decile_) return;
  if (seconds - drawn_at_ < interval_ && !(last && lines_printed_)) return;
  decile_ = decile;
  drawn_at_ = seconds;
  lines_printed_ = true;
  const auto [unit, name] = decimal_unit(static_cast<double>(bytes_total));
  char buf[200];
  int n = std::snprintf(buf, sizeof buf, "layerinit: %s %d%% %.1f of %.1f %s", command_,
                        last ? 100 : std::min(99, static_cast<int>(frac * 100)), in_unit(bytes_done, unit),
                        in_unit(bytes_total, unit), name);
  if (rate > 0 && n > 0 && static_cast<std::size_t>(n) < sizeof buf) {
    const auto [runit, rname] = decimal_unit(rate);
    std::snprintf(buf + n, sizeof buf - static_cast<std::size_t>(n), ", %.1f %s/s, %s left", rate / runit, rname,
                  duration_text(eta).c_str());
  }
  std::fprintf(stderr, "%s\n", buf);
  std::fflush(stderr);
}

void Progress::end() {
  if (bar_open_) std::fprintf(stderr, "\n");
  bar_open_ = false;
}

}  // namespace layerinit::cli

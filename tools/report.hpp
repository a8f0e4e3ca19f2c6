// What the commands print: JSON reports and the checks that every byte of them reached stdout.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include <layerinit/checkpoint/emit.hpp>
#include <layerinit/init/builder.hpp>
#include <layerinit/shard/parallel.hpp>
#include "args.hpp"

namespace layerinit::cli {

// "N parameters", and ", M buffer elements" when there are buffers (DeepSeek-V3's router biases).
std::string parameters_text(std::uint64_t parameters, std::uint64_t buffers);

nlohmann::ordered_json shape_json(const Shape& s);
// `s` for a JSON string: bytes that are not part of valid UTF-8 (a path may hold any byte but '\0')
// become the four characters \xNN, so dump() cannot throw and the bytes stay recoverable.
std::string escape_non_utf8(const std::string& s);
std::string hex64(std::uint64_t h);

// The "tensors" array of a report: name, shape, dtype, bytes, xxh3_64 (and per-layer hashes); a
// rank's piece has global_shape, offset and local_shape instead of shape.
nlohmann::ordered_json tensors_json(const std::vector<TensorReport>& tensors);
// The fields of a rank's report: "parallel" {"pp", "fsdp", "ep", "tp"}, "ranks", "rank", "coords",
// "layers" [first, count].
void add_rank_json(nlohmann::ordered_json& out, const ParallelPlan& plan, std::uint64_t rank);

// The report fields build and emit share: model, dtype, seed, recipe, layout (as given: restack
// too), orientation, experts, backend.
nlohmann::ordered_json report_header(const ModelSpec& spec, const BuildOptions& opts, const Recipe& recipe,
                                     const std::string& layout, const backend& be);

// How far a long command is, on stderr; the one progress display of every command. On a terminal a
// bar redrawn in place (at most every 0.1 s): "[####   ] layers 3/32  1.20/13.49 GiB  512 MiB/s  ETA 24 s",
// `unit` naming what is counted. Elsewhere (a batch job's log: no carriage returns, no escapes) plain
// lines, one per 10% of the bytes reached: "layerinit: emit 37% 5.2 of 14.0 GB, 1.1 GB/s, 12 s left";
// under ProgressMode::automatic also at least 5 s apart (LAYERINIT_TEST_PROGRESS_INTERVAL seconds in
// tests), the last one (100%) once any was printed.
class Progress {
 public:
  // `speaks`: false for an MPI rank other than 0, which shows nothing.
  Progress(const char* command, const char* unit, ProgressMode mode, bool speaks = true);
  ~Progress() { end(); }  // a failure's line starts on a line of its own
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  void update(std::uint64_t done, std::uint64_t total, std::uint64_t bytes_done, std::uint64_t bytes_total, double seconds);
  // Ends the bar's line, before anything else is written to stderr or stdout (idempotent).
  void end();
  bool shown() const { return style_ != Style::none; }

 private:
  enum class Style { none, bar, lines };
  Style style_ = Style::none;
  const char* command_;
  const char* unit_;
  double interval_ = 0;     // lines: seconds at least between two
  double drawn_at_ = 0;     // seconds of the last bar or line
  int decile_ = 0;          // lines: tenths of the bytes reached by the last line
  bool lines_printed_ = false;
  bool bar_open_ = false;
};

// Reports and tables go to stdout. begin_stdout() before writing one, check_stdout() after: it throws
// std::runtime_error "cannot write to standard output: <reason>" (exit 1) when any of it was lost to a
// full disk, a closed pipe or another write error, so a lost report never passes as success.
void begin_stdout();
void check_stdout();

}  // namespace layerinit::cli

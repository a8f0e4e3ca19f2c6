// layerinit: build, plan and emit model parameters layer by layer.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <new>

#include "init/spec_json.hpp"
#include "layerinit/config.hpp"
#include "memory/errors.hpp"
#include "tools/common.hpp"

int main(int argc, char** argv) {
  using namespace layerinit;
  using namespace layerinit::cli;
  CLI::App app{"layerinit " LAYERINIT_VERSION ": model parameters created layer by layer, directly in fp16/bf16, "
               "with values that depend only on (seed, tensor name, element index)."};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("layerinit ") + LAYERINIT_VERSION);

  ModelArgs build_args;
  std::string build_report, build_trace;
  auto* build = app.add_subcommand("build", "Build a model in memory and report its tensors, hashes, peak memory and time");
  build_args.add_model_flags(*build);
  build_args.add_build_flags(*build, "per-layer, stacked, restack (per-layer, then stack in place)");
  build_args.add_backend_flags(*build);
  build->add_option("--report", build_report, "Print a machine-readable report: json");
  build->add_option("--trace", build_trace, "Write bytes in use after each allocation and free to a CSV file");

  try {
    app.parse(argc, argv);
    if (*build) return build_command(build_args, build_report, build_trace);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "layerinit: error: %s (see --help)\n", e.what());
    return 2;
  } catch (const std::invalid_argument& e) {  // bad input: usage_error, spec_error, unknown names
    std::fprintf(stderr, "layerinit: error: %s\n", e.what());
    return 2;
  } catch (const std::overflow_error& e) {
    std::fprintf(stderr, "layerinit: error: %s\n", e.what());
    return 2;
  } catch (const out_of_memory& e) {
    std::fprintf(stderr, "layerinit: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "layerinit: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

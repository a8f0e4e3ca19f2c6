// layerinit verify: is a checkpoint the init it claims? (checkpoint/verify.hpp, docs/checkpoint.md "Verify")
#include <cstdio>
#include <iostream>
#include <optional>

#include <layerinit/backends/backend.hpp>
#include <layerinit/checkpoint/reader.hpp>
#include <layerinit/checkpoint/verify.hpp>
#include <layerinit/checkpoint/verify_document.hpp>
#include <layerinit/core/bytes.hpp>
#include <layerinit/core/text.hpp>
#include <layerinit/memory/tracking.hpp>
#include <layerinit/plan/memory_check.hpp>
#include "commands.hpp"
#include "report.hpp"

namespace layerinit::cli {

namespace {

bool given_flag(const CLI::App& app, const char* flag) { return app.get_option(flag)->count() > 0; }

nlohmann::ordered_json pairs_json(const std::vector<std::pair<std::string, std::string>>& v) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& [pattern, value] : v) out.push_back({pattern, value});
  return out;
}

}  // namespace

int verify_command(const ModelArgs& args, const VerifyArgs& va, const CLI::App& app) {
  Progress progress("verify", "tensors", args.progress_mode());
  const std::string shown = printable(va.path);
  const std::unique_ptr<CheckpointReader> reader = open_checkpoint_reader(va.path);
  const std::optional<CheckpointClaim> claim = claim_from_metadata(reader->metadata());

  // The model: the flags', else the one the checkpoint says it holds.
  const bool model_flags = given_flag(app, "--preset") || given_flag(app, "--spec") || given_flag(app, "--hf-config");
  if (!model_flags && !claim)
    throw bad_input("checkpoint", shown, "has no layerinit metadata (model_spec): give the model it should hold (--preset, "
                    "--spec or --hf-config) and the options it was made with",
                    shown + " has no layerinit metadata (model_spec): give the model it should hold (--preset, --spec or "
                            "--hf-config) and the options it was made with");
  const ModelSpec spec = model_flags ? args.load_spec() : claim->spec;

  // Each build option: the flag when given, else the checkpoint's (when layerinit wrote it), else emit's default.
  const OptionsText flags = args.options_text();
  GivenOptions given;
  if (given_flag(app, "--dtype")) given.dtype = flags.dtype;
  if (given_flag(app, "--dtype-override")) given.dtype_overrides = flags.dtype_overrides;
  if (given_flag(app, "--recipe")) given.recipe = flags.recipe;
  if (given_flag(app, "--init-override")) given.init_overrides = flags.init_overrides;
  if (given_flag(app, "--seed")) given.seed = flags.seed;
  if (given_flag(app, "--layout")) given.layout = flags.layout;
  if (given_flag(app, "--orientation")) given.orientation = flags.orientation;
  if (given_flag(app, "--experts")) given.experts = flags.experts;
  const OptionsText text = claimed_options(claim, given);
  const Recipe recipe = checked_recipe(text, OptionNames::cli);
  const BuildOptions opts = checked_build_options(text, OptionNames::cli, spec);
  args.check_overrides(spec, recipe, opts);

  // verify fills on the host (the stored values are there): the CPU backend, whatever else the machine has.
  const std::unique_ptr<backend> be = make_backend("cpu", args.threads);
  tracking_resource tracker(be->memory());
  const Builder builder(spec, recipe, opts, *be, tracker);
  VerifyOptions vo;
  // Before any tensor of the model is looked at, as emit: a model_spec claiming 2^40 layers was walked
  // for minutes.
  check_memory(args, *be, verify_memory_need(builder, vo.chunk_bytes));
  check_same_model(spec, builder, *reader, va.path);

  vo.diagnose = !va.no_diagnose;
  vo.seeds = va.seed_guesses;
  // A signal ends the process at once (exit 130, "layerinit: interrupted"): verify writes nothing.
  if (progress.shown())
    vo.progress = [&progress](const VerifyProgress& p) {
      progress.update(p.tensors_done, p.tensors_total, p.bytes_done, p.bytes_total, p.seconds);
    };
  const VerifyReport report = verify_checkpoint(builder, *reader, vo);
  progress.end();

  const char* source = model_flags ? "flags" : "metadata";
  begin_stdout();
  if (va.report == "json") {
    nlohmann::ordered_json out{{"path", escape_non_utf8(va.path)}, {"format", std::string(reader->format())}, {"source", source}};
    // model, dtype, seed, recipe, layout, orientation, experts, backend ("cpu (N threads)") as build's and emit's.
    const nlohmann::ordered_json header =
        report_header(spec, opts, recipe, opts.layout == Layout::stacked ? "stacked" : "per-layer", *be);
    for (const auto& [key, value] : header.items()) out[key] = value;
    out["dtype_overrides"] = pairs_json(text.dtype_overrides);
    out["init_overrides"] = pairs_json(text.init_overrides);
    // The tensor fields are the library's (verify_report_document), as layerinit.verify gives them.
    nlohmann::ordered_json fields = verify_report_document(report);
    for (auto& [key, value] : fields.items()) out[key] = std::move(value);
    std::cout << out.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  } else {
    std::printf("%s: %s of %s (from %s), %s, seed %llu, recipe %s, layout %s, orientation %s\n", shown.c_str(),
                std::string(reader->format()).c_str(), printable(spec.name).c_str(),
                model_flags ? "the flags" : "its metadata", std::string(dtype_name(opts.dtype)).c_str(),
                static_cast<unsigned long long>(opts.seed), printable(recipe.name()).c_str(),
                opts.layout == Layout::stacked ? "stacked" : "per-layer", std::string(orientation_name(opts.orientation)).c_str());
    std::fputs(verify_report_text(report, va.all).c_str(), stdout);
    std::printf("read %s in %.2f s\n", format_bytes_short(report.bytes_read).c_str(), report.seconds);
  }
  check_stdout();
  return report.ok() ? 0 : 1;
}

}  // namespace layerinit::cli

#include "tilenorm/autotune/cli_options.hpp"

#include <algorithm>
#include <memory>

#include "tilenorm/autotune/cli11.hpp"
#include "tilenorm/kernels/programs.hpp"
#include "tilenorm/runtime/heuristics.hpp"
#include "tilenorm/runtime/tuning_db.hpp"

namespace tilenorm {
namespace {

constexpr std::int64_t kMaxN = std::int64_t{1} << 30;  // codegen's limit
constexpr std::int64_t kMaxM = std::int64_t{1} << 40;

constexpr const char* kDescription =
    R"(usage: tilenorm-tune [options]          tune and store the winners
       tilenorm-tune show [--db PATH]     print what a tuning database holds
       tilenorm-tune merge OUT IN...      merge databases into OUT (the faster entry wins)

Tunes built-in kernels on GPU 0: every configuration of the pruned search space is compiled,
checked against the fp64 interpreter and timed; the winner per (kernel, dtype, N, M) is written
to the tuning database, which the runtime reads. See docs/autotuning.md.)";

constexpr const char* kFooter =
    R"(--all tunes every built-in kernel x {bf16, fp32} x N in {128, 256, 512, 1024, 2048, 2880,
4096, 5120, 7168, 8192, 12288, 16384, 32768, 65536, 131072, 262144}; --kernel, --dtype and --n
narrow it. Lists take commas or repeated flags; --flag=value works for every option.

exit status: 0 ok, 1 some shapes failed (or an error), 2 usage error, 3 no GPU (use --dry-run,
or run on a GPU machine))";

template <class T>
void append_unique(std::vector<T>& list, const T& value) {
  if (std::find(list.begin(), list.end(), value) == list.end()) list.push_back(value);
}

// Every value of a repeatable list option, split at commas and converted by `parse`.
template <class T, class Parse>
void convert_list(std::string_view flag, const std::vector<std::string>& texts, std::vector<T>& out,
                  Parse parse) {
  for (const auto& text : texts) {
    for (const auto& item : cli::split_list(flag, text)) append_unique(out, parse(item));
  }
}

// The command line as CLI11 sees it: flags bind straight to the command structs; list and
// number options are kept as text and checked in finish_tune, so every message has one form.
struct Parser {
  CLI::App app{kDescription, "tilenorm-tune"};
  TuneCommand tune;
  ShowCommand show;
  MergeCommand merge;
  std::vector<std::string> kernels, dtypes, ns, ms, passes;
  std::string db, show_db, merge_output;
  std::vector<std::string> merge_inputs;
  bool all = false;
  CLI::App* show_app = nullptr;
  CLI::App* merge_app = nullptr;

  Parser() {
    app.footer(kFooter);
    cli::add_common_flags(app, "tilenorm-tune");
    // One line per option.
    cli::add_values(app, "--kernel", kernels,
                    "built-in kernels (default: all): layer_norm, layer_norm_no_bias, "
                    "layer_norm_no_affine, rms_norm, rms_norm_no_weight",
                    "NAME[,...]");
    cli::add_values(app, "--pass", passes,
                    "forward (default), backward (the derived backward reading the saved "
                    "statistics: <kernel>_backward) and recompute (<kernel>_backward_recompute); "
                    "the pass is part of the tuned program's identity, so of its database key",
                    "PASS[,...]");
    cli::add_values(app, "--dtype", dtypes,
                    "bf16, fp16 or fp32, or IO/PARAM such as bf16/fp32 (default: bf16,fp32)",
                    "T[,...]");
    cli::add_values(app, "--n", ns, "row lengths (hidden sizes) to tune; required unless --all",
                    "N[,...]");
    cli::add_values(app, "--m", ms,
                    "row counts to time (default per N: 2^26/N rounded up to a power of two, "
                    "and 256)",
                    "M[,...]");
    app.add_flag("--all", all, "every built-in kernel, dtype bf16 and fp32, and N (see below)");
    cli::add_value(app, "--db", db,
                   "the tuning database to update (default: $TILENORM_TUNING_DB, else "
                   "<cache dir>/tuning.json)",
                   "PATH");
    app.add_flag("--dry-run", tune.dry_run,
                 "list the search space per shape and why configurations were pruned; needs "
                 "no GPU");
    app.add_flag("--list-pruned", tune.list_pruned,
                 "with --dry-run: every pruned configuration with its reason");
    app.add_flag("--quiet", tune.quiet, "no progress bar and no per-shape detail; tables only");
    app.add_flag("--show-candidates", tune.show_candidates,
                 "after the tables, every timed candidate of each shape with its first-round "
                 "time and % of the copy ceiling (also with --quiet)");
    cli::add_value(app, "--arch", tune.arch,
                   "with --dry-run: the limits of a known GPU instead of this machine's: A100, "
                   "L40S, H100, H200, B200, or sm_80, sm_89, sm_90, sm_100",
                   "DEVICE");

    show_app = app.add_subcommand("show", "print what a tuning database holds");
    cli::add_value(*show_app, "--db", show_db,
                   "the database (default: $TILENORM_TUNING_DB, else <cache dir>/tuning.json)",
                   "PATH");
    merge_app = app.add_subcommand(
        "merge", "merge databases into OUT; for a key in several files the faster entry wins");
    merge_app->add_option("OUT", merge_output, "the database to update")->required();
    merge_app->add_option("IN", merge_inputs, "the databases to merge into it")->required();
    app.require_subcommand(0, 1);
  }

  // The tune options given along with a subcommand, which would be silently ignored.
  void reject_tune_options(const std::string& subcommand) const {
    for (const CLI::Option* option : app.get_options()) {
      const std::string name = option->get_name();
      if (option->count() > 0 && name != "--help" && name != "--version") {
        throw UsageError(name + " does not apply to '" + subcommand + "' (see " + subcommand +
                         " --help)");
      }
    }
  }

  CliCommand finish() {
    if (show_app->parsed()) {
      reject_tune_options("show");
      if (show_app->count("--db") && show_db.empty())
        throw UsageError("--db needs a non-empty path");
      show.db = show_db;
      return show;
    }
    if (merge_app->parsed()) {
      reject_tune_options("merge");
      merge.output = merge_output;
      merge.inputs.assign(merge_inputs.begin(), merge_inputs.end());
      return merge;
    }
    return finish_tune();
  }

  // Each kernel once per pass: layer_norm with --pass backward is layer_norm_backward.
  std::vector<std::string> with_passes(const std::vector<std::string>& kernels) const {
    std::vector<std::string> pass_names;
    convert_list("--pass", passes, pass_names, [](const std::string& text) { return text; });
    if (pass_names.empty()) return kernels;
    std::vector<std::string> expanded;
    for (const std::string& pass : pass_names) {
      const char* suffix = pass == "forward"     ? ""
                           : pass == "backward"  ? "_backward"
                           : pass == "recompute" ? "_backward_recompute"
                                                 : nullptr;
      if (!suffix) {
        throw UsageError("--pass: unknown pass '" + pass +
                         "' (expected forward, backward or recompute)");
      }
      for (const std::string& kernel : kernels) {
        if (kernel.find("_backward") != std::string::npos) {
          throw UsageError("--pass with --kernel " + kernel +
                           ": name the forward kernel, the pass picks its backward");
        }
        expanded.push_back(cli::parse_kernel_name("--kernel", kernel + suffix));
      }
    }
    return expanded;
  }

  TuneCommand finish_tune() {
    convert_list("--kernel", kernels, tune.kernels,
                 [](const std::string& text) { return cli::parse_kernel_name("--kernel", text); });
    convert_list("--dtype", dtypes, tune.dtypes,
                 [](const std::string& text) { return cli::parse_dtype_choice("--dtype", text); });
    convert_list("--n", ns, tune.ns,
                 [](const std::string& text) { return cli::parse_integer("--n", text, 1, kMaxN); });
    convert_list("--m", ms, tune.ms,
                 [](const std::string& text) { return cli::parse_integer("--m", text, 1, kMaxM); });
    if (tune.list_pruned && !tune.dry_run) {
      throw UsageError("--list-pruned only works with --dry-run");
    }
    if (!tune.arch.empty()) {
      if (!tune.dry_run)
        throw UsageError("--arch only works with --dry-run (tuning times this GPU)");
      try {
        known_device(tune.arch);
      } catch (const Error& e) {
        throw UsageError(std::string("--arch: ") + e.what());
      }
    }
    if (tune.ns.empty()) {
      if (!all) {
        throw UsageError("say which row lengths to tune with --n N,... or use --all (see --help)");
      }
      tune.ns = all_hidden_sizes();
    }
    if (tune.kernels.empty()) {
      for (const auto& kernel : kernels::builtin_kernels()) {
        if (kernel.name.find("_backward") == std::string::npos) tune.kernels.push_back(kernel.name);
      }
    }
    tune.kernels = with_passes(tune.kernels);
    if (tune.dtypes.empty()) tune.dtypes = {{DType::bf16, DType::bf16}, {DType::f32, DType::f32}};
    if (app.count("--db") && db.empty()) throw UsageError("--db needs a non-empty path");
    tune.db = db;
    return tune;
  }
};

}  // namespace

CliCommand parse_command_line(const std::vector<std::string>& args) {
  Parser parser;
  try {
    cli::parse(parser.app, args);
  } catch (const cli::InfoRequest& info) {
    return HelpCommand{info.text};
  }
  return parser.finish();
}

std::filesystem::path database_path(const std::filesystem::path& db) {
  return db.empty() ? default_tuning_db_path() : db;
}

std::string usage_text() {
  return Parser().app.help();
}

const std::vector<std::int64_t>& all_hidden_sizes() {
  static const std::vector<std::int64_t> sizes = {128,   256,   512,    1024,  2048,  2880,
                                                  4096,  5120,  7168,   8192,  12288, 16384,
                                                  32768, 65536, 131072, 262144};
  return sizes;
}

}  // namespace tilenorm

// tilenorm-tune: the autotuner's command line (usage in --help and docs/autotuning.md).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "tilenorm/autotune/cli_options.hpp"
#include "tilenorm/autotune/search_space.hpp"
#include "tilenorm/autotune/tuner.hpp"
#include "tilenorm/autotune/tuning_db_writer.hpp"
#include "tilenorm/dsl/reflect.hpp"
#include "tilenorm/kernels/programs.hpp"
#include "tilenorm/runtime/driver.hpp"
#include "tilenorm/runtime/runtime.hpp"
#include "tilenorm/runtime/tuning_db.hpp"

namespace {

namespace tn = tilenorm;

constexpr int kExitOk = tn::cli::kExitOk;
constexpr int kExitSomeFailed = tn::cli::kExitFailure;
constexpr int kExitNoGpu = tn::cli::kExitNoGpu;

// Columns padded to their widest cell; numbers (and "-") right-aligned.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }

  void print(std::ostream& out) const {
    std::vector<std::size_t> widths(rows_.front().size(), 0);
    for (const auto& row : rows_) {
      for (std::size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
    }
    for (std::size_t r = 0; r < rows_.size(); ++r) {
      std::string line;
      for (std::size_t c = 0; c < rows_[r].size(); ++c) {
        const std::string& cell = rows_[r][c];
        const std::string padding(widths[c] - cell.size(), ' ');
        const bool numeric =
            r > 0 && !cell.empty() && cell.find_first_not_of("0123456789.-x") == std::string::npos;
        line += (c ? "  " : "") + (numeric ? padding + cell : cell + padding);
      }
      out << line.substr(0, line.find_last_not_of(' ') + 1) << "\n";
    }
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

std::string duration(double seconds) {
  const long total = static_cast<long>(seconds + 0.5);
  char text[32];
  std::snprintf(text, sizeof text, "%ld:%02ld", total / 60, total % 60);
  return text;
}

// A bar with ETA on stderr, redrawn in place on a terminal; elsewhere one line per stage.
class ProgressBar {
 public:
  ProgressBar() : terminal_(isatty(STDERR_FILENO) == 1), start_(std::chrono::steady_clock::now()) {}

  void update(const tn::TuneProgress& progress) {
    const auto now = std::chrono::steady_clock::now();
    const bool new_stage = progress.stage != stage_;
    if (!new_stage && progress.done != progress.total &&
        now - last_draw_ < std::chrono::milliseconds(100))
      return;
    stage_ = std::string(progress.stage);
    last_draw_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double fraction =
        progress.total ? static_cast<double>(progress.done) / static_cast<double>(progress.total)
                       : 1.0;
    const std::string eta = progress.done ? duration(elapsed * (1 - fraction) / fraction) : "?";
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(fraction * kWidth);
    const std::string line = "[" + std::string(filled, '#') + std::string(kWidth - filled, '.') +
                             "] " + std::to_string(static_cast<int>(fraction * 100)) + "% " +
                             std::to_string(progress.done) + "/" + std::to_string(progress.total) +
                             " elapsed " + duration(elapsed) + " ETA " + eta + "  " + stage_;
    if (terminal_) {
      std::cerr << "\r" << line << "\033[K" << std::flush;
    } else if (new_stage) {
      std::cerr << line << "\n";
    }
  }

  void finish() const {
    if (terminal_) std::cerr << "\n";
  }

 private:
  bool terminal_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_{};
  std::string stage_;
};

std::vector<tn::TuneShape> shapes_of(const tn::TuneCommand& command) {
  std::vector<tn::TuneShape> shapes;
  for (const auto& kernel : command.kernels) {
    for (const auto& dtype : command.dtypes) {
      for (std::int64_t n : command.ns) {
        shapes.push_back({kernel, tn::kernels::builtin_program(kernel), dtype.io, dtype.param, n,
                          command.ms.empty() ? tn::default_row_counts(n) : command.ms});
      }
    }
  }
  return shapes;
}

std::string join_counts(const std::vector<std::int64_t>& values) {
  std::string text;
  for (std::int64_t v : values) text += (text.empty() ? "" : ", ") + std::to_string(v);
  return text;
}

int dry_run(const tn::TuneCommand& command) {
  tn::DeviceLimits limits = tn::DeviceLimits::hopper();
  std::string limits_source = "no GPU: H200 limits";
  if (!command.arch.empty()) {
    limits = tn::known_device(command.arch);
    limits_source = std::string(limits.name) + " (" + limits.arch() + ") limits";
  } else if (tn::driver::gpu_available()) {
    const tn::driver::DeviceInfo info = tn::driver::device_info(0);
    limits = tn::device_limits(info);
    limits_source = info.name;
  }
  std::cout << "search space (" << limits_source << ", " << limits.shared_memory_per_block
            << " bytes of shared memory per block, " << limits.multiprocessors << " SMs, "
            << limits.l2_bytes / (1 << 20) << " MiB of L2"
            << (limits.cooperative_launch ? "" : ", no cooperative launches (no software clusters)")
            << ")\n";
  std::size_t shapes = 0, most = 0, least = static_cast<std::size_t>(-1), candidates = 0;
  Table summary({"kernel", "dtype", "N", "configs", "pruned", "candidates", "heuristic in space"});
  for (const tn::TuneShape& shape : shapes_of(command)) {
    const tn::LoweredProgram lowered = tn::lower(shape.program);
    const tn::SearchSpace space =
        tn::explore_search_space(lowered, shape.io_dtype, shape.param_dtype, shape.n, limits);
    // The runtime's choice for each timed M (fewer rows may change it), each in the space or
    // timed as well.
    std::vector<tn::KernelConfig> heuristics;
    for (std::int64_t m : shape.row_counts) {
      heuristics.push_back(tn::contiguous_rows_heuristic(lowered, shape.io_dtype, shape.param_dtype,
                                                         shape.n, limits, m));
    }
    const bool heuristic_in_space =
        std::all_of(heuristics.begin(), heuristics.end(),
                    [&](const tn::KernelConfig& config) { return space.contains(config); });
    ++shapes;
    most = std::max(most, space.candidates.size());
    least = std::min(least, space.candidates.size());
    candidates += space.candidates.size();
    const std::string dtype = tn::tuning_dtype_key(shape.io_dtype, shape.param_dtype);
    summary.add({shape.kernel, dtype, std::to_string(shape.n), std::to_string(space.total()),
                 std::to_string(space.pruned.size()), std::to_string(space.candidates.size()),
                 heuristic_in_space ? "yes" : "no"});
    if (command.quiet) continue;
    std::cout << "\n"
              << shape.kernel << " " << dtype << " N=" << shape.n << ": " << space.candidates.size()
              << " candidates of " << space.total()
              << " configurations; M = " << join_counts(shape.row_counts) << "\n";
    for (std::size_t i = 0; i < heuristics.size(); ++i) {
      if (i > 0 && heuristics[i] == heuristics[0]) continue;
      std::cout << "  heuristic" << (i > 0 ? " at M = " + std::to_string(shape.row_counts[i]) : "")
                << ": " << tn::short_config(heuristics[i])
                << (space.contains(heuristics[i]) ? " (in the space)" : " (timed as well)") << "\n";
    }
    for (const tn::Candidate& candidate : space.candidates) {
      std::cout << "  candidate " << tn::short_config(candidate.config);
      if (candidate.dynamic_shared_bytes) {
        std::cout << " (" << candidate.dynamic_shared_bytes << " B shared)";
      }
      std::cout << "\n";
    }
    std::map<tn::PruneRule, std::size_t> by_rule;
    for (const tn::PrunedCandidate& pruned : space.pruned) ++by_rule[pruned.rule];
    std::cout << "  pruned " << space.pruned.size() << ":";
    for (const auto& [rule, count] : by_rule) {
      std::cout << " " << tn::prune_rule_name(rule) << " " << count << ";";
    }
    std::cout << "\n";
    if (command.list_pruned) {
      for (const tn::PrunedCandidate& pruned : space.pruned) {
        std::cout << "    " << tn::short_config(pruned.config) << ": " << pruned.reason << "\n";
      }
    }
  }
  std::cout << "\n";
  summary.print(std::cout);
  std::cout << "\n"
            << shapes << " shapes; candidates per shape: " << least << " to " << most << ", "
            << candidates << " in all\n";
  return kExitOk;
}

// Each shape's timed candidates, fastest first, as % of the copy ceiling.
void print_candidates(const tn::TuneReport& report) {
  for (const tn::TuneResult& r : report.results) {
    if (r.first_round.empty()) continue;
    const double fastest_percent = r.percent_of_copy > 0 ? r.percent_of_copy : 0;
    const double fastest_us = r.median_us > 0 ? r.median_us : r.first_round.front().median_us;
    std::cout << "\n"
              << r.kernel << " " << tn::tuning_dtype_key(r.io_dtype, r.param_dtype) << " N=" << r.n
              << " M=" << r.m << ": " << r.first_round.size()
              << " candidates timed (first round)\n";
    for (const tn::TimedCandidate& c : r.first_round) {
      std::cout << "  " << fixed(c.median_us, 2) << " us  "
                << fixed(fastest_percent * fastest_us / c.median_us, 1) << "% copy  "
                << tn::short_config(c.config) << "\n";
    }
  }
}

void print_results(const tn::TuneReport& report, bool quiet) {
  bool wrong_results = false;
  Table table({"kernel", "dtype", "N", "M", "chosen config", "us", "TB/s", "% copy",
               "heuristic config", "heuristic us", "speedup", "candidates t/p/f/timed"});
  for (const tn::TuneResult& r : report.results) {
    const std::string dtype = tn::tuning_dtype_key(r.io_dtype, r.param_dtype);
    const std::string counts = std::to_string(r.total) + "/" + std::to_string(r.pruned) + "/" +
                               std::to_string(r.failed) + "/" + std::to_string(r.timed);
    if (!r.ok) {
      table.add({r.kernel, dtype, std::to_string(r.n), std::to_string(r.m), "FAILED", "-", "-", "-",
                 tn::short_config(r.heuristic), "-", "-", counts});
      continue;
    }
    table.add({r.kernel, dtype, std::to_string(r.n), std::to_string(r.m),
               tn::short_config(r.chosen), fixed(r.median_us, 2), fixed(r.tbps, 2),
               fixed(r.percent_of_copy, 1), tn::short_config(r.heuristic),
               r.heuristic_us > 0 ? fixed(r.heuristic_us, 2) : "-",
               r.speedup > 0 ? fixed(r.speedup, 2) + "x" : "-", counts});
  }
  std::cout << "\n";
  table.print(std::cout);
  for (const tn::TuneResult& r : report.results) {
    const std::string name = r.kernel + " " + tn::tuning_dtype_key(r.io_dtype, r.param_dtype) +
                             " N=" + std::to_string(r.n) + " M=" + std::to_string(r.m);
    if (!r.ok) std::cout << "\nFAILED " << name << ": " << r.error << "\n";
    // Quiet, only the candidates whose check failed: a wrong result is a bug, not a speed.
    const auto shown = [quiet](const tn::CandidateFailure& failure) {
      return !quiet || failure.kind == tn::DropKind::wrong_results ||
             failure.kind == tn::DropKind::check_failed;
    };
    const auto listed = std::count_if(r.failures.begin(), r.failures.end(), shown);
    if (listed == 0) continue;
    std::cout << "\n" << name << ": " << r.failures.size() << " configuration(s) dropped";
    if (quiet) std::cout << ", " << listed << " of them by the check against the interpreter";
    std::cout << "\n";
    for (const tn::CandidateFailure& failure : r.failures) {
      if (shown(failure))
        std::cout << "  " << tn::short_config(failure.config) << ": " << failure.reason << "\n";
      wrong_results = wrong_results || failure.kind == tn::DropKind::wrong_results;
    }
  }
  if (wrong_results) {
    std::cerr << "tilenorm-tune: warning: candidate configurations gave wrong results (listed "
                 "above): a code-generator bug; none was stored, but the same configuration "
                 "given explicitly computes the same wrong results\n";
  }
}

int tune(const tn::TuneCommand& command) {
  if (command.dry_run) return dry_run(command);
  if (!tn::driver::gpu_available()) {
    std::cerr << "tilenorm-tune: error: no GPU available (" << tn::driver::gpu_unavailable_reason()
              << "). Tuning times kernels on a GPU: run this on a GPU machine, or add --dry-run to "
                 "list the search space without one.\n";
    return kExitNoGpu;
  }
  const std::vector<tn::TuneShape> shapes = shapes_of(command);
  const std::filesystem::path db = tn::database_path(command.db);
  ProgressBar bar;
  tn::TuneOptions options;
  options.db_path = db;
  if (!command.quiet) {
    options.on_progress = [&bar](const tn::TuneProgress& progress) { bar.update(progress); };
    std::cerr << "tilenorm-tune: " << shapes.size() << " shape(s); winners go to " << db.string()
              << "\n";
  }
  const tn::TuneReport report = tn::tune(shapes, options);
  if (!command.quiet) bar.finish();
  std::cout << "device: " << report.device_name << " (" << report.arch << "); copy ceiling "
            << fixed(report.copy_tbps, 2) << " TB/s (cuMemcpyDtoD, read + write); database "
            << db.string() << "\n";
  print_results(report, command.quiet);
  if (command.show_candidates) print_candidates(report);
  const bool all_ok =
      report.aborted.empty() && std::all_of(report.results.begin(), report.results.end(),
                                            [](const tn::TuneResult& r) { return r.ok; });
  if (!report.aborted.empty()) {
    std::cerr << "tilenorm-tune: error: stopped early: " << report.aborted << "\n";
  }
  if (!all_ok) std::cerr << "tilenorm-tune: error: some shapes failed; see FAILED above\n";
  return all_ok ? kExitOk : kExitSomeFailed;
}

// The built-in kernel with this program hash, else the hash's first characters.
std::string kernel_name_for(const std::string& program_hash) {
  for (const auto& kernel : tn::kernels::builtin_kernels()) {
    if (kernel.program.hash() == program_hash) return kernel.name;
  }
  return "program " + program_hash.substr(0, 12);
}

// What the runtime reads after the primary database: the layers of its stack, in order.
void print_later_layers() {
  const tn::TuningDatabaseStack stack = tn::load_default_tuning_databases();
  if (stack.layers().size() < 2) return;
  std::cout << "then, at run time (show --db FILE prints one):\n";
  for (std::size_t i = 1; i < stack.layers().size(); ++i) {
    const tn::TuningDatabase& layer = stack.layers()[i];
    std::cout << (layer.origin() == tn::TuningOrigin::shipped ? "  shipped:   " : "  read-only: ")
              << layer.source_file().string() << "\n";
  }
}

int show(const tn::ShowCommand& command) {
  const std::filesystem::path db = tn::database_path(command.db);
  const tn::TuningFileContents contents = tn::read_tuning_file(db);
  if (!contents.exists) {
    std::cout << db.string()
              << " does not exist (tilenorm-tune writes it; --db picks another file)\n";
    if (command.db.empty()) print_later_layers();
    return kExitOk;
  }
  if (contents.whole_file_rejected) {
    throw tn::Error(db.string() +
                    " is not a usable tuning database: " + contents.problem_summary());
  }
  if (!contents.problems.empty()) {
    std::cerr << "tilenorm-tune: warning: " << db.string() << ": " << contents.problem_summary()
              << "\n";
  }
  std::vector<tn::TuningEntry> entries = contents.entries;
  std::sort(entries.begin(), entries.end(), [](const tn::TuningEntry& a, const tn::TuningEntry& b) {
    const auto& x = a.key;
    const auto& y = b.key;
    return std::tie(x.device_name, x.program_hash, x.dtype, x.n, x.m_bucket) <
           std::tie(y.device_name, y.program_hash, y.dtype, y.n, y.m_bucket);
  });
  Table table({"device", "cc", "kernel", "dtype", "N", "M bucket", "config", "us", "TB/s", "date"});
  for (const tn::TuningEntry& entry : entries) {
    const tn::TuningKey& key = entry.key;
    std::string config;
    try {
      config = tn::short_config(tn::reflect::from_json<tn::KernelConfig>(
          entry.config, "config", tn::kKernelConfigLaterFields));
    } catch (const tn::Error&) {
      config = entry.config.dump();  // from another tilenorm version
    }
    std::string kernel = kernel_name_for(key.program_hash);
    if (key.codegen_version != tn::kCodegenVersion) {
      kernel += " (stale: codegen " + std::to_string(key.codegen_version) + ")";
    }
    table.add({key.device_name, std::to_string(key.cc_major) + "." + std::to_string(key.cc_minor),
               kernel, key.dtype, std::to_string(key.n), std::to_string(key.m_bucket), config,
               fixed(entry.median_us, 2), fixed(entry.tbps, 2), entry.date});
  }
  std::cout << db.string() << ": " << entries.size() << " entries\n";
  table.print(std::cout);
  if (command.db.empty()) print_later_layers();
  return kExitOk;
}

int merge(const tn::MergeCommand& command) {
  const tn::MergeSummary summary = tn::merge_databases(command.inputs, command.output);
  std::cout << "merged " << summary.files_read << " file(s), " << summary.entries_read
            << " entries read, " << summary.conflicts_resolved
            << " conflict(s) resolved (the faster entry wins); " << command.output.string()
            << " now holds " << summary.entries_written << " entries\n";
  return kExitOk;
}

int run(const tn::CliCommand& command) {
  if (const auto* tune_command = std::get_if<tn::TuneCommand>(&command)) return tune(*tune_command);
  if (const auto* show_command = std::get_if<tn::ShowCommand>(&command)) return show(*show_command);
  if (const auto* merge_command = std::get_if<tn::MergeCommand>(&command)) {
    return merge(*merge_command);
  }
  std::cout << std::get<tn::HelpCommand>(command).text;
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  return tn::cli::run_tool("tilenorm-tune", [&] {
    const tn::CliCommand command =
        tn::parse_command_line(std::vector<std::string>(argv + 1, argv + argc));
    try {
      return run(command);
    } catch (const tn::driver::DriverUnavailable& e) {
      std::cerr << "tilenorm-tune: error: no GPU available (" << e.what()
                << "). Run this on a GPU machine, or use --dry-run to list the search space "
                   "without one.\n";
      return kExitNoGpu;
    }
  });
}

#pragma once
// The tilenorm-tune command line, parsed into plain structs so that tests can check it without
// running anything (tools/tilenorm_tune.cpp does the running).
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tilenorm/autotune/cli.hpp"

namespace tilenorm {

// `tilenorm-tune [options]`: tune (or, with dry_run, only list) kernels x dtypes x ns.
struct TuneCommand {
  std::vector<std::string> kernels;
  std::vector<DTypeChoice> dtypes;
  std::vector<std::int64_t> ns;
  std::vector<std::int64_t> ms;  // empty: default_row_counts(n) for each n
  std::filesystem::path db;      // empty: the default, see database_path()
  bool dry_run = false;
  bool list_pruned = false;  // with dry_run: every pruned configuration and its reason
  bool quiet = false;
  bool show_candidates = false;  // print every candidate's first-round time per shape
  std::string arch;  // with dry_run: a known device or arch whose limits to use (no GPU needed)
};

// `tilenorm-tune show [--db PATH]`
struct ShowCommand {
  std::filesystem::path db;  // empty: the default, see database_path()
};

// `tilenorm-tune merge OUT IN...`
struct MergeCommand {
  std::filesystem::path output;
  std::vector<std::filesystem::path> inputs;
};

// --help or --version: print `text` and exit 0.
struct HelpCommand {
  std::string text;
};

using CliCommand = std::variant<HelpCommand, TuneCommand, ShowCommand, MergeCommand>;

// The arguments after the program name. Throws UsageError saying what is wrong, naming the
// argument and its value. Reads no environment: the default database is resolved only when a
// command needs it (database_path).
CliCommand parse_command_line(const std::vector<std::string>& args);

// `db` if given, else default_tuning_db_path() (which throws when no cache directory can be
// chosen: no TILENORM_TUNING_DB, TILENORM_CACHE_DIR, XDG_CACHE_HOME or HOME).
std::filesystem::path database_path(const std::filesystem::path& db);

// The --help text.
std::string usage_text();

// The hidden sizes --all tunes.
const std::vector<std::int64_t>& all_hidden_sizes();

}  // namespace tilenorm

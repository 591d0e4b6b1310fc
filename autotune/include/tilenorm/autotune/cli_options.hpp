#pragma once
// The tilenorm-tune command line, parsed into plain structs so that tests can check it without
// running anything (tools/tilenorm_tune.cpp does the running).
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tilenorm/dsl/dtype.hpp"
#include "tilenorm/dsl/error.hpp"

namespace tilenorm {

// A malformed command line; the tool prints it and exits with status 2.
class UsageError : public Error {
 public:
  using Error::Error;
};

struct DTypeChoice {
  DType io = DType::bf16;     // row inputs and outputs
  DType param = DType::bf16;  // column parameters
  friend bool operator==(const DTypeChoice&, const DTypeChoice&) = default;
};

// `tilenorm-tune [options]`: tune (or, with dry_run, only list) kernels x dtypes x ns.
struct TuneCommand {
  std::vector<std::string> kernels;
  std::vector<DTypeChoice> dtypes;
  std::vector<std::int64_t> ns;
  std::vector<std::int64_t> ms;  // empty: default_row_counts(n) for each n
  std::filesystem::path db;
  bool dry_run = false;
  bool list_pruned = false;  // with dry_run: every pruned configuration and its reason
  bool quiet = false;
};

// `tilenorm-tune show [--db PATH]`
struct ShowCommand {
  std::filesystem::path db;
};

// `tilenorm-tune merge OUT IN...`
struct MergeCommand {
  std::filesystem::path output;
  std::vector<std::filesystem::path> inputs;
};

struct HelpCommand {};

using CliCommand = std::variant<HelpCommand, TuneCommand, ShowCommand, MergeCommand>;

// The arguments after the program name. Throws UsageError saying what is wrong and what to
// write instead. The --db default is default_tuning_db_path().
CliCommand parse_command_line(const std::vector<std::string>& args);

std::string_view usage_text();

// The hidden sizes --all tunes.
const std::vector<std::int64_t>& all_hidden_sizes();

}  // namespace tilenorm

#include "tilenorm/autotune/cli_options.hpp"

#include <algorithm>
#include <charconv>
#include <optional>

#include "tilenorm/kernels/programs.hpp"
#include "tilenorm/runtime/tuning_db.hpp"

namespace tilenorm {
namespace {

constexpr std::int64_t kMaxN = std::int64_t{1} << 30;  // codegen's limit
constexpr std::int64_t kMaxM = std::int64_t{1} << 40;

constexpr std::string_view kUsage =
    R"(usage: tilenorm-tune [options]          tune and store the winners
       tilenorm-tune show [--db PATH]     print what a tuning database holds
       tilenorm-tune merge OUT IN...      merge databases into OUT (the faster entry wins)

Tunes built-in kernels on GPU 0: every configuration of the pruned search space is compiled,
checked against the fp64 interpreter and timed; the winner per (kernel, dtype, N, M) is written
to the tuning database, which the runtime reads. See docs/autotuning.md.

options:
  --kernel NAME[,...]  built-in kernels (default: all): layer_norm, layer_norm_no_bias,
                       layer_norm_no_affine, rms_norm, rms_norm_no_weight
  --dtype T[,...]      bf16, fp16 or fp32, or IO/PARAM such as bf16/fp32 (default: bf16,fp32)
  --n N[,...]          row lengths (hidden sizes) to tune; required unless --all
  --m M[,...]          row counts to time (default per N: 2^26/N rounded up to a power
                       of two, and 256)
  --all                every built-in kernel x {bf16, fp32} x N in {128, 256, 512, 1024, 2048,
                       2880, 4096, 5120, 7168, 8192, 12288, 16384, 32768, 65536, 131072,
                       262144}; --kernel, --dtype and --n narrow it
  --db PATH            the tuning database to update (default: $TILENORM_TUNING_DB, else
                       <cache dir>/tuning.json)
  --dry-run            list the search space per shape and why configurations were pruned;
                       needs no GPU
  --list-pruned        with --dry-run: every pruned configuration with its reason
  --quiet              no progress bar and no per-shape detail; tables only
  -h, --help           this text

exit status: 0 ok, 1 some shapes failed, 2 usage error, 3 no GPU (use --dry-run, or run on a
GPU machine)
)";

template <class T>
void append_unique(std::vector<T>& list, const T& value) {
  if (std::find(list.begin(), list.end(), value) == list.end()) list.push_back(value);
}

std::vector<std::string> split_commas(const std::string& flag, const std::string& text) {
  std::vector<std::string> items;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = text.find(',', start);
    std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty()) throw UsageError(flag + " got an empty item in '" + text + "'");
    items.push_back(std::move(item));
    if (comma == std::string::npos) return items;
    start = comma + 1;
  }
}

std::int64_t parse_count(const std::string& flag, const std::string& text, std::int64_t most) {
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 1 || value > most) {
    throw UsageError(flag + " needs whole numbers from 1 to " + std::to_string(most) +
                     " separated by commas, got '" + text + "'");
  }
  return value;
}

DTypeChoice parse_dtype_choice(const std::string& text) {
  try {
    const std::size_t slash = text.find('/');
    if (slash == std::string::npos) {
      const DType dtype = parse_dtype(text);
      return {dtype, dtype};
    }
    return {parse_dtype(text.substr(0, slash)), parse_dtype(text.substr(slash + 1))};
  } catch (const Error& e) {
    throw UsageError("--dtype: " + std::string(e.what()) +
                     " (write bf16, fp16, fp32, or IO/PARAM such as bf16/fp32)");
  }
}

std::string checked_kernel(const std::string& name) {
  try {
    kernels::builtin_program(name);
  } catch (const Error& e) {
    throw UsageError("--kernel: " + std::string(e.what()));
  }
  return name;
}

// Walks the arguments, splitting "--flag=value" and handing out values.
class ArgumentCursor {
 public:
  explicit ArgumentCursor(const std::vector<std::string>& args) : args_(args) {}

  // The next flag or positional argument, or nothing at the end.
  std::optional<std::string> next() {
    if (pending_value_) {
      throw UsageError(current_ + " takes no value, got '" + *pending_value_ + "'");
    }
    if (index_ >= args_.size()) return std::nullopt;
    current_ = args_[index_++];
    if (const std::size_t equals = current_.find('=');
        current_.starts_with("--") && equals != std::string::npos) {
      pending_value_ = current_.substr(equals + 1);
      current_.resize(equals);
    }
    return current_;
  }

  std::string value() {
    if (pending_value_) {
      std::string value = std::move(*pending_value_);
      pending_value_.reset();
      return value;
    }
    if (index_ >= args_.size()) throw UsageError(current_ + " needs a value (see --help)");
    return args_[index_++];
  }

 private:
  const std::vector<std::string>& args_;
  std::size_t index_ = 0;
  std::string current_;
  std::optional<std::string> pending_value_;
};

[[noreturn]] void unknown(const std::string& arg, std::string_view command) {
  throw UsageError("unknown argument '" + arg + "' for " + std::string(command) + " (see --help)");
}

CliCommand parse_show(ArgumentCursor& cursor) {
  ShowCommand show{default_tuning_db_path()};
  while (auto arg = cursor.next()) {
    if (*arg == "-h" || *arg == "--help") return HelpCommand{};
    if (*arg != "--db") unknown(*arg, "tilenorm-tune show");
    show.db = cursor.value();
  }
  return show;
}

CliCommand parse_merge(ArgumentCursor& cursor) {
  std::vector<std::filesystem::path> paths;
  while (auto arg = cursor.next()) {
    if (*arg == "-h" || *arg == "--help") return HelpCommand{};
    if (arg->starts_with("-")) unknown(*arg, "tilenorm-tune merge");
    paths.emplace_back(*arg);
  }
  if (paths.size() < 2) {
    throw UsageError("merge needs an output and at least one input: tilenorm-tune merge OUT IN...");
  }
  return MergeCommand{paths.front(), {paths.begin() + 1, paths.end()}};
}

CliCommand parse_tune(ArgumentCursor& cursor) {
  TuneCommand tune;
  bool all = false;
  std::optional<std::filesystem::path> db;
  while (auto arg = cursor.next()) {
    if (*arg == "-h" || *arg == "--help") return HelpCommand{};
    if (*arg == "--kernel") {
      for (const auto& name : split_commas(*arg, cursor.value())) {
        append_unique(tune.kernels, checked_kernel(name));
      }
    } else if (*arg == "--dtype") {
      for (const auto& text : split_commas(*arg, cursor.value())) {
        append_unique(tune.dtypes, parse_dtype_choice(text));
      }
    } else if (*arg == "--n") {
      for (const auto& text : split_commas(*arg, cursor.value())) {
        append_unique(tune.ns, parse_count(*arg, text, kMaxN));
      }
    } else if (*arg == "--m") {
      for (const auto& text : split_commas(*arg, cursor.value())) {
        append_unique(tune.ms, parse_count(*arg, text, kMaxM));
      }
    } else if (*arg == "--all") {
      all = true;
    } else if (*arg == "--db") {
      db = cursor.value();
    } else if (*arg == "--dry-run") {
      tune.dry_run = true;
    } else if (*arg == "--list-pruned") {
      tune.list_pruned = true;
    } else if (*arg == "--quiet") {
      tune.quiet = true;
    } else {
      unknown(*arg, "tilenorm-tune");
    }
  }
  if (tune.list_pruned && !tune.dry_run) {
    throw UsageError("--list-pruned only works with --dry-run");
  }
  if (tune.ns.empty()) {
    if (!all) {
      throw UsageError("say which row lengths to tune with --n N,... or use --all (see --help)");
    }
    tune.ns = all_hidden_sizes();
  }
  if (tune.kernels.empty()) {
    for (const auto& kernel : kernels::builtin_kernels()) tune.kernels.push_back(kernel.name);
  }
  if (tune.dtypes.empty()) tune.dtypes = {{DType::bf16, DType::bf16}, {DType::f32, DType::f32}};
  tune.db = db ? *db : default_tuning_db_path();
  if (tune.db.empty()) throw UsageError("--db needs a non-empty path");
  return tune;
}

}  // namespace

CliCommand parse_command_line(const std::vector<std::string>& args) {
  ArgumentCursor cursor(args);
  if (!args.empty() && args.front() == "show") {
    cursor.next();
    return parse_show(cursor);
  }
  if (!args.empty() && args.front() == "merge") {
    cursor.next();
    return parse_merge(cursor);
  }
  return parse_tune(cursor);
}

std::string_view usage_text() {
  return kUsage;
}

const std::vector<std::int64_t>& all_hidden_sizes() {
  static const std::vector<std::int64_t> sizes = {128,   256,   512,    1024,  2048,  2880,
                                                  4096,  5120,  7168,   8192,  12288, 16384,
                                                  32768, 65536, 131072, 262144};
  return sizes;
}

}  // namespace tilenorm

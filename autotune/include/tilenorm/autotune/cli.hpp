#pragma once
// What every tilenorm command-line tool shares, so that they behave alike: the version text,
// checked value parsing with errors that name the flag and the value, and run_tool, which maps
// every outcome to one exit status and one error prefix ("tilenorm-<tool>: error: ...").
// The CLI11 side (building and parsing an app) is in cli11.hpp.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tilenorm/dsl/codegen.hpp"
#include "tilenorm/dsl/dtype.hpp"
#include "tilenorm/dsl/error.hpp"
#include "tilenorm/runtime/runtime.hpp"

namespace tilenorm {

// A malformed command line; run_tool prints it and exits with kExitUsage.
class UsageError : public Error {
 public:
  using Error::Error;
};

// Row and parameter storage types, written IO or IO/PARAM ("bf16", "bf16/fp32").
struct DTypeChoice {
  DType io = DType::bf16;     // row inputs and outputs
  DType param = DType::bf16;  // column parameters
  friend bool operator==(const DTypeChoice&, const DTypeChoice&) = default;
};

namespace cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the command ran and failed (or could not write)
inline constexpr int kExitUsage = 2;    // a malformed command line; nothing was done
inline constexpr int kExitNoGpu = 3;    // the command needs a GPU and there is none

// --help or --version: the text goes to stdout and the tool exits with kExitOk.
struct InfoRequest {
  std::string text;
};

// "<tool> <project version>", the codegen version, the NVRTC version, and the CUDA driver's
// version, or why there is none. Loads the driver only to ask its version.
std::string version_text(std::string_view tool);

// A whole number in [min, max] written in decimal; otherwise a UsageError such as
// "--n must be a whole number from 1 to 1073741824, got 'abc'".
std::int64_t parse_integer(std::string_view flag, std::string_view text, std::int64_t min,
                           std::int64_t max);

// "a,b,c" -> {"a", "b", "c"}; an empty item is a UsageError naming the flag and the text.
std::vector<std::string> split_list(std::string_view flag, std::string_view text);

// "bf16", "fp32", "fp16", or IO/PARAM such as "bf16/fp32"; otherwise a UsageError.
DTypeChoice parse_dtype_choice(std::string_view flag, std::string_view text);

// A row storage by name (row_storage_name); otherwise a UsageError naming them.
RowStorage parse_row_storage(std::string_view flag, std::string_view text);
// "rule", "on", "off" or "early" (load_pin_name); otherwise a UsageError naming them.
LoadPin parse_load_pin(std::string_view flag, std::string_view text);
// "rule", "on" or "off" (moment_fusion_name); otherwise a UsageError naming them.
MomentFusion parse_moment_fusion(std::string_view flag, std::string_view text);

// "auto", "per-thread" or "per-row" (peeled_row_shifts_name); otherwise a UsageError.
PeeledRowShifts parse_peeled_row_shifts(std::string_view flag, std::string_view text);
// "auto", "never" or "always" (early_columns_name); otherwise a UsageError naming them.
EarlyColumns parse_early_columns(std::string_view flag, std::string_view text);

// A built-in kernel's name; otherwise a UsageError listing the names.
std::string parse_kernel_name(std::string_view flag, std::string_view text);

// Runs a tool's main body and turns every outcome into an exit status, so that no exception
// ends a tool with abort(): InfoRequest -> its text on stdout, kExitOk; UsageError -> kExitUsage;
// driver::DriverUnavailable -> kExitNoGpu; any other exception -> kExitFailure. Each error is one
// line "<tool>: error: <message>" on stderr. Finally stdout is flushed, and a failed write (a
// full disk, a closed pipe, /dev/full) is an error too.
int run_tool(std::string_view tool, const std::function<int()>& body);

}  // namespace cli
}  // namespace tilenorm

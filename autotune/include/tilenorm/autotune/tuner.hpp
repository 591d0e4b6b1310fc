#pragma once
// The autotuner (docs/autotuning.md): for each (program, dtype, N) it compiles the pruned search
// space in parallel, checks every survivor against the fp64 interpreter, times the survivors at
// each row count M through the same launch path users take, re-times the best few and the
// heuristic default, and stores the winners in the tuning database.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tilenorm/dsl/codegen.hpp"
#include "tilenorm/dsl/ir.hpp"

namespace tilenorm {

// One program at one dtype and row length, timed at each of `row_counts`.
struct TuneShape {
  std::string kernel;  // the name shown in tables, e.g. "rms_norm"
  ir::Program program;
  DType io_dtype = DType::bf16;
  DType param_dtype = DType::bf16;
  std::int64_t n = 0;
  std::vector<std::int64_t> row_counts;
};

// The default M values for row length `n`: the bandwidth regime, 2^26 / N rows (at least 1)
// rounded up to a power of two (its M bucket), and a small batch of 256 rows (once if they
// coincide).
std::vector<std::int64_t> default_row_counts(std::int64_t n);

struct TimedCandidate {
  KernelConfig config;
  double median_us = 0;  // first round
};

// Why the tuner dropped a candidate. A wrong result is a code-generator bug, never a matter of
// speed: the tool reports it even when asked to be quiet.
enum class DropKind { does_not_compile, spills, wrong_results, check_failed, launch_failed };

// "spills", "wrong results", ...: the kind as the tool's summaries name it.
std::string_view drop_kind_name(DropKind kind);

struct CandidateFailure {
  KernelConfig config;
  DropKind kind = DropKind::does_not_compile;
  // Led by drop_kind_name(kind): e.g. "spills 48 bytes to local memory", "wrong results: ...".
  std::string reason;
};

// The outcome for one (kernel, dtype, N, M).
struct TuneResult {
  std::string kernel;
  DType io_dtype = DType::bf16;
  DType param_dtype = DType::bf16;
  std::int64_t n = 0;
  std::int64_t m = 0;
  bool ok = false;
  std::string error;  // why nothing was chosen, when !ok

  KernelConfig chosen{};
  double median_us = 0;
  double tbps = 0;             // (row inputs read + row outputs written) / median time
  double percent_of_copy = 0;  // tbps relative to the session's device-to-device copy

  KernelConfig heuristic{};  // what the runtime launches at this M without a database entry
  double heuristic_us = 0;   // 0 when the heuristic configuration itself failed
  double speedup = 0;        // heuristic_us / median_us; 0 when heuristic_us is 0

  std::size_t total = 0;   // configurations enumerated
  std::size_t pruned = 0;  // removed before compiling
  std::size_t failed = 0;  // failed to compile, spilled, failed the check or failed to launch
  std::size_t timed = 0;   // timed at this M
  std::vector<CandidateFailure> failures;
  std::vector<TimedCandidate> first_round;  // every timed candidate, fastest first
};

struct TuneProgress {
  std::size_t done = 0;
  std::size_t total = 0;
  std::string_view stage;  // e.g. "compiling rms_norm bf16 N=4096"
};

struct TuneOptions {
  std::filesystem::path db_path;  // where winners are upserted after each shape; empty: nowhere
  int warmup_launches = 3;
  int repeats = 15;  // first round, per candidate
  int finalists = 3;
  int final_repeats = 50;        // per finalist and for the heuristic configuration
  unsigned compile_threads = 0;  // 0: std::thread::hardware_concurrency()
  // Called after each step, possibly from compile worker threads, never concurrently.
  std::function<void(const TuneProgress&)> on_progress;
};

struct TuneReport {
  std::string device_name;
  std::string arch;
  double copy_tbps = 0;  // cuMemcpyDtoD ceiling: bytes read + written per second / 1e12
  std::vector<TuneResult> results;
  // Set when the sweep had to stop early (the CUDA context became unusable, or the database
  // could not be written); `results` then ends with the shape being tuned, its unfinished M
  // values marked failed, and winners found before were still written.
  std::string aborted;
};

// Tunes every shape on device 0. Needs a GPU: throws driver::DriverUnavailable without one. A
// shape that cannot be tuned is reported in its results (ok == false), not thrown.
TuneReport tune(const std::vector<TuneShape>& shapes, const TuneOptions& options);

}  // namespace tilenorm

// tilenorm-dump: prints the IR and the generated CUDA source of a built-in kernel.
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "tilenorm/autotune/cli11.hpp"
#include "tilenorm/dsl/autodiff.hpp"
#include "tilenorm/dsl/codegen.hpp"
#include "tilenorm/kernels/programs.hpp"
#include "tilenorm/runtime/fileio.hpp"
#include "tilenorm/runtime/heuristics.hpp"
#include "tilenorm/runtime/runtime.hpp"

namespace {

namespace tn = tilenorm;
namespace cli = tilenorm::cli;

constexpr std::int64_t kMaxN = std::int64_t{1} << 30;  // codegen's limit
constexpr std::int64_t kMaxKnob = 1024;                // threads, rows per CTA and vector width
constexpr std::int64_t kMaxM = std::int64_t{1} << 62;  // m_bucket's limit

constexpr const char* kDescription =
    "Prints the lowered IR and the generated CUDA source of a built-in kernel. The configuration "
    "is the heuristic one for an H100/H200 unless all four of --threads-per-row, --rows-per-cta, "
    "--vec and --storage are given.";

struct DumpOptions {
  std::string kernel, dtype = "bf16", n = "4096", m;
  std::string threads_per_row, rows_per_cta, vec, storage, ctas_per_row = "1", arch, cubin;
  std::string load_pin = "rule", moments = "rule";
  bool source_only = false, ir_only = false, backward = false, recompute = false;
  bool misaligned = false, shift_per_row = false, early_columns = false;
};

int dump(const std::vector<std::string>& args) {
  CLI::App app{kDescription, "tilenorm-dump"};
  cli::add_common_flags(app, "tilenorm-dump");
  DumpOptions o;
  // One line per option; values are checked below, before anything is printed.
  cli::add_value(app, "--kernel", o.kernel,
                 "required: layer_norm, layer_norm_no_bias, layer_norm_no_affine, rms_norm, "
                 "rms_norm_no_weight",
                 "NAME");
  cli::add_value(app, "--dtype", o.dtype,
                 "storage type: bf16, fp16 or fp32, or IO/PARAM such as bf16/fp32 (default bf16)",
                 "T");
  cli::add_value(app, "--n", o.n, "row length (default 4096)", "N");
  cli::add_value(app, "--m", o.m,
                 "rows of the launch the heuristic configures for (default: many; with "
                 "--early-columns, one): where every row block is resident at once, rows stay "
                 "in registers",
                 "M");
  cli::add_value(app, "--threads-per-row", o.threads_per_row, "override the configuration", "K");
  cli::add_value(app, "--rows-per-cta", o.rows_per_cta, "override the configuration", "K");
  cli::add_value(app, "--vec", o.vec, "override the configuration", "K");
  cli::add_value(app, "--ctas-per-row", o.ctas_per_row,
                 "with the overrides: CTAs of a thread-block cluster that split each row "
                 "(default 1, sm_90+)",
                 "K");
  cli::add_value(app, "--storage", o.storage,
                 "registers, shared, global, prefetched, staged or pipelined (the last three "
                 "persistent; pipelined on a cluster)",
                 "S");
  cli::add_value(
      app, "--load-pin", o.load_pin,
      "rule (default), on, off or early: where a prefetched cluster backward pins its next "
      "row block's loads: before the row's exchange, nowhere, or before its warps' sums are "
      "combined (KernelConfig::load_pin)",
      "P");
  cli::add_value(app, "--moments", o.moments,
                 "rule (default), on or off: whether centered sums become co-moments, which "
                 "the rule does only in forwards (KernelConfig::moments); the IR printed is the "
                 "one lowered so",
                 "F");
  auto* source_only = app.add_flag(
      "--source-only", o.source_only,
      "print only the self-contained source (prelude included), which `nvcc -arch=sm_90 -c` "
      "compiles as a .cu file");
  app.add_flag("--ir-only", o.ir_only, "print only the IR")->excludes(source_only);
  cli::add_value(app, "--arch", o.arch,
                 "also compile for this target through NVRTC (sm_80 to sm_120) and print its "
                 "registers and spills; the limits of its known device (A100, L40S, H100, B200), "
                 "else of the newest known one of an older architecture, drive the heuristic",
                 "sm_XX");
  cli::add_value(app, "--cubin", o.cubin,
                 "with --arch: also write the compiled main and finishing kernels (a CUDA "
                 "binary, which `cuobjdump -sass` disassembles) to PATH",
                 "PATH");
  auto* backward = app.add_flag("--backward", o.backward,
                                "the derived backward (reading the saved statistics): its IR, "
                                "main and finishing kernels");
  app.add_flag("--recompute", o.recompute,
               "with --backward: recompute the statistics from x instead of reading them")
      ->needs(backward);
  app.add_flag("--misaligned", o.misaligned,
               "the kernel for rows that may start misaligned (alignment peeling: a scalar head, "
               "aligned vectors, a scalar tail)");
  app.add_flag("--shift-per-row", o.shift_per_row,
               "with --misaligned: the persistent kernel that finds each row's shift, a backward "
               "walking the rows class by class (which the runtime takes where whole periods of "
               "the rows' shifts would idle its grid)")
      ->needs("--misaligned");
  app.add_flag("--early-columns", o.early_columns,
               "the kernel that fetches its column parameters before the row loop (which the "
               "runtime takes where few parameter vectors are held, or every row block is "
               "resident at once)");
  cli::parse(app, args);

  const tn::DTypeChoice dtype = cli::parse_dtype_choice("--dtype", o.dtype);
  const std::int64_t n = cli::parse_integer("--n", o.n, 1, kMaxN);
  // Early columns are what the runtime takes at small M, so they default to a one-row launch.
  const std::int64_t m = !o.m.empty()      ? cli::parse_integer("--m", o.m, 1, kMaxM)
                         : o.early_columns ? 1
                                           : 0;
  if (o.kernel.empty()) throw tn::UsageError("--kernel is required (see --help)");
  if (!o.cubin.empty() && (o.arch.empty() || o.ir_only))
    throw tn::UsageError("--cubin needs --arch and a kernel to compile (not --ir-only)");
  const std::string kernel = cli::parse_kernel_name("--kernel", o.kernel);
  std::optional<tn::DeviceLimits> arch_limits;
  if (!o.arch.empty()) {
    try {
      arch_limits = tn::limits_for_arch(o.arch);
    } catch (const tn::Error& e) {
      throw tn::UsageError("--arch: " + std::string(e.what()));
    }
  }
  const int overrides =
      !o.threads_per_row.empty() + !o.rows_per_cta.empty() + !o.vec.empty() + !o.storage.empty();
  if (overrides != 0 && overrides != 4) {
    throw tn::UsageError(
        "give all of --threads-per-row, --rows-per-cta, --vec and --storage, or none");
  }
  const tn::ir::Program& forward = tn::kernels::builtin_program(kernel);
  const tn::LoweredProgram lowered =
      tn::lower(o.backward ? tn::backward(forward, {o.recompute ? tn::StatisticsMode::recompute
                                                                : tn::StatisticsMode::saved})
                           : forward);
  tn::KernelSpec spec{dtype.io, dtype.param, n, {}, o.misaligned};
  if (overrides == 4) {
    spec.config = {
        static_cast<int>(cli::parse_integer("--threads-per-row", o.threads_per_row, 1, kMaxKnob)),
        static_cast<int>(cli::parse_integer("--rows-per-cta", o.rows_per_cta, 1, kMaxKnob)),
        static_cast<int>(cli::parse_integer("--vec", o.vec, 1, kMaxKnob)),
        static_cast<int>(cli::parse_row_storage("--storage", o.storage)),
        static_cast<int>(cli::parse_integer("--ctas-per-row", o.ctas_per_row, 1, 16))};
  } else {
    spec.config =
        tn::heuristic_config(lowered, spec.io_dtype, spec.param_dtype, n,
                             arch_limits.value_or(tn::DeviceLimits::hopper()), 0, o.misaligned, m);
  }
  spec.config.load_pin = static_cast<int>(cli::parse_load_pin("--load-pin", o.load_pin));
  spec.config.moments = static_cast<int>(cli::parse_moment_fusion("--moments", o.moments));
  spec.shift_per_row = o.shift_per_row;
  spec.early_columns = o.early_columns;
  if (arch_limits) spec = tn::fit_shared_memory(lowered, spec, *arch_limits);
  // Generated before anything is printed, so that a configuration codegen rejects prints nothing.
  const std::optional<tn::GeneratedKernel> generated =
      o.ir_only ? std::nullopt : std::optional(tn::generate_cuda(lowered, spec));
  // Compiled before anything is printed too, so that a target NVRTC refuses prints nothing.
  std::optional<tn::BuiltKernel> built;
  if (!o.arch.empty() && !o.ir_only) built = tn::build_kernel(lowered, spec, o.arch, false);
  if (!o.cubin.empty())
    tn::write_file_atomically(o.cubin, std::string_view(built->cubin.data(), built->cubin.size()));
  if (o.source_only) {
    std::cout << generated->source;
    return cli::kExitOk;
  }
  std::cout
      << "// ---- IR\n"
      << tn::with_moments(lowered, static_cast<tn::MomentFusion>(spec.config.moments)).to_string();
  if (generated) {
    std::cout << "// ---- CUDA (prelude omitted; --source-only includes it)\n"
              << generated->source.substr(tn::device_prelude().size());
  }
  if (built) {
    std::cout << "// ---- NVRTC " << o.arch << ": " << built->registers << " registers, "
              << built->spill_bytes << " bytes spilled\n";
  }
  return cli::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run_tool("tilenorm-dump",
                       [&] { return dump(std::vector<std::string>(argv + 1, argv + argc)); });
}

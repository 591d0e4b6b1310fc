// tilenorm-dump: prints the IR and the generated CUDA source of a built-in kernel.
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "tilenorm/dsl/codegen.hpp"
#include "tilenorm/dsl/error.hpp"
#include "tilenorm/kernels/programs.hpp"
#include "tilenorm/runtime/heuristics.hpp"

namespace {

constexpr const char* kUsage = R"(usage: tilenorm-dump --kernel NAME [options]

Prints the lowered IR and the generated CUDA source of a built-in kernel.

options:
  --kernel NAME          layer_norm, layer_norm_no_bias, layer_norm_no_affine, rms_norm,
                         rms_norm_no_weight
  --dtype T              storage type of rows and parameters: fp32, fp16, bf16 (default bf16)
  --n N                  row length (default 4096)
  --threads-per-row K    override the heuristic configuration (all four or none)
  --rows-per-cta K
  --vec K
  --storage S            registers, shared or global
  --source-only          print only the self-contained source (prelude included), which
                         `nvcc -arch=sm_90 -c` compiles as a .cu file
  --ir-only              print only the IR
  -h, --help             this text
)";

int to_int(const std::string& flag, const std::string& text) {
  try {
    std::size_t used = 0;
    const long long value = std::stoll(text, &used);
    if (used != text.size()) throw std::invalid_argument(text);
    return static_cast<int>(value);
  } catch (const std::exception&) {
    throw tilenorm::Error(flag + " needs an integer, got '" + text + "'");
  }
}

int storage_value(const std::string& text) {
  for (auto s : {tilenorm::RowStorage::registers, tilenorm::RowStorage::shared,
                 tilenorm::RowStorage::global}) {
    if (tilenorm::row_storage_name(s) == text) return static_cast<int>(s);
  }
  throw tilenorm::Error("--storage must be registers, shared or global, got '" + text + "'");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string kernel;
    tilenorm::DType dtype = tilenorm::DType::bf16;
    std::int64_t n = 4096;
    std::optional<int> tpr, rpc, vec, storage;
    bool source_only = false, ir_only = false;
    std::vector<std::string> args(argv + 1, argv + argc);
    for (std::size_t i = 0; i < args.size(); ++i) {
      const std::string& arg = args[i];
      auto value = [&]() -> const std::string& {
        if (i + 1 >= args.size()) throw tilenorm::Error(arg + " needs a value");
        return args[++i];
      };
      if (arg == "-h" || arg == "--help") {
        std::cout << kUsage;
        return 0;
      } else if (arg == "--kernel") {
        kernel = value();
      } else if (arg == "--dtype") {
        dtype = tilenorm::parse_dtype(value());
      } else if (arg == "--n") {
        n = to_int(arg, value());
      } else if (arg == "--threads-per-row") {
        tpr = to_int(arg, value());
      } else if (arg == "--rows-per-cta") {
        rpc = to_int(arg, value());
      } else if (arg == "--vec") {
        vec = to_int(arg, value());
      } else if (arg == "--storage") {
        storage = storage_value(value());
      } else if (arg == "--source-only") {
        source_only = true;
      } else if (arg == "--ir-only") {
        ir_only = true;
      } else {
        throw tilenorm::Error("unknown argument '" + arg + "' (see --help)");
      }
    }
    if (kernel.empty()) throw tilenorm::Error("--kernel is required (see --help)");
    const bool any_override = tpr || rpc || vec || storage;
    if (any_override && !(tpr && rpc && vec && storage)) {
      throw tilenorm::Error(
          "give all of --threads-per-row, --rows-per-cta, --vec and --storage, or none");
    }
    const tilenorm::LoweredProgram lowered =
        tilenorm::lower(tilenorm::kernels::builtin_program(kernel));
    tilenorm::KernelSpec spec{dtype, dtype, n, {}};
    spec.config = any_override
                      ? tilenorm::KernelConfig{*tpr, *rpc, *vec, *storage}
                      : tilenorm::heuristic_config(lowered, spec.io_dtype, spec.param_dtype, n,
                                                   tilenorm::DeviceLimits::hopper());
    if (ir_only || !source_only) std::cout << "// ---- IR\n" << lowered.to_string();
    if (ir_only) return 0;
    const tilenorm::GeneratedKernel generated = tilenorm::generate_cuda(lowered, spec);
    if (source_only) {
      std::cout << generated.source;
    } else {
      std::cout << "// ---- CUDA (prelude omitted; --source-only includes it)\n"
                << generated.source;
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "tilenorm-dump: error: " << e.what() << "\n";
    return 2;
  }
}

#include "tilenorm/runtime/nvrtc.hpp"

#include <dlfcn.h>
#include <nvrtc.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>

#include "tilenorm/runtime/paths.hpp"

namespace tilenorm {
namespace {

void check_nvrtc(nvrtcResult result, std::string_view what) {
  if (result == NVRTC_SUCCESS) return;
  throw Error(std::string(what) + " failed: " + nvrtcGetErrorString(result));
}

struct ProgramDeleter {
  void operator()(_nvrtcProgram* program) const { nvrtcDestroyProgram(&program); }
};
using ProgramHandle = std::unique_ptr<_nvrtcProgram, ProgramDeleter>;

std::string program_log(nvrtcProgram program) {
  std::size_t size = 0;
  check_nvrtc(nvrtcGetProgramLogSize(program, &size), "nvrtcGetProgramLogSize");
  std::string log(size, '\0');
  check_nvrtc(nvrtcGetProgramLog(program, log.data()), "nvrtcGetProgramLog");
  while (!log.empty() && log.back() == '\0') log.pop_back();  // The size counts the terminator.
  return log;
}

std::string join(const std::vector<std::string>& words) {
  std::string joined;
  for (const std::string& word : words) {
    if (!joined.empty()) joined += ' ';
    joined += word;
  }
  return joined;
}

std::string numbered_source(std::string_view source) {
  std::string numbered;
  int line_number = 1;
  while (!source.empty()) {
    std::size_t end = source.find('\n');
    std::string_view line = source.substr(0, end);
    char prefix[16];
    std::snprintf(prefix, sizeof(prefix), "%5d | ", line_number++);
    numbered += prefix;
    numbered += line;
    numbered += '\n';
    source.remove_prefix(end == std::string_view::npos ? source.size() : end + 1);
  }
  return numbered;
}

// The decimal number that ends right before `suffix` in `line`, e.g. 30 for
// ("Used 30 registers", " registers").
std::optional<int> number_before(std::string_view line, std::string_view suffix) {
  std::size_t end = line.find(suffix);
  if (end == std::string_view::npos) return std::nullopt;
  std::size_t begin = end;
  while (begin > 0 && std::isdigit(static_cast<unsigned char>(line[begin - 1]))) --begin;
  int value = 0;
  auto [parsed_end, error] = std::from_chars(line.data() + begin, line.data() + end, value);
  if (error != std::errc() || parsed_end != line.data() + end) return std::nullopt;
  return value;
}

// The text between `opening` and the next `closing` in `line`.
std::optional<std::string> text_after(std::string_view line, std::string_view opening,
                                      std::string_view closing) {
  std::size_t begin = line.find(opening);
  if (begin == std::string_view::npos) return std::nullopt;
  begin += opening.size();
  std::size_t end = closing.empty() ? line.size() : line.find(closing, begin);
  if (end == std::string_view::npos) return std::nullopt;
  return std::string(line.substr(begin, end - begin));
}

struct FunctionReport {
  std::string name;
  bool entry = false;
  std::optional<int> registers;
  int shared_memory = 0;
  int stack_frame = 0;
  std::optional<int> cumulative_stack;
  int spill_stores = 0;
  int spill_loads = 0;
};

// Reads ptxas -v output such as
//   ptxas info    : Compiling entry function 'k' for 'sm_90'
//   ptxas info    : Function properties for k
//   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//   ptxas info    : Used 30 registers, used 1 barriers, 4096 bytes smem, 380 bytes cmem[0]
// The "Used" line belongs to the entry function being compiled; a "Function properties" block
// also appears for each non-inlined device function.
std::vector<FunctionReport> parse_ptxas_report(std::string_view log) {
  std::vector<FunctionReport> functions;
  auto find_or_add = [&functions](const std::string& name) -> std::size_t {
    auto found = std::find_if(functions.begin(), functions.end(),
                              [&name](const FunctionReport& f) { return f.name == name; });
    if (found != functions.end()) return found - functions.begin();
    functions.emplace_back().name = name;
    return functions.size() - 1;
  };
  std::optional<std::size_t> compiling_entry;
  std::optional<std::size_t> properties_of;
  std::istringstream lines{std::string(log)};
  for (std::string line; std::getline(lines, line);) {
    if (auto name = text_after(line, "Compiling entry function '", "'")) {
      compiling_entry = find_or_add(*name);
      functions[*compiling_entry].entry = true;
    } else if (auto properties = text_after(line, "Function properties for ", "")) {
      while (!properties->empty() && std::isspace(static_cast<unsigned char>(properties->back()))) {
        properties->pop_back();
      }
      properties_of = find_or_add(*properties);
    } else if (auto stack_frame = number_before(line, " bytes stack frame"); stack_frame) {
      if (!properties_of) continue;
      FunctionReport& function = functions[*properties_of];
      function.stack_frame = *stack_frame;
      function.spill_stores = number_before(line, " bytes spill stores").value_or(0);
      function.spill_loads = number_before(line, " bytes spill loads").value_or(0);
    } else if (auto registers = number_before(line, " registers"); registers && compiling_entry) {
      FunctionReport& function = functions[*compiling_entry];
      function.registers = registers;
      function.shared_memory = number_before(line, " bytes smem").value_or(0);
      function.cumulative_stack = number_before(line, " bytes cumulative stack size");
    }
  }
  return functions;
}

// Fills the resource fields for the kernel named `kernel_name` (else the first kernel). Spills
// in non-inlined device functions count too: they cost the calling kernel just the same.
void apply_ptxas_report(std::string_view log, const std::string& kernel_name,
                        CompiledKernel& kernel) {
  std::vector<FunctionReport> functions = parse_ptxas_report(log);
  auto is_entry = [](const FunctionReport& f) { return f.entry; };
  auto chosen = std::find_if(functions.begin(), functions.end(), [&](const FunctionReport& f) {
    return f.entry && f.name == kernel_name;
  });
  if (chosen == functions.end())
    chosen = std::find_if(functions.begin(), functions.end(), is_entry);
  if (chosen == functions.end()) return;

  kernel.registers = chosen->registers.value_or(-1);
  kernel.shared_memory_bytes = chosen->shared_memory;
  kernel.stack_frame_bytes = chosen->cumulative_stack.value_or(chosen->stack_frame);
  kernel.spill_store_bytes = chosen->spill_stores;
  kernel.spill_load_bytes = chosen->spill_loads;
  for (const FunctionReport& function : functions) {
    if (function.entry) continue;
    kernel.spill_store_bytes += function.spill_stores;
    kernel.spill_load_bytes += function.spill_loads;
  }
}

void reject_architecture_options(const std::vector<std::string>& options) {
  for (const std::string& option : options) {
    if (option.starts_with("--gpu-architecture") || option.starts_with("-arch")) {
      throw Error("NVRTC option '" + option +
                  "' is not allowed: set the architecture through CompileRequest::arch");
    }
  }
}

// "libnvrtc-builtins.so.MAJOR.MINOR", the name NVRTC loads its builtins library by.
bool is_builtins_library_name(std::string_view name) {
  constexpr std::string_view kPrefix = "libnvrtc-builtins.so.";
  if (!name.starts_with(kPrefix)) return false;
  name.remove_prefix(kPrefix.size());
  const std::size_t dot = name.find('.');
  const auto all_digits = [](std::string_view text) {
    return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c)) != 0;
    });
  };
  return dot != std::string_view::npos && all_digits(name.substr(0, dot)) &&
         all_digits(name.substr(dot + 1));
}

// NVRTC dlopens its builtins library by name (libnvrtc-builtins.so.MAJOR.MINOR) on its first
// call, so without an ld.so.conf entry or LD_LIBRARY_PATH for the toolkit that fails, even though
// libnvrtc itself was found through tilenorm's RUNPATH. Loading the builtins from the directory
// libnvrtc came from, before any NVRTC call, makes NVRTC's own dlopen find the loaded library
// (matched by its soname). A failure here is ignored: NVRTC then searches as usual and reports.
void preload_nvrtc_builtins() {
  static std::once_flag once;
  std::call_once(once, [] {
    const auto directory = directory_of_loaded_file(reinterpret_cast<const void*>(&nvrtcVersion));
    if (directory.empty()) return;
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
      if (is_builtins_library_name(entry.path().filename().string())) {
        // Kept loaded for the life of the process, as NVRTC keeps it.
        ::dlopen(entry.path().c_str(), RTLD_NOW | RTLD_LOCAL);
      }
    }
  });
}

}  // namespace

void validate_arch(std::string_view arch) {
  std::string_view digits = arch.starts_with("sm_") ? arch.substr(3) : std::string_view();
  if (digits.ends_with('a')) digits.remove_suffix(1);
  bool valid = !digits.empty() && std::all_of(digits.begin(), digits.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
  if (!valid) {
    throw Error("invalid CUDA architecture '" + std::string(arch) +
                "': expected a real architecture such as sm_80, sm_90 or sm_90a");
  }
}

CompiledKernel compile_cuda(const CompileRequest& request) {
  validate_arch(request.arch);
  reject_architecture_options(request.options);
  preload_nvrtc_builtins();

  // --no-cache: on a hit in NVRTC's own cache (the driver's ComputeCache, used where libcuda is
  // present) ptxas does not run and the log lacks the resource report; DiskCache replaces it.
  std::vector<std::string> options = {"--gpu-architecture=" + request.arch, "-std=c++17",
                                      "--ptxas-options=-v", "--no-cache"};
  options.insert(options.end(), request.options.begin(), request.options.end());
  std::vector<const char*> option_pointers;
  for (const std::string& option : options) option_pointers.push_back(option.c_str());

  std::string program_name =
      (request.kernel_name.empty() ? std::string("tilenorm_kernel") : request.kernel_name) + ".cu";
  nvrtcProgram raw_program = nullptr;
  check_nvrtc(nvrtcCreateProgram(&raw_program, request.source.c_str(), program_name.c_str(), 0,
                                 nullptr, nullptr),
              "nvrtcCreateProgram");
  ProgramHandle program(raw_program);

  nvrtcResult compiled = nvrtcCompileProgram(
      program.get(), static_cast<int>(option_pointers.size()), option_pointers.data());
  CompiledKernel kernel;
  kernel.log = program_log(program.get());
  if (compiled != NVRTC_SUCCESS) {
    throw CompileError("NVRTC could not compile kernel '" + request.kernel_name + "' for " +
                           request.arch + " (" + nvrtcGetErrorString(compiled) +
                           ")\noptions: " + join(options) + "\nlog:\n" + kernel.log +
                           "\nsource:\n" + numbered_source(request.source),
                       kernel.log);
  }

  std::size_t cubin_size = 0;
  check_nvrtc(nvrtcGetCUBINSize(program.get(), &cubin_size), "nvrtcGetCUBINSize");
  if (cubin_size == 0) {
    throw Error("NVRTC produced no CUBIN for kernel '" + request.kernel_name + "' (" +
                request.arch + ")");
  }
  kernel.cubin.resize(cubin_size);
  check_nvrtc(nvrtcGetCUBIN(program.get(), kernel.cubin.data()), "nvrtcGetCUBIN");
  apply_ptxas_report(kernel.log, request.kernel_name, kernel);
  return kernel;
}

std::string nvrtc_version() {
  preload_nvrtc_builtins();
  int major = 0;
  int minor = 0;
  check_nvrtc(nvrtcVersion(&major, &minor), "nvrtcVersion");
  return std::to_string(major) + "." + std::to_string(minor);
}

std::vector<int> nvrtc_architectures() {
  preload_nvrtc_builtins();
  int count = 0;
  check_nvrtc(nvrtcGetNumSupportedArchs(&count), "nvrtcGetNumSupportedArchs");
  std::vector<int> architectures(static_cast<std::size_t>(std::max(count, 0)));
  check_nvrtc(nvrtcGetSupportedArchs(architectures.data()), "nvrtcGetSupportedArchs");
  return architectures;
}

std::string target_arch(int compute_capability, std::string_view device, std::span<const int> nvrtc,
                        std::string_view nvrtc_version) {
  const auto sm = [](int capability) { return "sm_" + std::to_string(capability); };
  if (compute_capability < kOldestComputeCapability) {
    throw Error(std::string(device) + " is " + sm(compute_capability) +
                "; tilenorm's kernels need " + sm(kOldestComputeCapability) +
                " or newer (cp.async and bf16 arithmetic)");
  }
  if (std::ranges::find(nvrtc, compute_capability) != nvrtc.end()) return sm(compute_capability);
  // Cubins run on any GPU of the same major and an equal or higher minor.
  std::optional<int> same_major;
  for (const int known : nvrtc) {
    if (known / 10 == compute_capability / 10 && known < compute_capability &&
        known > same_major.value_or(0)) {
      same_major = known;
    }
  }
  if (same_major) return sm(*same_major);
  std::string range = "no architecture";
  if (!nvrtc.empty()) {
    range = sm(std::ranges::min(nvrtc)) + " to " + sm(std::ranges::max(nvrtc));
  }
  throw Error("NVRTC " + std::string(nvrtc_version) + " cannot compile for " + std::string(device) +
              ", " + sm(compute_capability) + ": it knows " + range + ", none of the same major (" +
              std::to_string(compute_capability / 10) + ".x); a CUDA toolkit whose NVRTC knows " +
              sm(compute_capability) + " is needed");
}

namespace {

// "12.4" numbered as CUDA numbers its versions (12040); 0 for text that is not major.minor.
int cuda_version_number(std::string_view version) {
  const std::size_t dot = version.find('.');
  if (dot == std::string_view::npos) return 0;
  int major = 0;
  int minor = 0;
  std::from_chars(version.data(), version.data() + dot, major);
  std::from_chars(version.data() + dot + 1, version.data() + version.size(), minor);
  return 1000 * major + 10 * minor;
}

}  // namespace

bool nvrtc_assembles_clusters(std::string_view nvrtc_version) {
  constexpr int kStAsync = 12010;  // st.async, PTX ISA 8.1
  return cuda_version_number(nvrtc_version) >= kStAsync;
}

std::string older_driver_note(int driver_version, std::string_view nvrtc_version) {
  if (driver_version >= cuda_version_number(nvrtc_version)) return "";
  return "The driver supports CUDA " + std::to_string(driver_version / 1000) + "." +
         std::to_string(driver_version % 1000 / 10) + ", older than NVRTC " +
         std::string(nvrtc_version) +
         ", which compiled the kernel: update the driver, or build tilenorm with a CUDA "
         "toolkit no newer than the driver.";
}

std::string target_arch(int compute_capability, std::string_view device) {
  return target_arch(compute_capability, device, nvrtc_architectures(), nvrtc_version());
}

}  // namespace tilenorm

#include "tilenorm/autotune/cli.hpp"

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <type_traits>
#include <vector>

#include "tilenorm/kernels/programs.hpp"
#include "tilenorm/runtime/driver.hpp"
#include "tilenorm/runtime/fileio.hpp"
#include "tilenorm/runtime/nvrtc.hpp"

#ifndef TILENORM_VERSION
#error "TILENORM_VERSION must be defined by the build"
#endif

namespace tilenorm::cli {
namespace {

std::string quoted(std::string_view text) {
  return "'" + std::string(text) + "'";
}

void print_error(std::string_view tool, std::string_view message) {
  std::cerr << tool << ": error: " << message << std::endl;
}

// Flushes stdout; false when anything written to it was lost.
bool stdout_written(int& error_number) {
  std::cout.flush();
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  error_number = errno;
  return flushed && !std::ferror(stdout) && std::cout.good();
}

}  // namespace

std::string version_text(std::string_view tool) {
  std::string text = std::string(tool) + " " + TILENORM_VERSION + "\n";
  text += "codegen version " + std::to_string(kCodegenVersion) + "\n";
  try {
    text += "NVRTC " + nvrtc_version() + "\n";
  } catch (const std::exception& error) {
    text += "NVRTC: unavailable (" + std::string(error.what()) + ")\n";
  }
  try {
    int version = 0;
    driver::check(driver::api().cuDriverGetVersion(&version), "cuDriverGetVersion");
    text +=
        "CUDA driver " + std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
  } catch (const std::exception& error) {
    text += "CUDA driver: not present (" + std::string(error.what()) + ")";
  }
  return text;
}

std::int64_t parse_integer(std::string_view flag, std::string_view text, std::int64_t min,
                           std::int64_t max) {
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < min || value > max) {
    throw UsageError(std::string(flag) + " must be a whole number from " + std::to_string(min) +
                     " to " + std::to_string(max) + ", got " + quoted(text));
  }
  return value;
}

std::vector<std::string> split_list(std::string_view flag, std::string_view text) {
  std::vector<std::string> items;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = text.find(',', start);
    std::string item(text.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (item.empty()) {
      throw UsageError(std::string(flag) + " got an empty item in " + quoted(text));
    }
    items.push_back(std::move(item));
    if (comma == std::string_view::npos) return items;
    start = comma + 1;
  }
}

DTypeChoice parse_dtype_choice(std::string_view flag, std::string_view text) {
  try {
    const std::size_t slash = text.find('/');
    if (slash == std::string_view::npos) {
      const DType dtype = parse_dtype(text);
      return {dtype, dtype};
    }
    return {parse_dtype(text.substr(0, slash)), parse_dtype(text.substr(slash + 1))};
  } catch (const Error& e) {
    throw UsageError(std::string(flag) + " " + quoted(text) + ": " + e.what() +
                     "; write bf16, fp16, fp32, or IO/PARAM such as bf16/fp32");
  }
}

namespace {

// The one of `choices` that `name` calls `text`; otherwise a UsageError listing the names.
template <class Choice>
Choice parse_named(std::string_view flag, std::string_view text,
                   const std::vector<std::type_identity_t<Choice>>& choices,
                   std::string_view (*name)(Choice)) {
  std::string names;
  for (std::size_t i = 0; i < choices.size(); ++i) {
    if (name(choices[i]) == text) return choices[i];
    names += std::string(i == 0                    ? ""
                         : i + 1 == choices.size() ? " or "
                                                   : ", ") +
             std::string(name(choices[i]));
  }
  throw UsageError(std::string(flag) + " must be " + names + ", got " + quoted(text));
}

}  // namespace

RowStorage parse_row_storage(std::string_view flag, std::string_view text) {
  std::vector<RowStorage> storages;
  for (int value = 0; value < kRowStorageCount; ++value)
    storages.push_back(static_cast<RowStorage>(value));
  return parse_named(flag, text, storages, row_storage_name);
}

MomentFusion parse_moment_fusion(std::string_view flag, std::string_view text) {
  return parse_named(flag, text, {MomentFusion::rule, MomentFusion::on, MomentFusion::off},
                     moment_fusion_name);
}

LoadPin parse_load_pin(std::string_view flag, std::string_view text) {
  return parse_named(flag, text, {LoadPin::rule, LoadPin::on, LoadPin::off, LoadPin::early},
                     load_pin_name);
}

PeeledRowShifts parse_peeled_row_shifts(std::string_view flag, std::string_view text) {
  return parse_named(
      flag, text,
      {PeeledRowShifts::automatic, PeeledRowShifts::per_thread, PeeledRowShifts::per_row},
      peeled_row_shifts_name);
}

EarlyColumns parse_early_columns(std::string_view flag, std::string_view text) {
  return parse_named(flag, text,
                     {EarlyColumns::automatic, EarlyColumns::never, EarlyColumns::always},
                     early_columns_name);
}

std::string parse_kernel_name(std::string_view flag, std::string_view text) {
  try {
    kernels::builtin_program(text);
  } catch (const Error& e) {
    throw UsageError(std::string(flag) + ": " + e.what());
  }
  return std::string(text);
}

int run_tool(std::string_view tool, const std::function<int()>& body) {
  int status = kExitFailure;
  try {
    status = body();
  } catch (const InfoRequest& info) {
    std::cout << info.text;
    status = kExitOk;
  } catch (const UsageError& error) {
    print_error(tool, error.what());
    status = kExitUsage;
  } catch (const driver::DriverUnavailable& error) {
    print_error(tool, "no GPU available: " + std::string(error.what()));
    status = kExitNoGpu;
  } catch (const std::exception& error) {
    print_error(tool, error.what());
    status = kExitFailure;
  } catch (...) {
    print_error(tool, "unknown exception");
    status = kExitFailure;
  }
  int error_number = 0;
  if (!stdout_written(error_number)) {
    print_error(tool, "cannot write to standard output" +
                          (error_number ? ": " + system_error_text(error_number) : ""));
    if (status == kExitOk) status = kExitFailure;
  }
  return status;
}

}  // namespace tilenorm::cli

#pragma once
// Building a tool's command line with CLI11, with tilenorm's conventions (see cli.hpp). Used by
// the tools in this repository; not installed, so the installed package does not need CLI11.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <string>
#include <vector>

#include "tilenorm/autotune/cli.hpp"

namespace tilenorm::cli {

// Adds --version (and keeps CLI11's -h/--help). Options are added the CLI11 way, one line each,
// as strings: values are checked afterwards with the parse_* functions of cli.hpp, so every
// error names the flag and the value in the same words.
inline void add_common_flags(CLI::App& app, const std::string& tool) {
  app.set_version_flag(
      "--version", [tool] { return version_text(tool); },
      "print the versions of tilenorm, its code generator, NVRTC and the CUDA driver");
}

// An option that may be given once, as "--flag VALUE" or "--flag=VALUE".
inline CLI::Option* add_value(CLI::App& app, const std::string& name, std::string& value,
                              const std::string& help, const std::string& type_name) {
  return app.add_option(name, value, help)->type_name(type_name);
}

// An option that may be repeated; each use takes one value (itself maybe a comma list).
inline CLI::Option* add_values(CLI::App& app, const std::string& name,
                               std::vector<std::string>& values, const std::string& help,
                               const std::string& type_name) {
  return app.add_option(name, values, help)->type_name(type_name)->allow_extra_args(false);
}

// Parses `args` (without the program name). --help and --version become InfoRequest, and every
// CLI11 error a UsageError whose message names the argument.
inline void parse(CLI::App& app, std::vector<std::string> args) {
  std::reverse(args.begin(), args.end());  // CLI11 takes a vector last argument first
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp&) {
    throw InfoRequest{app.help()};
  } catch (const CLI::CallForAllHelp&) {
    throw InfoRequest{app.help("", CLI::AppFormatMode::All)};
  } catch (const CLI::CallForVersion& version) {
    throw InfoRequest{std::string(version.what()) + "\n"};
  } catch (const CLI::ParseError& error) {
    throw UsageError(std::string(error.what()) + " (see --help)");
  }
}

}  // namespace tilenorm::cli

// A small program the robustness scripts drive: it writes the tuning database or the disk cache
// in a loop (to be killed at a random moment), does one write (under a file-size limit), or
// checks that a database or cache entry is sound. Exit status 0 means "as expected".
//
//   robustness_helper db-writer DB ID          upsert entries n = ID*1000000 + i, forever
//   robustness_helper db-upsert DB N [BYTES]   upsert one entry for n = N, its config about BYTES
//   robustness_helper db-check DB              the file is absent or sound; prints its entry count
//   robustness_helper cache-writer DIR         store one key, alternating two sizes, forever
//   robustness_helper cache-store DIR BYTES    store one entry of about BYTES bytes
//   robustness_helper cache-check DIR          the entry is absent or loads without a warning
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "tilenorm/autotune/tuning_db_writer.hpp"
#include "tilenorm/dsl/codegen.hpp"
#include "tilenorm/runtime/disk_cache.hpp"
#include "tilenorm/runtime/log.hpp"
#include "tilenorm/runtime/tuning_db.hpp"

namespace {

namespace tn = tilenorm;

constexpr const char* kCacheKey = "robustness_entry";

tn::TuningEntry entry_for(std::int64_t n, std::size_t config_bytes = 0) {
  tn::TuningEntry entry;
  entry.key = {"Robust GPU", 9, 0, "feedc0de", tn::kCodegenVersion, "bf16", n, 1024};
  // Padding in strings of 1000 characters, as the reader allows no longer string in a config.
  entry.config = {
      {"threads_per_row", 128},
      {"padding", std::vector<std::string>(config_bytes / 1000, std::string(1000, 'p'))}};
  entry.median_us = 10.0;
  entry.tbps = 1.0;
  entry.date = "2026-01-01T00:00:00Z";
  return entry;
}

tn::CompiledKernel kernel_of(std::size_t bytes, char fill) {
  tn::CompiledKernel kernel;
  kernel.cubin.assign(bytes, fill);
  kernel.log = "ptxas info    : Used 32 registers";
  kernel.registers = 32;
  return kernel;
}

int db_check(const std::string& db) {
  const tn::TuningFileContents contents = tn::read_tuning_file(db);
  if (!contents.problems.empty()) {
    std::cerr << "damaged: " << contents.problem_summary() << "\n";
    return 1;
  }
  std::cout << contents.entries.size() << "\n";
  return 0;
}

int cache_check(const std::string& dir) {
  int warnings = 0;
  tn::set_warning_handler([&](std::string_view message) {
    std::cerr << "warning: " << message << "\n";
    ++warnings;
  });
  const auto loaded = tn::DiskCache(dir).load(kCacheKey);
  if (warnings) return 1;
  if (loaded && loaded->cubin.empty()) return 1;
  std::cout << (loaded ? loaded->cubin.size() : 0) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.size() == 3 && args[0] == "db-writer") {
      const std::int64_t base = std::stoll(args[2]) * 1000000;
      for (std::int64_t i = 1;; ++i) tn::upsert_entries(args[1], {entry_for(base + i)});
    }
    if ((args.size() == 3 || args.size() == 4) && args[0] == "db-upsert") {
      const std::size_t bytes = args.size() == 4 ? std::stoul(args[3]) : 0;
      tn::upsert_entries(args[1], {entry_for(std::stoll(args[2]), bytes)});
      return 0;
    }
    if (args.size() == 2 && args[0] == "db-check") return db_check(args[1]);
    if (args.size() == 2 && args[0] == "cache-writer") {
      const tn::DiskCache cache(args[1]);
      for (int i = 0;; ++i) cache.store(kCacheKey, kernel_of(i % 2 ? 300000 : 1000, 'a' + i % 26));
    }
    if (args.size() == 3 && args[0] == "cache-store") {
      tn::DiskCache(args[1]).store(kCacheKey, kernel_of(std::stoul(args[2]), 'z'));
      return 0;
    }
    if (args.size() == 2 && args[0] == "cache-check") return cache_check(args[1]);
  } catch (const std::exception& error) {
    std::cerr << "robustness_helper: error: " << error.what() << "\n";
    return 1;
  }
  std::cerr << "robustness_helper: usage: see the comment at the top of robustness_helper.cpp\n";
  return 2;
}

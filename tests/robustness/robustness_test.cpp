// Robustness (label "robustness"): damaged tuning databases and cache entries, and every kind of
// invalid DSL slot name. The process-level faults (kills, full disks, read-only places,
// concurrency, empty environments) are the shell scripts next to this file. docs/robustness.md
// lists each fault with its test and the observed behaviour.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "support/scoped.hpp"
#include "tilenorm/autotune/tuning_db_writer.hpp"
#include "tilenorm/dsl/codegen.hpp"
#include "tilenorm/dsl/error.hpp"
#include "tilenorm/dsl/language.hpp"
#include "tilenorm/dsl/names.hpp"
#include "tilenorm/dsl/passes.hpp"
#include "tilenorm/runtime/disk_cache.hpp"
#include "tilenorm/runtime/tuning_db.hpp"

namespace {

namespace fs = std::filesystem;
using tilenorm::testing::WarningCapture;

struct Scratch {
  Scratch() {
    std::string name = (fs::temp_directory_path() / "tilenorm-robustness-XXXXXX").string();
    REQUIRE(::mkdtemp(name.data()) != nullptr);
    path = name;
  }
  ~Scratch() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  fs::path path;
};

void write_bytes(const fs::path& file, const std::string& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << bytes;
  REQUIRE(out.good());
}

std::string read_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

bool printable(const std::string& text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) return false;
  }
  return true;
}

tilenorm::TuningEntry entry_for(std::int64_t n) {
  tilenorm::TuningEntry entry;
  entry.key = {"Robust GPU", 9, 0, "feedc0de", tilenorm::kCodegenVersion, "bf16", n, 1024};
  entry.config = {{"threads_per_row", 128}, {"vec", 8}};
  entry.median_us = 10.0;
  entry.tbps = 1.0;
  entry.date = "2026-01-01T00:00:00Z";
  return entry;
}

std::string random_bytes(std::size_t size, unsigned seed) {
  std::mt19937 generator(seed);
  std::string bytes(size, '\0');
  for (char& c : bytes) c = static_cast<char>(generator() & 0xff);
  return bytes;
}

// Loading must never throw, and must warn once with one printable line naming the file.
void expect_ignored_with_warning(const fs::path& db) {
  const WarningCapture warnings;
  tilenorm::TuningDatabase loaded;
  CHECK_NOTHROW(loaded = tilenorm::TuningDatabase::load_file(db));
  REQUIRE(warnings.messages().size() == 1);
  CHECK(warnings.messages()[0].find(db.string()) != std::string::npos);
  CHECK(printable(warnings.messages()[0]));
}

}  // namespace

TEST_CASE("damaged database: truncated at every length, never a crash, never a lost entry") {
  Scratch scratch;
  const fs::path db = scratch.path / "tuning.json";
  tilenorm::upsert_entries(db, {entry_for(1), entry_for(2), entry_for(3)});
  const std::string whole = read_bytes(db);
  for (std::size_t length = 0; length < whole.size(); length += 3) {
    write_bytes(db, whole.substr(0, length));
    const tilenorm::TuningFileContents contents = tilenorm::read_tuning_file(db);
    CHECK_FALSE(contents.problems.empty());
    CHECK(contents.entries.size() <= 3);
  }
  // A writer keeps the damaged file aside and carries its valid entries over.
  write_bytes(db, whole.substr(0, whole.size() - 4));  // cuts the closing "]}\n"
  const WarningCapture warnings;
  tilenorm::upsert_entries(db, {entry_for(4)});
  REQUIRE(warnings.messages().size() == 1);
  CHECK(warnings.messages()[0].find("is damaged") != std::string::npos);
  CHECK(tilenorm::TuningDatabase::load_file(db).entries().size() == 1);  // not valid JSON: 0 kept
  std::size_t kept = 0;
  for (const auto& item : fs::directory_iterator(scratch.path)) {
    kept += item.path().filename().string().starts_with("tuning.json.corrupt-");
  }
  CHECK(kept == 1);
}

TEST_CASE("damaged database: garbage bytes give one printable warning") {
  Scratch scratch;
  const fs::path db = scratch.path / "tuning.json";
  for (unsigned seed = 1; seed <= 20; ++seed) {
    write_bytes(db, random_bytes(64 * seed, seed));
    expect_ignored_with_warning(db);
  }
}

TEST_CASE("damaged database: hostile documents (deep nesting, huge numbers, wrong types)") {
  Scratch scratch;
  const fs::path db = scratch.path / "tuning.json";
  const std::string head = R"({"schema": "tilenorm-tuning-db", "version": 1, "entries": [)";
  std::string deep = head;
  for (int i = 0; i < 200000; ++i) deep += "[";
  write_bytes(db, deep);
  expect_ignored_with_warning(db);
  std::string deep_closed = head;
  for (int i = 0; i < 100000; ++i) deep_closed += "{\"a\":";
  deep_closed += "1";
  deep_closed.append(100000, '}');
  deep_closed += "]}";
  write_bytes(db, deep_closed);
  {
    const WarningCapture warnings;
    CHECK(tilenorm::TuningDatabase::load_file(db).entries().empty());
    CHECK(warnings.messages().size() == 1);
  }
  // A number beyond the double range makes the document invalid JSON: the file is ignored.
  write_bytes(db, head + R"({"n": 1e400}]})");
  expect_ignored_with_warning(db);
  const nlohmann::json valid = entry_for(7);
  for (const auto& [field, raw] :
       std::vector<std::pair<std::string, std::string>>{{"n", "99999999999999999999999999"},
                                                        {"n", "-1"},
                                                        {"n", "\"4096\""},
                                                        {"m_bucket", "3"},
                                                        {"median_us", "-0.0"},
                                                        {"config", "[]"},
                                                        {"device", "null"},
                                                        {"cc", "\"9.0.1\""},
                                                        {"date", "\"yesterday\""}}) {
    nlohmann::json entry = valid;
    entry[field] = "@X@";
    std::string text = entry.dump();
    text.replace(text.find("\"@X@\""), 5, raw);
    write_bytes(db, head + nlohmann::json(valid).dump() + "," + text + "]}");
    const WarningCapture warnings;
    const auto loaded = tilenorm::TuningDatabase::load_file(db);
    INFO(field << " = " << raw);
    CHECK(loaded.entries().size() == 1);  // the valid entry is still used
    REQUIRE(warnings.messages().size() == 1);
    CHECK(printable(warnings.messages()[0]));
  }
}

TEST_CASE("damaged database: a huge file is not read") {
  Scratch scratch;
  const fs::path db = scratch.path / "tuning.json";
  write_bytes(db, "{}");
  fs::resize_file(db, std::uintmax_t{1} << 40);  // sparse: 1 TiB that costs no disk space
  expect_ignored_with_warning(db);
  // The writer moves nothing and loses nothing: the huge file is kept aside, entries are added.
  const WarningCapture warnings;
  tilenorm::upsert_entries(db, {entry_for(1)});
  CHECK(tilenorm::TuningDatabase::load_file(db).entries().size() == 1);
}

TEST_CASE("damaged cache entries: truncated, garbage, hostile lengths and huge files") {
  Scratch scratch;
  const tilenorm::DiskCache cache(scratch.path);
  tilenorm::CompiledKernel kernel;
  kernel.cubin.assign(200, 'c');
  kernel.log = "log";
  kernel.registers = 40;
  cache.store("key", kernel);
  const fs::path path = cache.entry_path("key");
  const std::string whole = read_bytes(path);
  REQUIRE(cache.load("key"));

  std::vector<std::string> damaged;
  for (std::size_t length = 0; length < whole.size(); ++length) {
    damaged.push_back(whole.substr(0, length));
  }
  for (unsigned seed = 1; seed <= 10; ++seed) damaged.push_back(random_bytes(300, seed));
  std::string huge_length = whole;
  for (std::size_t i = 12; i < 20; ++i) huge_length[i] = '\xff';  // the payload length field
  damaged.push_back(huge_length);
  std::string flipped = whole;
  flipped.back() ^= 1;
  damaged.push_back(flipped);
  for (const std::string& bytes : damaged) {
    write_bytes(path, bytes);
    const WarningCapture warnings;
    CHECK_FALSE(cache.load("key"));
    REQUIRE(warnings.messages().size() == 1);
    CHECK(warnings.messages()[0].find("the kernel will be recompiled") != std::string::npos);
  }
  write_bytes(path, "x");
  fs::resize_file(path, std::uintmax_t{1} << 40);
  const WarningCapture warnings;
  CHECK_FALSE(cache.load("key"));
  REQUIRE(warnings.messages().size() == 1);
  CHECK(warnings.messages()[0].find("more than the 256 MiB") != std::string::npos);
  cache.store("key", kernel);  // a good entry replaces the damaged one
  CHECK(cache.load("key"));
}

namespace {

enum class Slot { input, column, scalar, output, save };

// A small valid program that names one of its slots `name`.
tilenorm::ir::Program program_naming(Slot slot, const std::string& name) {
  return tilenorm::dsl::make_program("named", [&](auto& p) {
    auto x = p.input(slot == Slot::input ? name : "x");
    auto w = p.column(slot == Slot::column ? name : "w");
    auto eps = p.scalar(slot == Slot::scalar ? name : "eps");
    auto r = rsqrt(mean(x * x) + eps);
    p.save(slot == Slot::save ? name : "rstd", r);
    p.output(slot == Slot::output ? name : "y", x * r * w);
  });
}

}  // namespace

TEST_CASE("invalid DSL names: lower() rejects them with a ProgramError naming them") {
  const std::vector<std::string> invalid = {"",    "1x",  "9",    "x y", " x",
                                            "x-y", "x.y", "x\ty", "x\n", "caf\xc3\xa9",
                                            "x;",  "a/b", "$x",   "x(y)"};
  for (Slot slot : {Slot::input, Slot::column, Slot::scalar, Slot::output, Slot::save}) {
    for (const std::string& name : invalid) {
      INFO("slot " << static_cast<int>(slot) << ", name '" << name << "'");
      bool rejected = false;
      try {
        tilenorm::lower(program_naming(slot, name));
      } catch (const tilenorm::ProgramError& error) {
        rejected = true;
        // Named as written, with characters that do not print (a tab, a newline, the bytes of
        // a non-ASCII letter) shown as '?'.
        std::string shown;
        for (char c : name) shown += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
        CHECK(std::string(error.what()).find("'" + shown + "'") != std::string::npos);
      }
      CHECK(rejected);
    }
  }
  // The same name twice, in any two slots.
  const auto twice = tilenorm::dsl::make_program("twice", [](auto& p) {
    auto x = p.input("v");
    p.output("v", x * 2.0);
  });
  CHECK_THROWS_WITH_AS(tilenorm::lower(twice), doctest::Contains("'v' is used twice"),
                       tilenorm::ProgramError);
}

TEST_CASE("invalid DSL names: check_slot_name covers keywords, reserved and overlong names") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "is empty"},
      {"1x", "starts with a digit"},
      {"x y", "is not an identifier"},
      {"caf\xc3\xa9", "is not an identifier"},
      {"int", "is a C++ or CUDA keyword"},
      {"float", "is a C++ or CUDA keyword"},
      {"threadIdx", "is a C++ or CUDA keyword"},
      {"__global__", "reserved in generated C++"},
      {"_x", "reserved in generated C++"},
      {"a__b", "reserved in generated C++"},
      {std::string(65, 'a'), "has 65 characters; at most 64 are allowed"},
      {std::string(1 << 20, 'a'), "has 1048576 characters"},
  };
  for (const auto& [name, why] : cases) {
    INFO("name of " << name.size() << " characters");
    try {
      tilenorm::check_slot_name("p", name);
      FAIL("accepted");
    } catch (const tilenorm::ProgramError& error) {
      const std::string message = error.what();
      CHECK(message.starts_with("program 'p': slot name '"));
      CHECK(message.find(why) != std::string::npos);
      CHECK(message.size() < 200);  // a long name is shortened
      CHECK(printable(message));
    }
  }
  for (const char* name : {"x", "eps", "rstd", "w_2", "Weight", "x1", "in", "out"}) {
    CHECK_NOTHROW(tilenorm::check_slot_name("p", name));
  }
  // lower() applies the same rules to every slot.
  for (const char* name : {"int", "threadIdx", "_x", "a__b"}) {
    CAPTURE(name);
    CHECK_THROWS_AS(tilenorm::lower(program_naming(Slot::input, name)), tilenorm::ProgramError);
  }
  CHECK_THROWS_AS(tilenorm::lower(program_naming(Slot::output, std::string(65, 'a'))),
                  tilenorm::ProgramError);
}

#include "tilenorm/runtime/tuning_db.hpp"

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "support/scoped.hpp"
#include "tilenorm/autotune/tuning_db_writer.hpp"
#include "tilenorm/dsl/error.hpp"
#include "tilenorm/runtime/paths.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using tilenorm::TuningDatabase;
using tilenorm::TuningDatabaseStack;
using tilenorm::TuningEntry;
using tilenorm::TuningKey;
using tilenorm::TuningLookup;
using Source = tilenorm::TuningLookup::Source;
using tilenorm::testing::ScopedEnv;
using tilenorm::testing::WarningCapture;

class TempDir {
 public:
  TempDir() {
    std::string name_template = (fs::temp_directory_path() / "tilenorm-tuning-db-XXXXXX").string();
    REQUIRE(::mkdtemp(name_template.data()) != nullptr);
    path_ = name_template;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  fs::path operator/(const std::string& name) const { return path_ / name; }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_text(const fs::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary);
  out << text;
  REQUIRE(out.good());
}

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TuningKey sample_key(std::int64_t m_bucket = 1024) {
  return {"NVIDIA H200", 9, 0, "3f2a9c01", 7, "bf16", 4096, m_bucket};
}

TuningEntry sample_entry(TuningKey key = sample_key(), double median_us = 10.0) {
  TuningEntry entry;
  entry.key = std::move(key);
  entry.config = {
      {"block", 256}, {"vector_width", 4}, {"schedule", {{"unroll", 2}, {"stages", {1, 2}}}}};
  entry.median_us = median_us;
  entry.tbps = 3.5;
  entry.date = "2024-05-01T12:00:00Z";
  return entry;
}

std::string database_json(const std::vector<std::string>& entry_texts) {
  std::string text = R"({"schema": "tilenorm-tuning-db", "version": 1, "entries": [)";
  for (std::size_t i = 0; i < entry_texts.size(); ++i) {
    text += (i ? "," : "") + entry_texts[i];
  }
  return text + "]}";
}

// The sample entry as JSON text with one field's value replaced by raw text.
std::string entry_with_field(const std::string& field, const std::string& raw_value) {
  json entry = sample_entry(sample_key(1));
  entry[field] = "@HOSTILE@";
  std::string text = entry.dump();
  return text.replace(text.find("\"@HOSTILE@\""), 11, raw_value);
}

std::string nested_objects(std::size_t depth) {
  std::string text;
  for (std::size_t level = 0; level < depth; ++level) text += "{\"a\":";
  text += "1";
  text.append(depth, '}');
  return text;
}

TuningDatabase database_of(const std::vector<TuningEntry>& entries) {
  TuningDatabase database;
  for (const auto& entry : entries) database.insert(entry);
  return database;
}

}  // namespace

TEST_CASE("m_bucket is the smallest power of two holding the rows") {
  CHECK(tilenorm::m_bucket(-5) == 1);
  CHECK(tilenorm::m_bucket(0) == 1);
  CHECK(tilenorm::m_bucket(1) == 1);
  CHECK(tilenorm::m_bucket(2) == 2);
  CHECK(tilenorm::m_bucket(3) == 4);
  CHECK(tilenorm::m_bucket(5) == 8);
  CHECK(tilenorm::m_bucket(1000) == 1024);
  CHECK(tilenorm::m_bucket(1024) == 1024);
  CHECK(tilenorm::m_bucket(1025) == 2048);
  CHECK(tilenorm::m_bucket(std::int64_t{1} << 62) == std::int64_t{1} << 62);
  CHECK_THROWS_WITH_AS(tilenorm::m_bucket((std::int64_t{1} << 62) + 1),
                       "m_bucket: 4611686018427387905 rows is more than 2^62", tilenorm::Error);
}

TEST_CASE("entries round-trip through JSON and through a file") {
  const TuningEntry entry = sample_entry();
  const json stored = entry;
  CHECK(stored.at("device") == "NVIDIA H200");
  CHECK(stored.at("cc") == "9.0");
  CHECK(stored.at("m_bucket") == 1024);
  CHECK(stored.get<TuningEntry>() == entry);

  TempDir dir;
  const fs::path db = dir / "tuning.json";
  TuningEntry other = sample_entry(sample_key(8), 2.5);
  other.key.cc_major = 10;
  other.key.cc_minor = 3;
  other.date = "2024-05-01T12:00:00.125Z";
  tilenorm::upsert_entries(db, {entry, other});

  WarningCapture warnings;
  const TuningDatabase loaded = TuningDatabase::load_file(db);
  CHECK(warnings.messages().empty());
  CHECK(loaded.source_file() == db);
  REQUIRE(loaded.entries().size() == 2);
  CHECK(loaded.entries()[0] == entry);
  CHECK(loaded.entries()[1] == other);

  const json document = json::parse(read_text(db));
  CHECK(document.at("schema") == "tilenorm-tuning-db");
  CHECK(document.at("version") == 1);
  CHECK(document.at("entries").size() == 2);
  CHECK(
      read_text(db).starts_with(R"({"schema": "tilenorm-tuning-db", "version": 1, "entries": [)"));
}

TEST_CASE("from_json names the field that is wrong") {
  json entry = sample_entry();
  entry.erase("dtype");
  CHECK_THROWS_WITH_AS(entry.get<TuningEntry>(), "field \"dtype\" is missing", tilenorm::Error);
  entry = sample_entry();
  entry["n"] = "4096";
  CHECK_THROWS_WITH_AS(entry.get<TuningEntry>(), "field \"n\": must be an integer, got \"4096\"",
                       tilenorm::Error);
  CHECK_THROWS_WITH_AS(json::array().get<TuningKey>(), "must be an object, got an array",
                       tilenorm::Error);
}

TEST_CASE("a missing file is an empty database without a warning") {
  TempDir dir;
  WarningCapture warnings;
  const TuningDatabase loaded = TuningDatabase::load_file(dir / "absent.json");
  CHECK(loaded.entries().empty());
  CHECK(warnings.messages().empty());
  CHECK(loaded.lookup(sample_key()).source == Source::heuristic);
}

TEST_CASE("a file of the wrong kind is ignored with one warning naming it") {
  struct Case {
    std::string text;
    std::string problem;
  };
  const std::vector<Case> cases = {
      {R"({"schema": "other", "version": 1, "entries": []})",
       R"(schema is "other", expected "tilenorm-tuning-db")"},
      {R"({"entries": []})", R"(no "schema" field (not a tilenorm tuning database))"},
      {R"({"schema": "tilenorm-tuning-db", "version": 2, "entries": []})",
       "version 2 is not supported (this build reads version 1)"},
      {R"({"schema": "tilenorm-tuning-db", "version": "1", "entries": []})",
       R"(version "1" is not supported (this build reads version 1))"},
      {R"({"schema": "tilenorm-tuning-db", "entries": []})", R"(no "version" field)"},
      {R"({"schema": "tilenorm-tuning-db", "version": 1})", R"(no "entries" field)"},
      {R"({"schema": "tilenorm-tuning-db", "version": 1, "entries": {}})",
       R"("entries" is an object, not an array)"},
      {"[1, 2]", "the top level is an array, not an object"},
      {std::string(1'000'000, '[') + std::string(1'000'000, ']'),
       "the top level is an array, not an object"},
      {"  \n", "the file is empty"},
  };
  TempDir dir;
  const fs::path db = dir / "tuning.json";
  for (const auto& test : cases) {
    INFO(test.problem);
    write_text(db, test.text);
    WarningCapture warnings;
    const TuningDatabase loaded = TuningDatabase::load_file(db);
    CHECK(loaded.entries().empty());
    REQUIRE(warnings.messages().size() == 1);
    CHECK(warnings.messages()[0] ==
          "ignoring tuning database " + db.string() + ": " + test.problem);
  }
}

TEST_CASE("a truncated file is ignored with a warning") {
  TempDir dir;
  const fs::path db = dir / "tuning.json";
  tilenorm::upsert_entries(
      db, {sample_entry(sample_key(1)), sample_entry(sample_key(2)), sample_entry(sample_key(4))});
  const std::string full = read_text(db);
  write_text(db, full.substr(0, full.size() / 2));

  WarningCapture warnings;
  CHECK(TuningDatabase::load_file(db).entries().empty());
  REQUIRE(warnings.messages().size() == 1);
  const std::string message = warnings.messages()[0];
  CHECK(message.starts_with("ignoring tuning database " + db.string() +
                            ": not valid JSON: parse error at line"));
  CHECK(contains(message, "syntax error"));
}

TEST_CASE("garbage bytes are ignored with a printable warning") {
  TempDir dir;
  const fs::path db = dir / "tuning.json";
  write_text(db, std::string("\xff\xfe\x00\x01garbage\x80", 12));
  WarningCapture warnings;
  CHECK(TuningDatabase::load_file(db).entries().empty());
  REQUIRE(warnings.messages().size() == 1);
  const std::string message = warnings.messages()[0];
  CHECK(message.starts_with("ignoring tuning database " + db.string() +
                            ": not valid JSON: parse error at line 1, column 1"));
  for (char c : message) CHECK((c >= 0x20 && c < 0x7f));
}

TEST_CASE("a non-finite number makes the file invalid JSON") {
  TempDir dir;
  const fs::path db = dir / "tuning.json";
  write_text(db, database_json({entry_with_field("median_us", "1e999")}));
  WarningCapture warnings;
  CHECK(TuningDatabase::load_file(db).entries().empty());
  REQUIRE(warnings.messages().size() == 1);
  CHECK(warnings.messages()[0] == "ignoring tuning database " + db.string() +
                                      ": not valid JSON: number overflow parsing '1e999'");
}

TEST_CASE("a file too large to be a tuning database is ignored") {
  TempDir dir;
  const fs::path db = dir / "tuning.json";
  write_text(db, "{}");
  fs::resize_file(db, (64u << 20) + 1);  // sparse: costs no disk space
  WarningCapture warnings;
  CHECK(TuningDatabase::load_file(db).entries().empty());
  REQUIRE(warnings.messages().size() == 1);
  CHECK(warnings.messages()[0] == "ignoring tuning database " + db.string() +
                                      ": the file is 67108865 bytes, more than the 64 MiB limit");
}

TEST_CASE("a path that cannot be read is ignored with a warning") {
  TempDir dir;
  WarningCapture warnings;
  CHECK(TuningDatabase::load_file(dir.path()).entries().empty());
  REQUIRE(warnings.messages().size() == 1);
  CHECK(warnings.messages()[0] ==
        "cannot read tuning database " + dir.path().string() + ": not a regular file; ignoring it");
}

TEST_CASE("hostile entries are skipped by index while the valid ones are used") {
  struct Case {
    std::string field;
    std::string raw_value;
    std::string problem;
  };
  std::string wide_config = "{";
  for (int i = 0; i < 5000; ++i) wide_config += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":0";
  wide_config += "}";
  const std::vector<Case> cases = {
      {"n", "-5", R"(field "n": must be from 1 to 2147483647, got -5)"},
      {"n", "1099511627776", R"(field "n": must be from 1 to 2147483647, got 1099511627776)"},
      {"n", "18446744073709551615",
       R"(field "n": must be from 1 to 2147483647, got 18446744073709551615)"},
      {"n", "1e30", R"(field "n": must be an integer, got 1e+30)"},
      {"m_bucket", "3", R"(field "m_bucket": must be a power of two, got 3)"},
      {"m_bucket", "0", R"(field "m_bucket": must be from 1 to 4611686018427387904, got 0)"},
      {"codegen_version", "-1", R"(field "codegen_version": must be from 0 to 2147483647, got -1)"},
      {"cc", R"("nine")", R"(field "cc": must be "major.minor" like "9.0", got "nine")"},
      {"cc", "9.0", R"(field "cc": must be "major.minor" like "9.0", got 9.0)"},
      {"device", R"("")", R"(field "device": must not be empty)"},
      {"device", "\"" + std::string(1'000'000, 'x') + "\"",
       R"(field "device": must be at most 256 characters, got 1000000)"},
      {"device", R"("a\u0007b")",
       R"(field "device": must not contain control characters, got "a?b")"},
      {"program_hash", "42", R"(field "program_hash": must be a string, got 42)"},
      {"dtype", "null", R"(field "dtype": must be a string, got null)"},
      {"dtype", std::string(26, '[') + std::string(26, ']'),
       R"(field "dtype": must be a string, got an array)"},
      {"config", R"("fast")", R"(field "config": must be an object, got "fast")"},
      {"config", "[1, 2]", R"(field "config": must be an object, got an array)"},
      {"config", nested_objects(100'000),
       R"(field "config": must not be nested more than 16 levels deep)"},
      {"config", nested_objects(17),
       R"(field "config": must not be nested more than 16 levels deep)"},
      {"config", wide_config, R"(field "config": must hold at most 4096 values)"},
      {"config", "{\"k\": \"" + std::string(2000, 'x') + "\"}",
       R"(field "config": must not hold a string or key longer than 1024 characters)"},
      {"median_us", "-1", R"(field "median_us": must be a finite number > 0, got -1)"},
      {"median_us", "0", R"(field "median_us": must be a finite number > 0, got 0)"},
      {"median_us", R"("fast")", R"(field "median_us": must be a finite number > 0, got "fast")"},
      {"tbps", "-0.5", R"(field "tbps": must be a finite number >= 0, got -0.5)"},
      {"date", R"("yesterday")",
       R"(field "date": must be an ISO 8601 UTC date-time like "2024-05-01T12:00:00Z", got "yesterday")"},
      {"date", R"("2024-13-01T00:00:00Z")",
       R"(field "date": must be an ISO 8601 UTC date-time like "2024-05-01T12:00:00Z", got "2024-13-01T00:00:00Z")"},
  };
  TempDir dir;
  const fs::path db = dir / "tuning.json";
  const TuningEntry valid = sample_entry(sample_key(64));
  for (const auto& test : cases) {
    INFO(test.problem);
    write_text(db,
               database_json({json(valid).dump(), entry_with_field(test.field, test.raw_value)}));
    WarningCapture warnings;
    const TuningDatabase loaded = TuningDatabase::load_file(db);
    REQUIRE(loaded.entries().size() == 1);
    CHECK(loaded.entries()[0] == valid);
    REQUIRE(warnings.messages().size() == 1);
    CHECK(warnings.messages()[0] ==
          "tuning database " + db.string() +
              " has 1 problem(s), using its 1 valid entries: entry 1: " + test.problem);
  }
  // The deepest config allowed loads cleanly.
  write_text(db, database_json({entry_with_field("config", nested_objects(16))}));
  WarningCapture warnings;
  CHECK(TuningDatabase::load_file(db).entries().size() == 1);
  CHECK(warnings.messages().empty());
}

TEST_CASE("many bad entries give one warning that lists the first few") {
  TempDir dir;
  const fs::path db = dir / "tuning.json";
  std::vector<std::string> entries = {json(sample_entry()).dump()};
  for (int i = 0; i < 7; ++i) entries.push_back("42");
  entries.push_back(json(sample_entry()).dump());
  write_text(db, database_json(entries));
  WarningCapture warnings;
  CHECK(TuningDatabase::load_file(db).entries().size() == 1);
  REQUIRE(warnings.messages().size() == 1);
  CHECK(warnings.messages()[0] ==
        "tuning database " + db.string() +
            " has 8 problem(s), using its 1 valid entries: entry 1: must be an object, got 42; "
            "entry 2: must be an object, got 42; entry 3: must be an object, got 42; entry 4: "
            "must be an object, got 42; entry 5: must be an object, got 42; and 3 more");
}

TEST_CASE("a repeated key keeps the later entry, with a warning") {
  TempDir dir;
  const fs::path db = dir / "tuning.json";
  const TuningEntry first = sample_entry(sample_key(), 9.0);
  const TuningEntry second = sample_entry(sample_key(), 7.0);
  write_text(db, database_json({json(first).dump(), json(second).dump()}));
  WarningCapture warnings;
  const TuningDatabase loaded = TuningDatabase::load_file(db);
  REQUIRE(loaded.entries().size() == 1);
  CHECK(loaded.entries()[0] == second);
  REQUIRE(warnings.messages().size() == 1);
  CHECK(warnings.messages()[0] == "tuning database " + db.string() +
                                      " has 1 problem(s), using its 1 valid entries: entry 1: "
                                      "repeats the key of entry 0; the later entry is used");
}

TEST_CASE("unknown fields and junk outside the entries are ignored") {
  TempDir dir;
  const fs::path db = dir / "tuning.json";
  json entry = sample_entry();
  entry["comment"] = "tuned overnight";
  std::string text = database_json({entry.dump()});
  text.insert(1, "\"junk\": " + std::string(100'000, '[') + std::string(100'000, ']') + ", ");
  write_text(db, text);
  WarningCapture warnings;
  CHECK(TuningDatabase::load_file(db).entries().size() == 1);
  CHECK(warnings.messages().empty());
}

TEST_CASE("lookup falls back from exact to the nearest m bucket to the heuristic") {
  const TuningKey wanted = sample_key(8);
  std::vector<TuningEntry> entries = {sample_entry(sample_key(4), 1.0),
                                      sample_entry(sample_key(16), 2.0),
                                      sample_entry(sample_key(64), 3.0)};
  // An entry at exactly the wanted bucket for each field but m_bucket that differs: never used.
  auto add_distractor = [&](auto change) {
    TuningKey key = wanted;
    change(key);
    entries.push_back(sample_entry(key, 99.0));
  };
  add_distractor([](TuningKey& key) { key.codegen_version += 1; });
  add_distractor([](TuningKey& key) { key.program_hash = "ffff0000"; });
  add_distractor([](TuningKey& key) { key.dtype = "fp16"; });
  add_distractor([](TuningKey& key) { key.n = 8192; });
  add_distractor([](TuningKey& key) { key.device_name = "NVIDIA A100"; });
  add_distractor([](TuningKey& key) { key.cc_minor = 1; });
  const TuningDatabase database = database_of(entries);

  const TuningLookup exact = database.lookup(sample_key(16));
  CHECK(exact.source == Source::exact);
  REQUIRE(exact.entry);
  CHECK(exact.entry->median_us == 2.0);

  const auto nearest_bucket = [&](std::int64_t bucket) {
    const TuningLookup found = database.lookup(sample_key(bucket));
    CHECK(found.source == Source::nearest_m_bucket);
    REQUIRE(found.entry);
    CHECK(found.entry->median_us != 99.0);
    return found.entry->key.m_bucket;
  };
  CHECK(nearest_bucket(8) == 16);   // 4 and 16 are equally near: the larger wins
  CHECK(nearest_bucket(32) == 64);  // likewise 16 and 64
  CHECK(nearest_bucket(2) == 4);
  CHECK(nearest_bucket(1) == 4);
  CHECK(nearest_bucket(std::int64_t{1} << 40) == 64);

  TuningKey other_codegen = sample_key(2);
  other_codegen.codegen_version += 1;
  const TuningLookup crossed = database.lookup(other_codegen);
  CHECK(crossed.source == Source::nearest_m_bucket);
  REQUIRE(crossed.entry);
  CHECK(crossed.entry->key.codegen_version == other_codegen.codegen_version);

  TuningKey unknown = sample_key(8);
  unknown.program_hash = "0123abcd";
  const TuningLookup heuristic = database.lookup(unknown);
  CHECK(heuristic.source == Source::heuristic);
  CHECK_FALSE(heuristic.entry);

  CHECK(tilenorm::to_string(Source::exact) == "exact");
  CHECK(tilenorm::to_string(Source::nearest_m_bucket) == "nearest_m_bucket");
  CHECK(tilenorm::to_string(Source::heuristic) == "heuristic");
  CHECK_THROWS_WITH_AS(database.lookup(sample_key(0)),
                       "tuning lookup for NVIDIA H200 (cc 9.0), program 3f2a9c01, codegen 7, "
                       "bf16, n=4096, m_bucket=0: m_bucket must be at least 1",
                       tilenorm::Error);
}

TEST_CASE("the primary layer beats read-only layers") {
  TuningDatabaseStack stack;
  stack.add_layer(
      database_of({sample_entry(sample_key(1024), 5.0), sample_entry(sample_key(4), 6.0)}));
  stack.add_layer(
      database_of({sample_entry(sample_key(1024), 1.0), sample_entry(sample_key(16), 2.0),
                   sample_entry(sample_key(4), 0.5)}));
  CHECK(stack.layers().size() == 2);

  const auto found = [&](const TuningKey& key) {
    const TuningLookup result = stack.lookup(key);
    REQUIRE(result.entry);
    return result;
  };
  CHECK(found(sample_key(1024)).entry->median_us == 5.0);
  CHECK(found(sample_key(4)).entry->median_us == 6.0);
  // An exact key in a read-only layer beats a merely near bucket in the primary.
  CHECK(found(sample_key(16)).entry->median_us == 2.0);
  CHECK(found(sample_key(16)).source == Source::exact);
  // Nearest bucket is chosen across all layers; for bucket 2, bucket 4 of the primary wins.
  CHECK(found(sample_key(2)).source == Source::nearest_m_bucket);
  CHECK(found(sample_key(2)).entry->median_us == 6.0);
  CHECK(found(sample_key(8)).entry->key.m_bucket == 16);
}

TEST_CASE("default locations come from the environment") {
  TempDir dir;
  {
    ScopedEnv cache("TILENORM_CACHE_DIR", dir.path().c_str());
    ScopedEnv primary("TILENORM_TUNING_DB", nullptr);
    ScopedEnv readonly("TILENORM_TUNING_DB_READONLY", nullptr);
    CHECK(tilenorm::default_tuning_db_path() == dir / "tuning.json");
    CHECK(tilenorm::readonly_tuning_db_paths().empty());
  }
  const fs::path primary_path = dir / "primary.json";
  const fs::path first_readonly = dir / "site.json";
  const fs::path second_readonly = dir / "shipped.json";
  ScopedEnv primary("TILENORM_TUNING_DB", primary_path.c_str());
  ScopedEnv no_shipped("TILENORM_DISABLE_SHIPPED_DATABASES", "1");
  const std::string readonly_list =
      ":" + first_readonly.string() + "::" + second_readonly.string() + ":";
  ScopedEnv readonly("TILENORM_TUNING_DB_READONLY", readonly_list.c_str());
  CHECK(tilenorm::default_tuning_db_path() == primary_path);
  CHECK(tilenorm::readonly_tuning_db_paths() ==
        std::vector<fs::path>{first_readonly, second_readonly});

  tilenorm::upsert_entries(primary_path, {sample_entry(sample_key(), 5.0)});
  tilenorm::upsert_entries(first_readonly, {sample_entry(sample_key(), 1.0)});
  tilenorm::upsert_entries(second_readonly, {sample_entry(sample_key(2), 1.0)});
  const TuningDatabaseStack stack = tilenorm::load_default_tuning_databases();
  REQUIRE(stack.layers().size() == 3);
  CHECK(stack.layers()[0].source_file() == primary_path);
  CHECK(stack.layers()[2].source_file() == second_readonly);
  CHECK(stack.lookup(sample_key()).entry->median_us == 5.0);
  CHECK(stack.lookup(sample_key(2)).source == Source::exact);
}

// The databases of autotune/databases, read under the user's own: the build tree keeps a copy
// beside its libraries (an install keeps them under <prefix>/share: the install_consumer test).
TEST_CASE("the shipped databases are read under the user's, unless turned off") {
  TempDir dir;
  ScopedEnv cache("TILENORM_CACHE_DIR", dir.path().c_str());
  ScopedEnv primary("TILENORM_TUNING_DB", nullptr);
  ScopedEnv readonly("TILENORM_TUNING_DB_READONLY", nullptr);
  ScopedEnv shipped_on("TILENORM_DISABLE_SHIPPED_DATABASES", nullptr);

  const std::optional<fs::path> directory = tilenorm::shipped_databases_directory();
  REQUIRE(directory);
  CHECK(directory->parent_path().filename() == "tilenorm");
  std::vector<fs::path> sources;
  for (const auto& item : fs::directory_iterator(TILENORM_DATABASES_DIR)) {
    if (item.path().extension() == ".json") sources.push_back(item.path());
  }
  std::sort(sources.begin(), sources.end());
  REQUIRE(sources.size() >= 4);
  const std::vector<fs::path> shipped = tilenorm::shipped_tuning_db_paths();
  REQUIRE(shipped.size() == sources.size());
  for (std::size_t i = 0; i < shipped.size(); ++i) {
    CAPTURE(shipped[i]);
    CHECK(shipped[i].parent_path() == *directory);
    CHECK(shipped[i].filename() == sources[i].filename());
    CHECK(read_text(shipped[i]) == read_text(sources[i]));  // the build's copy is current
  }

  // Each file a layer after the primary, read without a warning; a user's entry for the same
  // key hides the shipped one.
  WarningCapture warnings;
  const TuningDatabaseStack stack = tilenorm::load_default_tuning_databases();
  CHECK(warnings.messages().empty());
  REQUIRE(stack.layers().size() == 1 + shipped.size());
  CHECK(stack.layers()[0].source_file() == dir / "tuning.json");
  CHECK(stack.layers()[0].origin() == tilenorm::TuningOrigin::user);
  for (std::size_t i = 0; i < shipped.size(); ++i) {
    CHECK(stack.layers()[1 + i].source_file() == shipped[i]);
    CHECK(stack.layers()[1 + i].origin() == tilenorm::TuningOrigin::shipped);
  }
  REQUIRE(!stack.layers()[1].entries().empty());
  const TuningEntry& first = stack.layers()[1].entries().front();
  const TuningLookup shipped_entry = stack.lookup(first.key);
  CHECK(shipped_entry.source == Source::exact);
  CHECK(*shipped_entry.entry == first);
  CHECK(shipped_entry.file == shipped[0]);
  CHECK(shipped_entry.origin == tilenorm::TuningOrigin::shipped);
  TuningKey far_bucket = first.key;
  far_bucket.m_bucket = std::int64_t{1} << 40;  // no entry has it: the nearest one's layer
  const TuningLookup nearest = stack.lookup(far_bucket);
  CHECK(nearest.source == Source::nearest_m_bucket);
  CHECK(nearest.origin == tilenorm::TuningOrigin::shipped);
  CHECK(std::find(shipped.begin(), shipped.end(), nearest.file) != shipped.end());
  TuningEntry mine = first;
  mine.median_us = first.median_us * 2;
  tilenorm::upsert_entries(dir / "tuning.json", {mine});
  const TuningLookup user_entry = tilenorm::load_default_tuning_databases().lookup(first.key);
  CHECK(*user_entry.entry == mine);
  CHECK(user_entry.file == dir / "tuning.json");
  CHECK(user_entry.origin == tilenorm::TuningOrigin::user);

  for (const char* off : {"1", "yes"}) {
    ScopedEnv shipped_off("TILENORM_DISABLE_SHIPPED_DATABASES", off);
    CHECK(tilenorm::shipped_tuning_db_paths().empty());
    CHECK(tilenorm::load_default_tuning_databases().layers().size() == 1);
  }
  ScopedEnv zero("TILENORM_DISABLE_SHIPPED_DATABASES", "0");  // "0" leaves them on
  CHECK(tilenorm::shipped_tuning_db_paths() == shipped);
}

TEST_CASE("upsert replaces the entry with the same key and leaves no temporary files") {
  TempDir dir;
  const fs::path db = dir / "tuning.json";
  tilenorm::upsert_entries(db, {sample_entry(sample_key(), 5.0), sample_entry(sample_key(2), 5.0)});
  TuningEntry faster = sample_entry(sample_key(), 3.0);
  faster.config = {{"block", 512}};
  TuningEntry fastest = faster;
  fastest.median_us = 2.0;
  tilenorm::upsert_entries(db, {faster, fastest});  // within one call too, the later one wins

  WarningCapture warnings;
  const TuningDatabase loaded = TuningDatabase::load_file(db);
  CHECK(warnings.messages().empty());
  REQUIRE(loaded.entries().size() == 2);
  CHECK(*loaded.find(sample_key()) == fastest);

  std::vector<std::string> names;
  for (const auto& item : fs::directory_iterator(dir.path()))
    names.push_back(item.path().filename());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"tuning.json"});  // no temporary and no lock file
}

TEST_CASE("upsert creates the directory and refuses invalid entries before writing") {
  TempDir dir;
  const fs::path db = dir / "new" / "deeper" / "tuning.json";
  TuningEntry invalid = sample_entry();
  invalid.median_us = std::nan("");
  CHECK_THROWS_WITH_AS(tilenorm::upsert_entries(db, {sample_entry(), invalid}),
                       "cannot store tuning entry 1: field \"median_us\": must be a finite number "
                       "> 0, got a non-finite number",
                       tilenorm::Error);
  CHECK_FALSE(fs::exists(dir / "new"));

  invalid = sample_entry();
  invalid.config = {{"name", "\xff"}};
  CHECK_THROWS_WITH_AS(tilenorm::upsert_entries(db, {invalid}),
                       "cannot store tuning entry 0: [json.exception.type_error.316] invalid "
                       "UTF-8 byte at index 0: 0xFF",
                       tilenorm::Error);

  tilenorm::upsert_entries(db, {sample_entry()});
  CHECK(TuningDatabase::load_file(db).entries().size() == 1);
}

TEST_CASE("upsert reports I/O failures with the path and the reason") {
  TempDir dir;
  write_text(dir / "file", "not a directory");
  const fs::path below_file = dir / "file" / "tuning.json";
  CHECK_THROWS_WITH_AS(
      tilenorm::upsert_entries(below_file, {sample_entry()}),
      ("cannot create directory " + (dir / "file").string() + ": Not a directory").c_str(),
      tilenorm::Error);

  fs::create_directory(dir / "tuning.json");
  CHECK_THROWS_WITH_AS(
      tilenorm::upsert_entries(dir / "tuning.json", {sample_entry()}),
      ("cannot read tuning database " + (dir / "tuning.json").string() + ": not a regular file")
          .c_str(),
      tilenorm::Error);
}

TEST_CASE("a corrupt primary is kept aside, not lost") {
  TempDir dir;
  const fs::path db = dir / "tuning.json";
  const std::string garbage = "{\"schema\": \"tilenorm-tuning-db\", \"version\": 1, \"entries\": [";
  write_text(db, garbage);
  {
    WarningCapture warnings;
    tilenorm::upsert_entries(db, {sample_entry()});
    REQUIRE(warnings.messages().size() == 1);
    const std::string message = warnings.messages()[0];
    CHECK(message.starts_with("tuning database " + db.string() +
                              " is damaged (not valid JSON: parse error at line 1"));
    CHECK(contains(message, "); kept it as " + db.string() + ".corrupt-"));
    CHECK(message.ends_with(" and kept its 0 valid entries"));
  }
  std::vector<fs::path> aside;
  for (const auto& item : fs::directory_iterator(dir.path())) {
    if (item.path().filename().string().starts_with("tuning.json.corrupt-"))
      aside.push_back(item.path());
  }
  REQUIRE(aside.size() == 1);
  CHECK(read_text(aside[0]) == garbage);
  CHECK(TuningDatabase::load_file(db).entries().size() == 1);

  // A damaged file whose structure is sound keeps its valid entries; another schema is kept too.
  const TuningEntry survivor = sample_entry(sample_key(2));
  write_text(db, database_json({json(survivor).dump(), "42"}));
  {
    WarningCapture warnings;
    tilenorm::upsert_entries(db, {sample_entry(sample_key(4))});
    REQUIRE(warnings.messages().size() == 1);
    CHECK(contains(warnings.messages()[0], "is damaged (entry 1: must be an object, got 42)"));
    CHECK(warnings.messages()[0].ends_with(" and kept its 1 valid entries"));
  }
  const TuningDatabase repaired = TuningDatabase::load_file(db);
  CHECK(repaired.entries().size() == 2);
  CHECK(repaired.find(survivor.key) != nullptr);

  write_text(db, R"({"schema": "someone-elses", "data": 1})");
  {
    WarningCapture warnings;
    tilenorm::upsert_entries(db, {sample_entry()});
    REQUIRE(warnings.messages().size() == 1);
    CHECK(contains(warnings.messages()[0], R"(is damaged (schema is "someone-elses", expected)"));
  }
  std::size_t aside_count = 0;
  for (const auto& item : fs::directory_iterator(dir.path())) {
    aside_count += item.path().filename().string().starts_with("tuning.json.corrupt-");
  }
  CHECK(aside_count == 3);
}

TEST_CASE("concurrent writers never lose each other's entries") {
  TempDir dir;
  const fs::path db = dir / "tuning.json";
  constexpr int kWriters = 8;
  constexpr int kEntriesPerWriter = 25;
  std::vector<pid_t> children;
  for (int writer = 0; writer < kWriters; ++writer) {
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // _exit, not exit: the child must not run the parent's atexit handlers or flush its stdio.
      int status = 0;
      try {
        for (int i = 0; i < kEntriesPerWriter; ++i) {
          TuningEntry entry = sample_entry(sample_key(std::int64_t{1} << i));
          entry.key.n = 1 + writer;
          tilenorm::upsert_entries(db, {entry});
        }
      } catch (...) {
        status = 1;
      }
      ::_exit(status);
    }
    children.push_back(child);
  }
  for (pid_t child : children) {
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  WarningCapture warnings;
  const TuningDatabase loaded = TuningDatabase::load_file(db);
  CHECK(warnings.messages().empty());
  CHECK(loaded.entries().size() == kWriters * kEntriesPerWriter);
  CHECK(json::parse(read_text(db)).at("entries").size() == kWriters * kEntriesPerWriter);
}

TEST_CASE("merge keeps the faster entry for a key found in several files") {
  TempDir dir;
  const fs::path first = dir / "a.json";
  const fs::path second = dir / "b.json";
  const fs::path output = dir / "merged.json";
  tilenorm::upsert_entries(first,
                           {sample_entry(sample_key(1), 5.0), sample_entry(sample_key(2), 3.0)});
  tilenorm::upsert_entries(second,
                           {sample_entry(sample_key(1), 4.0), sample_entry(sample_key(4), 1.0),
                            sample_entry(sample_key(2), 3.0)});
  tilenorm::upsert_entries(output, {sample_entry(sample_key(8), 2.0)});

  const tilenorm::MergeSummary summary = tilenorm::merge_databases({first, second}, output);
  CHECK(summary.files_read == 3);
  CHECK(summary.entries_read == 6);
  CHECK(summary.conflicts_resolved == 1);  // the identical entries for bucket 2 are no conflict
  CHECK(summary.entries_written == 4);
  const TuningDatabase merged = TuningDatabase::load_file(output);
  REQUIRE(merged.entries().size() == 4);
  CHECK(merged.find(sample_key(1))->median_us == 4.0);
  CHECK(merged.find(sample_key(8))->median_us == 2.0);

  CHECK_THROWS_WITH_AS(
      tilenorm::merge_databases({first, dir / "absent.json"}, output),
      ("merge input " + (dir / "absent.json").string() + " does not exist").c_str(),
      tilenorm::Error);

  write_text(second, database_json({json(sample_entry(sample_key(16), 1.0)).dump(), "[]"}));
  WarningCapture warnings;
  const tilenorm::MergeSummary partial = tilenorm::merge_databases({second}, output);
  REQUIRE(warnings.messages().size() == 1);
  CHECK(warnings.messages()[0] == "merge input " + second.string() +
                                      " has 1 problem(s), using its 1 valid entries: entry 1: "
                                      "must be an object, got an array");
  CHECK(partial.entries_written == 5);
}

TEST_CASE("merge refuses an input that is not a tuning database, naming it") {
  TempDir dir;
  const fs::path output = dir / "merged.json";
  tilenorm::upsert_entries(output, {sample_entry(sample_key(8), 2.0)});
  const std::string before = read_text(output);
  const fs::path foreign = dir / "foreign.json";
  write_text(foreign, R"({"schema": "someone-elses", "entries": []})");
  const fs::path garbage = dir / "garbage.json";
  write_text(garbage, "\x01\x02 not json");
  for (const fs::path& input : {foreign, garbage}) {
    try {
      tilenorm::merge_databases({input}, output);
      FAIL("no error for " << input);
    } catch (const tilenorm::Error& e) {
      CHECK(std::string(e.what()).starts_with("merge input " + input.string() +
                                              " is not a usable tuning database ("));
      CHECK(contains(e.what(), "nothing was merged"));
    }
  }
  CHECK(read_text(output) == before);
  CHECK_FALSE(fs::exists(dir / "merged.json.lock"));
}

TEST_CASE("the writer refuses a database that readers would reject and leaves the file") {
  TempDir dir;
  const fs::path db = dir / "tuning.json";
  tilenorm::upsert_entries(db, {sample_entry(sample_key(1))});
  const std::string before = read_text(db);

  // Each entry is valid on its own (4000 config values of 1000 characters: the reader's limits),
  // but together they are more than the 64 MiB a reader accepts.
  std::vector<TuningEntry> big;
  json config = json::object();
  for (int i = 0; i < 4000; ++i) config["k" + std::to_string(i)] = std::string(1000, 'x');
  for (int i = 0; i < 17; ++i) {
    TuningEntry entry = sample_entry(sample_key(std::int64_t{2} << i));
    entry.config = config;
    big.push_back(std::move(entry));
  }
  try {
    tilenorm::upsert_entries(db, big);
    FAIL("no error");
  } catch (const tilenorm::Error& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.starts_with("refusing to write tuning database " + db.string() +
                              " with 18 entries: it would be "));
    CHECK(contains(message,
                   "bytes, more than the 64 MiB that readers accept; the file is unchanged"));
  }
  CHECK(read_text(db) == before);
  std::vector<std::string> names;
  for (const auto& item : fs::directory_iterator(dir.path())) {
    names.push_back(item.path().filename());
  }
  CHECK(names == std::vector<std::string>{"tuning.json"});
}

TEST_CASE("the writer refuses more JSON values than readers accept") {
  TempDir dir;
  const fs::path db = dir / "tuning.json";
  // 2000 entries of 4096 small config values: under 64 MiB, but over the 8 million values limit.
  const json config = {{"a", std::vector<int>(4000, 1)}};
  std::vector<TuningEntry> entries;
  for (int i = 0; i < 2100; ++i) {
    TuningEntry entry = sample_entry(sample_key(1));
    entry.key.n = 1 + i;
    entry.config = config;
    entries.push_back(std::move(entry));
  }
  CHECK_THROWS_WITH_AS(tilenorm::upsert_entries(db, entries),
                       doctest::Contains("readers would reject it (more than 8000000 JSON values)"),
                       tilenorm::Error);
  CHECK_FALSE(fs::exists(db));
}

TEST_CASE("a symbolic link to the database stays a link; its target is replaced") {
  TempDir dir;
  fs::create_directory(dir / "real");
  const fs::path target = dir / "real" / "tuning.json";
  tilenorm::upsert_entries(target, {sample_entry(sample_key(1))});
  const fs::path link = dir / "link.json";
  fs::create_symlink("real/tuning.json", link);  // relative to the link's directory
  const fs::path input = dir / "input.json";
  tilenorm::upsert_entries(input, {sample_entry(sample_key(2))});

  const tilenorm::MergeSummary summary = tilenorm::merge_databases({input}, link);
  CHECK(summary.entries_written == 2);
  CHECK(fs::is_symlink(link));
  CHECK(fs::read_symlink(link) == "real/tuning.json");
  CHECK(TuningDatabase::load_file(target).entries().size() == 2);
  tilenorm::upsert_entries(link, {sample_entry(sample_key(4))});
  CHECK(fs::is_symlink(link));
  CHECK(TuningDatabase::load_file(target).entries().size() == 3);
  // Nothing was written next to the link: no temporary or lock file there.
  std::vector<std::string> names;
  for (const auto& item : fs::directory_iterator(dir.path())) {
    names.push_back(item.path().filename());
  }
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"input.json", "link.json", "real"});

  // A dangling link gets its target created.
  fs::create_symlink("real/new.json", dir / "dangling.json");
  tilenorm::upsert_entries(dir / "dangling.json", {sample_entry()});
  CHECK(fs::is_symlink(dir / "dangling.json"));
  CHECK(TuningDatabase::load_file(dir / "real" / "new.json").entries().size() == 1);
}

#pragma once
// The tuning database: the autotuner's winning kernel configurations, per GPU and problem shape,
// stored as versioned JSON (docs/tuning-database.md). This is the read side used by the runtime;
// the locked, atomic writer lives in autotune/ (tilenorm/autotune/tuning_db_writer.hpp).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tilenorm {

inline constexpr std::string_view kTuningDbSchema = "tilenorm-tuning-db";
inline constexpr int kTuningDbVersion = 1;
// Readers ignore a larger file (a hostile or runaway one); the writer refuses to write one.
inline constexpr std::uintmax_t kMaxTuningDbBytes = std::uintmax_t{64} << 20;

// Everything a tuned configuration depends on. m_bucket is m_bucket(rows), not the row count.
struct TuningKey {
  std::string device_name;
  int cc_major = 0;
  int cc_minor = 0;
  std::string program_hash;
  int codegen_version = 0;
  std::string dtype;
  std::int64_t n = 0;
  std::int64_t m_bucket = 1;

  friend bool operator==(const TuningKey&, const TuningKey&) = default;
};

struct TuningKeyHash {
  std::size_t operator()(const TuningKey& key) const;
};

// The smallest power of two >= rows; 1 for rows <= 1. Throws tilenorm::Error above 2^62.
std::int64_t m_bucket(std::int64_t rows);

struct TuningEntry {
  TuningKey key;
  nlohmann::json config = nlohmann::json::object();  // opaque to the database, always an object
  double median_us = 0;
  double tbps = 0;
  std::string date;  // ISO 8601 UTC date-time, e.g. "2024-05-01T12:00:00Z"

  friend bool operator==(const TuningEntry&, const TuningEntry&) = default;
};

// The current time as an ISO 8601 UTC date-time ("YYYY-MM-DDTHH:MM:SSZ"), for TuningEntry::date.
std::string utc_date_time_now();

// JSON conversion of one entry as stored in the file (the key's fields inline). from_json
// validates every field and throws tilenorm::Error naming the field ("field \"n\": ...").
void to_json(nlohmann::json& json, const TuningKey& key);
void from_json(const nlohmann::json& json, TuningKey& key);
void to_json(nlohmann::json& json, const TuningEntry& entry);
void from_json(const nlohmann::json& json, TuningEntry& entry);

// Whose timings a database holds: the user's (the primary, the read-only ones), or the
// project's, shipped with tilenorm and read by default (shipped_tuning_db_paths()).
enum class TuningOrigin { user, shipped };

struct TuningLookup {
  enum class Source { exact, nearest_m_bucket, heuristic };
  Source source = Source::heuristic;
  std::optional<TuningEntry> entry;  // empty exactly when source is heuristic
  // The entry's database (meaningless for the heuristic): its file (empty for one built in
  // memory) and origin.
  std::filesystem::path file;
  TuningOrigin origin = TuningOrigin::user;
};

std::string_view to_string(TuningLookup::Source source);

// What reading one tuning file found, without warning about it: for code that decides itself
// what to do with a damaged file (load_file warns; the writer moves the file aside).
struct TuningFileContents {
  bool exists = false;
  std::vector<TuningEntry> entries;   // the valid entries; a repeated key keeps the later entry
  std::vector<std::string> problems;  // empty when the file is sound
  bool whole_file_rejected = false;   // the top-level structure is unusable; entries is empty

  // The problems as one line: the first few, then how many more.
  std::string problem_summary() const;
};

// Throws tilenorm::Error only for I/O failures (not for content): permission denied, not a
// regular file, a failed read. A missing file gives exists == false.
TuningFileContents read_tuning_file(const std::filesystem::path& file);

// What read_tuning_file would find in a file holding `text` (exists is true), with every limit
// the reader enforces. The writer checks its output with it before replacing a file.
TuningFileContents parse_tuning_database(std::string_view text);

class TuningDatabase {
 public:
  TuningDatabase() = default;

  // Never throws for a missing, unreadable or damaged file: a missing file is an empty database
  // (silently); any other problem gives one tilenorm::warn naming the file and what is wrong,
  // and the file's valid entries are still used when its top-level structure is sound.
  static TuningDatabase load_file(const std::filesystem::path& file);

  // Adds the entry, replacing the one with the same key if there is one.
  void insert(TuningEntry entry);

  const TuningEntry* find(const TuningKey& key) const;  // exact key; nullptr when absent
  TuningLookup lookup(const TuningKey& key) const;

  const std::vector<TuningEntry>& entries() const { return entries_; }
  const std::filesystem::path& source_file() const { return source_file_; }  // empty if none
  TuningOrigin origin() const { return origin_; }

 private:
  friend class TuningDatabaseStack;
  static TuningLookup lookup_in(std::span<const TuningDatabase> layers, const TuningKey& key);

  std::vector<TuningEntry> entries_;
  // Key with m_bucket = 0 -> indices into entries_ of all its m buckets, so both the exact and
  // the nearest-bucket lookup only scan the few entries that differ in m_bucket alone.
  std::unordered_map<TuningKey, std::vector<std::size_t>, TuningKeyHash> buckets_by_family_;
  std::filesystem::path source_file_;
  TuningOrigin origin_ = TuningOrigin::user;
};

// The writable primary database first, then read-only layers. A key found in an earlier layer
// hides the same key in later ones; lookup treats the stack as the union of its layers.
class TuningDatabaseStack {
 public:
  // Lower priority than every layer added before.
  void add_layer(TuningDatabase layer, TuningOrigin origin = TuningOrigin::user);
  const std::vector<TuningDatabase>& layers() const { return layers_; }

  // Exact key in any layer, else the nearest m bucket (log2 distance, ties to the larger bucket)
  // among entries that match every other field, else heuristic with no entry.
  TuningLookup lookup(const TuningKey& key) const;

 private:
  std::vector<TuningDatabase> layers_;
};

// $TILENORM_TUNING_DB if set and non-empty, else cache_directory() / "tuning.json".
std::filesystem::path default_tuning_db_path();

// $TILENORM_TUNING_DB_READONLY split at ':' (empty items ignored); empty when unset.
std::vector<std::filesystem::path> readonly_tuning_db_paths();

// The *.json files of shipped_databases_directory() by name, unless
// $TILENORM_DISABLE_SHIPPED_DATABASES is on (env_flag); empty where there is no such directory.
// Their entries match only the GPUs they were measured on, so all of them can be read anywhere.
std::vector<std::filesystem::path> shipped_tuning_db_paths();

// The primary (default_tuning_db_path()), each read-only path in order, then the shipped
// databases: a tuned entry of the user's hides the project's for the same key.
TuningDatabaseStack load_default_tuning_databases();

}  // namespace tilenorm

#include "tilenorm/autotune/tuning_db_writer.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include "tilenorm/dsl/error.hpp"
#include "tilenorm/runtime/fileio.hpp"
#include "tilenorm/runtime/log.hpp"

namespace tilenorm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

[[noreturn]] void throw_io_error(std::string_view action, const fs::path& path, int error_number) {
  throw Error("cannot " + std::string(action) + " " + path.string() + ": " +
              system_error_text(error_number));
}

fs::path with_suffix(const fs::path& file, std::string_view suffix) {
  fs::path result = file;
  result += suffix;
  return result;
}

fs::path directory_of(const fs::path& file) {
  return file.has_parent_path() ? file.parent_path() : fs::path(".");
}

// An exclusive flock on "<db>.lock", held while the database is read, changed and replaced.
// The lock file is removed when the lock is released, so no lock file stays behind, neither after
// a success nor after a failure. That is safe because a process that gets the lock checks that
// its descriptor is still the file at that path; if the holder removed it meanwhile, it opens the
// new one and locks again.
class DatabaseLock {
 public:
  explicit DatabaseLock(const fs::path& db) : path_(with_suffix(db, ".lock")) {
    for (;;) {
      FileDescriptor lock(::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
      if (!lock.valid()) throw_io_error("open lock file", path_, errno);
      while (::flock(lock.get(), LOCK_EX) != 0) {
        if (errno != EINTR) throw_io_error("lock", path_, errno);
      }
      struct stat locked {};
      struct stat current {};
      if (::fstat(lock.get(), &locked) != 0) throw_io_error("lock", path_, errno);
      if (::stat(path_.c_str(), &current) == 0 && current.st_dev == locked.st_dev &&
          current.st_ino == locked.st_ino) {
        descriptor_ = std::move(lock);
        return;
      }
      // The previous holder removed this lock file after we opened it: try the new one.
    }
  }
  DatabaseLock(const DatabaseLock&) = delete;
  DatabaseLock& operator=(const DatabaseLock&) = delete;
  ~DatabaseLock() { ::unlink(path_.c_str()); }  // before the descriptor closes and unlocks

 private:
  fs::path path_;
  FileDescriptor descriptor_;
};

void create_directory_of(const fs::path& db) {
  const fs::path directory = directory_of(db);
  std::error_code error;
  fs::create_directories(directory, error);
  if (error) throw Error("cannot create directory " + directory.string() + ": " + error.message());
}

// "<db>.corrupt-YYYYMMDDTHHMMSSZ", with "-1", "-2", ... appended if that name is taken.
fs::path unused_corrupt_path(const fs::path& db) {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char timestamp[32];
  std::strftime(timestamp, sizeof timestamp, "%Y%m%dT%H%M%SZ", &utc);
  const fs::path base = with_suffix(db, std::string(".corrupt-") + timestamp);
  fs::path candidate = base;
  std::error_code error;
  for (int attempt = 1; fs::exists(fs::symlink_status(candidate, error)); ++attempt) {
    candidate = base;
    candidate += "-";
    candidate += std::to_string(attempt);
  }
  return candidate;
}

struct CurrentDatabase {
  bool existed = false;
  TuningDatabase database;
  std::optional<std::string> damage;  // what is wrong with the file, if anything
  std::size_t valid_entries = 0;      // in the file as read
};

// Reads the database under the lock: its valid entries, and what is wrong with it, if anything.
CurrentDatabase read_current_database(const fs::path& db) {
  TuningFileContents contents = read_tuning_file(db);
  CurrentDatabase current;
  current.existed = contents.exists;
  if (!contents.problems.empty()) current.damage = contents.problem_summary();
  current.valid_entries = contents.entries.size();
  for (auto& entry : contents.entries) current.database.insert(std::move(entry));
  return current;
}

// Keeps a damaged file under "<db>.corrupt-..." before it is replaced, with a warning: a hard
// link (the file stays at `db` until the rename replaces it), else a copy.
void keep_damaged_file(const fs::path& db, const CurrentDatabase& current) {
  if (!current.damage) return;
  const fs::path aside = unused_corrupt_path(db);
  if (::link(db.c_str(), aside.c_str()) != 0) {
    std::error_code error;
    fs::copy_file(db, aside, error);
    if (error) {
      throw Error("cannot keep damaged tuning database " + db.string() + " as " + aside.string() +
                  ": " + error.message() + "; the file is unchanged");
    }
  }
  warn("tuning database " + db.string() + " is damaged (" + *current.damage + "); kept it as " +
       aside.string() + " and kept its " + std::to_string(current.valid_entries) +
       " valid entries");
}

// One entry per line keeps the file readable, greppable and friendly to diffs.
std::string database_text(const std::vector<TuningEntry>& entries) {
  std::string text = "{\"schema\": " + json(kTuningDbSchema).dump() +
                     ", \"version\": " + std::to_string(kTuningDbVersion) + ", \"entries\": [\n";
  for (std::size_t i = 0; i < entries.size(); ++i) {
    text += "  " + json(entries[i]).dump();
    text += i + 1 < entries.size() ? ",\n" : "\n";
  }
  text += "]}\n";
  return text;
}

// The writer refuses what a reader would reject, so that it never writes a file whose entries
// readers then drop: the text is checked with the reader itself, with all of its limits.
void check_readable(const fs::path& db, const std::string& text, std::size_t entries) {
  const std::string refusal = "refusing to write tuning database " + db.string() + " with " +
                              std::to_string(entries) + " entries: ";
  const std::string unchanged = "; the file is unchanged";
  if (text.size() > kMaxTuningDbBytes) {
    throw Error(refusal + "it would be " + std::to_string(text.size()) + " bytes, more than the " +
                std::to_string(kMaxTuningDbBytes >> 20) + " MiB that readers accept" + unchanged);
  }
  const TuningFileContents reread = parse_tuning_database(text);
  if (!reread.problems.empty() || reread.entries.size() != entries) {
    throw Error(refusal + "readers would reject it (" + reread.problem_summary() + ")" + unchanged);
  }
}

// Holds the lock across read, change and rename so that concurrent writers serialize. A link
// is followed: the file it points to is replaced, in that file's directory, and the link stays.
template <typename Change>
void rewrite_locked(const fs::path& requested, Change change) {
  const fs::path db = resolve_symlinks(requested);
  create_directory_of(db);
  const DatabaseLock lock(db);
  CurrentDatabase current = read_current_database(db);
  change(current);
  const std::string text = database_text(current.database.entries());
  check_readable(db, text, current.database.entries().size());
  keep_damaged_file(db, current);
  write_file_atomically(db, text);
}

// Rejects an entry that the reader would skip, or that cannot be printed as JSON (invalid UTF-8),
// before any file is touched.
void check_storable(const TuningEntry& entry, std::size_t index) {
  const std::string where = "cannot store tuning entry " + std::to_string(index) + ": ";
  try {
    const json stored = entry;
    stored.get<TuningEntry>();
    stored.dump();
  } catch (const Error& error) {
    throw Error(where + error.what());
  } catch (const json::exception& error) {
    throw Error(where + error.what());
  }
}

}  // namespace

void upsert_entries(const fs::path& db, const std::vector<TuningEntry>& entries) {
  if (entries.empty()) return;
  for (std::size_t i = 0; i < entries.size(); ++i) check_storable(entries[i], i);
  rewrite_locked(db, [&](CurrentDatabase& current) {
    for (const auto& entry : entries) current.database.insert(entry);
  });
}

MergeSummary merge_databases(const std::vector<fs::path>& inputs, const fs::path& output) {
  // Inputs are read before the output is locked, so a missing input changes nothing.
  std::vector<TuningFileContents> input_contents;
  for (const auto& input : inputs) {
    TuningFileContents contents = read_tuning_file(input);
    if (!contents.exists) throw Error("merge input " + input.string() + " does not exist");
    if (contents.whole_file_rejected) {
      throw Error("merge input " + input.string() + " is not a usable tuning database (" +
                  contents.problem_summary() + "); nothing was merged");
    }
    if (!contents.problems.empty()) {
      warn("merge input " + input.string() + " has " + std::to_string(contents.problems.size()) +
           " problem(s), using its " + std::to_string(contents.entries.size()) +
           " valid entries: " + contents.problem_summary());
    }
    input_contents.push_back(std::move(contents));
  }

  MergeSummary summary;
  rewrite_locked(output, [&](CurrentDatabase& current) {
    summary.files_read = inputs.size() + (current.existed ? 1 : 0);
    summary.entries_read = current.database.entries().size();
    TuningDatabase& merged = current.database;
    for (auto& contents : input_contents) {
      for (auto& entry : contents.entries) {
        ++summary.entries_read;
        const TuningEntry* kept = merged.find(entry.key);
        if (kept == nullptr) {
          merged.insert(std::move(entry));
          continue;
        }
        if (*kept == entry) continue;
        ++summary.conflicts_resolved;
        if (entry.median_us < kept->median_us) merged.insert(std::move(entry));
      }
    }
    summary.entries_written = merged.entries().size();
  });
  return summary;
}

}  // namespace tilenorm

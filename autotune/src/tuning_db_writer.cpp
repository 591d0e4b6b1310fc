#include "tilenorm/autotune/tuning_db_writer.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "tilenorm/dsl/error.hpp"
#include "tilenorm/runtime/log.hpp"

namespace tilenorm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

[[noreturn]] void throw_io_error(std::string_view action, const fs::path& path, int error_number) {
  throw Error("cannot " + std::string(action) + " " + path.string() + ": " +
              std::generic_category().message(error_number));
}

fs::path with_suffix(const fs::path& file, std::string_view suffix) {
  fs::path result = file;
  result += suffix;
  return result;
}

fs::path directory_of(const fs::path& file) {
  return file.has_parent_path() ? file.parent_path() : fs::path(".");
}

class FileDescriptor {
 public:
  explicit FileDescriptor(int descriptor) : descriptor_(descriptor) {}
  FileDescriptor(FileDescriptor&& other) noexcept
      : descriptor_(std::exchange(other.descriptor_, -1)) {}
  FileDescriptor& operator=(FileDescriptor&&) = delete;
  ~FileDescriptor() {
    if (descriptor_ >= 0) ::close(descriptor_);
  }
  int get() const { return descriptor_; }

  // Closes now; returns false with errno set when the close reports a failed write.
  bool close() { return ::close(std::exchange(descriptor_, -1)) == 0; }

 private:
  int descriptor_;
};

// Unlinks the temporary file unless it was renamed into place.
class TemporaryFile {
 public:
  explicit TemporaryFile(fs::path path) : path_(std::move(path)) {}
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  ~TemporaryFile() {
    if (!renamed_) ::unlink(path_.c_str());
  }
  const fs::path& path() const { return path_; }
  void mark_renamed() { renamed_ = true; }

 private:
  fs::path path_;
  bool renamed_ = false;
};

// Creates the directory and "<db>.lock" if needed, and holds an exclusive flock on the lock file
// until the returned descriptor is destroyed. The lock file is never deleted: deleting it would
// let two processes lock two different files of the same name.
FileDescriptor lock_database(const fs::path& db) {
  const fs::path directory = directory_of(db);
  std::error_code error;
  fs::create_directories(directory, error);
  if (error) throw Error("cannot create directory " + directory.string() + ": " + error.message());
  const fs::path lock_path = with_suffix(db, ".lock");
  FileDescriptor lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (lock.get() < 0) throw_io_error("open lock file", lock_path, errno);
  while (::flock(lock.get(), LOCK_EX) != 0) {
    if (errno != EINTR) throw_io_error("lock", lock_path, errno);
  }
  return lock;
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
};

// Reads the database under the lock. A damaged file is moved aside rather than overwritten, with
// a warning, and only its valid entries come back.
CurrentDatabase take_current_database(const fs::path& db) {
  TuningFileContents contents = read_tuning_file(db);
  if (!contents.problems.empty()) {
    const fs::path aside = unused_corrupt_path(db);
    if (::rename(db.c_str(), aside.c_str()) != 0) {
      throw Error("cannot move damaged tuning database " + db.string() + " to " + aside.string() +
                  ": " + std::generic_category().message(errno));
    }
    warn("tuning database " + db.string() + " is damaged (" + contents.problem_summary() +
         "); moved it to " + aside.string() + " and kept its " +
         std::to_string(contents.entries.size()) + " valid entries");
  }
  CurrentDatabase current;
  current.existed = contents.exists;
  for (auto& entry : contents.entries) current.database.insert(std::move(entry));
  return current;
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

void write_all(int descriptor, std::string_view text, const fs::path& path) {
  while (!text.empty()) {
    const ssize_t written = ::write(descriptor, text.data(), text.size());
    if (written < 0 && errno == EINTR) continue;
    if (written < 0) throw_io_error("write", path, errno);
    text.remove_prefix(static_cast<std::size_t>(written));
  }
}

// Readers see either the old file or the complete new one, never a partial write, even after a
// crash (the data is synced before the rename). The directory is not synced: a crash may at worst
// bring back the previous version of the database, which only costs re-tuning.
void replace_file_atomically(const fs::path& db, std::string_view text) {
  const fs::path directory = directory_of(db);
  std::string name_template = (directory / (db.filename().string() + ".tmp-XXXXXX")).string();
  FileDescriptor file(::mkostemp(name_template.data(), O_CLOEXEC));
  if (file.get() < 0) throw_io_error("create a temporary file in", directory, errno);
  TemporaryFile temporary(name_template);

  // mkostemp creates the file 0600; keep the mode of the file being replaced, or the usual 0644.
  struct stat existing {};
  const mode_t mode = ::stat(db.c_str(), &existing) == 0 ? (existing.st_mode & 07777) : 0644;
  if (::fchmod(file.get(), mode) != 0) throw_io_error("set the mode of", temporary.path(), errno);
  write_all(file.get(), text, temporary.path());
  if (::fsync(file.get()) != 0) throw_io_error("sync", temporary.path(), errno);
  if (!file.close()) throw_io_error("write", temporary.path(), errno);
  if (::rename(temporary.path().c_str(), db.c_str()) != 0) {
    throw Error("cannot rename " + temporary.path().string() + " to " + db.string() + ": " +
                std::generic_category().message(errno));
  }
  temporary.mark_renamed();
}

// Holds the lock across read, change and rename so that concurrent writers serialize.
template <typename Change>
void rewrite_locked(const fs::path& db, Change change) {
  const FileDescriptor lock = lock_database(db);
  CurrentDatabase current = take_current_database(db);
  change(current);
  replace_file_atomically(db, database_text(current.database.entries()));
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
      warn("ignoring merge input " + input.string() + ": " + contents.problem_summary());
    } else if (!contents.problems.empty()) {
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

#pragma once
// Writing the tuning database (docs/tuning-database.md). Every write holds an exclusive flock on
// "<db>.lock" (removed again afterwards) while it re-reads the file, changes it and renames a
// fully written, fsynced temporary file over it, so concurrent tuning processes never lose each
// other's entries and readers never see a half-written file. A symbolic link is followed: the
// file it points to is replaced in its own directory, and the link stays a link. The new text is
// checked with the reader and its limits first; what readers would reject is refused and the file
// is left unchanged. A damaged existing file is kept as "<db>.corrupt-<UTC timestamp>" (with a
// warning), never lost; its valid entries are carried over.
#include <cstddef>
#include <filesystem>
#include <vector>

#include "tilenorm/runtime/tuning_db.hpp"

namespace tilenorm {

// Adds the entries to the database at `db`, replacing those with the same key (a later entry in
// `entries` replaces an earlier one with the same key). Creates the file and its directory if
// needed; does nothing for an empty `entries`. Throws tilenorm::Error naming the entry and field
// for an invalid entry (before touching any file), or naming the path and the system's reason
// for an I/O failure.
void upsert_entries(const std::filesystem::path& db, const std::vector<TuningEntry>& entries);

struct MergeSummary {
  std::size_t files_read = 0;          // inputs, plus the output when it already existed
  std::size_t entries_read = 0;        // valid entries in those files
  std::size_t entries_written = 0;     // entries in the output afterwards
  std::size_t conflicts_resolved = 0;  // differing entries for a key already seen
};

// Writes the union of the entries of `inputs` and of `output` itself (when it exists) to
// `output`, under the same lock and atomic rename as upsert_entries. For a key in several files
// the entry with the smaller median_us wins (on a tie, the earlier one: output, then inputs in
// order). A missing input is an error; a damaged input gets a warning and its valid entries are
// used. An input that is not a tuning database at all (wrong schema, not JSON, too large) is an
// error naming it, before the output is touched.
MergeSummary merge_databases(const std::vector<std::filesystem::path>& inputs,
                             const std::filesystem::path& output);

}  // namespace tilenorm

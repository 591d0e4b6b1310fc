#pragma once
// The file handling every cache and database of tilenorm shares: one owner of a file descriptor,
// one bounded reader and one atomic writer (temporary file, fsync, rename).
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace tilenorm {

// Owns a POSIX file descriptor (-1: none) and closes it once.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int descriptor) : descriptor_(descriptor) {}
  FileDescriptor(FileDescriptor&& other) noexcept;
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor();

  int get() const { return descriptor_; }
  bool valid() const { return descriptor_ >= 0; }

  // Closes now; false (with errno set) when close reports an error, such as a failed write.
  bool close();

 private:
  int descriptor_ = -1;
};

// What read_regular_file found.
struct FileContents {
  bool exists = false;     // false: there is no file at the path (ENOENT, ENOTDIR)
  bool too_large = false;  // the file has more than max_bytes bytes; `bytes` is then empty
  std::uintmax_t size = 0;
  std::string bytes;
};

// Reads a whole regular file of at most `max_bytes` bytes. A missing file gives exists == false;
// a larger one gives too_large without reading it. Throws tilenorm::Error "cannot read <what>
// <path>: <reason>" when it cannot be read (permission, not a regular file, a read error).
FileContents read_regular_file(const std::filesystem::path& path, std::uintmax_t max_bytes,
                               std::string_view what = "file");

// Follows `path` while it is a symbolic link (relative targets resolve against the link's
// directory) and returns the final path, which need not exist. Throws tilenorm::Error for a
// link loop.
std::filesystem::path resolve_symlinks(const std::filesystem::path& path);

// Replaces the file at `path` (after resolve_symlinks, so a link stays a link and its target is
// replaced) by `contents`: written to a temporary file in the same directory, fsynced, then
// renamed over the old file, so readers and a crash at any moment see the old or the new file,
// never a mix. Keeps the mode of the file it replaces (new files get 0644). The directory must
// exist. Throws tilenorm::Error naming the path and the system's reason; the old file is then
// unchanged and no temporary file is left.
void write_file_atomically(const std::filesystem::path& path, std::string_view contents);

// The system's message for an errno value ("No space left on device").
std::string system_error_text(int error_number);

}  // namespace tilenorm

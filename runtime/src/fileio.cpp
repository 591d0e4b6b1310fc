#include "tilenorm/runtime/fileio.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <utility>

#include "tilenorm/dsl/error.hpp"

namespace tilenorm {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(std::string_view action, const fs::path& path, int error_number) {
  throw Error("cannot " + std::string(action) + " " + path.string() + ": " +
              system_error_text(error_number));
}

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

void write_all(int descriptor, std::string_view text, const fs::path& path) {
  while (!text.empty()) {
    const ssize_t written = ::write(descriptor, text.data(), text.size());
    if (written < 0 && errno == EINTR) continue;
    if (written < 0) fail("write", path, errno);
    text.remove_prefix(static_cast<std::size_t>(written));
  }
}

}  // namespace

FileDescriptor::FileDescriptor(FileDescriptor&& other) noexcept
    : descriptor_(std::exchange(other.descriptor_, -1)) {}

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    if (descriptor_ >= 0) ::close(descriptor_);
    descriptor_ = std::exchange(other.descriptor_, -1);
  }
  return *this;
}

FileDescriptor::~FileDescriptor() {
  if (descriptor_ >= 0) ::close(descriptor_);
}

bool FileDescriptor::close() {
  if (descriptor_ < 0) return true;
  return ::close(std::exchange(descriptor_, -1)) == 0;
}

std::string system_error_text(int error_number) {
  return std::generic_category().message(error_number);
}

FileContents read_regular_file(const fs::path& path, std::uintmax_t max_bytes,
                               std::string_view what) {
  const std::string action = "read " + std::string(what);
  FileContents contents;
  FileDescriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!file.valid()) {
    if (errno == ENOENT || errno == ENOTDIR) return contents;  // no file there
    fail(action, path, errno);
  }
  struct stat status {};
  if (::fstat(file.get(), &status) != 0) fail(action, path, errno);
  if (!S_ISREG(status.st_mode)) {
    throw Error("cannot " + action + " " + path.string() + ": not a regular file");
  }
  contents.exists = true;
  contents.size = static_cast<std::uintmax_t>(status.st_size);
  if (contents.size > max_bytes) {
    contents.too_large = true;
    return contents;
  }
  char buffer[1 << 16];
  for (;;) {
    const ssize_t got = ::read(file.get(), buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail(action, path, errno);
    if (got == 0) break;
    contents.bytes.append(buffer, static_cast<std::size_t>(got));
    if (contents.bytes.size() > max_bytes) {  // it grew while being read
      contents.bytes.clear();
      contents.too_large = true;
      break;
    }
  }
  contents.size = contents.too_large ? contents.size : contents.bytes.size();
  return contents;
}

fs::path resolve_symlinks(const fs::path& path) {
  constexpr int kMaxLinks = 40;  // as the kernel's ELOOP limit
  fs::path current = path;
  for (int followed = 0; followed <= kMaxLinks; ++followed) {
    std::error_code error;
    if (!fs::is_symlink(fs::symlink_status(current, error))) return current;
    const fs::path target = fs::read_symlink(current, error);
    if (error) throw Error("cannot read the link " + current.string() + ": " + error.message());
    current = target.is_absolute() ? target : current.parent_path() / target;
  }
  throw Error("cannot resolve " + path.string() + ": more than " + std::to_string(kMaxLinks) +
              " symbolic links (a loop?)");
}

void write_file_atomically(const fs::path& requested, std::string_view contents) {
  const fs::path path = resolve_symlinks(requested);
  const fs::path directory = path.has_parent_path() ? path.parent_path() : fs::path(".");
  std::string name_template = directory / (path.filename().string() + ".tmp-XXXXXX");
  FileDescriptor file(::mkostemp(name_template.data(), O_CLOEXEC));
  if (!file.valid()) fail("create a temporary file in", directory, errno);
  TemporaryFile temporary(name_template);

  // mkostemp creates the file 0600; keep the mode of the file being replaced, or the usual 0644.
  struct stat existing {};
  const mode_t mode = ::stat(path.c_str(), &existing) == 0 ? (existing.st_mode & 07777) : 0644;
  if (::fchmod(file.get(), mode) != 0) fail("set the mode of", temporary.path(), errno);
  write_all(file.get(), contents, temporary.path());
  if (::fsync(file.get()) != 0) fail("sync", temporary.path(), errno);
  if (!file.close()) fail("write", temporary.path(), errno);
  if (::rename(temporary.path().c_str(), path.c_str()) != 0) {
    throw Error("cannot rename " + temporary.path().string() + " to " + path.string() + ": " +
                system_error_text(errno));
  }
  temporary.mark_renamed();
}

}  // namespace tilenorm

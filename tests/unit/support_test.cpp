// The shared helpers of the runtime: environment flags, median, file reading and atomic writes.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tilenorm/dsl/env.hpp"
#include "tilenorm/dsl/error.hpp"
#include "tilenorm/runtime/fileio.hpp"
#include "tilenorm/runtime/stats.hpp"

namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

struct ScratchDir {
  ScratchDir() {
    std::string name = (fs::temp_directory_path() / "tilenorm-support-XXXXXX").string();
    REQUIRE(::mkdtemp(name.data()) != nullptr);
    path = name;
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  fs::path path;
};

}  // namespace

TEST_CASE("env_flag: set, not empty and not 0") {
  constexpr const char* kName = "TILENORM_TEST_FLAG_FOR_SUPPORT_TEST";
  ::unsetenv(kName);
  CHECK_FALSE(tilenorm::env_flag(kName));
  CHECK_FALSE(tilenorm::env_value(kName));
  for (const char* off : {"", "0"}) {
    ::setenv(kName, off, 1);
    CHECK_FALSE(tilenorm::env_flag(kName));
  }
  CHECK_FALSE(tilenorm::env_value(kName) == std::nullopt);  // "0" is a value
  for (const char* on : {"1", "yes", "true", "00"}) {
    ::setenv(kName, on, 1);
    CHECK(tilenorm::env_flag(kName));
    CHECK(*tilenorm::env_value(kName) == on);
  }
  ::setenv(kName, "", 1);
  CHECK_FALSE(tilenorm::env_value(kName));
  ::unsetenv(kName);
}

TEST_CASE("median: middle value, mean of the middle two, error when empty") {
  CHECK(tilenorm::median({3.0}) == 3.0);
  CHECK(tilenorm::median({5.0, 1.0, 3.0}) == 3.0);
  CHECK(tilenorm::median({4.0, 1.0, 3.0, 2.0}) == 2.5);
  CHECK(tilenorm::median({7.0, 7.0, 1.0, 9.0, 9.0, 1.0}) == 7.0);
  CHECK_THROWS_WITH_AS(tilenorm::median({}), "median of no samples", tilenorm::Error);
}

TEST_CASE("read_regular_file: missing, too large, not regular") {
  ScratchDir dir;
  CHECK_FALSE(tilenorm::read_regular_file(dir.path / "absent", 10).exists);
  std::ofstream(dir.path / "small") << "hello";
  const auto small = tilenorm::read_regular_file(dir.path / "small", 10);
  CHECK(small.exists);
  CHECK(small.bytes == "hello");
  const auto large = tilenorm::read_regular_file(dir.path / "small", 4);
  CHECK(large.too_large);
  CHECK(large.size == 5);
  CHECK(large.bytes.empty());
  CHECK_THROWS_WITH_AS(tilenorm::read_regular_file(dir.path, 10, "thing"),
                       ("cannot read thing " + dir.path.string() + ": not a regular file").c_str(),
                       tilenorm::Error);
}

TEST_CASE("write_file_atomically: replaces, keeps the mode, follows links, reports failures") {
  ScratchDir dir;
  const fs::path file = dir.path / "f.txt";
  tilenorm::write_file_atomically(file, "one");
  CHECK(read_text(file) == "one");
  CHECK((fs::status(file).permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
         fs::perms::others_read));
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write);
  tilenorm::write_file_atomically(file, "two");
  CHECK(read_text(file) == "two");
  CHECK((fs::status(file).permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write));

  fs::create_symlink("f.txt", dir.path / "link");
  tilenorm::write_file_atomically(dir.path / "link", "three");
  CHECK(fs::is_symlink(dir.path / "link"));
  CHECK(read_text(file) == "three");

  fs::create_symlink("loop2", dir.path / "loop1");
  fs::create_symlink("loop1", dir.path / "loop2");
  CHECK_THROWS_WITH_AS(tilenorm::write_file_atomically(dir.path / "loop1", "x"),
                       doctest::Contains("symbolic links (a loop?)"), tilenorm::Error);

  // A directory that is a regular file: ENOTDIR, reported with the path; nothing left behind.
  CHECK_THROWS_WITH_AS(
      tilenorm::write_file_atomically(file / "below", "x"),
      ("cannot create a temporary file in " + file.string() + ": Not a directory").c_str(),
      tilenorm::Error);
  std::size_t count = 0;
  for ([[maybe_unused]] const auto& item : fs::directory_iterator(dir.path)) ++count;
  CHECK(count == 4);  // f.txt, link, loop1, loop2
}

// SHA-256, the on-disk kernel cache and compile_cached.
#include "tilenorm/runtime/disk_cache.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "support/scoped.hpp"
#include "tilenorm/runtime/sha256.hpp"

namespace {

namespace fs = std::filesystem;
using tilenorm::testing::ScopedEnv;
using tilenorm::testing::WarningCapture;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A fresh directory under the system temporary directory, removed with everything in it.
class TemporaryDirectory {
 public:
  TemporaryDirectory() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() / ("tilenorm-disk-cache-test-" + std::to_string(::getpid()) +
                                         "-" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TemporaryDirectory() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;

  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_file(const fs::path& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
}

tilenorm::CompiledKernel sample_kernel() {
  tilenorm::CompiledKernel kernel;
  kernel.cubin = {'\x7f', 'E', 'L', 'F', '\0', '\xff', '\n', 'x'};
  kernel.log = "ptxas info    : Used 30 registers\n";
  kernel.registers = 30;
  kernel.spill_store_bytes = 8;
  kernel.spill_load_bytes = 12;
  kernel.stack_frame_bytes = 16;
  kernel.shared_memory_bytes = 4096;
  return kernel;
}

void check_same_kernel(const tilenorm::CompiledKernel& actual,
                       const tilenorm::CompiledKernel& expected) {
  CHECK(actual.cubin == expected.cubin);
  CHECK(actual.log == expected.log);
  CHECK(actual.registers == expected.registers);
  CHECK(actual.spill_store_bytes == expected.spill_store_bytes);
  CHECK(actual.spill_load_bytes == expected.spill_load_bytes);
  CHECK(actual.stack_frame_bytes == expected.stack_frame_bytes);
  CHECK(actual.shared_memory_bytes == expected.shared_memory_bytes);
}

tilenorm::CompileRequest add_one_request() {
  tilenorm::CompileRequest request;
  request.kernel_name = "add_one";
  request.arch = "sm_90";
  request.source = R"(
extern "C" __global__ void add_one(float* data) { data[threadIdx.x] += 1.0f; }
)";
  return request;
}

const std::string kKey(64, 'a');

}  // namespace

TEST_CASE("sha256: standard test vectors") {
  CHECK(tilenorm::sha256_hex("") ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(tilenorm::sha256_hex("abc") ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(tilenorm::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(tilenorm::sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
                             "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu") ==
        "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  CHECK(tilenorm::sha256_hex(std::string(1000000, 'a')) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("sha256: messages around the padding boundaries") {
  // 55 bytes pad into one block, 56 need a second, 64 fill a whole block.
  CHECK(tilenorm::sha256_hex(std::string(55, 'a')) ==
        "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  CHECK(tilenorm::sha256_hex(std::string(56, 'a')) ==
        "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  CHECK(tilenorm::sha256_hex(std::string(64, 'a')) ==
        "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

TEST_CASE("disk cache: store then load returns the same kernel; a missing key is silent") {
  TemporaryDirectory temporary;
  tilenorm::DiskCache cache(temporary.path() / "not-yet-created");
  WarningCapture warnings;
  CHECK_FALSE(cache.load(kKey).has_value());

  tilenorm::CompiledKernel kernel = sample_kernel();
  cache.store(kKey, kernel);
  CHECK(fs::exists(cache.entry_path(kKey)));
  CHECK(cache.entry_path(kKey).parent_path() == cache.directory());
  std::optional<tilenorm::CompiledKernel> loaded = cache.load(kKey);
  REQUIRE(loaded.has_value());
  check_same_kernel(*loaded, kernel);

  // Storing again replaces the entry and leaves no temporary files behind.
  kernel.registers = 31;
  cache.store(kKey, kernel);
  CHECK(cache.load(kKey)->registers == 31);
  CHECK(std::distance(fs::directory_iterator(cache.directory()), fs::directory_iterator()) == 1);
  CHECK(warnings.messages().empty());
}

TEST_CASE("disk cache: corrupt, truncated and foreign entries warn and read as missing") {
  TemporaryDirectory temporary;
  tilenorm::DiskCache cache(temporary.path());
  cache.store(kKey, sample_kernel());
  const fs::path path = cache.entry_path(kKey);
  const std::string good_entry = read_file(path);

  struct Damage {
    const char* description;
    std::string contents;
    const char* expected_reason;
  };
  std::string flipped = good_entry;
  flipped[flipped.size() - 3] ^= 0x20;  // Inside the log text, the payload's last field.
  std::string other_version = good_entry;
  other_version[8] = 2;  // The format version follows the 8-byte magic.
  std::vector<Damage> damages = {
      {"corrupt payload", flipped, ": checksum mismatch; the kernel will be recompiled"},
      {"truncated entry", good_entry.substr(0, good_entry.size() / 2),
       ": truncated or overlong: the payload has"},
      {"header only", good_entry.substr(0, 20), ": truncated: "},
      {"empty file", "", ": not a tilenorm kernel cache entry (bad magic)"},
      {"foreign file", "this is not a cache entry at all, just some text",
       ": not a tilenorm kernel cache entry (bad magic)"},
      {"other format version", other_version, ": cache format version 2, expected 1"},
  };
  for (const Damage& damage : damages) {
    CAPTURE(damage.description);
    write_file(path, damage.contents);
    WarningCapture warnings;
    CHECK_FALSE(cache.load(kKey).has_value());
    std::vector<std::string> messages = warnings.messages();
    REQUIRE(messages.size() == 1);
    CHECK(contains(messages[0], "ignoring disk cache entry " + path.string()));
    CHECK(contains(messages[0], damage.expected_reason));
  }

  // An intact entry copied to another key's file belongs to that other key.
  const std::string other_key(64, 'b');
  write_file(cache.entry_path(other_key), good_entry);
  WarningCapture warnings;
  CHECK_FALSE(cache.load(other_key).has_value());
  REQUIRE(warnings.messages().size() == 1);
  CHECK(contains(warnings.messages()[0], "it was stored under a different key"));
}

TEST_CASE("disk cache: a corrupt entry is rebuilt by compile_cached") {
  TemporaryDirectory temporary;
  tilenorm::DiskCache cache(temporary.path());
  tilenorm::CompileRequest request = add_one_request();
  tilenorm::CompiledKernel first = tilenorm::compile_cached(request, &cache);
  const fs::path path = cache.entry_path(tilenorm::cache_key(request, tilenorm::nvrtc_version()));
  REQUIRE(fs::exists(path));
  fs::resize_file(path, fs::file_size(path) - 10);

  WarningCapture warnings;
  tilenorm::CompiledKernel rebuilt = tilenorm::compile_cached(request, &cache);
  CHECK_FALSE(rebuilt.from_disk_cache);
  REQUIRE(warnings.messages().size() == 1);
  CHECK(contains(warnings.messages()[0], path.string()));
  CHECK(rebuilt.cubin == first.cubin);

  tilenorm::CompiledKernel again = tilenorm::compile_cached(request, &cache);
  CHECK(again.from_disk_cache);
  CHECK(warnings.messages().size() == 1);
}

TEST_CASE("disk cache: a failing store warns instead of throwing") {
  TemporaryDirectory temporary;
  write_file(temporary.path() / "plain-file", "x");
  tilenorm::DiskCache cache(temporary.path() / "plain-file" / "cache");
  WarningCapture warnings;
  CHECK_NOTHROW(cache.store(kKey, sample_kernel()));
  REQUIRE(warnings.messages().size() == 1);
  CHECK(contains(warnings.messages()[0],
                 "cannot create the disk cache directory " + cache.directory().string()));
  CHECK(contains(warnings.messages()[0], "the compiled kernel is not cached"));
}

TEST_CASE("disk cache: a key that is not a plain file name is rejected") {
  tilenorm::DiskCache cache(fs::temp_directory_path());
  for (const std::string key : {"", "../escape", "a/b", "with space"}) {
    CAPTURE(key);
    try {
      cache.load(key);
      FAIL("load accepted the key");
    } catch (const tilenorm::Error& error) {
      CHECK(std::string(error.what()) ==
            "invalid disk cache key '" + key + "': expected letters, digits, '_' or '-'");
    }
  }
}

TEST_CASE("disk cache: compile_cached hits the cache on the second call") {
  TemporaryDirectory temporary;
  tilenorm::DiskCache cache(temporary.path());
  tilenorm::CompileRequest request = add_one_request();
  tilenorm::CompiledKernel compiled = tilenorm::compile_cached(request, &cache);
  CHECK_FALSE(compiled.from_disk_cache);
  tilenorm::CompiledKernel cached = tilenorm::compile_cached(request, &cache);
  CHECK(cached.from_disk_cache);
  check_same_kernel(cached, compiled);
  INFO("compiler log: " << compiled.log);
  CHECK(cached.registers > 0);
}

TEST_CASE("disk cache: a hit does not compile at all") {
  TemporaryDirectory temporary;
  tilenorm::DiskCache cache(temporary.path());
  tilenorm::CompileRequest request = add_one_request();
  request.source = "this would not compile";
  cache.store(tilenorm::cache_key(request, tilenorm::nvrtc_version()), sample_kernel());
  tilenorm::CompiledKernel kernel = tilenorm::compile_cached(request, &cache);
  CHECK(kernel.from_disk_cache);
  check_same_kernel(kernel, sample_kernel());
}

TEST_CASE("disk cache: TILENORM_DISABLE_DISK_CACHE=1 and a null cache bypass it") {
  TemporaryDirectory temporary;
  tilenorm::DiskCache cache(temporary.path() / "cache");
  tilenorm::CompileRequest request = add_one_request();
  {
    ScopedEnv disabled("TILENORM_DISABLE_DISK_CACHE", "1");
    CHECK_FALSE(tilenorm::compile_cached(request, &cache).from_disk_cache);
    CHECK_FALSE(tilenorm::compile_cached(request, &cache).from_disk_cache);
    CHECK_FALSE(fs::exists(cache.directory()));
  }
  CHECK_FALSE(tilenorm::compile_cached(request, nullptr).from_disk_cache);
  CHECK_FALSE(fs::exists(cache.directory()));
}

TEST_CASE("disk cache: cache_key changes with source, kernel name, options, arch and NVRTC") {
  tilenorm::CompileRequest base = add_one_request();
  base.options = {"-DA=1", "-DB=2"};
  const std::string key = tilenorm::cache_key(base, "13.0");
  CHECK(key.size() == 64);
  CHECK(key.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(tilenorm::cache_key(base, "13.0") == key);

  auto changed = [&](auto change) {
    tilenorm::CompileRequest request = base;
    change(request);
    return tilenorm::cache_key(request, "13.0");
  };
  CHECK(changed([](auto& r) { r.source += " "; }) != key);
  CHECK(changed([](auto& r) { r.kernel_name = "add_two"; }) != key);
  CHECK(changed([](auto& r) { r.arch = "sm_80"; }) != key);
  CHECK(changed([](auto& r) { r.options = {"-DA=1"}; }) != key);
  CHECK(changed([](auto& r) { r.options = {"-DB=2", "-DA=1"}; }) != key);
  CHECK(changed([](auto& r) { r.options = {"-DA=1 -DB=2"}; }) != key);
  CHECK(changed([](auto& r) { r.options = {"-DA=1", "-DB=2", ""}; }) != key);
  CHECK(tilenorm::cache_key(base, "13.1") != key);
}

TEST_CASE("disk cache: concurrent compile_cached calls compile each kernel once") {
  TemporaryDirectory temporary;
  tilenorm::DiskCache cache(temporary.path());
  WarningCapture warnings;
  constexpr int kThreads = 8;
  constexpr int kDistinctKernels = 2;
  std::vector<tilenorm::CompiledKernel> results(kThreads);
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      tilenorm::CompileRequest request = add_one_request();
      request.options = {"-DVARIANT=" + std::to_string(t % kDistinctKernels)};
      try {
        results[t] = tilenorm::compile_cached(request, &cache);
      } catch (const std::exception& error) {
        failures[t] = error.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  int compiled = 0;
  for (int t = 0; t < kThreads; ++t) {
    CAPTURE(t);
    CHECK(failures[t].empty());
    CHECK(results[t].cubin == results[t % kDistinctKernels].cubin);
    if (!results[t].from_disk_cache) ++compiled;
  }
  CHECK(compiled == kDistinctKernels);
  CHECK(warnings.messages().empty());
  // Only the finished entries remain: no temporary files.
  CHECK(std::distance(fs::directory_iterator(cache.directory()), fs::directory_iterator()) ==
        kDistinctKernels);
}

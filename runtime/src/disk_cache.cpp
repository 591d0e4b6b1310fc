#include "tilenorm/runtime/disk_cache.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "tilenorm/dsl/env.hpp"
#include "tilenorm/runtime/fileio.hpp"
#include "tilenorm/runtime/log.hpp"
#include "tilenorm/runtime/sha256.hpp"

namespace tilenorm {
namespace {

namespace fs = std::filesystem;

// Entry layout, integers little-endian:
//   header:  magic (8 bytes) | format version (u32) | payload length (u64) | payload SHA-256 (64
//            hex digits)
//   payload: key | registers, spill stores, spill loads, stack frame, shared memory (i32 each) |
//            cubin | log, where key, cubin and log are a u64 length followed by the bytes.
// The key is repeated inside so that an entry copied or renamed to another key is detected.
constexpr std::string_view kMagic = "TNKCUBIN";
constexpr std::uint32_t kFormatVersion = 1;
constexpr std::size_t kChecksumChars = 64;
constexpr std::size_t kHeaderBytes = kMagic.size() + 4 + 8 + kChecksumChars;
constexpr std::string_view kEntrySuffix = ".cubin-entry";
// Far above any real CUBIN; a larger file is not read (a hostile or runaway file).
constexpr std::uintmax_t kMaxEntryBytes = std::uintmax_t{256} << 20;

void append_unsigned(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
}

void append_int32(std::string& out, int value) {
  append_unsigned(out, static_cast<std::uint32_t>(value), 4);
}

void append_bytes(std::string& out, std::string_view bytes) {
  append_unsigned(out, bytes.size(), 8);
  out += bytes;
}

// Thrown by EntryReader when the entry does not hold what the format promises; load() turns it
// into a warning.
class MalformedEntry : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class EntryReader {
 public:
  explicit EntryReader(std::string_view data) : data_(data) {}

  std::uint64_t read_unsigned(int bytes) {
    std::string_view raw = take(static_cast<std::size_t>(bytes));
    std::uint64_t value = 0;
    for (int i = 0; i < bytes; ++i) {
      value |= std::uint64_t{static_cast<unsigned char>(raw[i])} << (8 * i);
    }
    return value;
  }

  int read_int32() {
    return static_cast<std::int32_t>(static_cast<std::uint32_t>(read_unsigned(4)));
  }

  std::string_view read_bytes() {
    std::uint64_t size = read_unsigned(8);
    if (size > data_.size()) throw MalformedEntry("a field is longer than the rest of the entry");
    return take(static_cast<std::size_t>(size));
  }

  std::string_view take(std::size_t size) {
    if (size > data_.size()) {
      throw MalformedEntry("truncated: " + std::to_string(data_.size()) + " bytes left where " +
                           std::to_string(size) + " were expected");
    }
    std::string_view taken = data_.substr(0, size);
    data_.remove_prefix(size);
    return taken;
  }

  bool at_end() const { return data_.empty(); }

 private:
  std::string_view data_;
};

std::string serialize_payload(const std::string& key, const CompiledKernel& kernel) {
  std::string payload;
  append_bytes(payload, key);
  append_int32(payload, kernel.registers);
  append_int32(payload, kernel.spill_store_bytes);
  append_int32(payload, kernel.spill_load_bytes);
  append_int32(payload, kernel.stack_frame_bytes);
  append_int32(payload, kernel.shared_memory_bytes);
  append_bytes(payload, std::string_view(kernel.cubin.data(), kernel.cubin.size()));
  append_bytes(payload, kernel.log);
  return payload;
}

std::string serialize_entry(const std::string& key, const CompiledKernel& kernel) {
  std::string payload = serialize_payload(key, kernel);
  std::string entry(kMagic);
  append_unsigned(entry, kFormatVersion, 4);
  append_unsigned(entry, payload.size(), 8);
  entry += sha256_hex(payload);
  entry += payload;
  return entry;
}

CompiledKernel parse_entry(std::string_view entry, const std::string& expected_key) {
  EntryReader header(entry);
  if (entry.size() < kMagic.size() || header.take(kMagic.size()) != kMagic) {
    throw MalformedEntry("not a tilenorm kernel cache entry (bad magic)");
  }
  std::uint64_t version = header.read_unsigned(4);
  if (version != kFormatVersion) {
    throw MalformedEntry("cache format version " + std::to_string(version) + ", expected " +
                         std::to_string(kFormatVersion));
  }
  std::uint64_t payload_size = header.read_unsigned(8);
  std::string_view checksum = header.take(kChecksumChars);
  std::string_view payload = entry.substr(std::min(kHeaderBytes, entry.size()));
  if (payload.size() != payload_size) {
    throw MalformedEntry("truncated or overlong: the payload has " +
                         std::to_string(payload.size()) + " bytes, the header says " +
                         std::to_string(payload_size));
  }
  if (sha256_hex(payload) != checksum) throw MalformedEntry("checksum mismatch");

  EntryReader reader(payload);
  if (reader.read_bytes() != expected_key) {
    throw MalformedEntry("it was stored under a different key");
  }
  CompiledKernel kernel;
  kernel.registers = reader.read_int32();
  kernel.spill_store_bytes = reader.read_int32();
  kernel.spill_load_bytes = reader.read_int32();
  kernel.stack_frame_bytes = reader.read_int32();
  kernel.shared_memory_bytes = reader.read_int32();
  std::string_view cubin = reader.read_bytes();
  kernel.cubin.assign(cubin.begin(), cubin.end());
  kernel.log = reader.read_bytes();
  if (!reader.at_end()) throw MalformedEntry("unexpected bytes after the log");
  return kernel;
}

void validate_key(const std::string& key) {
  bool valid = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
  if (!valid) {
    throw Error("invalid disk cache key '" + key + "': expected letters, digits, '_' or '-'");
  }
}

// Serializes compile_cached calls for one key within the process, so that threads asking for
// the same kernel at once wait for the first compile instead of repeating it.
class KeyLocks {
 public:
  class Guard {
   public:
    explicit Guard(std::shared_ptr<std::mutex> mutex) : mutex_(std::move(mutex)), lock_(*mutex_) {}

   private:
    std::shared_ptr<std::mutex> mutex_;  // Declared first: must outlive lock_.
    std::unique_lock<std::mutex> lock_;
  };

  Guard lock(const std::string& key) {
    std::shared_ptr<std::mutex> mutex;
    {
      std::lock_guard registry_lock(registry_mutex_);
      std::erase_if(mutexes_, [](const auto& entry) { return entry.second.expired(); });
      std::weak_ptr<std::mutex>& slot = mutexes_[key];
      mutex = slot.lock();
      if (!mutex) {
        mutex = std::make_shared<std::mutex>();
        slot = mutex;
      }
    }
    return Guard(std::move(mutex));
  }

 private:
  std::mutex registry_mutex_;
  std::unordered_map<std::string, std::weak_ptr<std::mutex>> mutexes_;
};

bool disk_cache_disabled() {
  return env_flag("TILENORM_DISABLE_DISK_CACHE");
}

const std::string& cached_nvrtc_version() {
  static const std::string version = nvrtc_version();
  return version;
}

void append_key_field(std::string& text, std::string_view name, std::string_view value) {
  text += name;
  text += ' ';
  text += std::to_string(value.size());
  text += ':';
  text += value;
  text += '\n';
}

}  // namespace

DiskCache::DiskCache(std::filesystem::path dir) : directory_(std::move(dir)) {}

std::filesystem::path DiskCache::entry_path(const std::string& key) const {
  validate_key(key);
  return directory_ / (key + std::string(kEntrySuffix));
}

std::optional<CompiledKernel> DiskCache::load(const std::string& key) const {
  fs::path path = entry_path(key);
  FileContents entry;
  try {
    entry = read_regular_file(path, kMaxEntryBytes, "disk cache entry");
  } catch (const Error& error) {
    warn(std::string(error.what()) + "; the kernel will be recompiled");
    return std::nullopt;
  }
  if (!entry.exists) return std::nullopt;
  try {
    if (entry.too_large) {
      throw MalformedEntry("it is " + std::to_string(entry.size) + " bytes, more than the " +
                           std::to_string(kMaxEntryBytes >> 20) + " MiB a kernel can take");
    }
    return parse_entry(entry.bytes, key);
  } catch (const MalformedEntry& problem) {
    warn("ignoring disk cache entry " + path.string() + ": " + problem.what() +
         "; the kernel will be recompiled");
    return std::nullopt;
  }
}

void DiskCache::store(const std::string& key, const CompiledKernel& kernel) const {
  fs::path path = entry_path(key);
  std::string entry = serialize_entry(key, kernel);
  std::error_code error;
  fs::create_directories(directory_, error);
  if (error) {
    warn("cannot create the disk cache directory " + directory_.string() + " (" + error.message() +
         "); the compiled kernel is not cached");
    return;
  }
  try {
    write_file_atomically(path, entry);
  } catch (const Error& failure) {
    warn(std::string("disk cache: ") + failure.what() + "; the compiled kernel is not cached");
  }
}

std::string cache_key(const CompileRequest& request, std::string_view nvrtc_version) {
  // Each field is length-prefixed so that no two different requests serialize alike.
  std::string text = "tilenorm kernel cache key 1\n";
  append_key_field(text, "nvrtc", nvrtc_version);
  append_key_field(text, "arch", request.arch);
  append_key_field(text, "kernel", request.kernel_name);
  append_key_field(text, "source", request.source);
  append_key_field(text, "options", std::to_string(request.options.size()));
  for (const std::string& option : request.options) append_key_field(text, "option", option);
  return sha256_hex(text);
}

CompiledKernel compile_cached(const CompileRequest& request, const DiskCache* cache) {
  if (!cache || disk_cache_disabled()) return compile_cuda(request);
  std::string key = cache_key(request, cached_nvrtc_version());
  static KeyLocks key_locks;
  KeyLocks::Guard guard = key_locks.lock(key);
  if (std::optional<CompiledKernel> hit = cache->load(key)) {
    hit->from_disk_cache = true;
    return std::move(*hit);
  }
  CompiledKernel kernel = compile_cuda(request);
  cache->store(key, kernel);
  return kernel;
}

}  // namespace tilenorm

#pragma once
// A directory of compiled kernels keyed by a hash of everything that affects the CUBIN, so a
// kernel compiled once is loaded from disk in later processes without calling NVRTC.
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "tilenorm/runtime/nvrtc.hpp"

namespace tilenorm {

class DiskCache {
 public:
  // The directory need not exist; store() creates it.
  explicit DiskCache(std::filesystem::path dir);

  // The entry stored under `key`, or nullopt when there is none. A truncated, corrupt or foreign
  // entry is reported through tilenorm::warn and also yields nullopt, so the caller recompiles.
  // Throws Error if `key` is not a plain file name stem ([A-Za-z0-9_-]+).
  std::optional<CompiledKernel> load(const std::string& key) const;

  // Writes the entry atomically (temporary file + rename). Failing to write is a warning, not an
  // error: the kernel was compiled and is still usable.
  void store(const std::string& key, const CompiledKernel& kernel) const;

  const std::filesystem::path& directory() const { return directory_; }

  // Where the entry for `key` lives.
  std::filesystem::path entry_path(const std::string& key) const;

 private:
  std::filesystem::path directory_;
};

// SHA-256 (hex) over the source, kernel name, arch, options and NVRTC version.
std::string cache_key(const CompileRequest& request, std::string_view nvrtc_version);

// compile_cuda through `cache`: a hit returns the stored kernel (from_disk_cache = true) without
// calling NVRTC; a miss compiles and stores. `cache` may be null, and the environment variable
// TILENORM_DISABLE_DISK_CACHE (set, not empty and not "0"; see env_flag) bypasses it. Safe to call
// from several threads at once; callers asking for the same kernel at the same time compile it
// once.
CompiledKernel compile_cached(const CompileRequest& request, const DiskCache* cache);

}  // namespace tilenorm

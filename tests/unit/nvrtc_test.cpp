// NVRTC compilation, checked against real ptxas output (NVRTC needs no GPU).
#include "tilenorm/runtime/nvrtc.hpp"

#include <doctest/doctest.h>

#include <cctype>
#include <string>
#include <vector>

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

bool is_elf(const std::vector<char>& bytes) {
  return bytes.size() > 4 && bytes[0] == 0x7f && bytes[1] == 'E' && bytes[2] == 'L' &&
         bytes[3] == 'F';
}

tilenorm::CompileRequest shared_memory_request(const std::string& arch) {
  tilenorm::CompileRequest request;
  request.kernel_name = "reverse_tile";
  request.arch = arch;
  request.source = R"(
extern "C" __global__ void reverse_tile(float* data) {
  __shared__ float tile[256];
  tile[threadIdx.x] = data[threadIdx.x];
  __syncthreads();
  data[threadIdx.x] = tile[255 - threadIdx.x];
}
)";
  return request;
}

// 32 values live at once cannot fit in 24 registers, so ptxas spills.
tilenorm::CompileRequest spilling_request(const std::string& arch) {
  tilenorm::CompileRequest request;
  request.kernel_name = "register_hungry";
  request.arch = arch;
  request.options = {"--maxrregcount=24"};
  request.source = R"(
extern "C" __global__ void register_hungry(float* out, const float* in) {
  float values[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) values[i] = in[threadIdx.x + i * 1024];
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 32; ++i) sum += values[i] * values[31 - i] + values[(i + 5) % 32];
#pragma unroll
  for (int i = 0; i < 32; ++i) out[threadIdx.x + i * 1024] = values[i] * sum;
}
)";
  return request;
}

}  // namespace

TEST_CASE("nvrtc: compile_cuda builds a CUBIN and reads registers and shared memory") {
  for (const char* arch : {"sm_80", "sm_90"}) {
    CAPTURE(arch);
    tilenorm::CompiledKernel kernel = tilenorm::compile_cuda(shared_memory_request(arch));
    CHECK(is_elf(kernel.cubin));
    CHECK(contains(kernel.log,
                   "Compiling entry function 'reverse_tile' for '" + std::string(arch) + "'"));
    CHECK(kernel.registers > 0);
    CHECK(kernel.registers < 64);
    CHECK(kernel.shared_memory_bytes == 256 * 4);
    CHECK(kernel.stack_frame_bytes == 0);
    CHECK_FALSE(kernel.spills());
    CHECK_FALSE(kernel.from_disk_cache);

    // Compiling the same source again must report again: where a driver is installed, NVRTC's
    // own cache would otherwise skip ptxas and drop the report.
    tilenorm::CompiledKernel again = tilenorm::compile_cuda(shared_memory_request(arch));
    CHECK(again.registers == kernel.registers);
    CHECK(again.shared_memory_bytes == kernel.shared_memory_bytes);
  }
}

TEST_CASE("nvrtc: compile_cuda reads spill stores, spill loads and the stack frame") {
  for (const char* arch : {"sm_80", "sm_90"}) {
    CAPTURE(arch);
    tilenorm::CompiledKernel kernel = tilenorm::compile_cuda(spilling_request(arch));
    CHECK(kernel.registers == 24);
    CHECK(kernel.spills());
    CHECK(kernel.spill_store_bytes > 0);
    CHECK(kernel.spill_load_bytes > 0);
    CHECK(kernel.stack_frame_bytes > 0);
    CHECK(contains(kernel.log, std::to_string(kernel.spill_store_bytes) + " bytes spill stores"));
    CHECK(contains(kernel.log, std::to_string(kernel.spill_load_bytes) + " bytes spill loads"));
    CHECK(kernel.shared_memory_bytes == 0);
  }
}

TEST_CASE("nvrtc: kernel_name picks that kernel's figures when a program has several") {
  tilenorm::CompileRequest request;
  request.arch = "sm_90";
  request.source = R"(
extern "C" __global__ void small_tile(float* data) {
  __shared__ float tile[64];
  tile[threadIdx.x] = data[threadIdx.x];
  __syncthreads();
  data[threadIdx.x] = tile[63 - threadIdx.x];
}
extern "C" __global__ void large_tile(float* data) {
  __shared__ double tile[512];
  tile[threadIdx.x] = data[threadIdx.x];
  __syncthreads();
  data[threadIdx.x] = tile[511 - threadIdx.x];
}
)";
  request.kernel_name = "small_tile";
  CHECK(tilenorm::compile_cuda(request).shared_memory_bytes == 64 * 4);
  request.kernel_name = "large_tile";
  CHECK(tilenorm::compile_cuda(request).shared_memory_bytes == 512 * 8);
}

TEST_CASE("nvrtc: a compile error carries the kernel, arch, options, log and numbered source") {
  tilenorm::CompileRequest request;
  request.kernel_name = "broken_kernel";
  request.arch = "sm_90";
  request.options = {"-DTILENORM_TEST_FLAG=1"};
  request.source =
      "extern \"C\" __global__ void broken_kernel(float* data) {\n"
      "  float scale = 2.0f;\n"
      "  data[threadIdx.x] = scale * undeclared_variable;\n"
      "}\n";
  try {
    tilenorm::compile_cuda(request);
    FAIL("compile_cuda accepted broken source");
  } catch (const tilenorm::CompileError& error) {
    std::string message = error.what();
    CHECK(contains(message, "NVRTC could not compile kernel 'broken_kernel' for sm_90"));
    CHECK(contains(message,
                   "options: --gpu-architecture=sm_90 -std=c++17 --ptxas-options=-v --no-cache "
                   "-DTILENORM_TEST_FLAG=1"));
    CHECK(contains(error.log(), "undeclared_variable"));
    CHECK(contains(error.log(), "broken_kernel.cu(3)"));
    CHECK(contains(message, "log:\n" + error.log()));
    CHECK(contains(message, "    1 | extern \"C\" __global__ void broken_kernel(float* data) {\n"));
    CHECK(contains(message, "    3 |   data[threadIdx.x] = scale * undeclared_variable;\n"));
    CHECK(contains(message, "    4 | }\n"));
    CHECK_FALSE(contains(message, "    5 |"));
  }
}

TEST_CASE("nvrtc: an invalid architecture is rejected naming it") {
  for (const char* arch : {"compute_90", "sm90", "sm_", "sm_9x", "90", "sm_90b", ""}) {
    CAPTURE(arch);
    tilenorm::CompileRequest request = shared_memory_request(arch);
    try {
      tilenorm::compile_cuda(request);
      FAIL("compile_cuda accepted the architecture");
    } catch (const tilenorm::Error& error) {
      CHECK(std::string(error.what()) ==
            "invalid CUDA architecture '" + std::string(arch) +
                "': expected a real architecture such as sm_80, sm_90 or sm_90a");
    }
  }
  CHECK_NOTHROW(tilenorm::validate_arch("sm_90a"));
  CHECK_NOTHROW(tilenorm::validate_arch("sm_100"));
}

TEST_CASE("nvrtc: an architecture option in request.options is rejected") {
  tilenorm::CompileRequest request = shared_memory_request("sm_90");
  request.options = {"-arch=sm_80"};
  try {
    tilenorm::compile_cuda(request);
    FAIL("compile_cuda accepted a second architecture");
  } catch (const tilenorm::Error& error) {
    CHECK(std::string(error.what()) ==
          "NVRTC option '-arch=sm_80' is not allowed: set the architecture through "
          "CompileRequest::arch");
  }
}

TEST_CASE("nvrtc: nvrtc_version() is major.minor") {
  std::string version = tilenorm::nvrtc_version();
  MESSAGE("NVRTC " << version);
  std::size_t dot = version.find('.');
  REQUIRE(dot != std::string::npos);
  CHECK(dot > 0);
  CHECK(dot + 1 < version.size());
  for (std::size_t i = 0; i < version.size(); ++i) {
    if (i != dot) CHECK(std::isdigit(static_cast<unsigned char>(version[i])));
  }
}

TEST_CASE("nvrtc: the architecture a GPU's kernels are compiled for") {
  // This NVRTC knows every architecture the project supports.
  const std::vector<int> known = tilenorm::nvrtc_architectures();
  for (int capability : {80, 86, 89, 90, 100, 120}) {
    CAPTURE(capability);
    CHECK(tilenorm::target_arch(capability, "device 0 (GPU)") ==
          "sm_" + std::to_string(capability));
  }
  // An older NVRTC's list (CUDA 12.8's, from sm_75): sm_103 takes the newest 10.x below it,
  // sm_121 sm_120's; sm_130 has no same major.
  const std::vector<int> older = {75, 80, 86, 87, 89, 90, 100, 101, 120};
  CHECK(tilenorm::target_arch(90, "device 0 (H200)", older, "12.8") == "sm_90");
  CHECK(tilenorm::target_arch(103, "device 0 (B300)", older, "12.8") == "sm_101");
  CHECK(tilenorm::target_arch(121, "device 1 (GB10)", older, "12.8") == "sm_120");
  auto error = [](int capability, const std::vector<int>& architectures) {
    try {
      tilenorm::target_arch(capability, "device 0 (GPU)", architectures, "12.8");
    } catch (const tilenorm::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(error(130, older) ==
        "NVRTC 12.8 cannot compile for device 0 (GPU), sm_130: it knows sm_75 to sm_120, none of "
        "the same major (13.x); a CUDA toolkit whose NVRTC knows sm_130 is needed");
  CHECK(error(75, older) ==
        "device 0 (GPU) is sm_75; tilenorm's kernels need sm_80 or newer (cp.async and bf16 "
        "arithmetic)");
  CHECK(error(70, known).starts_with("device 0 (GPU) is sm_70;"));
  CHECK(error(100, {}) ==
        "NVRTC 12.8 cannot compile for device 0 (GPU), sm_100: it knows no architecture, none of "
        "the same major (10.x); a CUDA toolkit whose NVRTC knows sm_100 is needed");
}

TEST_CASE("nvrtc: a driver older than NVRTC is named when a module does not load") {
  CHECK(tilenorm::older_driver_note(13000, "13.0").empty());
  CHECK(tilenorm::older_driver_note(13010, "13.0").empty());
  CHECK(tilenorm::older_driver_note(12080, "12.4").empty());
  CHECK(tilenorm::older_driver_note(12040, "13.0") ==
        "The driver supports CUDA 12.4, older than NVRTC 13.0, which compiled the kernel: update "
        "the driver, or build tilenorm with a CUDA toolkit no newer than the driver.");
  CHECK(tilenorm::older_driver_note(12040, "12.8").starts_with("The driver supports CUDA 12.4,"));
}

TEST_CASE("nvrtc: clusters only where NVRTC assembles their row exchange") {
  CHECK(tilenorm::nvrtc_assembles_clusters("13.0"));
  CHECK(tilenorm::nvrtc_assembles_clusters("12.1"));
  CHECK(tilenorm::nvrtc_assembles_clusters("12.10"));
  CHECK_FALSE(tilenorm::nvrtc_assembles_clusters("12.0"));
  CHECK_FALSE(tilenorm::nvrtc_assembles_clusters("11.8"));
  CHECK_FALSE(tilenorm::nvrtc_assembles_clusters("garbage"));
  // This NVRTC does, so a GPU with clusters keeps them.
  CHECK(tilenorm::nvrtc_assembles_clusters(tilenorm::nvrtc_version()));
}

// The driver wrapper: without a GPU it must fail cleanly and explain why; with one, the device
// queries and RAII helpers must work.
#include "tilenorm/runtime/driver.hpp"

#include <doctest/doctest.h>

#include <string>

namespace {

namespace driver = tilenorm::driver;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("driver: gpu_available() and gpu_unavailable_reason() agree") {
  if (driver::gpu_available()) {
    CHECK(driver::gpu_unavailable_reason().empty());
  } else {
    CHECK_FALSE(driver::gpu_unavailable_reason().empty());
    MESSAGE("no GPU: " << driver::gpu_unavailable_reason());
  }
}

TEST_CASE("driver: api() without a usable driver throws DriverUnavailable, the same every time") {
  if (driver::gpu_available()) {
    CHECK_NOTHROW(driver::api());
    CHECK(static_cast<bool>(driver::api().cuLaunchKernel));
    return;
  }
  std::string first_message;
  try {
    driver::api();
    // A driver with no devices loads, so api() may succeed; the reason then names the count.
    CHECK(contains(driver::gpu_unavailable_reason(), "no devices"));
    return;
  } catch (const driver::DriverUnavailable& error) {
    first_message = error.what();
  }
  CHECK(first_message.starts_with("CUDA driver not available: "));
  CHECK(first_message.ends_with("; compiling and everything but launching still works"));
  CHECK((contains(first_message, "libcuda.so.1 could not be loaded (") ||
         contains(first_message, "cuInit(0) failed: ")));
  CHECK(driver::gpu_unavailable_reason() == first_message);

  std::string second_message;
  try {
    driver::api();
  } catch (const tilenorm::Error& error) {  // DriverUnavailable is a tilenorm::Error.
    second_message = error.what();
  }
  CHECK(second_message == first_message);
}

TEST_CASE("driver: check() names the call and the CUDA error") {
  CHECK_NOTHROW(driver::check(CUDA_SUCCESS, "cuMemAlloc"));
  try {
    driver::check(CUDA_ERROR_INVALID_VALUE, "cuMemAlloc(16 bytes)");
    FAIL("check() did not throw");
  } catch (const driver::CudaError& error) {
    std::string message = error.what();
    CHECK(error.result() == CUDA_ERROR_INVALID_VALUE);
    CHECK(message.starts_with("cuMemAlloc(16 bytes) failed: "));
    // The driver supplies the name and description; without it the number is all there is.
    CHECK((contains(message, "CUDA_ERROR_INVALID_VALUE (") || contains(message, "CUresult 1")));
  }
}

TEST_CASE("driver: device_info(0) is sane on a GPU machine") {
  if (!driver::gpu_available()) {
    CHECK_THROWS_AS(driver::device_info(0), driver::DriverUnavailable);
    return;
  }
  driver::DeviceInfo info = driver::device_info(0);
  MESSAGE("device 0: " << info.name << " " << info.arch());
  CHECK(info.ordinal == 0);
  CHECK_FALSE(info.name.empty());
  CHECK(info.cc_major >= 5);
  CHECK(info.cc_minor >= 0);
  CHECK(info.arch() == "sm_" + std::to_string(info.cc_major) + std::to_string(info.cc_minor));
  CHECK(info.multiprocessors > 0);
  CHECK(info.max_threads_per_block >= 512);
  CHECK(info.max_threads_per_multiprocessor >= info.max_threads_per_block);
  CHECK(info.registers_per_multiprocessor >= 32 * 1024);
  CHECK(info.shared_memory_per_block_optin >= 48 * 1024);
  CHECK(info.shared_memory_per_multiprocessor >= info.shared_memory_per_block_optin);
  CHECK(info.l2_bytes > 0);
  CHECK(info.total_memory > std::size_t{1} << 30);

  try {
    driver::device_info(1000);
    FAIL("device_info(1000) did not throw");
  } catch (const tilenorm::Error& error) {
    CHECK(contains(error.what(), "CUDA device ordinal 1000 is out of range"));
  }
}

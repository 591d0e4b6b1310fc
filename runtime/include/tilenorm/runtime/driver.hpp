#pragma once
// The CUDA driver API, loaded with dlopen("libcuda.so.1") on first use so that the library (and
// everything but launching) works on machines without a driver. <cuda.h> supplies types only;
// libcuda is never linked.
#include <cuda.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "tilenorm/dsl/error.hpp"

namespace tilenorm::driver {

// libcuda.so.1 could not be loaded, lacks an entry point, or cuInit failed.
class DriverUnavailable : public Error {
 public:
  using Error::Error;
};

// A driver call returned something other than CUDA_SUCCESS.
class CudaError : public Error {
 public:
  CudaError(CUresult result, const std::string& message) : Error(message), result_(result) {}
  CUresult result() const noexcept { return result_; }

 private:
  CUresult result_;
};

// Every entry point tilenorm uses. cuda.h #defines many of these names to versioned symbols
// (cuMemAlloc -> cuMemAlloc_v2, cuStreamBeginCapture -> cuStreamBeginCapture_v2, ...); the
// same macros rename the Api members, so `api().cuMemAlloc(...)` calls the symbol that cuda.h
// declares, and the loader resolves that expanded name. cuGraphInstantiateWithFlags is named
// as such: cuGraphInstantiate takes other arguments in CUDA 11's headers.
#define TILENORM_DRIVER_ENTRY_POINTS(X)          \
  X(cuInit)                                      \
  X(cuDriverGetVersion)                          \
  X(cuDeviceGetCount)                            \
  X(cuDeviceGet)                                 \
  X(cuDeviceGetName)                             \
  X(cuDeviceGetAttribute)                        \
  X(cuDeviceTotalMem)                            \
  X(cuDevicePrimaryCtxRetain)                    \
  X(cuDevicePrimaryCtxRelease)                   \
  X(cuCtxGetCurrent)                             \
  X(cuCtxSetCurrent)                             \
  X(cuCtxGetDevice)                              \
  X(cuCtxSynchronize)                            \
  X(cuModuleLoadData)                            \
  X(cuModuleUnload)                              \
  X(cuModuleGetFunction)                         \
  X(cuFuncGetAttribute)                          \
  X(cuFuncSetAttribute)                          \
  X(cuLaunchKernel)                              \
  X(cuLaunchKernelEx)                            \
  X(cuMemAlloc)                                  \
  X(cuMemFree)                                   \
  X(cuMemcpyHtoD)                                \
  X(cuMemcpyDtoH)                                \
  X(cuMemcpyDtoD)                                \
  X(cuMemcpyDtoDAsync)                           \
  X(cuMemsetD8)                                  \
  X(cuMemsetD8Async)                             \
  X(cuMemcpyHtoDAsync)                           \
  X(cuMemcpyDtoHAsync)                           \
  X(cuMemGetInfo)                                \
  X(cuStreamCreate)                              \
  X(cuStreamDestroy)                             \
  X(cuStreamSynchronize)                         \
  X(cuEventCreate)                               \
  X(cuEventRecord)                               \
  X(cuEventSynchronize)                          \
  X(cuEventElapsedTime)                          \
  X(cuEventDestroy)                              \
  X(cuGetErrorName)                              \
  X(cuGetErrorString)                            \
  X(cuStreamBeginCapture)                        \
  X(cuStreamEndCapture)                          \
  X(cuGraphInstantiateWithFlags)                 \
  X(cuGraphLaunch)                               \
  X(cuGraphExecDestroy)                          \
  X(cuGraphDestroy)                              \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor) \
  X(cuOccupancyMaxActiveClusters)

#define TILENORM_DRIVER_DECLARE_ENTRY_POINT(name) decltype(&::name) name = nullptr;

struct Api {
  TILENORM_DRIVER_ENTRY_POINTS(TILENORM_DRIVER_DECLARE_ENTRY_POINT)
};

#undef TILENORM_DRIVER_DECLARE_ENTRY_POINT

// Loads libcuda.so.1 and calls cuInit(0), once per process (thread-safe). Throws
// DriverUnavailable if that fails; the failure is remembered and rethrown by later calls.
const Api& api();

// True when the driver loads and reports at least one device. Never throws.
bool gpu_available() noexcept;

// Why gpu_available() is false (empty when it is true), for tests that skip.
std::string gpu_unavailable_reason();

// Throws CudaError "<what> failed: CUDA_ERROR_X (<description>)" unless result is CUDA_SUCCESS.
void check(CUresult result, std::string_view what);

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int multiprocessors = 0;
  int max_threads_per_block = 0;
  int max_threads_per_multiprocessor = 0;
  int registers_per_multiprocessor = 0;
  std::size_t shared_memory_per_block_optin = 0;
  std::size_t shared_memory_per_multiprocessor = 0;
  int l2_bytes = 0;
  std::size_t total_memory = 0;
  bool cluster_launch = false;      // thread-block clusters (sm_90 and later)
  bool cooperative_launch = false;  // every CTA of a grid resident at once (software clusters)

  // The GPU's own real architecture, e.g. "sm_90" (kernels are compiled for target_arch(), which
  // differs where NVRTC does not know this one).
  std::string arch() const;
  int compute_capability() const { return 10 * cc_major + cc_minor; }
  // "device 0 (NVIDIA H200)", for messages.
  std::string label() const;
};

DeviceInfo device_info(int ordinal);

// The CUDA version the driver supports, as cuDriverGetVersion() reports it (13000 for 13.0).
int driver_version();

// Retains the device's primary context the first time it is asked for and keeps it for the
// lifetime of the process (releasing it at exit would race other static destructors).
CUcontext primary_context(int ordinal = 0);

void make_current(CUcontext context);

// Makes a context current for the calling thread and restores the previous one on destruction.
class ScopedContext {
 public:
  explicit ScopedContext(CUcontext context);
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  CUcontext previous_ = nullptr;
};

// Device memory from cuMemAlloc. Needs a current context for its whole lifetime.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr get() const noexcept { return pointer_; }
  std::size_t bytes() const noexcept { return bytes_; }

  // Copies `bytes` bytes from the host to the start of the buffer (synchronous).
  void upload(const void* host, std::size_t bytes);
  // Copies `bytes` bytes from the start of the buffer to the host (synchronous).
  void download(void* host, std::size_t bytes) const;
  // Sets every byte of the buffer to `value` (synchronous).
  void fill_bytes(unsigned char value);

 private:
  void release() noexcept;

  CUdeviceptr pointer_ = 0;
  std::size_t bytes_ = 0;
};

// A CUDA stream; non-blocking by default so it never synchronizes with the legacy stream.
class Stream {
 public:
  explicit Stream(unsigned int flags = CU_STREAM_NON_BLOCKING);
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  CUstream get() const noexcept { return stream_; }
  void synchronize() const;

 private:
  CUstream stream_ = nullptr;
};

class Event {
 public:
  explicit Event(unsigned int flags = CU_EVENT_DEFAULT);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  CUevent get() const noexcept { return event_; }
  void record(CUstream stream = nullptr);
  void synchronize() const;

  // Milliseconds between two recorded (and completed) events.
  static float elapsed_ms(const Event& start, const Event& end);

 private:
  CUevent event_ = nullptr;
};

}  // namespace tilenorm::driver

#include "tilenorm/runtime/driver.hpp"

#include <dlfcn.h>

#include <map>
#include <mutex>
#include <utility>

// Two levels so that the argument is macro-expanded (cuMemAlloc -> cuMemAlloc_v2) first.
#define TILENORM_STRINGIZE_EXPANDED(name) TILENORM_STRINGIZE(name)
#define TILENORM_STRINGIZE(name) #name

namespace tilenorm::driver {
namespace {

constexpr const char* kLibraryName = "libcuda.so.1";
constexpr const char* kStillWorks = "; compiling and everything but launching still works";

// The driver's name and description of `result`, or a plain number when they are unknown.
std::string describe(const Api& loaded, CUresult result) {
  const char* name = nullptr;
  const char* description = nullptr;
  if (loaded.cuGetErrorName) loaded.cuGetErrorName(result, &name);
  if (loaded.cuGetErrorString) loaded.cuGetErrorString(result, &description);
  std::string text = name ? name : "CUresult " + std::to_string(static_cast<int>(result));
  if (description) text += std::string(" (") + description + ")";
  return text;
}

struct LoadOutcome {
  Api api;
  std::string failure;  // Empty when the driver loaded and initialized.
};

template <typename Function>
bool resolve(void* library, const char* symbol, Function& entry_point) {
  entry_point = reinterpret_cast<Function>(dlsym(library, symbol));
  return entry_point != nullptr;
}

LoadOutcome missing_entry_point(void* library, const char* symbol) {
  dlclose(library);
  LoadOutcome outcome;
  outcome.failure =
      std::string("CUDA driver not available: ") + kLibraryName + " lacks the entry point " +
      symbol + " (a driver older than the CUDA " + std::to_string(CUDA_VERSION / 1000) + "." +
      std::to_string(CUDA_VERSION % 1000 / 10) + " headers tilenorm was built with?)" + kStillWorks;
  return outcome;
}

LoadOutcome load_driver() {
  LoadOutcome outcome;
  // Once loaded, the handle is never closed: the entry points must stay valid until exit.
  void* library = dlopen(kLibraryName, RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char* reason = dlerror();
    outcome.failure = std::string("CUDA driver not available: ") + kLibraryName +
                      " could not be loaded (" + (reason ? reason : "unknown reason") + ")" +
                      kStillWorks;
    return outcome;
  }
#define TILENORM_RESOLVE_ENTRY_POINT(name)                                      \
  if (!resolve(library, TILENORM_STRINGIZE_EXPANDED(name), outcome.api.name)) { \
    return missing_entry_point(library, TILENORM_STRINGIZE_EXPANDED(name));     \
  }
  TILENORM_DRIVER_ENTRY_POINTS(TILENORM_RESOLVE_ENTRY_POINT)
#undef TILENORM_RESOLVE_ENTRY_POINT

  CUresult result = outcome.api.cuInit(0);
  if (result != CUDA_SUCCESS) {
    outcome.failure =
        "CUDA driver not available: cuInit(0) failed: " + describe(outcome.api, result) +
        kStillWorks;
  }
  return outcome;
}

const LoadOutcome& loaded_driver() {
  static const LoadOutcome outcome = load_driver();  // Thread-safe, runs once.
  return outcome;
}

// For destructors, which must not throw: objects holding driver resources exist only after
// api() succeeded, so the entry points are loaded.
const Api& loaded_api() noexcept {
  return loaded_driver().api;
}

struct Availability {
  bool available = false;
  std::string reason;
};

Availability probe_availability() {
  const LoadOutcome& outcome = loaded_driver();
  if (!outcome.failure.empty()) return {false, outcome.failure};
  int count = 0;
  CUresult result = outcome.api.cuDeviceGetCount(&count);
  if (result != CUDA_SUCCESS) {
    return {false, "cuDeviceGetCount failed: " + describe(outcome.api, result)};
  }
  if (count == 0) return {false, "the CUDA driver loaded but reports no devices"};
  return {true, ""};
}

const Availability& availability() {
  static const Availability result = probe_availability();
  return result;
}

void check_copy_size(std::string_view direction, std::size_t requested, std::size_t capacity) {
  if (requested > capacity) {
    throw Error("DeviceBuffer " + std::string(direction) + " of " + std::to_string(requested) +
                " bytes exceeds the buffer size of " + std::to_string(capacity) + " bytes");
  }
}

void check_ordinal(const Api& driver, int ordinal) {
  int count = 0;
  check(driver.cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (ordinal < 0 || ordinal >= count) {
    throw Error("CUDA device ordinal " + std::to_string(ordinal) +
                " is out of range: " + std::to_string(count) + " device(s) present");
  }
}

int device_attribute(CUdevice device, CUdevice_attribute attribute, std::string_view name) {
  int value = 0;
  check(api().cuDeviceGetAttribute(&value, attribute, device),
        "cuDeviceGetAttribute(" + std::string(name) + ")");
  return value;
}

}  // namespace

const Api& api() {
  const LoadOutcome& outcome = loaded_driver();
  if (!outcome.failure.empty()) throw DriverUnavailable(outcome.failure);
  return outcome.api;
}

bool gpu_available() noexcept {
  try {
    return availability().available;
  } catch (...) {  // Only std::bad_alloc could get here.
    return false;
  }
}

std::string gpu_unavailable_reason() {
  return availability().reason;
}

void check(CUresult result, std::string_view what) {
  if (result == CUDA_SUCCESS) return;
  throw CudaError(result, std::string(what) + " failed: " + describe(loaded_driver().api, result));
}

std::string DeviceInfo::arch() const {
  return "sm_" + std::to_string(compute_capability());
}

int driver_version() {
  int version = 0;
  check(api().cuDriverGetVersion(&version), "cuDriverGetVersion");
  return version;
}

std::string DeviceInfo::label() const {
  return "device " + std::to_string(ordinal) + " (" + name + ")";
}

DeviceInfo device_info(int ordinal) {
  const Api& driver = api();
  check_ordinal(driver, ordinal);
  CUdevice device = 0;
  check(driver.cuDeviceGet(&device, ordinal), "cuDeviceGet");

  DeviceInfo info;
  info.ordinal = ordinal;
  char name[256] = {};
  check(driver.cuDeviceGetName(name, sizeof(name) - 1, device), "cuDeviceGetName");
  info.name = name;
  info.cc_major = device_attribute(device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                   "COMPUTE_CAPABILITY_MAJOR");
  info.cc_minor = device_attribute(device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                   "COMPUTE_CAPABILITY_MINOR");
  info.multiprocessors =
      device_attribute(device, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "MULTIPROCESSOR_COUNT");
  info.max_threads_per_block =
      device_attribute(device, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "MAX_THREADS_PER_BLOCK");
  info.max_threads_per_multiprocessor = device_attribute(
      device, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, "MAX_THREADS_PER_MULTIPROCESSOR");
  info.registers_per_multiprocessor =
      device_attribute(device, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR,
                       "MAX_REGISTERS_PER_MULTIPROCESSOR");
  info.shared_memory_per_block_optin = static_cast<std::size_t>(
      device_attribute(device, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                       "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"));
  info.shared_memory_per_multiprocessor = static_cast<std::size_t>(
      device_attribute(device, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
                       "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"));
  info.l2_bytes = device_attribute(device, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "L2_CACHE_SIZE");
  info.cluster_launch =
      device_attribute(device, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, "CLUSTER_LAUNCH") != 0;
  info.cooperative_launch =
      device_attribute(device, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, "COOPERATIVE_LAUNCH") != 0;
  check(driver.cuDeviceTotalMem(&info.total_memory, device), "cuDeviceTotalMem");
  return info;
}

CUcontext primary_context(int ordinal) {
  static std::mutex mutex;
  static std::map<int, CUcontext> retained;
  const Api& driver = api();
  std::lock_guard lock(mutex);
  if (auto found = retained.find(ordinal); found != retained.end()) return found->second;
  check_ordinal(driver, ordinal);
  CUdevice device = 0;
  check(driver.cuDeviceGet(&device, ordinal), "cuDeviceGet");
  CUcontext context = nullptr;
  check(driver.cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
  retained.emplace(ordinal, context);
  return context;
}

void make_current(CUcontext context) {
  check(api().cuCtxSetCurrent(context), "cuCtxSetCurrent");
}

ScopedContext::ScopedContext(CUcontext context) {
  check(api().cuCtxGetCurrent(&previous_), "cuCtxGetCurrent");
  make_current(context);
}

ScopedContext::~ScopedContext() {
  loaded_api().cuCtxSetCurrent(previous_);
}

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  // cuMemAlloc rejects zero bytes; an empty buffer is simply a null pointer.
  if (bytes > 0)
    check(api().cuMemAlloc(&pointer_, bytes), "cuMemAlloc(" + std::to_string(bytes) + " bytes)");
}

DeviceBuffer::~DeviceBuffer() {
  release();
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : pointer_(std::exchange(other.pointer_, 0)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    pointer_ = std::exchange(other.pointer_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::release() noexcept {
  // Errors are ignored: a destructor cannot report them, and a failed free leaks nothing more.
  if (pointer_) loaded_api().cuMemFree(pointer_);
  pointer_ = 0;
  bytes_ = 0;
}

void DeviceBuffer::upload(const void* host, std::size_t bytes) {
  check_copy_size("upload", bytes, bytes_);
  if (bytes > 0) check(api().cuMemcpyHtoD(pointer_, host, bytes), "cuMemcpyHtoD");
  // cuMemcpyHtoD may return before the DMA lands, and work on non-blocking streams is not
  // ordered after it: finish it here so the buffer holds the data when this returns.
  check(api().cuCtxSynchronize(), "cuCtxSynchronize after cuMemcpyHtoD");
}

void DeviceBuffer::download(void* host, std::size_t bytes) const {
  check_copy_size("download", bytes, bytes_);
  if (bytes > 0) check(api().cuMemcpyDtoH(host, pointer_, bytes), "cuMemcpyDtoH");
}

void DeviceBuffer::fill_bytes(unsigned char value) {
  if (bytes_ > 0) check(api().cuMemsetD8(pointer_, value, bytes_), "cuMemsetD8");
  // As in upload(): a non-blocking stream would not wait for this memset.
  check(api().cuCtxSynchronize(), "cuCtxSynchronize after cuMemsetD8");
}

Stream::Stream(unsigned int flags) {
  check(api().cuStreamCreate(&stream_, flags), "cuStreamCreate");
}

Stream::~Stream() {
  if (stream_) loaded_api().cuStreamDestroy(stream_);
}

Stream::Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (stream_) loaded_api().cuStreamDestroy(stream_);
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

void Stream::synchronize() const {
  check(api().cuStreamSynchronize(stream_), "cuStreamSynchronize");
}

Event::Event(unsigned int flags) {
  check(api().cuEventCreate(&event_, flags), "cuEventCreate");
}

Event::~Event() {
  if (event_) loaded_api().cuEventDestroy(event_);
}

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_) loaded_api().cuEventDestroy(event_);
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void Event::record(CUstream stream) {
  check(api().cuEventRecord(event_, stream), "cuEventRecord");
}

void Event::synchronize() const {
  check(api().cuEventSynchronize(event_), "cuEventSynchronize");
}

float Event::elapsed_ms(const Event& start, const Event& end) {
  float milliseconds = 0.0f;
  check(api().cuEventElapsedTime(&milliseconds, start.event_, end.event_), "cuEventElapsedTime");
  return milliseconds;
}

}  // namespace tilenorm::driver

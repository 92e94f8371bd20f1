#include "runtime/cuda_driver.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <atomic>

#include <cstring>
#include <mutex>
#include <vector>

#include "compiler/support/error.h"

namespace tilefuse::cuda {
namespace {

// Exported names as CUDA 13's cuda.h maps them (the plain names are macros for these).
#define TF_CUDA_FUNCS(X)                                                                                     \
  X(cuGetErrorName)                                                                                          \
  X(cuGetErrorString)                                                                                        \
  X(cuInit)                                                                                                  \
  X(cuDriverGetVersion)                                                                                      \
  X(cuDeviceGetCount)                                                                                        \
  X(cuDeviceGet)                                                                                             \
  X(cuDeviceGetName)                                                                                         \
  X(cuDeviceGetAttribute)                                                                                    \
  X(cuDeviceTotalMem_v2) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuMemAlloc_v2) \
      X(cuMemFree_v2) X(cuMemcpyHtoD_v2) X(cuMemcpyDtoH_v2) X(cuMemcpyDtoDAsync_v2) X(cuMemsetD8_v2)         \
          X(cuMemsetD16_v2) X(cuMemsetD32_v2) X(cuMemsetD8Async) X(cuMemsetD16Async) X(cuMemsetD32Async) X(cuModuleLoadDataEx) X(cuModuleGetFunction) X(cuModuleUnload) \
              X(cuFuncGetAttribute) X(cuFuncSetAttribute) X(cuLaunchKernel) X(cuStreamCreate)                \
                  X(cuStreamDestroy_v2) X(cuStreamSynchronize) X(cuEventCreate) X(cuEventRecord)             \
                      X(cuEventSynchronize) X(cuEventElapsedTime_v2) X(cuEventDestroy_v2)                    \
                          X(cuLaunchKernelEx) X(cuOccupancyMaxActiveClusters)                                \
                              X(cuOccupancyMaxActiveBlocksPerMultiprocessor) X(cuTensorMapEncodeTiled)

struct Api {
#define TF_FIELD(n) decltype(&::n) n = nullptr;
  TF_CUDA_FUNCS(TF_FIELD)
#undef TF_FIELD
};

struct Driver {
  Api api;
  bool ok = false;
  std::string why;  // set when !ok
};

constexpr const char* kFaultHint =
    "; an earlier kernel or copy failed asynchronously (e.g. an out-of-bounds access) and the "
    "context is now unusable; run under compute-sanitizer to find it";

std::string result_text(const Api& api, CUresult r) {
  const char* name = nullptr;
  const char* str = nullptr;
  if (api.cuGetErrorName(r, &name) != CUDA_SUCCESS || !name) name = "unknown CUresult";
  if (api.cuGetErrorString(r, &str) != CUDA_SUCCESS || !str) str = "no description";
  return std::string(name) + " (" + str + ")";
}

template <class F>
bool resolve(void* lib, const char* name, F& fn, std::string& why) {
  dlerror();
  void* p = dlsym(lib, name);
  if (!p) {
    const char* e = dlerror();
    why = std::string("no GPU present: libcuda.so.1 has no symbol ") + name + " (" +
          (e ? e : "dlsym failed") + "); a driver for CUDA 13 or newer is required";
    return false;
  }
  fn = reinterpret_cast<F>(p);
  return true;
}

void load(Driver& d) {
  // Never dlclose'd: buffers and modules may be released during process exit.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    d.why = std::string("no GPU present: libcuda.so.1 not found (") + (e ? e : "dlopen failed") + ")";
    return;
  }
  Api api;
#define TF_RESOLVE(n) \
  if (!resolve(lib, #n, api.n, d.why)) return;
  TF_CUDA_FUNCS(TF_RESOLVE)
#undef TF_RESOLVE
  CUresult r = api.cuInit(0);
  if (r != CUDA_SUCCESS) {
    d.why = "no GPU present: cuInit: " + result_text(api, r);
    return;
  }
  int count = 0;
  r = api.cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS) {
    d.why = "no GPU present: cuDeviceGetCount: " + result_text(api, r);
    return;
  }
  if (count == 0) {
    d.why = "no GPU present: the CUDA driver loaded but reports no devices";
    return;
  }
  d.api = api;
  d.ok = true;
}

const Driver& driver() {
  static Driver d;
  static std::once_flag once;
  std::call_once(once, [] { load(d); });
  return d;
}

[[noreturn]] void fail(const char* call, const std::string& what, CUresult r, const char* hint = "") {
  std::string msg = call;
  if (!what.empty()) msg += "(" + what + ")";
  throw CudaError(msg + ": " + result_text(driver().api, r) + hint);
}

void check(CUresult r, const char* call, const std::string& what, const char* hint = "") {
  if (r != CUDA_SUCCESS) fail(call, what, r, hint);
}

// Loads the driver and makes the context current on this thread.
const Api& ready() {
  Context::get();
  return driver().api;
}

// For destructors, which may run on threads that never used the context; never throws.
const Api* ready_quietly() noexcept {
  try {
    return &ready();
  } catch (...) {
    return nullptr;
  }
}

void check_fill_width(size_t size, size_t width, const char* fn) {
  if (size % width != 0)
    throw CudaError(std::string("DeviceBuffer::") + fn + ": buffer of " + std::to_string(size) +
                    " bytes is not a multiple of " + std::to_string(width) +
                    " bytes; the tail would stay unfilled");
}

}  // namespace

bool available(std::string* why) {
  const Driver& d = driver();
  if (!d.ok && why) *why = d.why;
  return d.ok;
}

Context::Context() {
  const Driver& d = driver();
  if (!d.ok) throw CudaError(d.why);
  const Api& a = d.api;
  CUdevice dev = 0;
  check(a.cuDeviceGet(&dev, 0), "cuDeviceGet", "device 0");
  check(a.cuDevicePrimaryCtxRetain(&ctx_, dev), "cuDevicePrimaryCtxRetain", "device 0");

  char name[256] = {};
  check(a.cuDeviceGetName(name, static_cast<int>(sizeof(name)) - 1, dev), "cuDeviceGetName", "device 0");
  info_.name = name;
  auto attr = [&](CUdevice_attribute at, const char* what) {
    int v = 0;
    check(a.cuDeviceGetAttribute(&v, at, dev), "cuDeviceGetAttribute", what);
    return v;
  };
  info_.sm_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "MULTIPROCESSOR_COUNT");
  info_.cc_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "COMPUTE_CAPABILITY_MAJOR");
  info_.cc_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "COMPUTE_CAPABILITY_MINOR");
  info_.l2_bytes = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "L2_CACHE_SIZE");
  info_.max_shared_per_block_optin =
      attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN");
  check(a.cuDriverGetVersion(&info_.driver_version), "cuDriverGetVersion", "");
  check(a.cuDeviceTotalMem_v2(&info_.total_mem, dev), "cuDeviceTotalMem_v2", "device 0");
}

Context& Context::get() {
  // Leaked on purpose: buffers in static storage may be freed after it would be destroyed.
  static Context* ctx = new Context();
  thread_local bool current = false;
  if (!current) {
    ctx->make_current();
    current = true;
  }
  return *ctx;
}

void Context::make_current() {
  check(driver().api.cuCtxSetCurrent(ctx_), "cuCtxSetCurrent", "primary context of device 0");
}

void Context::synchronize() { check(ready().cuCtxSynchronize(), "cuCtxSynchronize", "", kFaultHint); }

// ---- DeviceBuffer ----

DeviceBuffer::DeviceBuffer(size_t bytes) : size_(bytes) {
  const Api& a = ready();
  if (bytes == 0) return;  // cuMemAlloc rejects zero bytes
  check(a.cuMemAlloc_v2(&ptr_, bytes), "cuMemAlloc_v2", std::to_string(bytes) + " bytes");
}

DeviceBuffer::~DeviceBuffer() {
  if (!ptr_) return;
  if (const Api* a = ready_quietly()) a->cuMemFree_v2(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, 0)), size_(std::exchange(o.size_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    DeviceBuffer old(std::move(*this));
    ptr_ = std::exchange(o.ptr_, 0);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

namespace {
std::atomic<uint64_t> host_bytes{0};  // copied between host and device, process-wide
}  // namespace

uint64_t host_transfer_bytes() { return host_bytes.load(); }

void DeviceBuffer::upload(const void* host, size_t bytes) {
  const Api& a = ready();
  host_bytes += bytes;
  if (bytes > size_)
    throw CudaError("DeviceBuffer::upload: " + std::to_string(bytes) + " bytes do not fit in a " +
                    std::to_string(size_) + "-byte device buffer");
  if (bytes == 0) return;
  check(a.cuMemcpyHtoD_v2(ptr_, host, bytes), "cuMemcpyHtoD_v2", std::to_string(bytes) + " bytes");
}

void DeviceBuffer::download(void* host, size_t bytes) const {
  const Api& a = ready();
  host_bytes += bytes;
  if (bytes > size_)
    throw CudaError("DeviceBuffer::download: " + std::to_string(bytes) + " bytes requested from a " +
                    std::to_string(size_) + "-byte device buffer");
  if (bytes == 0) return;
  check(a.cuMemcpyDtoH_v2(host, ptr_, bytes), "cuMemcpyDtoH_v2", std::to_string(bytes) + " bytes",
        kFaultHint);
}

void DeviceBuffer::fill_u8(uint8_t v) {
  const Api& a = ready();
  if (size_ == 0) return;
  check(a.cuMemsetD8_v2(ptr_, v, size_), "cuMemsetD8_v2", std::to_string(size_) + " bytes");
}

void DeviceBuffer::fill_u16(uint16_t v) {
  const Api& a = ready();
  check_fill_width(size_, 2, "fill_u16");
  if (size_ == 0) return;
  check(a.cuMemsetD16_v2(ptr_, v, size_ / 2), "cuMemsetD16_v2", std::to_string(size_) + " bytes");
}

void DeviceBuffer::fill_u32(uint32_t v) {
  const Api& a = ready();
  check_fill_width(size_, 4, "fill_u32");
  if (size_ == 0) return;
  check(a.cuMemsetD32_v2(ptr_, v, size_ / 4), "cuMemsetD32_v2", std::to_string(size_) + " bytes");
}

// ---- Stream ----

// CU_STREAM_DEFAULT so work here stays ordered after the legacy-stream memsets and copies above.
Stream::Stream() { check(ready().cuStreamCreate(&s_, CU_STREAM_DEFAULT), "cuStreamCreate", ""); }

Stream::~Stream() {
  if (!s_) return;
  if (const Api* a = ready_quietly()) a->cuStreamDestroy_v2(s_);
}

Stream::Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}

Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    Stream old(std::move(*this));
    s_ = std::exchange(o.s_, nullptr);
  }
  return *this;
}

void Stream::synchronize() { check(ready().cuStreamSynchronize(s_), "cuStreamSynchronize", "", kFaultHint); }

// ---- Event ----

Event::Event() { check(ready().cuEventCreate(&e_, CU_EVENT_DEFAULT), "cuEventCreate", ""); }

Event::~Event() {
  if (!e_) return;
  if (const Api* a = ready_quietly()) a->cuEventDestroy_v2(e_);
}

Event::Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    Event old(std::move(*this));
    e_ = std::exchange(o.e_, nullptr);
  }
  return *this;
}

void Event::record(CUstream s) { check(ready().cuEventRecord(e_, s), "cuEventRecord", ""); }

void Event::synchronize() { check(ready().cuEventSynchronize(e_), "cuEventSynchronize", "", kFaultHint); }

float Event::elapsed_ms(const Event& a, const Event& b) {
  float ms = 0.0f;
  check(ready().cuEventElapsedTime_v2(&ms, a.e_, b.e_), "cuEventElapsedTime_v2", "");
  return ms;
}

// ---- Module ----

Module Module::load_ptx(const std::string& ptx, const std::string& what) {
  const Api& a = ready();
  std::vector<char> err_log(64 * 1024, '\0'), info_log(64 * 1024, '\0');
  CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_INFO_LOG_BUFFER,
                         CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_LOG_VERBOSE};
  void* vals[] = {err_log.data(), reinterpret_cast<void*>(static_cast<uintptr_t>(err_log.size())),
                  info_log.data(), reinterpret_cast<void*>(static_cast<uintptr_t>(info_log.size())),
                  reinterpret_cast<void*>(static_cast<uintptr_t>(1))};
  CUmodule m = nullptr;
  CUresult r = a.cuModuleLoadDataEx(&m, ptx.c_str(), sizeof(opts) / sizeof(opts[0]), opts, vals);
  if (r != CUDA_SUCCESS) {
    std::string msg = "cuModuleLoadDataEx(" + what + "): " + result_text(a, r);
    auto text = [](const std::vector<char>& buf) {
      return std::string(buf.data(), strnlen(buf.data(), buf.size()));
    };
    std::string err = text(err_log), info = text(info_log);
    if (!err.empty()) msg += "\nJIT error log:\n" + err;
    if (!info.empty()) msg += "\nJIT info log:\n" + info;
    throw CudaError(msg);
  }
  return Module(m, what);
}

Module::~Module() {
  if (!m_) return;
  if (const Api* a = ready_quietly()) a->cuModuleUnload(m_);
}

Module::Module(Module&& o) noexcept : m_(std::exchange(o.m_, nullptr)), what_(std::move(o.what_)) {}

Module& Module::operator=(Module&& o) noexcept {
  if (this != &o) {
    Module old(std::move(*this));
    m_ = std::exchange(o.m_, nullptr);
    what_ = std::move(o.what_);
  }
  return *this;
}

CUfunction Module::function(const std::string& name) const {
  CUfunction f = nullptr;
  check(ready().cuModuleGetFunction(&f, m_, name.c_str()), "cuModuleGetFunction", what_ + ": " + name);
  return f;
}

int Module::num_registers(CUfunction f) const {
  int v = 0;
  check(ready().cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, f), "cuFuncGetAttribute",
        what_ + ": NUM_REGS");
  return v;
}

int Module::local_bytes(CUfunction f) const {
  int v = 0;
  check(ready().cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f), "cuFuncGetAttribute",
        what_ + ": LOCAL_SIZE_BYTES");
  return v;
}

// ---- launches and copies ----

namespace {

std::string launch_shape(Dim3 grid, Dim3 block, unsigned cluster, unsigned shared_bytes) {
  auto d3 = [](Dim3 d) {
    return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
  };
  std::string s = "; grid " + d3(grid) + " block " + d3(block);
  if (cluster > 1) s += " cluster (" + std::to_string(cluster) + ",1,1)";
  return s + " dynamic shared " + std::to_string(shared_bytes) + " bytes";
}

// A cuLaunchKernelEx configuration: clusters of `cluster` blocks along x (1: none), cooperative or not.
struct LaunchConfig {
  CUlaunchAttribute attrs[2]{};
  CUlaunchConfig config{};

  LaunchConfig(Dim3 grid, Dim3 block, unsigned cluster, unsigned shared_bytes, CUstream stream,
               bool cooperative = false) {
    unsigned n = 0;
    if (cluster > 1) {
      attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      attrs[n].value.clusterDim.x = cluster;
      attrs[n].value.clusterDim.y = 1;
      attrs[n].value.clusterDim.z = 1;
      ++n;
    }
    if (cooperative) {
      attrs[n].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
      attrs[n].value.cooperative = 1;
      ++n;
    }
    config.gridDimX = grid.x, config.gridDimY = grid.y, config.gridDimZ = grid.z;
    config.blockDimX = block.x, config.blockDimY = block.y, config.blockDimZ = block.z;
    config.sharedMemBytes = shared_bytes;
    config.hStream = stream;
    config.attrs = attrs;
    config.numAttrs = n;
  }
};

}  // namespace

void launch(CUfunction f, Dim3 grid, Dim3 block, unsigned shared_bytes, CUstream stream, void** args,
            const std::string& what, unsigned cluster, bool cooperative) {
  const Api& a = ready();
  CUresult r;
  const bool ex = cluster > 1 || cooperative;
  if (ex) {
    LaunchConfig l(grid, block, cluster, shared_bytes, stream, cooperative);
    r = a.cuLaunchKernelEx(&l.config, f, args, nullptr);
  } else {
    r = a.cuLaunchKernel(f, grid.x, grid.y, grid.z, block.x, block.y, block.z, shared_bytes, stream, args,
                         nullptr);
  }
  if (r != CUDA_SUCCESS)
    fail(ex ? "cuLaunchKernelEx" : "cuLaunchKernel", what, r,
         launch_shape(grid, block, cluster, shared_bytes).c_str());
}

int prepare_launch(CUfunction f, Dim3 block, unsigned cluster, unsigned shared_bytes,
                   const std::string& what) {
  const Api& a = ready();
  // Set once here rather than before every launch: dynamic shared memory beyond the 48 KiB
  // default (which static shared memory counts against too, so any dynamic amount opts in),
  // and clusters above the 8 blocks every sm_90 part supports, need per-function opt-ins.
  if (shared_bytes > 0)
    check(a.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                               static_cast<int>(shared_bytes)),
          "cuFuncSetAttribute", what + ": MAX_DYNAMIC_SHARED_SIZE_BYTES=" + std::to_string(shared_bytes));
  if (cluster > 8)
    check(a.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
          "cuFuncSetAttribute", what + ": NON_PORTABLE_CLUSTER_SIZE_ALLOWED");
  int n = 0;
  if (cluster > 1) {
    LaunchConfig l({cluster, 1, 1}, block, cluster, shared_bytes, nullptr);
    check(a.cuOccupancyMaxActiveClusters(&n, f, &l.config), "cuOccupancyMaxActiveClusters",
          what + launch_shape({cluster, 1, 1}, block, cluster, shared_bytes));
  } else {
    check(a.cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, static_cast<int>(block.x * block.y * block.z),
                                                        shared_bytes),
          "cuOccupancyMaxActiveBlocksPerMultiprocessor",
          what + launch_shape({1, 1, 1}, block, 1, shared_bytes));
    n *= Context::get().info().sm_count;
  }
  return n;
}

void fill_async(CUdeviceptr dst, size_t bytes, unsigned width, uint32_t pattern, CUstream stream) {
  const Api& a = ready();
  if (bytes == 0) return;
  if (width == 0 || bytes % width != 0)
    throw CudaError("fill_async: " + std::to_string(bytes) + " bytes are not whole " + std::to_string(width) +
                    "-byte elements");
  const std::string what = std::to_string(bytes) + " bytes";
  if (width == 1)
    check(a.cuMemsetD8Async(dst, static_cast<uint8_t>(pattern), bytes, stream), "cuMemsetD8Async", what);
  else if (width == 2)
    check(a.cuMemsetD16Async(dst, static_cast<uint16_t>(pattern), bytes / 2, stream), "cuMemsetD16Async", what);
  else
    check(a.cuMemsetD32Async(dst, pattern, bytes / 4, stream), "cuMemsetD32Async", what);
}

void synchronize(CUstream stream) {
  check(ready().cuStreamSynchronize(stream), "cuStreamSynchronize", "", kFaultHint);
}

CUtensorMap tensor_map(CUdeviceptr base, DType dtype, const uint64_t dims[3], const uint64_t strides[2],
                       const unsigned box[3], const std::string& what) {
  const Api& a = ready();
  CUtensorMap map;
  const cuuint64_t global_dims[3] = {dims[0], dims[1], dims[2]};
  const cuuint64_t global_strides[2] = {strides[0], strides[1]};
  const cuuint32_t box_dims[3] = {box[0], box[1], box[2]};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUtensorMapDataType type = dtype == DType::BF16  ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                   : dtype == DType::F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                         : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  check(a.cuTensorMapEncodeTiled(&map, type, 3,
                                 reinterpret_cast<void*>(base), global_dims, global_strides, box_dims,
                                 element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        "cuTensorMapEncodeTiled",
        fmt::format("{} (dims {}×{}×{}, strides {} {} bytes, box {}×{}×{}, at {:#x})", what, dims[0], dims[1], dims[2],
                    strides[0], strides[1], box[0], box[1], box[2], base));
  return map;
}

void copy_device_to_device(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  const Api& a = ready();
  if (bytes == 0) return;
  check(a.cuMemcpyDtoDAsync_v2(dst, src, bytes, stream), "cuMemcpyDtoDAsync_v2",
        std::to_string(bytes) + " bytes");
}

}  // namespace tilefuse::cuda

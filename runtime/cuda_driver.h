#pragma once
// Thin, fully-checked CUDA Driver API wrapper. libcuda.so.1 is opened with dlopen at run
// time, so binaries build and run without a GPU and report "no GPU present" when used.
// Every failure throws tilefuse::CudaError naming the call, the CUDA error and the subject.
#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "compiler/graph/dtype.h"

namespace tilefuse::cuda {

// True when libcuda.so.1 loads, cuInit succeeds and at least one device exists.
// Otherwise `why` (if given) gets a plain sentence saying what is missing.
bool available(std::string* why = nullptr);

struct DeviceInfo {
  std::string name;
  int sm_count = 0;
  int cc_major = 0;
  int cc_minor = 0;
  int driver_version = 0;  // e.g. 13000 for CUDA 13.0
  size_t total_mem = 0;
  int l2_bytes = 0;
  int max_shared_per_block_optin = 0;
};

// Process-wide primary context on device 0, made current on each calling thread's first use.
// Throws CudaError("no GPU present: ...") when unavailable.
class Context {
 public:
  static Context& get();
  const DeviceInfo& info() const { return info_; }
  // Waits for all work; asynchronous kernel faults surface here.
  void synchronize();

  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

 private:
  Context();
  void make_current();
  CUcontext ctx_ = nullptr;
  DeviceInfo info_;
};

// Device memory, RAII and move-only. A zero-byte buffer holds no allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr ptr() const { return ptr_; }
  size_t size() const { return size_; }

  // Both throw CudaError when bytes > size().
  void upload(const void* host, size_t bytes);
  void download(void* host, size_t bytes) const;

  // Fill the whole buffer (used to poison outputs); size() must be a multiple of the width.
  void fill_u8(uint8_t v);
  void fill_u16(uint16_t v);
  void fill_u32(uint32_t v);

 private:
  CUdeviceptr ptr_ = 0;
  size_t size_ = 0;
};

class Stream {
 public:
  Stream();
  ~Stream();
  Stream(Stream&& o) noexcept;
  Stream& operator=(Stream&& o) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  CUstream get() const { return s_; }
  // Asynchronous kernel faults on this stream surface here.
  void synchronize();

 private:
  CUstream s_ = nullptr;
};

class Event {
 public:
  Event();
  ~Event();
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(CUstream s);
  void synchronize();
  // Milliseconds from a to b; both must have been recorded and completed.
  static float elapsed_ms(const Event& a, const Event& b);

 private:
  CUevent e_ = nullptr;
};

// A loaded module, move-only; unloaded in the destructor.
class Module {
 public:
  // `what` names the kernel/module in messages. On failure the JIT log is in the message.
  static Module load_ptx(const std::string& ptx, const std::string& what);
  ~Module();
  Module(Module&& o) noexcept;
  Module& operator=(Module&& o) noexcept;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  CUfunction function(const std::string& name) const;
  int num_registers(CUfunction f) const;
  int local_bytes(CUfunction f) const;

 private:
  Module(CUmodule m, std::string what) : m_(m), what_(std::move(what)) {}
  CUmodule m_ = nullptr;
  std::string what_;
};

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// Checks the launch itself; faults inside the kernel surface at the next synchronize. With
// cluster > 1, each `cluster` consecutive blocks along x form a thread-block cluster (sm_90).
// A cooperative launch runs all its blocks at once or fails (blocks that wait for each other).
// Call prepare_launch once per function first.
void launch(CUfunction f, Dim3 grid, Dim3 block, unsigned shared_bytes, CUstream stream, void** args,
            const std::string& what, unsigned cluster = 1, bool cooperative = false);

// Readies `f` for launches of `block` with `shared_bytes` of dynamic shared memory (opting into
// it, since static shared memory counts against the 48 KiB default) in clusters of `cluster` blocks (opting
// into sizes over 8), and returns how many blocks — with cluster > 1, clusters — the device holds at once; 0
// when even one cannot be placed (too many registers, too much shared memory, or too many blocks for a GPC).
int prepare_launch(CUfunction f, Dim3 block, unsigned cluster, unsigned shared_bytes,
                   const std::string& what);

// A 3-D tiled TMA tensor map of bf16, f16 or f32 elements at `base` (dims innermost first,
// strides in bytes for dims 1 and 2), boxes of `box` elements, 128-byte swizzle, zeros out of
// bounds (loads; stores skip what lies out of bounds).
CUtensorMap tensor_map(CUdeviceptr base, DType dtype, const uint64_t dims[3], const uint64_t strides[2],
                       const unsigned box[3], const std::string& what);

void copy_device_to_device(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream);
// `bytes` of `width`-byte elements (1, 2 or 4) set to `pattern`, on `stream`.
void fill_async(CUdeviceptr dst, size_t bytes, unsigned width, uint32_t pattern, CUstream stream);
// Waits for `stream`; its asynchronous kernel faults surface here.
void synchronize(CUstream stream);
// Bytes DeviceBuffer::upload and download have moved between host and device in this process.
uint64_t host_transfer_bytes();

}  // namespace tilefuse::cuda

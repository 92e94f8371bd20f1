#include "runtime/dlpack.h"

#include <fmt/format.h>

#include <vector>

#include "compiler/support/error.h"

namespace tilefuse {

namespace {

DType dtype_of(const DLDataType& d) {
  if (d.lanes != 1) throw InputError(fmt::format("from_dlpack: {} lanes per element; tilefuse takes 1", d.lanes));
  if (d.code == kDLFloat && d.bits == 32) return DType::F32;
  if (d.code == kDLFloat && d.bits == 16) return DType::F16;
  if (d.code == kDLBfloat && d.bits == 16) return DType::BF16;
  if ((d.code == kDLUInt || d.code == kDLInt) && d.bits == 8) return DType::Bool;
  throw InputError(fmt::format("from_dlpack: elements of type code {} with {} bits; tilefuse takes f32, f16, bf16 "
                               "and 8-bit bool",
                               static_cast<int>(d.code), static_cast<int>(d.bits)));
}

DLDataType dl_type_of(DType t) {
  switch (t) {
    case DType::F32:
      return {kDLFloat, 32, 1};
    case DType::F16:
      return {kDLFloat, 16, 1};
    case DType::BF16:
      return {kDLBfloat, 16, 1};
    case DType::Bool:
      return {kDLUInt, 8, 1};
  }
  return {kDLFloat, 32, 1};
}

// The view's shape lives with it and goes with its deleter.
struct View {
  DLManagedTensor managed{};
  std::vector<int64_t> shape;
};

}  // namespace

DeviceTensor from_dlpack(const DLTensor& t) {
  if (t.device.device_type != kDLCUDA && t.device.device_type != kDLCUDAManaged)
    throw InputError(fmt::format("from_dlpack: the tensor is in memory of device type {}; tilefuse runs on CUDA memory",
                                 static_cast<int>(t.device.device_type)));
  if (t.ndim < 0 || (t.ndim > 0 && !t.shape)) throw InputError("from_dlpack: the tensor has no shape");
  DeviceTensor d;
  d.dtype = dtype_of(t.dtype);
  d.shape.assign(t.shape, t.shape + t.ndim);
  if (t.strides) {  // only the compact row-major strides
    int64_t stride = 1;
    for (int i = t.ndim - 1; i >= 0; --i) {
      if (t.shape[i] != 1 && t.strides[i] != stride)
        throw InputError(fmt::format("from_dlpack: the tensor {} is not dense row-major (stride {} along axis {}, "
                                     "{} expected): make it contiguous first",
                                     shape_str(d.shape), t.strides[i], i, stride));
      stride *= t.shape[i];
    }
  }
  d.ptr = reinterpret_cast<uint64_t>(t.data) + t.byte_offset;
  return d;
}

DLManagedTensor* to_dlpack(const DeviceTensor& t, int device) {
  auto* v = new View;
  v->shape = t.shape;
  DLTensor& dl = v->managed.dl_tensor;
  dl.data = reinterpret_cast<void*>(t.ptr);
  dl.device = {kDLCUDA, device};
  dl.ndim = static_cast<int>(t.shape.size());
  dl.dtype = dl_type_of(t.dtype);
  dl.shape = v->shape.data();
  dl.strides = nullptr;
  dl.byte_offset = 0;
  v->managed.manager_ctx = v;
  v->managed.deleter = [](DLManagedTensor* self) { delete static_cast<View*>(self->manager_ctx); };
  return &v->managed;
}

}  // namespace tilefuse

#pragma once
// DLPack views of device tensors, so that a framework's GPU tensors (torch.utils.dlpack, CuPy,
// JAX) run through Executable::run_on_device without a copy. Needs <dlpack/dlpack.h> (Debian
// libdlpack-dev); tilefuse/tilefuse.h does not include this header.
#include <dlpack/dlpack.h>

#include "runtime/executable.h"

namespace tilefuse {

// The tensor `t` describes, as a DeviceTensor (no copy): it must be in CUDA or CUDA-managed
// memory, dense in row-major order (no strides, or the compact ones), with one lane of f32,
// f16, bf16 or 8-bit bool/uint8 elements. Throws InputError naming what does not hold.
DeviceTensor from_dlpack(const DLTensor& t);

// A DLPack view of `t` on CUDA device `device`; its deleter frees the view, never the memory
// (which stays its owner's).
DLManagedTensor* to_dlpack(const DeviceTensor& t, int device = 0);

}  // namespace tilefuse

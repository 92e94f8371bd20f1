#pragma once
#include <string>

namespace tilefuse {

// What codegen emits for. sm_90 by default; sm_80 and sm_90a selectable.
struct CodegenOptions {
  std::string sm = "sm_90";
  std::string ptx_features = "+ptx80";
  // false: compile through LLVM even where the disk cache has the kernel (which it then replaces),
  // as `tilefuse cache time` does for its cold compiles. Not part of any cache key.
  bool read_disk_cache = true;
};

// Throws TargetError for anything but sm_80, sm_90, sm_90a.
CodegenOptions codegen_options_for(const std::string& sm);

}  // namespace tilefuse

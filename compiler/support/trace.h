#pragma once
// Named ranges for profilers: each is an NVTX range in the "tilefuse" domain (Nsight Systems
// shows the compiles and the kernel launches by their plan names). With no tool attached an NVTX
// call only checks that none is, so ranges stay in release builds.
#include <string>

namespace tilefuse {

class TraceRange {
 public:
  explicit TraceRange(const std::string& name);
  ~TraceRange();
  TraceRange(const TraceRange&) = delete;
  TraceRange& operator=(const TraceRange&) = delete;
};

}  // namespace tilefuse

#include "compiler/support/trace.h"

#include <nvtx3/nvToolsExt.h>

namespace tilefuse {

namespace {
nvtxDomainHandle_t domain() {
  static nvtxDomainHandle_t d = nvtxDomainCreateA("tilefuse");
  return d;
}
}  // namespace

TraceRange::TraceRange(const std::string& name) {
  nvtxEventAttributes_t a = {};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name.c_str();
  nvtxDomainRangePushEx(domain(), &a);
}

TraceRange::~TraceRange() { nvtxDomainRangePop(domain()); }

}  // namespace tilefuse

// An NVTX injection library for tests/nvtx_test.sh: loaded through NVTX_INJECTION64_PATH, it
// appends every range pushed in a domain to the file TILEFUSE_NVTX_LOG ("domain: message").
#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

namespace {

std::mutex mu;
std::map<nvtxDomainHandle_t, std::string> names;
int next_domain = 1;

nvtxDomainHandle_t create_domain(const char* name) {
  std::lock_guard<std::mutex> lock(mu);
  auto h = reinterpret_cast<nvtxDomainHandle_t>(static_cast<uintptr_t>(next_domain++));
  names[h] = name;
  return h;
}

int push(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  std::lock_guard<std::mutex> lock(mu);
  if (const char* path = std::getenv("TILEFUSE_NVTX_LOG"))
    if (FILE* f = std::fopen(path, "a")) {
      std::fprintf(f, "%s: %s\n", names[d].c_str(), a->messageType == NVTX_MESSAGE_TYPE_ASCII ? a->message.ascii : "?");
      std::fclose(f);
    }
  return 0;
}

int pop(nvtxDomainHandle_t) { return 0; }

}  // namespace

extern "C" int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (!callbacks || !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size)) return 0;
  *table[NVTX_CBID_CORE2_DomainCreateA] = reinterpret_cast<NvtxFunctionPointer>(&create_domain);
  *table[NVTX_CBID_CORE2_DomainRangePushEx] = reinterpret_cast<NvtxFunctionPointer>(&push);
  *table[NVTX_CBID_CORE2_DomainRangePop] = reinterpret_cast<NvtxFunctionPointer>(&pop);
  return 1;
}

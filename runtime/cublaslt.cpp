#include "runtime/cublaslt.h"

#include <cublasLt.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "compiler/support/error.h"
#include "runtime/cuda_driver.h"

namespace tilefuse::cublaslt {

namespace {

// The entry points used, resolved once.
struct Api {
  std::string why;  // empty when loaded
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtGetStatusName) status_name = nullptr;
  decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&cublasLtMatrixLayoutSetAttribute) layout_set = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
  cublasLtHandle_t handle = nullptr;
};

template <typename F>
bool resolve(void* lib, const char* name, F* out, std::string* why) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  if (!*out) *why = fmt::format("libcublasLt.so.13 has no {}", name);
  return *out != nullptr;
}

const Api& api() {
  static const Api a = [] {
    Api r;
    std::string gpu;
    if (!cuda::available(&gpu)) {
      r.why = gpu;
      return r;
    }
    // TILEFUSE_CUBLASLT names the library; else the loader's search path, then the toolkit's.
    std::vector<std::string> tried;
    if (const char* env = std::getenv("TILEFUSE_CUBLASLT")) tried.push_back(env);
    for (const char* c : {"libcublasLt.so.13", "/usr/local/cuda/lib64/libcublasLt.so.13", "/usr/local/cuda/lib/libcublasLt.so.13"})
      tried.push_back(c);
    void* lib = nullptr;
    std::string first_error;
    for (const std::string& path : tried) {
      lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib) break;
      const char* e = dlerror();
      if (first_error.empty()) first_error = e ? e : "dlopen failed";
    }
    if (!lib) {
      r.why = fmt::format("cuBLASLt not found: tried {} ({}); set TILEFUSE_CUBLASLT to the library's path",
                          fmt::join(tried, ", "), first_error);
      return r;
    }
    if (!resolve(lib, "cublasLtCreate", &r.create, &r.why) ||
        !resolve(lib, "cublasLtGetStatusName", &r.status_name, &r.why) ||
        !resolve(lib, "cublasLtMatmulDescCreate", &r.desc_create, &r.why) ||
        !resolve(lib, "cublasLtMatmulDescDestroy", &r.desc_destroy, &r.why) ||
        !resolve(lib, "cublasLtMatmulDescSetAttribute", &r.desc_set, &r.why) ||
        !resolve(lib, "cublasLtMatrixLayoutCreate", &r.layout_create, &r.why) ||
        !resolve(lib, "cublasLtMatrixLayoutDestroy", &r.layout_destroy, &r.why) ||
        !resolve(lib, "cublasLtMatrixLayoutSetAttribute", &r.layout_set, &r.why) ||
        !resolve(lib, "cublasLtMatmulPreferenceCreate", &r.pref_create, &r.why) ||
        !resolve(lib, "cublasLtMatmulPreferenceDestroy", &r.pref_destroy, &r.why) ||
        !resolve(lib, "cublasLtMatmulPreferenceSetAttribute", &r.pref_set, &r.why) ||
        !resolve(lib, "cublasLtMatmulAlgoGetHeuristic", &r.heuristic, &r.why) ||
        !resolve(lib, "cublasLtMatmul", &r.matmul, &r.why))
      return r;
    cuda::Context::get();  // cuBLASLt runs in the primary context the runtime made current
    if (cublasStatus_t s = r.create(&r.handle); s != CUBLAS_STATUS_SUCCESS)
      r.why = fmt::format("cublasLtCreate failed: {}", r.status_name(s));
    return r;
  }();
  return a;
}

void check(cublasStatus_t s, const char* call) {
  if (s != CUBLAS_STATUS_SUCCESS) throw CudaError(fmt::format("{} failed: {}", call, api().status_name(s)));
}

template <typename T>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v, const char* what) {
  check(api().desc_set(d, attr, &v, sizeof v), what);
}
template <typename T>
void set_layout(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr, const T& v) {
  check(api().layout_set(l, attr, &v, sizeof v), "cublasLtMatrixLayoutSetAttribute");
}

// A column-major rows × cols matrix of `batch` (stride apart; 0: one shared).
struct Layout {
  cublasLtMatrixLayout_t l = nullptr;
  Layout(cudaDataType t, int64_t rows, int64_t cols, int64_t batch, int64_t stride) {
    check(api().layout_create(&l, t, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), rows),
          "cublasLtMatrixLayoutCreate");
    if (batch > 1) {
      set_layout(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, static_cast<int32_t>(batch));
      set_layout(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride);
    }
  }
  ~Layout() { api().layout_destroy(l); }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
};

// A workspace per stream, kept for the process: GEMMs on one stream run one after another, so
// they may share one; GEMMs on two streams may overlap and must not.
cuda::DeviceBuffer* workspace_for(CUstream stream) {
  static std::mutex mu;
  static auto* spaces = new std::map<CUstream, cuda::DeviceBuffer>();  // outlives every caller
  std::lock_guard<std::mutex> lock(mu);
  auto it = spaces->find(stream);
  if (it == spaces->end()) it = spaces->emplace(stream, cuda::DeviceBuffer(size_t{32} << 20)).first;
  return &it->second;
}

}  // namespace

bool available(std::string* why) {
  const Api& a = api();
  if (why) *why = a.why;
  return a.why.empty();
}

void run(const Gemm& g, CUdeviceptr a, CUdeviceptr b, CUdeviceptr bias, CUdeviceptr c, CUstream stream) {
  std::string why;
  if (!available(&why)) throw CudaError(why);
  if (g.dtype != DType::BF16 && g.dtype != DType::F16)
    throw Error(fmt::format("cuBLASLt GEMM of {}: tilefuse asks it for bf16 or f16 operands", dtype_name(g.dtype)));
  if (g.batch < 1 || g.m < 1 || g.n < 1 || g.k < 1 || g.batch > INT32_MAX)
    throw Error(fmt::format("cuBLASLt GEMM of [{}, {}, {}] × {} batches: every extent must be positive", g.m,
                            g.n, g.k, g.batch));
  if (g.epilogue != LibraryEpilogue::None && bias == 0) throw Error("cuBLASLt GEMM: its bias epilogue needs a bias");
  const cudaDataType t = g.dtype == DType::BF16 ? CUDA_R_16BF : CUDA_R_16F;
  // Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: cuBLASLt's first operand is B's buffer
  // ([n, k] column-major, or [k, n] read transposed), its second A's, its result C's as [n, m].
  cublasLtMatmulDesc_t desc = nullptr;
  check(api().desc_create(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  struct DescGuard {
    cublasLtMatmulDesc_t d;
    ~DescGuard() { api().desc_destroy(d); }
  } desc_guard{desc};
  const cublasOperation_t op_b = g.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = g.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSA, op_b, "cublasLtMatmulDescSetAttribute(TRANSA)");
  set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSB, op_a, "cublasLtMatmulDescSetAttribute(TRANSB)");
  if (g.epilogue != LibraryEpilogue::None) {
    const cublasLtEpilogue_t e = g.epilogue == LibraryEpilogue::Bias       ? CUBLASLT_EPILOGUE_BIAS
                                 : g.epilogue == LibraryEpilogue::BiasRelu ? CUBLASLT_EPILOGUE_RELU_BIAS
                                                                           : CUBLASLT_EPILOGUE_GELU_BIAS;
    set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, e, "cublasLtMatmulDescSetAttribute(EPILOGUE)");
    const void* p = reinterpret_cast<const void*>(bias);
    set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p, "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
    set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, t, "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)");
  }
  const int64_t b_rows = g.transpose_b ? g.k : g.n, b_cols = g.transpose_b ? g.n : g.k;
  const int64_t a_rows = g.transpose_a ? g.m : g.k, a_cols = g.transpose_a ? g.k : g.m;
  Layout lb(t, b_rows, b_cols, g.batch, g.shared_b ? 0 : g.n * g.k);
  Layout la(t, a_rows, a_cols, g.batch, g.shared_a ? 0 : g.m * g.k);
  Layout lc(t, g.n, g.m, g.batch, g.m * g.n);

  cuda::DeviceBuffer* workspace = workspace_for(stream);
  cublasLtMatmulPreference_t pref = nullptr;
  check(api().pref_create(&pref), "cublasLtMatmulPreferenceCreate");
  struct PrefGuard {
    cublasLtMatmulPreference_t p;
    ~PrefGuard() { api().pref_destroy(p); }
  } pref_guard{pref};
  const uint64_t ws = workspace->size();
  check(api().pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
        "cublasLtMatmulPreferenceSetAttribute");
  cublasLtMatmulHeuristicResult_t best{};
  int found = 0;
  check(api().heuristic(api().handle, desc, lb.l, la.l, lc.l, lc.l, pref, 1, &best, &found),
        "cublasLtMatmulAlgoGetHeuristic");
  if (found == 0)
    throw CudaError(fmt::format("cuBLASLt offers no algorithm for [{}, {}] × [{}, {}] × {} batches", g.m, g.k,
                                g.k, g.n, g.batch));
  const float one = 1.0f, zero = 0.0f;
  check(api().matmul(api().handle, desc, &one, reinterpret_cast<const void*>(b), lb.l, reinterpret_cast<const void*>(a),
                     la.l, &zero, reinterpret_cast<const void*>(c), lc.l, reinterpret_cast<void*>(c), lc.l, &best.algo,
                     reinterpret_cast<void*>(workspace->ptr()), ws, reinterpret_cast<cudaStream_t>(stream)),
        "cublasLtMatmul");
}

}  // namespace tilefuse::cublaslt

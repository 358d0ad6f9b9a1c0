// cuBLASLt, loaded on first use. libcublasLt is over 500 MB; linking it normally maps and
// relocates it in every process, which alone added about 200 MB of resident memory to CPU-only
// runs of a CUDA build. These definitions of the cuBLASLt functions hpcnet calls forward to the
// library opened with dlopen() when linear layers first run on a GPU. Without the library each
// returns CUBLAS_STATUS_NOT_INITIALIZED, which HPCNET_CUBLAS reports with the call and place.
#include <cublasLt.h>
#include <dlfcn.h>

namespace {

void* cublaslt_library() {
  static void* lib = [] {
    void* h = dlopen("libcublasLt.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libcublasLt.so", RTLD_NOW | RTLD_LOCAL);
    return h;
  }();
  return lib;
}

template <class Fn>
Fn lt_symbol(const char* name) {
  void* lib = cublaslt_library();
  return lib ? reinterpret_cast<Fn>(dlsym(lib, name)) : nullptr;
}

}  // namespace

// Each shim resolves its symbol once; NAME is the function, ARGS its parameter names.
#define HPCNET_LT_FORWARD(NAME, FALLBACK, ...)                            \
  static const auto fn = lt_symbol<decltype(&NAME)>(#NAME);               \
  return fn ? fn(__VA_ARGS__) : FALLBACK

extern "C" {

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* handle) {
  HPCNET_LT_FORWARD(cublasLtCreate, CUBLAS_STATUS_NOT_INITIALIZED, handle);
}

const char* CUBLASWINAPI cublasLtGetStatusName(cublasStatus_t status) {
  HPCNET_LT_FORWARD(cublasLtGetStatusName, "CUBLAS_STATUS_NOT_INITIALIZED (libcublasLt not found)",
                    status);
}

const char* CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status) {
  HPCNET_LT_FORWARD(cublasLtGetStatusString, "libcublasLt.so could not be loaded", status);
}

size_t CUBLASWINAPI cublasLtGetVersion(void) { HPCNET_LT_FORWARD(cublasLtGetVersion, 0); }

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                           const void* alpha, const void* A,
                                           cublasLtMatrixLayout_t Adesc, const void* B,
                                           cublasLtMatrixLayout_t Bdesc, const void* beta,
                                           const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                                           cublasLtMatrixLayout_t Ddesc,
                                           const cublasLtMatmulAlgo_t* algo, void* workspace,
                                           size_t workspace_bytes, cudaStream_t stream) {
  HPCNET_LT_FORWARD(cublasLtMatmul, CUBLAS_STATUS_NOT_INITIALIZED, handle, desc, alpha, A, Adesc,
                    B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace, workspace_bytes, stream);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t results[],
    int* returned) {
  HPCNET_LT_FORWARD(cublasLtMatmulAlgoGetHeuristic, CUBLAS_STATUS_NOT_INITIALIZED, handle, desc,
                    Adesc, Bdesc, Cdesc, Ddesc, pref, requested, results, returned);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc,
                                                     cublasComputeType_t compute,
                                                     cudaDataType_t scale) {
  HPCNET_LT_FORWARD(cublasLtMatmulDescCreate, CUBLAS_STATUS_NOT_INITIALIZED, desc, compute, scale);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  HPCNET_LT_FORWARD(cublasLtMatmulDescDestroy, CUBLAS_STATUS_NOT_INITIALIZED, desc);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                           cublasLtMatmulDescAttributes_t attr,
                                                           const void* buf, size_t bytes) {
  HPCNET_LT_FORWARD(cublasLtMatmulDescSetAttribute, CUBLAS_STATUS_NOT_INITIALIZED, desc, attr, buf,
                    bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  HPCNET_LT_FORWARD(cublasLtMatmulPreferenceCreate, CUBLAS_STATUS_NOT_INITIALIZED, pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  HPCNET_LT_FORWARD(cublasLtMatmulPreferenceDestroy, CUBLAS_STATUS_NOT_INITIALIZED, pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
    size_t bytes) {
  HPCNET_LT_FORWARD(cublasLtMatmulPreferenceSetAttribute, CUBLAS_STATUS_NOT_INITIALIZED, pref, attr,
                    buf, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout,
                                                       cudaDataType type, uint64_t rows,
                                                       uint64_t cols, int64_t ld) {
  HPCNET_LT_FORWARD(cublasLtMatrixLayoutCreate, CUBLAS_STATUS_NOT_INITIALIZED, layout, type, rows,
                    cols, ld);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  HPCNET_LT_FORWARD(cublasLtMatrixLayoutDestroy, CUBLAS_STATUS_NOT_INITIALIZED, layout);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                             cublasLtMatrixLayoutAttribute_t attr,
                                                             const void* buf, size_t bytes) {
  HPCNET_LT_FORWARD(cublasLtMatrixLayoutSetAttribute, CUBLAS_STATUS_NOT_INITIALIZED, layout, attr,
                    buf, bytes);
}

}  // extern "C"

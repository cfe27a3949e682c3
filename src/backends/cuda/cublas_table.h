/* cuBLAS, loaded at run time through a table of symbols (IREE's way): the
 * plugin has no load-time dependency on it, so a machine whose CUDA
 * libraries differ gets "GEMM on the portable kernel, and why" instead of a
 * plugin that fails to load. The CUDA runtime itself is linked statically
 * (cudart_static), and it loads the driver, libcuda.so.1, at run time and
 * reports its absence as an error code: zero devices and the reason. */
#ifndef TF_CUBLAS_TABLE_H
#define TF_CUBLAS_TABLE_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <stdbool.h>
#include <stddef.h>

/* Every symbol the plugin calls, by its exported name (cublas_v2.h maps
 * cublasCreate to cublasCreate_v2 and so on); types come from the header. */
#define TF_CUBLAS_SYMBOLS(X)                                                                          \
    X(cublasCreate_v2) X(cublasDestroy_v2) X(cublasSetStream_v2) X(cublasGemmStridedBatchedEx)     \
    X(cublasGetStatusName)

/* cuBLASLt, for the GEMMs whose epilogue does more (lt_gemm.c): optional,
 * as GEMM works without it. */
#define TF_CUBLASLT_SYMBOLS(X)                                                                              \
    X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy)         \
    X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)        \
    X(cublasLtMatrixLayoutSetAttribute) X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy) \
    X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)

typedef struct tf_cublas {
    bool loaded;
    char why[300];                      /* when not loaded: the library or symbol missing */
#define TF__CUBLAS_FIELD(name) __typeof__(&name) name;
    TF_CUBLAS_SYMBOLS(TF__CUBLAS_FIELD)
    bool lt_loaded;
    char lt_why[300];                   /* when cuBLASLt is not loaded: why */
    TF_CUBLASLT_SYMBOLS(TF__CUBLAS_FIELD)
#undef TF__CUBLAS_FIELD
} tf_cublas;

/* The plugin loads it once it has opened a device (or at init when
 * TF_CUBLAS_LIB names one). Open `soname` through the loader's search path, else `toolkit_path` (the
 * toolkit the plugin was built against; TF_CUBLAS_LIB overrides both), and
 * resolve every symbol;
 * on failure t->loaded is false and t->why says which library or symbol. The
 * library stays mapped for the life of the process: cuBLAS registers exit
 * handlers and is not built to be unloaded. */
void tf_cublas_load(tf_cublas *t, const char *soname, const char *toolkit_path);

/* Then cuBLASLt the same way (cuBLAS has loaded it already as its own
 * dependency; this finds that copy): t->lt_loaded, or t->lt_why. */
void tf_cublaslt_load(tf_cublas *t, const char *soname, const char *toolkit_path);

/* Whether the NVIDIA driver library (libcuda.so.1, which the CUDA runtime
 * loads itself) can be opened; if not, `why` gets the loader's reason, so
 * "0 devices" can say which library is missing. It stays loaded. */
bool tf_cuda_driver_present(char *why, size_t n);

#endif

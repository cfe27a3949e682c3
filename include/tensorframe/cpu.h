/* Extras of the built-in CPU backend, through
 * tf_backend_proc_address("cpu", name). */
#ifndef TENSORFRAME_CPU_H
#define TENSORFRAME_CPU_H

#include <stdint.h>

/* "tf_cpu_blas_calls": GEMM calls the CPU backend has made through the CBLAS
 * library (OpenBLAS, BLIS) in this process; 0 when built without one. With
 * TF_CPU_KERNELS=reference it stays 0: every op runs the reference loops. */
typedef uint64_t (*tf_cpu_blas_calls_fn)(void);

#endif

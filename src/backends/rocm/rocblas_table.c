/* See rocblas_table.h. */
#include "rocblas_table.h"

#include <string.h>

#include "vendor.h"

void tf_rocblas_load(tf_rocblas *t, const char *chosen) {
    memset(t, 0, sizeof *t);
    static const char *const names[] = {"rocblas_create_handle", "rocblas_destroy_handle", "rocblas_set_stream",
                                        "rocblas_status_to_string", "rocblas_gemm_strided_batched_ex"};
    void **const slots[] = {(void **)&t->rocblas_create_handle, (void **)&t->rocblas_destroy_handle,
                            (void **)&t->rocblas_set_stream, (void **)&t->rocblas_status_to_string,
                            (void **)&t->rocblas_gemm_strided_batched_ex};
    const char *lib;
    t->loaded = tf_gpu_load_symbols(TF_ROCBLAS_SONAME, chosen, NULL, names, slots, sizeof names / sizeof *names, &lib,
                                    t->why, sizeof t->why);
}

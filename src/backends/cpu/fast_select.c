/* Pick the fast-kernel table for this CPU once, by CPUID. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fast_kernels.h"

extern const tf_fast_kernels tf_fast_table_generic;
#if defined(__x86_64__)
extern const tf_fast_kernels tf_fast_table_avx512, tf_fast_table_avx2;
#endif

static const tf_fast_kernels *chosen;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void choose(void) {
    const char *off = getenv("TF_CPU_KERNELS"), *cap = getenv("TF_CPU_ISA");
    if (off && !strcmp(off, "reference")) return;
    chosen = &tf_fast_table_generic;
#if defined(__x86_64__)
    __builtin_cpu_init();
    bool allow512 = !cap || !strcmp(cap, "avx512"), allow2 = allow512 || !strcmp(cap, "avx2");
    if (allow512 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        chosen = &tf_fast_table_avx512;
    else if (allow2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        chosen = &tf_fast_table_avx2;
#endif
}

const tf_fast_kernels *tf_fast(void) {
    pthread_once(&once, choose);
    return chosen;
}

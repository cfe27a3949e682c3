/* Pick the fast-kernel table for this CPU once, by CPUID. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "fast_kernels.h"
#include "tensorframe/backend.h"   /* tf_host: the strict environment readers */

extern const tf_fast_kernels tf_fast_table_generic;
#if defined(__x86_64__)
extern const tf_fast_kernels tf_fast_table_avx512, tf_fast_table_avx2;
#if defined(TF_HAVE_AVX512BF16)
void tf_fast_gemm_rows_bf16_dp(int64_t m, int64_t j0, int64_t j1, int64_t k, const uint16_t *a, int64_t lda,
                               const uint16_t *w, int64_t ldw, float *c, int64_t ldc);
void tf_fast_gemm_bf16_panel(int64_t m, int64_t nc, int64_t pairs, const uint32_t *a, int64_t lda, const uint16_t *panel,
                             float *c, int64_t ldc);
void tf_fast_bf16_pack_panel_rows(const uint16_t *w, int64_t ldw, int64_t nc, int64_t pairs, uint16_t *panel);
#endif
#endif

static tf_fast_kernels table;               /* the ISA's table, plus extensions this CPU has */

static const tf_fast_kernels *chosen;
static pthread_once_t once = PTHREAD_ONCE_INIT;

bool tf_cpu_reference_kernels(void) {
    static const char *const modes[] = {"fast", "reference"};
    return tf_host()->env_choice("TF_CPU_KERNELS", modes, 2) == 1;
}

/* TF_CPU_ISA caps the choice: avx512bf16 (the default: everything the CPU
 * has), avx512, avxvnni (AVX2 and AVX-VNNI, no AVX-512: the quantized
 * products' path for Alder Lake-class CPUs), avx2, generic. */
int tf_cpu_isa_cap(void) {
    static const char *const caps[] = {"avx512bf16", "avx512", "avxvnni", "avx2", "generic"};
    int i = tf_host()->env_choice("TF_CPU_ISA", caps, 5);
    return i < 0 ? TF_CPU_ISA_ALL : i;
}

static void choose(void) {
    if (tf_cpu_reference_kernels()) return;
    table = tf_fast_table_generic;
#if defined(__x86_64__)
    __builtin_cpu_init();
    const int cap = tf_cpu_isa_cap();
    bool allow_bf16 = cap == TF_CPU_ISA_ALL, allow512 = cap <= TF_CPU_ISA_AVX512, allow2 = cap <= TF_CPU_ISA_AVX2;
    bool have512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl");
    if (allow512 && have512) {
        table = tf_fast_table_avx512;
#if defined(TF_HAVE_AVX512BF16)
        if (allow_bf16 && __builtin_cpu_supports("avx512bf16")) {
            table.gemm_rows_bf16_dp = tf_fast_gemm_rows_bf16_dp;
            table.gemm_bf16_panel = tf_fast_gemm_bf16_panel;
            table.bf16_pack_panel_rows = tf_fast_bf16_pack_panel_rows;
            table.name = "avx512+bf16";
        }
#else
        (void)allow_bf16;
#endif
    } else if (allow2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        table = tf_fast_table_avx2;
    }
#endif
    chosen = &table;
}

/* Every kernel asks: after the first answer, one load. */
const tf_fast_kernels *tf_fast(void) {
    static atomic_bool ready;
    if (atomic_load_explicit(&ready, memory_order_acquire)) return chosen;
    pthread_once(&once, choose);
    atomic_store_explicit(&ready, true, memory_order_release);
    return chosen;
}

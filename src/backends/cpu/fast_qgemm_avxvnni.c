/* The integer GEMM built for AVX-VNNI (VEX vpdpbusd, no AVX-512: Intel's
 * Alder Lake and later client cores; flags in CMakeLists.txt). */
#include <immintrin.h>

#define QGEMM_NAME tf_cpu_qgemm_avxvnni_impl
#define QGEMM_PACK_NAME tf_cpu_qgemm_pack_avxvnni_impl
#define QGEMM_PACKED_NAME tf_cpu_qgemm_packed_avxvnni_impl
#define QGEMM_GROUP_BYTES_NAME tf_cpu_qgemm_group_bytes_avxvnni_impl
#define QGEMM_DPBUSD _mm256_dpbusd_avx_epi32
#define QGEMM_PANEL_BYTES 0
#include "fast_qgemm.inc"

/* The integer GEMM built for AVX512-VNNI (flags in CMakeLists.txt). */
#include <immintrin.h>

#define QGEMM_NAME tf_cpu_qgemm_vnni_impl
#define QGEMM_PACK_NAME tf_cpu_qgemm_pack_vnni_impl
#define QGEMM_PACKED_NAME tf_cpu_qgemm_packed_vnni_impl
#define QGEMM_GROUP_BYTES_NAME tf_cpu_qgemm_group_bytes_vnni_impl
#define QGEMM_DPBUSD _mm256_dpbusd_epi32
#define QGEMM_PANEL_BYTES 1
#define QGEMM_ZMM 1
#include "fast_qgemm.inc"

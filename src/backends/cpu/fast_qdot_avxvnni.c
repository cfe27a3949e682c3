/* The quantized dot products built for AVX-VNNI (VEX vpdpbusd on ymm, no
 * AVX-512; flags in CMakeLists.txt): AVX2's kernels with VNNI's int32
 * sums, so codes may use all 8 bits as with AVX512-VNNI. */
#include <immintrin.h>

#define QDOT_NAME tf_cpu_qdot_avxvnni_impl
#define QROUND_NAME tf_cpu_q8_round_avxvnni_impl
static inline __m256i dot_u8s8(__m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s); }
static inline __m256i dot_acc(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
#define QDOT_FULL_BYTES 1
#define QDOT_AVX512 0
#include "fast_qdot.inc"

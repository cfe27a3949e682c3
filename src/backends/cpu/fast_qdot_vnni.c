/* The quantized dot products built for AVX512-VNNI (flags in CMakeLists.txt). */
#include <immintrin.h>

#define QDOT_NAME tf_cpu_qdot_vnni_impl
#define QROUND_NAME tf_cpu_q8_round_vnni_impl
static inline __m256i dot_u8s8(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
static inline __m256i dot_acc(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
#define QDOT_FULL_BYTES 1   /* vpdpbusd sums in int32: unsigned codes may use all 8 bits */
#define QDOT_AVX512 1
#include "fast_qdot.inc"

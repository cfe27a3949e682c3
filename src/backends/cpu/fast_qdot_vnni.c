/* The quantized dot products built for AVX512-VNNI (flags in CMakeLists.txt). */
#include <immintrin.h>

#define QDOT_NAME tf_cpu_qdot_vnni_impl
#define QROUND_NAME tf_cpu_q8_round_vnni_impl
static inline __m256i dot_u8s8(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
#include "fast_qdot.inc"

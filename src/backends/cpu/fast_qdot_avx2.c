/* The quantized dot products built for AVX2 (flags in CMakeLists.txt):
 * vpmaddubsw multiplies unsigned by signed bytes and adds pairs to int16
 * (the codes are small enough that no pair saturates: at most 2 * 128 *
 * 127), vpmaddwd adds pairs of those to int32. */
#include <immintrin.h>

#define QDOT_NAME tf_cpu_qdot_avx2_impl
#define QROUND_NAME tf_cpu_q8_round_avx2_impl
static inline __m256i dot_u8s8(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
static inline __m256i dot_acc(__m256i acc, __m256i u, __m256i s) { return _mm256_add_epi32(acc, dot_u8s8(u, s)); }
#define QDOT_FULL_BYTES 0   /* vpmaddubsw's int16 pairs: codes above 127 could saturate */
#define QDOT_AVX512 0
#include "fast_qdot.inc"

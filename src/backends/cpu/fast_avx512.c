/* The fast kernels built for avx512 (flags set in CMakeLists.txt). */
#define ISA(name) name##_avx512
#define ISA_NAME "avx512"
#define W 16 /* 16 floats */
#include "fast_kernels.inc"

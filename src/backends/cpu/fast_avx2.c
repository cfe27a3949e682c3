/* The fast kernels built for avx2 (flags set in CMakeLists.txt). */
#define ISA(name) name##_avx2
#define ISA_NAME "avx2"
#define W 8 /* 8 floats */
#include "fast_kernels.inc"

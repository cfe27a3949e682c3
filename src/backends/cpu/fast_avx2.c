/* The fast kernels built for avx2 (flags set in CMakeLists.txt). */
#define ISA(name) name##_avx2
#define ISA_NAME "avx2"
#include "fast_kernels.inc"

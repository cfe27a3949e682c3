/* The fast kernels built for generic (flags set in CMakeLists.txt). */
#define ISA(name) name##_generic
#define ISA_NAME "generic"
#define W 4 /* 4 floats: SSE2 on x86, NEON on ARM */
#include "fast_kernels.inc"

/* The fast kernels built for generic (flags set in CMakeLists.txt). */
#define ISA(name) name##_generic
#define ISA_NAME "generic"
#include "fast_kernels.inc"

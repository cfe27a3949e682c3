/* One dtype's portable kernels for HIP: ../gpu_common/kernels.cl through
 * ../native_gpu/opencl_compat.h, as the CUDA plugin compiles them, but each kernel
 * with C linkage (the plugin finds it by name in the code object with
 * hipModuleGetFunction) and one code object per dtype and gfx target
 * instead of one namespace per dtype. CMake defines TF_DT. */
#include <cstddef>
extern "C" {
#include "plan.h"
}
#include "opencl_compat.h"

#define RWG 256
#define TS 16

#undef kernel
#define kernel extern "C" __attribute__((__global__))

#include "portable_kernels.cl"       /* gpu_common/kernels.cl with the formulas (generated) */

/* One dtype's portable kernels for CUDA. */
#include <cstddef>
extern "C" {
#include "plan.h"
}
#include "opencl_compat.h"

#define RWG 256
#define TS 16

#define TF__CAT2(a, b) a##b
#define TF__CAT(a, b) TF__CAT2(a, b)
#define TF_NS TF__CAT(tf_cuda_, TF_CUDA_SUFFIX)

/* Kernels a dtype's program lacks resolve to these (qualified lookup finds a
 * namespace's own declaration first, the using-directive's only without one). */
namespace tf_cuda_missing {
#define TF__MISSING(E, name) constexpr std::nullptr_t name = nullptr;
TF_PK_KERNEL_LIST(TF__MISSING)
#undef TF__MISSING
}

namespace TF_NS {
using namespace tf_cuda_missing;
#include "portable_kernels.cl"       /* gpu_common/kernels.cl with the formulas (generated) */
}

#undef kernel
#undef global
#undef local
#undef inline
#undef half

static const void *entry(std::nullptr_t) { return nullptr; }
template <typename F> static const void *entry(F *f) { return reinterpret_cast<const void *>(f); }

extern "C" const void *const TF__CAT(tf_cuda_kernels_, TF_CUDA_SUFFIX)[TF_PK_KERNEL_COUNT] = {
#define TF__ENTRY(E, name) entry(TF_NS::name),
    TF_PK_KERNEL_LIST(TF__ENTRY)
#undef TF__ENTRY
};

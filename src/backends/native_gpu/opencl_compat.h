/* OpenCL C as CUDA or HIP: what ../gpu_common/kernels.cl needs to compile
 * with nvcc, or with hipcc (__HIP__: the ROCm plugin's
 * ../rocm/kernels_dtype.hip, where HIP's own names differ: its headers, and
 * no CUDA 13 renaming of long4).
 *
 * kernels_dtype.cu includes this, then kernels.cl inside a namespace per
 * dtype. The mapping keeps OpenCL's semantics where CUDA differs:
 * - a work-item is a thread; get_global_id(d) = block * blockDim + thread.
 *   Kernels use at most two dimensions; a second dimension with more than
 *   65535 groups is split over blockIdx.z by the launcher (native_backend.c)
 *   and reassembled here, so every kernel sees OpenCL's flat group index;
 * - `half` is the storage type of f16 (its bits), read and written through
 *   vload_half / vstore_half_rte as in OpenCL (round to nearest even);
 * - convert_*_sat_rtz truncate toward zero, saturate, NaN -> 0;
 * - long is 64 bits, char is signed (as in OpenCL C), on every CUDA target
 *   tensorframe builds for (x86-64 and aarch64 Linux).
 */
#ifndef TF_OPENCL_COMPAT_H
#define TF_OPENCL_COMPAT_H

#include <climits>
#include <cmath>
#include <cstdint>
#ifdef __HIP__
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>
#else
#include <cuda_fp16.h>
#endif

#define TF_CUDA 1
#define TF_HAS_FP64 1

typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
static_assert(sizeof(long) == 8, "OpenCL's long is 64 bits");
#ifndef __HIP__
#define long4 long4_16a                   /* CUDA 13 deprecates the unsuffixed name */
#endif

/* Work-item functions. */
__device__ inline long tf_group_id(int d) {
    return d == 0 ? (long)blockIdx.x : d == 1 ? (long)blockIdx.y + (long)blockIdx.z * gridDim.y : 0;
}
__device__ inline long tf_local_size(int d) { return d == 0 ? blockDim.x : d == 1 ? blockDim.y : 1; }
__device__ inline long get_group_id(int d) { return tf_group_id(d); }
__device__ inline long get_local_id(int d) { return d == 0 ? threadIdx.x : d == 1 ? threadIdx.y : 0; }
__device__ inline long get_global_id(int d) { return tf_group_id(d) * tf_local_size(d) + get_local_id(d); }
#define barrier(flags) __syncthreads()
#define CLK_LOCAL_MEM_FENCE 0

/* Address spaces and function qualifiers. */
/* __global__ is spelled out: CUDA's macro for it expands to a `global`
 * token, which the empty `global` below would erase. C++ linkage: each
 * dtype's kernels live in their own namespace. */
#undef __global__
#define kernel __attribute__((__global__))
#define global
#define local __shared__
#define LOCAL_PTR
#define inline __device__ inline

/* Bit casts and integer helpers. */
__device__ __forceinline__ uint as_uint(float f) { return __float_as_uint(f); }
__device__ __forceinline__ float as_float(uint u) { return __uint_as_float(u); }
__device__ __forceinline__ double as_double(ulong u) { return __longlong_as_double((long long)u); }
__device__ __forceinline__ uint mul_hi(uint a, uint b) { return __umulhi(a, b); }
#define MAKE_UINT4(a, b, c, d) make_uint4((a), (b), (c), (d))
#define MAKE_FLOAT4(a, b, c, d) make_float4((a), (b), (c), (d))

/* f16 storage: the bits, converted with round to nearest even. */
typedef ushort tf_half_bits;
#define half tf_half_bits
__device__ __forceinline__ float vload_half(long i, const tf_half_bits *p) {
    return __half2float(__ushort_as_half(p[i]));
}
__device__ __forceinline__ void vstore_half_rte(float v, long i, tf_half_bits *p) {
    p[i] = __half_as_ushort(__float2half_rn(v));
}

/* 128-bit vector access (the launcher keeps offsets multiples of 4). */
__device__ __forceinline__ float4 vload4(long i, const float *p) { return reinterpret_cast<const float4 *>(p)[i]; }
__device__ __forceinline__ void vstore4(float4 v, long i, float *p) { reinterpret_cast<float4 *>(p)[i] = v; }

/* OpenCL's saturating, truncating conversions; NaN gives 0. */
template <typename I>
__device__ __forceinline__ I tf_sat_rtz(double v, double lo, double hi, I lo_i, I hi_i) {
    return v != v ? (I)0 : v <= lo ? lo_i : v >= hi ? hi_i : (I)v;
}
__device__ __forceinline__ signed char convert_char_sat_rtz(double v) {
    return tf_sat_rtz<signed char>(v, -128.0, 127.0, (signed char)-128, (signed char)127);
}
__device__ __forceinline__ uchar convert_uchar_sat_rtz(double v) { return tf_sat_rtz<uchar>(v, 0.0, 255.0, 0, 255); }
__device__ __forceinline__ int convert_int_sat_rtz(double v) {
    return tf_sat_rtz<int>(v, -2147483648.0, 2147483647.0, INT_MIN, INT_MAX);
}
__device__ __forceinline__ long convert_long_sat_rtz(double v) {
    return tf_sat_rtz<long>(v, -9223372036854775808.0, 9223372036854775807.0, LONG_MIN, LONG_MAX);
}

/* OpenCL's isnan/isinf return int for scalars; CUDA's bool serves the same uses. */
using std::isinf;
using std::isnan;

#endif

/* The CUDA plugin's own kernels, for the ops where the portable ones leave
 * most of a GPU unused (fast_plan.h says which ops and shapes they take):
 * one-pass row ops, reductions at the memory's speed, and flash attention
 * on the tensor cores. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "element.cuh"

extern "C" {
#include "fast_plan.h"
}

namespace {


/* VW elements loaded or stored as one access (16 bytes when VW fills them). */
template <typename T, int VW> struct alignas(sizeof(T) * VW) pack { T v[VW]; };

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* ---- row ops: a row in registers, one read and one write ---- */

/* The reduction of v over a row's TPR threads (a warp, or the block). */
template <int TPR> __device__ __forceinline__ float row_reduce(float v, bool is_max, float *red) {
    v = is_max ? warp_max(v) : warp_sum(v);
    if (TPR == 32) return v;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();                             /* red[] may still be read from the last reduction */
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < TPR / 32 ? red[lane] : (is_max ? -INFINITY : 0.0f);
    return is_max ? warp_max(v) : warp_sum(v);
}

/* Element (c, k) of a thread is row element ((c * TPR + tid) * VW + k). */
template <typename T, int VW, int CH, int TPR>
__global__ void __launch_bounds__(TPR == 32 ? 128 : TPR) row_kernel(const tf_cuda_row_args a) {
    __shared__ float red[32];
    const int tid = TPR == 32 ? (threadIdx.x & 31) : threadIdx.x;
    const int64_t row = TPR == 32 ? (int64_t)blockIdx.x * 4 + (threadIdx.x >> 5) : (int64_t)blockIdx.x;
    if (row >= a.rows) return;                   /* a whole warp (warp rows) or block (block rows) */
    const int64_t len = a.len;
    const T *x = (const T *)a.x + row * len;
    T *out = (T *)a.out + row * len;
    float v[CH][VW];
#pragma unroll
    for (int c = 0; c < CH; c++) {
        int64_t j = ((int64_t)c * TPR + tid) * VW;
        pack<T, VW> p;
        if (j < len) p = *(const pack<T, VW> *)(x + j);
#pragma unroll
        for (int k = 0; k < VW; k++) v[c][k] = j < len ? to_f(p.v[k]) : 0.0f;
    }
#define TF_FOR_EACH_VALID(body)                                      \
    _Pragma("unroll") for (int c = 0; c < CH; c++) {                 \
        int64_t j = ((int64_t)c * TPR + tid) * VW;                   \
        if (j < len) {                                               \
            _Pragma("unroll") for (int k = 0; k < VW; k++) { body; } \
        }                                                            \
    }
    if (a.op == TF_OP_SOFTMAX || a.op == TF_OP_LOG_SOFTMAX) {
        float m = -INFINITY;
        TF_FOR_EACH_VALID(m = fmaxf(m, v[c][k]));
        m = row_reduce<TPR>(m, true, red);
        float s = 0;
        const bool soft = a.op == TF_OP_SOFTMAX;
        TF_FOR_EACH_VALID(float e = expf(v[c][k] - m); s += e; if (soft) v[c][k] = e);
        s = row_reduce<TPR>(s, false, red);
        const float shift = soft ? 0.0f : m + logf(s), inv = soft ? 1.0f / s : 1.0f;
        TF_FOR_EACH_VALID(v[c][k] = soft ? v[c][k] * inv : v[c][k] - shift);
    } else {
        float mean = 0;
        if (a.op == TF_OP_LAYERNORM) {
            float s = 0;
            TF_FOR_EACH_VALID(s += v[c][k]);
            mean = row_reduce<TPR>(s, false, red) / (float)len;
        }
        float ss = 0;
        TF_FOR_EACH_VALID(float d = v[c][k] - mean; ss += d * d);
        const float inv = 1.0f / sqrtf(row_reduce<TPR>(ss, false, red) / (float)len + a.eps);
        TF_FOR_EACH_VALID(v[c][k] = (v[c][k] - mean) * inv);
        const T *w = (const T *)a.w, *b = (const T *)a.b;
#pragma unroll
        for (int c = 0; c < CH; c++) {
            int64_t j = ((int64_t)c * TPR + tid) * VW;
            if (j >= len) continue;
            if (VW > 1) {                        /* the plan gives VW > 1 only with unit-stride w and b */
                if (a.has_w) {
                    pack<T, VW> p = *(const pack<T, VW> *)(w + j);
#pragma unroll
                    for (int k = 0; k < VW; k++) v[c][k] *= to_f(p.v[k]);
                }
                if (a.has_b) {
                    pack<T, VW> p = *(const pack<T, VW> *)(b + j);
#pragma unroll
                    for (int k = 0; k < VW; k++) v[c][k] += to_f(p.v[k]);
                }
            } else {
                if (a.has_w) v[c][0] *= to_f(w[j * a.ws]);
                if (a.has_b) v[c][0] += to_f(b[j * a.bs]);
            }
        }
    }
#undef TF_FOR_EACH_VALID
#pragma unroll
    for (int c = 0; c < CH; c++) {
        int64_t j = ((int64_t)c * TPR + tid) * VW;
        if (j >= len) continue;
        pack<T, VW> p;
#pragma unroll
        for (int k = 0; k < VW; k++) p.v[k] = from_f<T>(v[c][k]);
        *(pack<T, VW> *)(out + j) = p;
    }
}

template <typename T, int VW, int CH, int TPR> cudaError_t launch_row(const tf_cuda_row_args *a, cudaStream_t st) {
    int64_t blocks = TPR == 32 ? (a->rows + 3) / 4 : a->rows;
    row_kernel<T, VW, CH, TPR><<<(unsigned)blocks, TPR == 32 ? 128 : TPR, 0, st>>>(*a);
    return cudaGetLastError();
}

template <typename T, int VW, int TPR> cudaError_t launch_row_ch(const tf_cuda_row_args *a, cudaStream_t st) {
    switch (a->chunks) {
    case 1: return launch_row<T, VW, 1, TPR>(a, st);
    case 2: return launch_row<T, VW, 2, TPR>(a, st);
    case 4: return launch_row<T, VW, 4, TPR>(a, st);
    case 8: return launch_row<T, VW, 8, TPR>(a, st);
    default: return cudaErrorInvalidValue;
    }
}

template <typename T, int VW> cudaError_t launch_row_tpr(const tf_cuda_row_args *a, cudaStream_t st) {
    switch (a->threads_per_row) {
    case 32: return launch_row_ch<T, VW, 32>(a, st);
    case 256: return launch_row_ch<T, VW, 256>(a, st);
    case 1024: return launch_row_ch<T, VW, 1024>(a, st);
    default: return cudaErrorInvalidValue;
    }
}

template <typename T> cudaError_t launch_row_vec(const tf_cuda_row_args *a, cudaStream_t st) {
    constexpr int V = 16 / sizeof(T);
    if (a->vec == V) return launch_row_tpr<T, V>(a, st);
    if (a->vec == 1) return launch_row_tpr<T, 1>(a, st);
    return cudaErrorInvalidValue;
}

/* ---- reductions: sum, mean, max, min, argmax, argmin ---- */

enum { R_SUM, R_MAX, R_MIN, R_ARGMAX, R_ARGMIN };

struct rstate {
    double sum;
    float value;
    int64_t index;                               /* arg ops: -1 = no element yet */
};

template <int P> __device__ __forceinline__ rstate r_identity() {
    return {0.0, P == R_MAX ? -INFINITY : INFINITY, -1};
}

/* Fold x (at index r) into st, as the portable kernels' fold() does. */
template <int P> __device__ __forceinline__ void r_fold(rstate &st, float x, int64_t r) {
    if (P == R_SUM) {
        st.sum += (double)x;
    } else if (P == R_MAX || P == R_MIN) {
        if (!isnan(st.value)) st.value = isnan(x) || (P == R_MAX ? x > st.value : x < st.value) ? x : st.value;
    } else {
        bool take;
        if (st.index < 0) take = true;
        else if (isnan(st.value)) take = isnan(x) && r < st.index;
        else if (isnan(x)) take = true;
        else if (x == st.value) take = r < st.index;
        else take = P == R_ARGMAX ? x > st.value : x < st.value;
        if (take) {
            st.value = x;
            st.index = r;
        }
    }
}

template <int P> __device__ __forceinline__ void r_merge(rstate &st, const rstate &o) {
    if (P == R_SUM) st.sum += o.sum;
    else if (P == R_MAX || P == R_MIN) r_fold<P>(st, o.value, 0);
    else if (o.index >= 0) r_fold<P>(st, o.value, o.index);
}

template <int P> __device__ __forceinline__ rstate r_shfl(const rstate &st, int off) {
    rstate o;
    o.sum = P == R_SUM ? __shfl_xor_sync(0xffffffffu, st.sum, off) : 0.0;
    o.value = P == R_SUM ? 0.0f : __shfl_xor_sync(0xffffffffu, st.value, off);
    o.index = P >= R_ARGMAX ? (int64_t)__shfl_xor_sync(0xffffffffu, (long long)st.index, off) : 0;
    return o;
}

/* The block's merged state, valid in thread 0. */
template <int P> __device__ __forceinline__ rstate r_block(rstate st) {
    __shared__ rstate red[8];
    for (int off = 16; off; off >>= 1) r_merge<P>(st, r_shfl<P>(st, off));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) red[warp] = st;
    __syncthreads();
    if (threadIdx.x == 0)
        for (int w = 1; w < (int)(blockDim.x >> 5); w++) r_merge<P>(st, red[w]);
    return st;
}

template <typename T, int P> __device__ __forceinline__ void r_write(const tf_cuda_reduce_args &a, int64_t row,
                                                                      const rstate &st) {
    if (P >= R_ARGMAX) ((int64_t *)a.out)[row] = st.index;
    else if (P == R_SUM) ((T *)a.out)[row] = from_f<T>((float)(a.op == TF_OP_MEAN ? st.sum / (double)a.len : st.sum));
    else ((T *)a.out)[row] = from_f<T>(st.value);
}

/* Block b takes part (b % parts) of row (b / parts): vectors part, part +
 * parts, ... of 256 threads each, U loads in flight a thread. */
template <typename T, int VW, int P>
__global__ void __launch_bounds__(256) reduce_kernel(const tf_cuda_reduce_args a) {
    constexpr int U = 4;
    const int64_t part = blockIdx.x % a.parts, row = blockIdx.x / a.parts;
    const T *x = (const T *)a.x + row * a.len;
    const int64_t step = a.parts * 256 * VW;
    rstate st = r_identity<P>();
    for (int64_t j0 = (part * 256 + threadIdx.x) * VW; j0 < a.len; j0 += step * U) {
        pack<T, VW> p[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (j0 + u * step < a.len) p[u] = *(const pack<T, VW> *)(x + j0 + u * step);
#pragma unroll
        for (int u = 0; u < U; u++)
            if (j0 + u * step < a.len)
#pragma unroll
                for (int k = 0; k < VW; k++) r_fold<P>(st, to_f(p[u].v[k]), j0 + u * step + k);
    }
    st = r_block<P>(st);
    if (threadIdx.x != 0) return;
    if (a.parts == 1) {
        r_write<T, P>(a, row, st);
    } else {
        tf_cuda_reduce_part *o = a.partial + blockIdx.x;
        o->sum = st.sum;
        o->value = st.value;
        o->index = st.index;
    }
}

template <typename T, int P> __global__ void __launch_bounds__(256) reduce_merge(const tf_cuda_reduce_args a) {
    const int64_t row = blockIdx.x;
    rstate st = r_identity<P>();
    for (int64_t i = threadIdx.x; i < a.parts; i += 256) {
        const tf_cuda_reduce_part &p = a.partial[row * a.parts + i];
        r_merge<P>(st, rstate{p.sum, p.value, p.index});
    }
    st = r_block<P>(st);
    if (threadIdx.x == 0) r_write<T, P>(a, row, st);
}

/* A middle axis: thread t takes output t = (o, i) of [outer, inner] and
 * folds x[o, j, i] over j (argmax's index is j); neighbouring threads read
 * neighbouring elements. */
template <typename T, int P>
__global__ void __launch_bounds__(256) reduce_cols_kernel(const tf_cuda_reduce_args a) {
    const int64_t t = (int64_t)blockIdx.x * 256 + threadIdx.x;
    if (t >= a.rows) return;
    const int64_t o = t / a.inner, i = t % a.inner;
    const T *x = (const T *)a.x + o * a.len * a.inner + i;
    rstate st = r_identity<P>();
#pragma unroll 4
    for (int64_t j = 0; j < a.len; j++) r_fold<P>(st, to_f(x[j * a.inner]), j);
    r_write<T, P>(a, t, st);
}

template <typename T, int VW, int P> cudaError_t launch_reduce(const tf_cuda_reduce_args *a, cudaStream_t st) {
    if (a->inner > 1) {
        reduce_cols_kernel<T, P><<<(unsigned)((a->rows + 255) / 256), 256, 0, st>>>(*a);
        return cudaGetLastError();
    }
    reduce_kernel<T, VW, P><<<(unsigned)(a->rows * a->parts), 256, 0, st>>>(*a);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || a->parts == 1) return e;
    reduce_merge<T, P><<<(unsigned)a->rows, 256, 0, st>>>(*a);
    return cudaGetLastError();
}

template <typename T, int VW> cudaError_t launch_reduce_op(const tf_cuda_reduce_args *a, cudaStream_t st) {
    switch (a->op) {
    case TF_OP_SUM:
    case TF_OP_MEAN: return launch_reduce<T, VW, R_SUM>(a, st);
    case TF_OP_MAX: return launch_reduce<T, VW, R_MAX>(a, st);
    case TF_OP_MIN: return launch_reduce<T, VW, R_MIN>(a, st);
    case TF_OP_ARGMAX: return launch_reduce<T, VW, R_ARGMAX>(a, st);
    case TF_OP_ARGMIN: return launch_reduce<T, VW, R_ARGMIN>(a, st);
    default: return cudaErrorInvalidValue;
    }
}

template <typename T> cudaError_t launch_reduce_vec(const tf_cuda_reduce_args *a, cudaStream_t st) {
    constexpr int V = 16 / sizeof(T);
    if (a->vec == V) return launch_reduce_op<T, V>(a, st);
    if (a->vec == 1) return launch_reduce_op<T, 1>(a, st);
    return cudaErrorInvalidValue;
}

/* ---- tensor-core building blocks (sm_80 and later) ---- */

/* c += a b for one m16n8k16 tile; a: 16 x 16 row-major, b: 16 x 8 column-major. */
template <typename T> __device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1);
template <> __device__ __forceinline__ void mma16816<__half>(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

/* 16 bytes global -> shared without registers; !valid fills zeros (src unread). */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* ---- flash attention (prefill) ----
 * A block takes 16 x NW query rows of one (batch, head), a warp 16 of them,
 * and walks the keys 64 at a time: K and V tiles double-buffered in shared
 * memory by cp.async, S = Q K^T and O += P V on the tensor cores, the online
 * softmax on S's accumulators in registers (which become P's A operand
 * without a trip through memory). Fragment layout of m16n8k16 (g = lane / 4,
 * t = lane % 4): accumulator c0, c1 at row g, columns 2t, 2t + 1; c2, c3 at
 * row g + 8. */
template <typename T, int D, int NW>
__global__ void __launch_bounds__(NW * 32) flash_kernel(const tf_cuda_attn_args a) {
    constexpr int BM = 16 * NW, BN = 64, LDS = D + 8;   /* +8: rows 16 bytes apart in banks */
    extern __shared__ __align__(16) unsigned char smem[];
    T *Qs = reinterpret_cast<T *>(smem);
    T *Ks = Qs + BM * LDS;                       /* [2][BN][LDS] */
    T *Vs = Ks + 2 * BN * LDS;                   /* [2][BN][LDS] */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    /* Causal: the heaviest query blocks (the last) start first. */
    const int64_t qblock = a.causal ? (int64_t)(gridDim.x - 1 - blockIdx.x) : (int64_t)blockIdx.x;
    const int64_t q0 = qblock * BM, h = blockIdx.y, b = blockIdx.z, kh = h / (a.Hq / a.Hkv);
    const T *q = (const T *)a.q + b * a.qs[0] + h * a.qs[1];
    const T *k = (const T *)a.k + b * a.ks[0] + kh * a.ks[1];
    const T *v = (const T *)a.v + b * a.vs[0] + kh * a.vs[1];
    int64_t kv_end = a.Lk;
    if (a.causal && a.q_off + q0 + BM < kv_end) kv_end = a.q_off + q0 + BM;
    const int ntiles = kv_end > 0 ? (int)((kv_end + BN - 1) / BN) : 0;
    constexpr int CPR = D / 8;                   /* 16-byte chunks a row */
    for (int i = tid; i < BM * CPR; i += NW * 32) {
        int r = i / CPR, c = i % CPR;
        bool ok = q0 + r < a.Lq;
        cp_async16(Qs + r * LDS + c * 8, ok ? q + (q0 + r) * a.qs[2] + c * 8 : q, ok);
    }
    auto load_kv = [&](int tile, int buf) {
        int64_t j0 = (int64_t)tile * BN;
        for (int i = tid; i < BN * CPR; i += NW * 32) {
            int r = i / CPR, c = i % CPR;
            bool ok = j0 + r < a.Lk;
            cp_async16(Ks + (buf * BN + r) * LDS + c * 8, ok ? k + (j0 + r) * a.ks[2] + c * 8 : k, ok);
            cp_async16(Vs + (buf * BN + r) * LDS + c * 8, ok ? v + (j0 + r) * a.vs[2] + c * 8 : v, ok);
        }
    };
    if (ntiles > 0) load_kv(0, 0);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();

    uint32_t qf[D / 16][4];                      /* this warp's 16 query rows as A fragments */
    const T *qw = Qs + warp * 16 * LDS;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        qf[kk][0] = *reinterpret_cast<const uint32_t *>(qw + g * LDS + kk * 16 + t * 2);
        qf[kk][1] = *reinterpret_cast<const uint32_t *>(qw + (g + 8) * LDS + kk * 16 + t * 2);
        qf[kk][2] = *reinterpret_cast<const uint32_t *>(qw + g * LDS + kk * 16 + 8 + t * 2);
        qf[kk][3] = *reinterpret_cast<const uint32_t *>(qw + (g + 8) * LDS + kk * 16 + 8 + t * 2);
    }
    float o[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0, 0};
    const int64_t row0 = q0 + warp * 16 + g;     /* this thread's rows: row0 and row0 + 8 */
    const T *mask = (const T *)a.mask;
    const int64_t mbase = b * a.ms[0] + h * a.ms[1];

    for (int tile = 0; tile < ntiles; tile++) {
        const int buf = tile & 1;
        if (tile + 1 < ntiles) load_kv(tile + 1, buf ^ 1);
        cp_async_commit();
        cp_async_wait<1>();                      /* this tile's group is done; the next may fly */
        __syncthreads();
        const T *Kt = Ks + buf * BN * LDS, *Vt = Vs + buf * BN * LDS;
        float s[BN / 8][4];
#pragma unroll
        for (int n = 0; n < BN / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++)
#pragma unroll
            for (int n = 0; n < BN / 8; n += 2) {
                uint32_t r[4];
                ldsm_x4(r, Kt + (n * 8 + (lane & 7) + ((lane >> 4) << 3)) * LDS + kk * 16 + ((lane >> 3) & 1) * 8);
                mma16816<T>(s[n], qf[kk], r[0], r[1]);
                mma16816<T>(s[n + 1], qf[kk], r[2], r[3]);
            }
        const int64_t j0 = (int64_t)tile * BN;
        float mx[2] = {-INFINITY, -INFINITY};
        /* Only tiles past the keys' end, on the causal diagonal or under a
         * mask look at each score's position. */
        const bool edge = j0 + BN > a.Lk || a.has_mask || (a.causal && j0 + BN - 1 > a.q_off + q0);
        if (edge) {
#pragma unroll
            for (int n = 0; n < BN / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int half = e >> 1;
                    const int64_t i = row0 + half * 8, j = j0 + n * 8 + t * 2 + (e & 1);
                    float x = s[n][e] * a.scale_log2;
                    if (j >= a.Lk || (a.causal && j > a.q_off + i)) x = -INFINITY;
                    else if (a.has_mask && i < a.Lq) x += to_f(mask[mbase + i * a.ms[2] + j * a.ms[3]]) * kLog2e;
                    s[n][e] = x;
                    mx[e >> 1] = fmaxf(mx[e >> 1], x);
                }
        } else {
#pragma unroll
            for (int n = 0; n < BN / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    s[n][e] *= a.scale_log2;
                    mx[e >> 1] = fmaxf(mx[e >> 1], s[n][e]);
                }
        }
        float scale_o[2], m_use[2];
#pragma unroll
        for (int half = 0; half < 2; half++) {
            mx[half] = fmaxf(mx[half], __shfl_xor_sync(0xffffffffu, mx[half], 1));
            mx[half] = fmaxf(mx[half], __shfl_xor_sync(0xffffffffu, mx[half], 2));
            const float m_new = fmaxf(m_run[half], mx[half]);
            m_use[half] = m_new == -INFINITY ? 0.0f : m_new;   /* no key yet: exp2(-inf) = 0, not NaN */
            scale_o[half] = exp2f(m_run[half] - m_use[half]);
            m_run[half] = m_new;
        }
        float ls[2] = {0, 0};
#pragma unroll
        for (int n = 0; n < BN / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                s[n][e] = exp2f(s[n][e] - m_use[e >> 1]);
                ls[e >> 1] += s[n][e];
            }
#pragma unroll
        for (int half = 0; half < 2; half++) l_run[half] = l_run[half] * scale_o[half] + ls[half];
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            o[n][0] *= scale_o[0];
            o[n][1] *= scale_o[0];
            o[n][2] *= scale_o[1];
            o[n][3] *= scale_o[1];
        }
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) {
            const uint32_t pa[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]), pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                                    pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                    pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int n = 0; n < D / 8; n += 2) {
                uint32_t r[4];
                ldsm_x4_trans(r, Vt + (kk * 16 + (lane & 15)) * LDS + n * 8 + (lane >> 4) * 8);
                mma16816<T>(o[n], pa, r[0], r[1]);
                mma16816<T>(o[n + 1], pa, r[2], r[3]);
            }
        }
        __syncthreads();                         /* the buffer is refilled next iteration */
    }
    T *out = (T *)a.out + b * a.os[0] + h * a.os[1];
#pragma unroll
    for (int half = 0; half < 2; half++) {
        float l = l_run[half];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const float inv = 1.0f / l;              /* no visible key: 0 * inf = NaN, as 0/0 elsewhere */
        const int64_t i = row0 + half * 8;
        if (i >= a.Lq) continue;
#pragma unroll
        for (int n = 0; n < D / 8; n++)
            *reinterpret_cast<uint32_t *>(out + i * a.os[2] + n * 8 + t * 2) =
                pack2<T>(o[n][half * 2] * inv, o[n][half * 2 + 1] * inv);
    }
}

template <typename T, int D, int NW> cudaError_t launch_flash(const tf_cuda_attn_args *a, cudaStream_t st) {
    constexpr int BM = 16 * NW;
    const size_t smem = (size_t)(BM + 4 * 64) * (D + 8) * sizeof(T);
    cudaError_t e = cudaFuncSetAttribute(flash_kernel<T, D, NW>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    dim3 grid((unsigned)((a->Lq + BM - 1) / BM), (unsigned)a->Hq, (unsigned)a->B);
    flash_kernel<T, D, NW><<<grid, NW * 32, smem, st>>>(*a);
    return cudaGetLastError();
}

/* ---- attention a query row at a time: split-KV ----
 * Decode (up to TF_CUDA_DECODE_MAX_Q queries) in every dtype, and every
 * f32 attention (prefill too: no tensor-core path keeps f32's precision).
 * A block takes one query row and `chunk` keys, walking rows with a
 * stride of gridDim.y where there are more than a grid holds. A key is a
 * group of D/8 lanes (8 elements each), so a warp reads 32/(D/8) keys at
 * once; each group keeps its own online softmax, and the block merges its
 * groups. With several splits, (max, sum, acc) go to `partial` and
 * decode_combine merges them. */

/* Eight consecutive elements of a row as loaded: one 16-byte access for the
 * half types, two for f32 (the plan promises 16-byte alignment only). */
template <typename T> struct alignas(16) row8 { T v[8]; };

template <typename T, int D>
__device__ __forceinline__ void decode_row(const tf_cuda_attn_args &a, int64_t row) {
    constexpr int G = D / 8, KPW = 32 / G, NG = 4 * KPW, U = 4;   /* U keys a group in flight */
    __shared__ float sm_m[NG], sm_l[NG], sm_acc[NG][D];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, grp = warp * KPW + lane / G, gl = lane % G;
    const int64_t split = blockIdx.x, b = blockIdx.z, rows = a.Hq * a.Lq;
    {
        const int64_t i = row % a.Lq, h = row / a.Lq, kh = h / (a.Hq / a.Hkv);
        int64_t kv_end = a.Lk;
        if (a.causal && a.q_off + i + 1 < kv_end) kv_end = a.q_off + i + 1;
        const int64_t j_begin = split * a.chunk, j_end = j_begin + a.chunk < kv_end ? j_begin + a.chunk : kv_end;
        const T *q = (const T *)a.q + b * a.qs[0] + h * a.qs[1] + i * a.qs[2];
        const T *k = (const T *)a.k + b * a.ks[0] + kh * a.ks[1] + gl * 8;
        const T *v = (const T *)a.v + b * a.vs[0] + kh * a.vs[1] + gl * 8;
        const T *mask = (const T *)a.mask + b * a.ms[0] + h * a.ms[1] + i * a.ms[2];
        float qv[8], acc[8], m = -INFINITY, l = 0;
        {
            row8<T> p = *(const row8<T> *)(q + gl * 8);
#pragma unroll
            for (int e = 0; e < 8; e++) {
                qv[e] = to_f(p.v[e]) * a.scale_log2;
                acc[e] = 0;
            }
        }
        /* Warp-uniform trip count: every lane takes part in the shuffles. */
        for (int64_t jb = j_begin + warp * KPW; jb < j_end; jb += (int64_t)NG * U) {
            row8<T> kp[U], vp[U];
            bool ok[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int64_t j = jb + (int64_t)u * NG + lane / G;
                ok[u] = j < j_end;
                if (ok[u]) {
                    kp[u] = *(const row8<T> *)(k + j * a.ks[2]);
                    vp[u] = *(const row8<T> *)(v + j * a.vs[2]);
                }
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                float s = 0;
                if (ok[u])
#pragma unroll
                    for (int e = 0; e < 8; e++) s += qv[e] * to_f(kp[u].v[e]);
#pragma unroll
                for (int off = G / 2; off; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
                if (!ok[u]) continue;
                const int64_t j = jb + (int64_t)u * NG + lane / G;
                if (a.has_mask) s += to_f(mask[j * a.ms[3]]) * kLog2e;
                const float m_new = fmaxf(m, s);
                if (m_new == -INFINITY) continue;
                const float keep = exp2f(m - m_new), p = exp2f(s - m_new);
                l = l * keep + p;
#pragma unroll
                for (int e = 0; e < 8; e++) acc[e] = acc[e] * keep + p * to_f(vp[u].v[e]);
                m = m_new;
            }
        }
        if (gl == 0) {
            sm_m[grp] = m;
            sm_l[grp] = l;
        }
#pragma unroll
        for (int e = 0; e < 8; e++) sm_acc[grp][gl * 8 + e] = acc[e];
        __syncthreads();
        const int d = threadIdx.x;
        if (d < D) {
            float M = -INFINITY;
            for (int gi = 0; gi < NG; gi++) M = fmaxf(M, sm_m[gi]);
            const float mu = M == -INFINITY ? 0.0f : M;
            float L = 0, A = 0;
            for (int gi = 0; gi < NG; gi++) {
                const float w = exp2f(sm_m[gi] - mu);
                L += sm_l[gi] * w;
                A += sm_acc[gi][d] * w;
            }
            if (a.splits == 1) {
                T *out = (T *)a.out + b * a.os[0] + h * a.os[1] + i * a.os[2];
                out[d] = from_f<T>(A / L);               /* no visible key: 0/0 = NaN */
            } else {
                float *part = a.partial + ((b * rows + row) * a.splits + split) * (D + 2);
                part[2 + d] = A;
                if (d == 0) {
                    part[0] = M;
                    part[1] = L;
                }
            }
        }
    }
}

/* One query row a block: grids of up to 65535 rows. */
template <typename T, int D>
__global__ void __launch_bounds__(128) decode_kernel(const tf_cuda_attn_args a) {
    decode_row<T, D>(a, blockIdx.y);
}

/* More rows than a grid holds (a long f32 prompt): a block walks rows
 * gridDim.y apart. */
template <typename T, int D>
__global__ void __launch_bounds__(128) decode_rows_kernel(const tf_cuda_attn_args a) {
    for (int64_t row = blockIdx.y; row < a.Hq * a.Lq; row += gridDim.y) {
        decode_row<T, D>(a, row);
        __syncthreads();                         /* the next row reuses the shared arrays */
    }
}

/* The half types' decode kernel as measured on the H200 (0.157 ms at 8 x 32
 * heads x 4096 keys bf16): the row-at-a-time kernel below is the same
 * computation, but where it replaced this one that case took 0.22 ms on the
 * next machines (cause not found with the device time left), so the half
 * types keep this code. */
template <typename T, int D>
__global__ void __launch_bounds__(128) decode_half_kernel(const tf_cuda_attn_args a) {
    constexpr int G = D / 8, KPW = 32 / G, NG = 4 * KPW, U = 4;   /* U keys a group in flight */
    __shared__ float sm_m[NG], sm_l[NG], sm_acc[NG][D];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, grp = warp * KPW + lane / G, gl = lane % G;
    const int64_t split = blockIdx.x, row = blockIdx.y, b = blockIdx.z;
    const int64_t i = row % a.Lq, h = row / a.Lq, kh = h / (a.Hq / a.Hkv);
    int64_t kv_end = a.Lk;
    if (a.causal && a.q_off + i + 1 < kv_end) kv_end = a.q_off + i + 1;
    const int64_t j_begin = split * a.chunk, j_end = j_begin + a.chunk < kv_end ? j_begin + a.chunk : kv_end;
    const T *q = (const T *)a.q + b * a.qs[0] + h * a.qs[1] + i * a.qs[2];
    const T *k = (const T *)a.k + b * a.ks[0] + kh * a.ks[1] + gl * 8;
    const T *v = (const T *)a.v + b * a.vs[0] + kh * a.vs[1] + gl * 8;
    const T *mask = (const T *)a.mask + b * a.ms[0] + h * a.ms[1] + i * a.ms[2];
    float qv[8], acc[8], m = -INFINITY, l = 0;
    {
        pack<T, 8> p = *(const pack<T, 8> *)(q + gl * 8);
#pragma unroll
        for (int e = 0; e < 8; e++) {
            qv[e] = to_f(p.v[e]) * a.scale_log2;
            acc[e] = 0;
        }
    }
    /* Warp-uniform trip count: every lane takes part in the shuffles. */
    for (int64_t jb = j_begin + warp * KPW; jb < j_end; jb += (int64_t)NG * U) {
        pack<T, 8> kp[U], vp[U];
        bool ok[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t j = jb + (int64_t)u * NG + lane / G;
            ok[u] = j < j_end;
            if (ok[u]) {
                kp[u] = *(const pack<T, 8> *)(k + j * a.ks[2]);
                vp[u] = *(const pack<T, 8> *)(v + j * a.vs[2]);
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            float s = 0;
            if (ok[u])
#pragma unroll
                for (int e = 0; e < 8; e++) s += qv[e] * to_f(kp[u].v[e]);
#pragma unroll
            for (int off = G / 2; off; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
            if (!ok[u]) continue;
            const int64_t j = jb + (int64_t)u * NG + lane / G;
            if (a.has_mask) s += to_f(mask[j * a.ms[3]]) * kLog2e;
            const float m_new = fmaxf(m, s);
            if (m_new == -INFINITY) continue;
            const float keep = exp2f(m - m_new), p = exp2f(s - m_new);
            l = l * keep + p;
#pragma unroll
            for (int e = 0; e < 8; e++) acc[e] = acc[e] * keep + p * to_f(vp[u].v[e]);
            m = m_new;
        }
    }
    if (gl == 0) {
        sm_m[grp] = m;
        sm_l[grp] = l;
    }
#pragma unroll
    for (int e = 0; e < 8; e++) sm_acc[grp][gl * 8 + e] = acc[e];
    __syncthreads();
    const int d = threadIdx.x;
    if (d >= D) return;
    float M = -INFINITY;
    for (int gi = 0; gi < NG; gi++) M = fmaxf(M, sm_m[gi]);
    const float mu = M == -INFINITY ? 0.0f : M;
    float L = 0, A = 0;
    for (int gi = 0; gi < NG; gi++) {
        const float w = exp2f(sm_m[gi] - mu);
        L += sm_l[gi] * w;
        A += sm_acc[gi][d] * w;
    }
    if (a.splits == 1) {
        T *out = (T *)a.out + b * a.os[0] + h * a.os[1] + i * a.os[2];
        out[d] = from_f<T>(A / L);               /* no visible key: 0/0 = NaN */
        return;
    }
    float *part = a.partial + ((b * a.Hq * a.Lq + row) * a.splits + split) * (D + 2);
    part[2 + d] = A;
    if (d == 0) {
        part[0] = M;
        part[1] = L;
    }
}

template <typename T, int D> __global__ void __launch_bounds__(D) decode_combine(const tf_cuda_attn_args a) {
    const int64_t row = blockIdx.x, b = blockIdx.y, d = threadIdx.x;
    const int64_t i = row % a.Lq, h = row / a.Lq;
    const float *part = a.partial + (b * a.Hq * a.Lq + row) * a.splits * (D + 2);
    float M = -INFINITY;
    for (int64_t s = 0; s < a.splits; s++) M = fmaxf(M, part[s * (D + 2)]);
    const float mu = M == -INFINITY ? 0.0f : M;
    float L = 0, A = 0;
    for (int64_t s = 0; s < a.splits; s++) {
        const float w = exp2f(part[s * (D + 2)] - mu);
        L += part[s * (D + 2) + 1] * w;
        A += part[s * (D + 2) + 2 + d] * w;
    }
    T *out = (T *)a.out + b * a.os[0] + h * a.os[1] + i * a.os[2];
    out[d] = from_f<T>(A / L);
}

template <typename T, int D> cudaError_t launch_decode(const tf_cuda_attn_args *a, cudaStream_t st) {
    const int64_t rows = a->Hq * a->Lq;
    dim3 grid((unsigned)a->splits, (unsigned)(rows < 65535 ? rows : 65535), (unsigned)a->B);
    if (!std::is_same<T, float>::value && rows <= 65535) decode_half_kernel<T, D><<<grid, 128, 0, st>>>(*a);
    else if (rows <= 65535) decode_kernel<T, D><<<grid, 128, 0, st>>>(*a);
    else decode_rows_kernel<T, D><<<grid, 128, 0, st>>>(*a);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || a->splits == 1) return e;
    decode_combine<T, D><<<dim3((unsigned)(a->Hq * a->Lq), (unsigned)a->B), D, 0, st>>>(*a);
    return cudaGetLastError();
}

template <typename T, int D> cudaError_t launch_attn(const tf_cuda_attn_args *a, cudaStream_t st) {
    if (a->kind == TF_CUDA_ATTN_DECODE) return launch_decode<T, D>(a, st);
    const int hopper = tf_cuda_flash_hopper_launch(a, st);
    if (hopper >= 0) return (cudaError_t)hopper;
    if (a->flash_impl >= TF_CUDA_FLASH_HOPPER) return cudaErrorNotSupported;   /* required, and it cannot run here */
    return a->warps == 8 ? launch_flash<T, D, 8>(a, st) : launch_flash<T, D, 4>(a, st);
}

/* ---- f32 attention with few keys: a block per (TF_CUDA_SMALL_ROWS query
 * rows, head) ----
 * The head's values and keys go to shared memory once (key rows padded by
 * one float, so lanes that take one key each read distinct banks); each
 * warp takes query rows: its lanes take keys for the scores, kept in the
 * warp's row of shared memory, then head elements for the output. An
 * encoder's sentences (64 x 12 heads x 40 tokens x 32) had the
 * row-at-a-time kernel take 0.16 ms: 30720 blocks for 40 keys each. */
template <int D>
__global__ void __launch_bounds__(128) attn_small_kernel(const tf_cuda_attn_args a) {
    constexpr int E = D / 32;                    /* output elements a lane */
    extern __shared__ __align__(16) unsigned char smem[];
    const int64_t Lk = a.Lk;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *sv = reinterpret_cast<float *>(smem);                          /* [Lk][D], 16-byte aligned rows */
    float *sk = sv + Lk * D;                     /* [Lk][D + 1] */
    float *sp = sk + Lk * (D + 1) + warp * Lk;   /* this warp's scores, then weights */
    float *sq = sk + Lk * (D + 1) + 4 * Lk + warp * D;   /* this warp's query row, scaled */
    const int64_t h = blockIdx.y, b = blockIdx.z, kh = h / (a.Hq / a.Hkv);
    const float *k = (const float *)a.k + b * a.ks[0] + kh * a.ks[1];
    const float *v = (const float *)a.v + b * a.vs[0] + kh * a.vs[1];
    for (int64_t e = threadIdx.x; e < Lk * (D / 4); e += 128) {
        const int64_t j = e / (D / 4), d = (e % (D / 4)) * 4;
        const float4 kq = *(const float4 *)(k + j * a.ks[2] + d);
        *(float4 *)(sv + j * D + d) = *(const float4 *)(v + j * a.vs[2] + d);
        float *kr = sk + j * (D + 1) + d;
        kr[0] = kq.x;
        kr[1] = kq.y;
        kr[2] = kq.z;
        kr[3] = kq.w;
    }
    __syncthreads();
    const int64_t i_begin = (int64_t)blockIdx.x * TF_CUDA_SMALL_ROWS;
    const int64_t i_end = i_begin + TF_CUDA_SMALL_ROWS < a.Lq ? i_begin + TF_CUDA_SMALL_ROWS : a.Lq;
    for (int64_t i = i_begin + warp; i < i_end; i += 4) {
        const float *q = (const float *)a.q + b * a.qs[0] + h * a.qs[1] + i * a.qs[2];
        for (int d = lane; d < D; d += 32) sq[d] = q[d] * a.scale_log2;
        __syncwarp();
        int64_t kv_end = Lk;
        if (a.causal && a.q_off + i + 1 < kv_end) kv_end = a.q_off + i + 1;
        const float *mask = (const float *)a.mask + b * a.ms[0] + h * a.ms[1] + i * a.ms[2];
        float m = -INFINITY;
        for (int64_t j = lane; j < kv_end; j += 32) {
            const float *kr = sk + j * (D + 1);
            float s = 0;
#pragma unroll 8
            for (int d = 0; d < D; d++) s += sq[d] * kr[d];
            if (a.has_mask) s += mask[j * a.ms[3]] * kLog2e;
            sp[j] = s;
            m = fmaxf(m, s);
        }
        m = warp_max(m);
        const float mu = m == -INFINITY ? 0.0f : m;
        float l = 0;
        for (int64_t j = lane; j < kv_end; j += 32) {
            const float p = exp2f(sp[j] - mu);
            sp[j] = p;
            l += p;
        }
        l = warp_sum(l);
        __syncwarp();
        float acc[E];
#pragma unroll
        for (int e = 0; e < E; e++) acc[e] = 0;
        for (int64_t j = 0; j < kv_end; j++) {
            const float p = sp[j];
#pragma unroll
            for (int e = 0; e < E; e++) acc[e] += p * sv[j * D + lane + 32 * e];
        }
        float *out = (float *)a.out + b * a.os[0] + h * a.os[1] + i * a.os[2];
#pragma unroll
        for (int e = 0; e < E; e++) out[lane + 32 * e] = acc[e] / l;   /* no visible key: 0/0 = NaN */
        __syncwarp();                            /* sp and sq serve the warp's next row */
    }
}

template <int D> cudaError_t launch_small(const tf_cuda_attn_args *a, cudaStream_t st) {
    dim3 grid((unsigned)((a->Lq + TF_CUDA_SMALL_ROWS - 1) / TF_CUDA_SMALL_ROWS), (unsigned)a->Hq, (unsigned)a->B);
    attn_small_kernel<D><<<grid, 128, tf_cuda_attn_small_smem(a->Lk, D), st>>>(*a);
    return cudaGetLastError();
}

/* f32: the small kernel or the row-at-a-time one (the plan never makes it FLASH). */
cudaError_t launch_attn_f32(const tf_cuda_attn_args *a, cudaStream_t st) {
    const bool small = a->kind == TF_CUDA_ATTN_SMALL;
    if (!small && a->kind != TF_CUDA_ATTN_DECODE) return cudaErrorInvalidValue;
    switch (a->head_dim) {
    case 32: return small ? launch_small<32>(a, st) : launch_decode<float, 32>(a, st);
    case 64: return small ? launch_small<64>(a, st) : launch_decode<float, 64>(a, st);
    case 128: return small ? launch_small<128>(a, st) : launch_decode<float, 128>(a, st);
    default: return cudaErrorInvalidValue;
    }
}

template <typename T> cudaError_t launch_attn_d(const tf_cuda_attn_args *a, cudaStream_t st) {
    switch (a->head_dim) {
    case 64: return launch_attn<T, 64>(a, st);
    case 128: return launch_attn<T, 128>(a, st);
    default: return cudaErrorInvalidValue;
    }
}

}  // namespace

extern "C" int tf_cuda_row_launch(const tf_cuda_row_args *a, void *stream) {
    cudaStream_t st = (cudaStream_t)stream;
    switch (a->type) {
    case TF_CUDA_F32: return (int)launch_row_vec<float>(a, st);
    case TF_CUDA_F16: return (int)launch_row_vec<__half>(a, st);
    case TF_CUDA_BF16: return (int)launch_row_vec<__nv_bfloat16>(a, st);
    default: return (int)cudaErrorInvalidValue;
    }
}

extern "C" int tf_cuda_reduce_launch(const tf_cuda_reduce_args *a, void *stream) {
    cudaStream_t st = (cudaStream_t)stream;
    switch (a->type) {
    case TF_CUDA_F32: return (int)launch_reduce_vec<float>(a, st);
    case TF_CUDA_F16: return (int)launch_reduce_vec<__half>(a, st);
    case TF_CUDA_BF16: return (int)launch_reduce_vec<__nv_bfloat16>(a, st);
    default: return (int)cudaErrorInvalidValue;
    }
}

extern "C" int tf_cuda_attn_launch(const tf_cuda_attn_args *a, void *stream) {
    cudaStream_t st = (cudaStream_t)stream;
    switch (a->type) {
    case TF_CUDA_F32: return (int)launch_attn_f32(a, st);
    case TF_CUDA_F16: return (int)launch_attn_d<__half>(a, st);
    case TF_CUDA_BF16: return (int)launch_attn_d<__nv_bfloat16>(a, st);
    default: return (int)cudaErrorInvalidValue;
    }
}

#ifdef TF_CUDA_TEST_HOOKS
namespace {
__global__ void fault_kernel(int *p) { *p = 1; }
}  // namespace

extern "C" int tf_cuda_debug_fault_launch(void *stream) {
    fault_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(reinterpret_cast<int *>(16));
    return (int)cudaGetLastError();
}
#endif

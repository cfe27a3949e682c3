/* Flash attention (prefill) for Hopper, sm_90a: FlashAttention-3's design.
 *
 * A block takes 128 query rows of one (batch, head) and walks the keys 128
 * at a time. Three warpgroups: the first is the producer, one thread of
 * which copies Q once and each K and V tile into shared memory with the
 * tensor copy engine (TMA, 128-byte swizzle), completing on mbarriers; the
 * other two are consumers, 64 query rows each. A consumer computes
 * S = Q K^T with wgmma (both operands in shared memory), the online softmax
 * on S's accumulators in registers, and O += P V with wgmma (P from
 * registers, V from shared memory, N-major). K and V stages are released
 * separately (K once S is done, V once P V is done), so the producer runs
 * ahead of the consumers by STAGES tiles.
 *
 * Schedules (SCHED): SERIAL issues a tile's two products one after the
 * other, waiting for each. OVERLAP issues the scores of tile j + 1 before
 * the P V product of tile j and does tile j + 1's softmax while that
 * product runs (FlashAttention-3's intra-warpgroup pipelining). PINGPONG
 * adds the inter-warpgroup schedule: the two consumers take turns issuing
 * their products (two named barriers), so one warpgroup's softmax runs
 * while the other's products hold the tensor cores, instead of both
 * computing exponentials at once and leaving the tensor cores idle.
 *
 * Everything here compiles to an empty kernel except in the sm_90a pass
 * (wgmma and setmaxnreg exist only there); the launcher runs it only on a
 * device of compute capability 9.0, where the sm_90a code is the one the
 * driver loads, and otherwise reports "not taken" so fast_kernels.cu's
 * mma.sync kernel (sm_80) runs instead. */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "element.cuh"

extern "C" {
#include "fast_plan.h"
}

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TF_HOPPER_CODE 1
#elif defined(__CUDA_ARCH__)
#pragma nv_diag_suppress 177   /* the empty kernel of the other targets leaves the constants unreferenced */
#endif

namespace {

constexpr int kBM = 128;            /* query rows a block: two consumer warpgroups of 64 */
constexpr int kBN = 128;            /* keys a tile */
constexpr int kThreads = 384;       /* producer warpgroup + two consumers */
constexpr int kConsumerWarps = 8;

/* Shared memory of one block, in bytes from a 1024-aligned base (the
 * 128-byte swizzle repeats every 1024 bytes; TMA and wgmma both assume the
 * pattern starts on such a boundary). A Q, K or V tile is stored as
 * D / 64 column halves of [rows][64] elements, 128 bytes a row. */
template <int D, int STAGES> struct hopper_layout {
    static constexpr uint32_t q_half = kBM * 128, kv_half = kBN * 128;
    static constexpr uint32_t q_bytes = kBM * D * 2, kv_bytes = kBN * D * 2;
    static constexpr uint32_t q = 0, k = q_bytes, v = k + STAGES * kv_bytes, bars = v + STAGES * kv_bytes;
    /* barriers (8 bytes each): q_full, k_full[S], v_full[S], k_empty[S], v_empty[S] */
    static constexpr uint32_t bytes = bars + 8 * (1 + 4 * STAGES);
    static constexpr size_t dynamic_smem = bytes + 1024;   /* room to align the base */
};

#ifdef TF_HOPPER_CODE

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* ---- mbarriers ---- */

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done = 0;
    while (!done)
        asm volatile(
            "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
}

/* ---- the tensor copy engine ---- */

/* Box {64, rows} of a 4-D map (d, l, h, b) at (x, y, z, w) into shared dst;
 * rows past the tensor's end arrive as zeros and count toward the bytes. */
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap *map, int x, int y, int z, int w,
                                         uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
        "%5}], [%6];\n" ::"r"(dst),
        "l"((uint64_t)map), "r"(x), "r"(y), "r"(z), "r"(w), "r"(bar)
        : "memory");
}

/* ---- wgmma ---- */

/* Descriptor of a 128-byte-swizzled operand at shared address addr: SBO is
 * 1024 (8 rows of 128 bytes); LBO the distance between 64-column halves
 * (N-major V; K-major operands ignore it). */
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr, uint32_t lbo) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | (uint64_t)((lbo & 0x3FFFF) >> 4) << 16 | (uint64_t)(1024 >> 4) << 32 |
           (uint64_t)1 << 62;
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Keeps the compiler from moving reads or writes of r across this point
 * (the products write their accumulators asynchronously). */
template <int N> __device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(r[i])::"memory");
}

#define TF_D8(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), \
                    "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define TF_D32(d, i) TF_D8(d, i), TF_D8(d, i + 8), TF_D8(d, i + 16), TF_D8(d, i + 24)
#define TF_ACC32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define TF_ACC64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

template <typename T> struct wg_name;
template <> struct wg_name<__half> { static constexpr bool bf16 = false; };
template <> struct wg_name<__nv_bfloat16> { static constexpr bool bf16 = true; };

/* d (64 x 128, f32) = or += A (64 x 16, shared, K-major) B (16 x 128, shared, K-major). */
template <typename T> __device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], uint64_t a, uint64_t b, int acc) {
    if constexpr (wg_name<T>::bf16)
        asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " TF_ACC64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
                     : TF_D32(d, 0), TF_D32(d, 32)
                     : "l"(a), "l"(b), "r"(acc));
    else
        asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " TF_ACC64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
                     : TF_D32(d, 0), TF_D32(d, 32)
                     : "l"(a), "l"(b), "r"(acc));
}

/* d (64 x N, f32) += A (64 x 16, registers) B (16 x N, shared, N-major). */
template <typename T, int N> __device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b) {
    if constexpr (N == 128) {
        if constexpr (wg_name<T>::bf16)
            asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, 1, 0;\n"
                         "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " TF_ACC64
                         ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                         : TF_D32(d, 0), TF_D32(d, 32)
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
        else
            asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, 1, 0;\n"
                         "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " TF_ACC64
                         ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                         : TF_D32(d, 0), TF_D32(d, 32)
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
    } else {
        static_assert(N == 64, "head sizes 64 and 128");
        if constexpr (wg_name<T>::bf16)
            asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, 1, 0;\n"
                         "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " TF_ACC32
                         ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                         : TF_D32(d, 0)
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
        else
            asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, 1, 0;\n"
                         "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " TF_ACC32
                         ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                         : TF_D32(d, 0)
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
    }
}

__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* One consumer thread's part of the online softmax. S's accumulator layout
 * (m64nNk16, f32): warp w of the warpgroup holds rows 16w..16w+15; element
 * 4n + e of a thread is row g (e < 2) or g + 8, column 8n + 2t + (e & 1)
 * (g = lane / 4, t = lane % 4). */
struct row_state {
    float m[2], l[2];
};

/* Scales the scores of the tile at key j0 to log2 units, applies the causal
 * bound, the keys' end and the mask where the tile needs it, folds the tile
 * into (m, l), turns s into the tile's probabilities and returns in
 * scale_o[] the factor the output so far must be multiplied by. */
template <typename T>
__device__ __forceinline__ void softmax_tile(float (&s)[64], row_state &st, float (&scale_o)[2], const tf_cuda_attn_args &a,
                                             int64_t j0, int64_t row0, int t, bool edge, const T *mask, int64_t mbase) {
    float mx[2] = {-INFINITY, -INFINITY};
    /* Inside the tiles that need no position (most of them) with a positive
     * scale, the max is taken on the raw scores and the scale folds into
     * the exponent's FFMA: 64 multiplications a tile fewer. */
    const bool fold = !edge && a.scale_log2 > 0;
    if (edge) {
#pragma unroll
        for (int n = 0; n < kBN / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int64_t i = row0 + (e >> 1) * 8, j = j0 + n * 8 + t * 2 + (e & 1);
                float x = s[4 * n + e] * a.scale_log2;
                if (j >= a.Lk || (a.causal && j > a.q_off + i)) x = -INFINITY;
                else if (a.has_mask && i < a.Lq) x += to_f(mask[mbase + i * a.ms[2] + j * a.ms[3]]) * kLog2e;
                s[4 * n + e] = x;
                mx[e >> 1] = fmaxf(mx[e >> 1], x);
            }
    } else if (fold) {
#pragma unroll
        for (int n = 0; n < kBN / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) mx[e >> 1] = fmaxf(mx[e >> 1], s[4 * n + e]);
        mx[0] *= a.scale_log2;
        mx[1] *= a.scale_log2;
    } else {
#pragma unroll
        for (int n = 0; n < kBN / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                s[4 * n + e] *= a.scale_log2;
                mx[e >> 1] = fmaxf(mx[e >> 1], s[4 * n + e]);
            }
    }
    float m_use[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        const float m_new = fmaxf(st.m[r], mx[r]);
        m_use[r] = m_new == -INFINITY ? 0.0f : m_new;   /* no key yet: exp2(-inf) = 0, not NaN */
        scale_o[r] = fast_exp2(st.m[r] - m_use[r]);
        st.m[r] = m_new;
    }
    float ls[2] = {0, 0};
    const float k = fold ? a.scale_log2 : 1.0f;  /* scores in log2 units: k s - m */
#pragma unroll
    for (int n = 0; n < kBN / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            s[4 * n + e] = fast_exp2(fmaf(s[4 * n + e], k, -m_use[e >> 1]));
            ls[e >> 1] += s[4 * n + e];
        }
#pragma unroll
    for (int r = 0; r < 2; r++) st.l[r] = st.l[r] * scale_o[r] + ls[r];
}

/* P (the probabilities in s) as the A fragments of P V, one per 16 keys:
 * the accumulator of columns 16k..16k+15 is the A fragment of step k. */
template <typename T> __device__ __forceinline__ void pack_p(const float (&s)[64], uint32_t (&p)[kBN / 16][4]) {
#pragma unroll
    for (int k = 0; k < kBN / 16; k++) {
        p[k][0] = pack2<T>(s[8 * k + 0], s[8 * k + 1]);
        p[k][1] = pack2<T>(s[8 * k + 2], s[8 * k + 3]);
        p[k][2] = pack2<T>(s[8 * k + 4], s[8 * k + 5]);
        p[k][3] = pack2<T>(s[8 * k + 6], s[8 * k + 7]);
    }
}

template <int N> __device__ __forceinline__ void scale_rows(float (&o)[N], const float (&f)[2]) {
#pragma unroll
    for (int i = 0; i < N; i += 4) {
        o[i] *= f[0];
        o[i + 1] *= f[0];
        o[i + 2] *= f[1];
        o[i + 3] *= f[1];
    }
}

/* The pingpong schedule's turns: named barriers 1 and 2 (0 is
 * __syncthreads), each met by one consumer warpgroup waiting (bar.sync)
 * and the other arriving (bar.arrive): 256 threads. */
__device__ __forceinline__ void turn_wait(int c) { asm volatile("bar.sync %0, 256;\n" ::"r"(1 + c) : "memory"); }
__device__ __forceinline__ void turn_pass(int c) { asm volatile("bar.arrive %0, 256;\n" ::"r"(2 - c) : "memory"); }

#endif  /* TF_HOPPER_CODE */

enum { SCHED_SERIAL, SCHED_OVERLAP, SCHED_PINGPONG };

template <typename T, int D, int STAGES, int SCHED>
__global__ void __launch_bounds__(kThreads, 1)
    flash_hopper_kernel(const __grid_constant__ CUtensorMap tmq, const __grid_constant__ CUtensorMap tmk,
                        const __grid_constant__ CUtensorMap tmv, const tf_cuda_attn_args a) {
#ifdef TF_HOPPER_CODE
    using L = hopper_layout<D, STAGES>;
    constexpr int HALVES = D / 64;
    extern __shared__ unsigned char smem_raw[];
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const uint32_t sQ = base + L::q, sK = base + L::k, sV = base + L::v;
    const uint32_t bar_q = base + L::bars, bar_k = bar_q + 8, bar_v = bar_k + 8 * STAGES,
                   bar_ke = bar_v + 8 * STAGES, bar_ve = bar_ke + 8 * STAGES;
    const int tid = threadIdx.x, wg = tid >> 7;
    /* Causal: the heaviest query blocks (the last) start first. */
    const int64_t qblock = a.causal ? (int64_t)(gridDim.x - 1 - blockIdx.x) : (int64_t)blockIdx.x;
    const int64_t q0 = qblock * kBM, h = blockIdx.y, b = blockIdx.z, kh = h / (a.Hq / a.Hkv);
    int64_t kv_end = a.Lk;
    if (a.causal && a.q_off + q0 + kBM < kv_end) kv_end = a.q_off + q0 + kBM;
    const int ntiles = kv_end > 0 ? (int)((kv_end + kBN - 1) / kBN) : 0;

    if (tid == 0) {
        mbar_init(bar_q, 1);
        for (int s = 0; s < STAGES; s++) {
            mbar_init(bar_k + 8 * s, 1);
            mbar_init(bar_v + 8 * s, 1);
            mbar_init(bar_ke + 8 * s, kConsumerWarps);
            mbar_init(bar_ve + 8 * s, kConsumerWarps);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        /* ---- producer ---- */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
        if (tid == 0) {
            asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)&tmq) : "memory");
            asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)&tmk) : "memory");
            asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)&tmv) : "memory");
            mbar_expect_tx(bar_q, L::q_bytes);
#pragma unroll
            for (int hh = 0; hh < HALVES; hh++)
                tma_load(sQ + hh * L::q_half, &tmq, hh * 64, (int)q0, (int)h, (int)b, bar_q);
            for (int it = 0; it < ntiles; it++) {
                const int s = it % STAGES;
                const uint32_t round = (uint32_t)(it / STAGES);
                const int j0 = it * kBN;
                if (it >= STAGES) mbar_wait(bar_ke + 8 * s, (round - 1) & 1);
                mbar_expect_tx(bar_k + 8 * s, L::kv_bytes);
#pragma unroll
                for (int hh = 0; hh < HALVES; hh++)
                    tma_load(sK + s * L::kv_bytes + hh * L::kv_half, &tmk, hh * 64, j0, (int)kh, (int)b, bar_k + 8 * s);
                if (it >= STAGES) mbar_wait(bar_ve + 8 * s, (round - 1) & 1);
                mbar_expect_tx(bar_v + 8 * s, L::kv_bytes);
#pragma unroll
                for (int hh = 0; hh < HALVES; hh++)
                    tma_load(sV + s * L::kv_bytes + hh * L::kv_half, &tmv, hh * 64, j0, (int)kh, (int)b, bar_v + 8 * s);
            }
        }
    } else {
        /* ---- consumers ---- */
        asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
        const int c = wg - 1, ltid = tid - 128 * wg, warp = ltid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
        const int64_t row0 = q0 + 64 * c + 16 * warp + g;   /* this thread's rows: row0 and row0 + 8 */
        const T *mask = (const T *)a.mask;
        const int64_t mbase = b * a.ms[0] + h * a.ms[1];
        const uint32_t qa = sQ + 64 * c * 128;              /* this warpgroup's 64 rows of Q */
        float o[D / 2];
#pragma unroll
        for (int i = 0; i < D / 2; i++) o[i] = 0.0f;
        row_state st = {{-INFINITY, -INFINITY}, {0.0f, 0.0f}};
        float s[64];
        uint32_t p[kBN / 16][4];
        float scale_o[2];

        /* S = Q K^T for the tile in stage sk (issued, not waited for). */
        auto issue_scores = [&](int sk) {
            const uint32_t kb = sK + sk * L::kv_bytes;
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                const uint32_t off = (kk & 3) * 32;   /* 16 columns = 32 bytes into the swizzled row */
                wgmma_ss_n128<T>(s, desc_sw128(qa + (kk >> 2) * L::q_half + off, 16),
                                 desc_sw128(kb + (kk >> 2) * L::kv_half + off, 16), kk > 0);
            }
            wg_commit();
        };
        /* O += P V for the tile in stage sv (issued, not waited for). */
        auto issue_pv = [&](int sv) {
            const uint32_t vb = sV + sv * L::kv_bytes;
#pragma unroll
            for (int kk = 0; kk < kBN / 16; kk++) wgmma_rs<T, D>(o, p[kk], desc_sw128(vb + kk * 2048, L::kv_half));
            wg_commit();
        };
        auto release = [&](uint32_t bar) {
            __syncwarp();
            if (lane == 0) mbar_arrive(bar);
        };
        auto edge_of = [&](int it) {
            const int64_t j0 = (int64_t)it * kBN;
            return j0 + kBN > a.Lk || a.has_mask || (a.causal && j0 + kBN - 1 > a.q_off + q0);
        };

        /* PINGPONG: a warpgroup issues its products only in its turn, and
         * passes the turn once they are issued. Warpgroup 0 goes first; the
         * count of turns (ntiles + 1 issue points each) balances, since
         * warpgroup 1 does not pass after its last. */
        const bool pingpong = SCHED == SCHED_PINGPONG && ntiles > 0;
        int turns_left = ntiles + 1;
        auto my_turn = [&] {
            if (pingpong) turn_wait(c);
        };
        auto pass_turn = [&] {
            if (pingpong && !(c == 1 && --turns_left == 0)) turn_pass(c);
        };
        if (pingpong && c == 1) turn_pass(c);

        mbar_wait(bar_q, 0);
        if (SCHED == SCHED_SERIAL) {
            for (int it = 0; it < ntiles; it++) {
                const int sk = it % STAGES;
                const uint32_t ph = (uint32_t)(it / STAGES) & 1;
                mbar_wait(bar_k + 8 * sk, ph);
                wg_fence();
                issue_scores(sk);
                wg_wait<0>();
                fence_regs(s);
                release(bar_ke + 8 * sk);
                softmax_tile<T>(s, st, scale_o, a, (int64_t)it * kBN, row0, t, edge_of(it), mask, mbase);
                scale_rows(o, scale_o);
                pack_p<T>(s, p);
                mbar_wait(bar_v + 8 * sk, ph);
                wg_fence();
                issue_pv(sk);
                wg_wait<0>();
                fence_regs(o);
                release(bar_ve + 8 * sk);
            }
        } else if (ntiles > 0) {
            mbar_wait(bar_k, 0);
            my_turn();
            wg_fence();
            issue_scores(0);
            pass_turn();
            wg_wait<0>();
            fence_regs(s);
            release(bar_ke);
            softmax_tile<T>(s, st, scale_o, a, 0, row0, t, edge_of(0), mask, mbase);
            pack_p<T>(s, p);                             /* o is still zero: nothing to rescale */
            for (int it = 1; it < ntiles; it++) {
                const int sk = it % STAGES, sv = (it - 1) % STAGES;
                mbar_wait(bar_k + 8 * sk, (uint32_t)(it / STAGES) & 1);
                mbar_wait(bar_v + 8 * sv, (uint32_t)((it - 1) / STAGES) & 1);
                my_turn();
                wg_fence();
                issue_scores(sk);                        /* tile it's scores ... */
                issue_pv(sv);                            /* ... and tile it - 1's product, both in flight */
                pass_turn();
                wg_wait<1>();                            /* the scores are done */
                fence_regs(s);
                release(bar_ke + 8 * sk);
                softmax_tile<T>(s, st, scale_o, a, (int64_t)it * kBN, row0, t, edge_of(it), mask, mbase);
                wg_wait<0>();                            /* the product is done */
                fence_regs(o);
                release(bar_ve + 8 * sv);
                scale_rows(o, scale_o);
                pack_p<T>(s, p);
            }
            const int sv = (ntiles - 1) % STAGES;
            mbar_wait(bar_v + 8 * sv, (uint32_t)((ntiles - 1) / STAGES) & 1);
            my_turn();
            wg_fence();
            issue_pv(sv);
            pass_turn();
            wg_wait<0>();
            fence_regs(o);
            release(bar_ve + 8 * sv);
        }

        T *out = (T *)a.out + b * a.os[0] + h * a.os[1];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float l = st.l[r];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const float inv = 1.0f / l;                  /* no visible key: 0 * inf = NaN, as 0/0 elsewhere */
            const int64_t i = row0 + r * 8;
            if (i >= a.Lq) continue;
#pragma unroll
            for (int n = 0; n < D / 8; n++)
                *reinterpret_cast<uint32_t *>(out + i * a.os[2] + n * 8 + t * 2) =
                    pack2<T>(o[4 * n + 2 * r] * inv, o[4 * n + 2 * r + 1] * inv);
        }
    }
#endif  /* TF_HOPPER_CODE */
}

/* ---- host side ---- */

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void *p = nullptr;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess)
            p = nullptr;
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    }();
    return fn;
}

/* A map of the 4-D tensor (d, l, h, b) at base with element strides st
 * (b, h, l; unit along d), read in boxes of 64 x rows. A size-1 axis may
 * carry any stride: it gets a valid one. False if TMA cannot address it. */
bool make_map(CUtensorMap *m, bool bf16, const void *base, int64_t D, int64_t L, int64_t H, int64_t B,
              const int64_t st[3], int rows) {
    PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
    if (!encode) return false;
    cuuint64_t dims[4] = {(cuuint64_t)D, (cuuint64_t)(L > 0 ? L : 1), (cuuint64_t)H, (cuuint64_t)B};
    const int64_t elem[3] = {st[2], st[1], st[0]};   /* along l, h, b */
    cuuint64_t strides[3];
    for (int i = 0; i < 3; i++) {
        int64_t bytes = elem[i] * 2;
        if (dims[i + 1] == 1) bytes = i == 0 ? D * 2 : (int64_t)strides[i - 1] * (int64_t)dims[i];
        if (bytes <= 0 || bytes % 16 != 0 || bytes >= ((int64_t)1 << 40)) return false;
        strides[i] = (cuuint64_t)bytes;
    }
    cuuint32_t box[4] = {64, (cuuint32_t)rows, 1, 1}, estr[4] = {1, 1, 1, 1};
    CUresult r = encode(m, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
                        const_cast<void *>(base), dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                        CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS;
}

template <typename T, int D, int STAGES, int SCHED>
int launch(const tf_cuda_attn_args *a, const CUtensorMap &q, const CUtensorMap &k, const CUtensorMap &v,
           cudaStream_t st) {
    auto kernel = flash_hopper_kernel<T, D, STAGES, SCHED>;
    const size_t smem = hopper_layout<D, STAGES>::dynamic_smem;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return (int)e;
    dim3 grid((unsigned)((a->Lq + kBM - 1) / kBM), (unsigned)a->Hq, (unsigned)a->B);
    kernel<<<grid, kThreads, smem, st>>>(q, k, v, *a);
    return (int)cudaGetLastError();
}

template <typename T, int D> int launch_d(const tf_cuda_attn_args *a, const CUtensorMap &q, const CUtensorMap &k,
                                          const CUtensorMap &v, cudaStream_t st) {
    constexpr int STAGES = D == 128 ? 2 : 3;
    switch (a->flash_impl) {
    case TF_CUDA_FLASH_HOPPER_SERIAL: return launch<T, D, STAGES, SCHED_SERIAL>(a, q, k, v, st);
    case TF_CUDA_FLASH_HOPPER_OVERLAP: return launch<T, D, STAGES, SCHED_OVERLAP>(a, q, k, v, st);
    default: return launch<T, D, STAGES, SCHED_PINGPONG>(a, q, k, v, st);   /* auto, hopper, hopper-pingpong */
    }
}

}  // namespace

/* -1: not taken (the caller runs the sm_80 kernel); else a cudaError_t. */
extern "C" int tf_cuda_flash_hopper_launch(const tf_cuda_attn_args *a, void *stream) {
    /* MMA: the caller's kernel; UNAVAILABLE: the caller fails the op. */
    if (a->kind != TF_CUDA_ATTN_FLASH || a->flash_impl == TF_CUDA_FLASH_MMA || a->flash_impl == TF_CUDA_FLASH_UNAVAILABLE)
        return -1;
    if (a->head_dim != 64 && a->head_dim != 128) return -1;
    if (a->Lq > (int64_t)INT32_MAX || a->Lk > (int64_t)INT32_MAX || a->Hkv > INT32_MAX || a->B > INT32_MAX) return -1;
    const bool bf16 = a->type == TF_CUDA_BF16;
    CUtensorMap q, k, v;
    if (!make_map(&q, bf16, a->q, a->head_dim, a->Lq, a->Hq, a->B, a->qs, kBM) ||
        !make_map(&k, bf16, a->k, a->head_dim, a->Lk, a->Hkv, a->B, a->ks, kBN) ||
        !make_map(&v, bf16, a->v, a->head_dim, a->Lk, a->Hkv, a->B, a->vs, kBN))
        return -1;
    cudaStream_t st = (cudaStream_t)stream;
    if (bf16) return a->head_dim == 128 ? launch_d<__nv_bfloat16, 128>(a, q, k, v, st) : launch_d<__nv_bfloat16, 64>(a, q, k, v, st);
    return a->head_dim == 128 ? launch_d<__half, 128>(a, q, k, v, st) : launch_d<__half, 64>(a, q, k, v, st);
}

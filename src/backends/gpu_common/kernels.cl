/* tensorframe's portable kernels: OpenCL C 1.2, also compiled by nvcc for
 * the CUDA plugin through opencl_compat.h (TF_CUDA defined), so one source is
 * tested on PoCL here and runs on NVIDIA GPUs. Host side: plan.c.
 *
 * Built once per (device, dtype) with -DTF_DT=<dtype code> -DRWG=<reduce
 * work-group size> -DTS=<matmul tile> [-DTF_HAS_FP64]. TF_DT selects the
 * storage type T, the compute type C and their load/store macros; f16 is
 * stored through vload_half/vstore_half so it needs no cl_khr_fp16, bf16 is
 * a ushort holding the top half of a float. Integer arithmetic wraps (done
 * in ulong), float to integer conversion truncates and saturates (NaN -> 0),
 * exactly as the CPU reference does.
 */
#define DT_F32 0
#define DT_F64 1
#define DT_F16 2
#define DT_BF16 3
#define DT_I8 4
#define DT_I32 5
#define DT_I64 6
#define DT_U8 7
#define DT_BOOL 8

#ifdef TF_FORCE_BUILD_ERROR
#error "build error forced by tf_opencl_set_build_options (testing)"
#endif

/* Constructs OpenCL C and CUDA spell differently; opencl_compat.h defines
 * them for nvcc (TF_CUDA). */
#ifndef TF_CUDA
#define LOCAL_PTR local
#define MAKE_UINT4(a, b, c, d) ((uint4)((a), (b), (c), (d)))
#define MAKE_FLOAT4(a, b, c, d) ((float4)((a), (b), (c), (d)))
#endif

#ifdef TF_HAS_FP64
#ifndef TF_CUDA
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
typedef double wide_t;
#else
typedef float wide_t;
#endif

#define IS_FLOAT (TF_DT <= DT_BF16)

inline ushort f32_to_bf16(float f) {
    uint u = as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (ushort)(u >> 16);
}

#if TF_DT == DT_F32
typedef float T; typedef float C;
#define LD(p, i) ((p)[i])
#define ST(p, i, v) ((p)[i] = (float)(v))
#elif TF_DT == DT_F64
typedef double T; typedef double C;
#define LD(p, i) ((p)[i])
#define ST(p, i, v) ((p)[i] = (double)(v))
#elif TF_DT == DT_F16
typedef half T; typedef float C;
#define LD(p, i) vload_half((i), (p))
#define ST(p, i, v) vstore_half_rte((float)(v), (i), (p))
#elif TF_DT == DT_BF16
typedef ushort T; typedef float C;
#define LD(p, i) as_float((uint)(p)[i] << 16)
#define ST(p, i, v) ((p)[i] = f32_to_bf16((float)(v)))
#elif TF_DT == DT_I8
typedef char T; typedef long C;
#elif TF_DT == DT_I32
typedef int T; typedef long C;
#elif TF_DT == DT_I64
typedef long T; typedef long C;
#elif TF_DT == DT_U8
typedef uchar T; typedef long C;
#elif TF_DT == DT_BOOL
typedef uchar T; typedef long C;
#endif
/* The storage bits, for copies that must be exact (NaN payloads included). */
#if TF_DT == DT_F16
typedef ushort RAW_T;
#else
typedef T RAW_T;
#endif

#if !IS_FLOAT
#define LD(p, i) ((long)(p)[i])
#define ST(p, i, v) ((p)[i] = (T)(v))   /* two's complement wrap */
#endif

/* Geometry of up to four operands over one index space (mirrors the host's
 * cl_geom): extents, strides in elements per operand, offsets in elements. */
typedef struct geom {
    long shape[8];
    long stride[4][8];
    long offset[4];
    int ndim;
    int contiguous;
} geom;

/* Element offset of flat index i (row-major over g->shape) for operand k. */
inline long offset_of(const geom *g, int k, long i) {
    long off = g->offset[k];
    for (int d = g->ndim - 1; d >= 0; d--) {
        long e = g->shape[d];
        off += (i % e) * g->stride[k][d];
        i /= e;
    }
    return off;
}

/* ---- elementwise binary ---- */

/* op is the op table's value (TF_OP_ADD, ...): the host prepends them. */

#if TF_DT != DT_BOOL
#if !IS_FLOAT
/* Integer power by squaring, wrapping; negative exponents give 0 except
 * for bases 1 and -1 (what repeated division would round to). */
/* The bitwise int forms, as the CPU reference's (cpu_ref.c). */
inline long tf_and(long x, long y) { return x & y; }
inline long tf_or(long x, long y) { return x | y; }
inline long tf_xor(long x, long y) { return x ^ y; }
inline long tf_shl(long x, long y) { return y < 0 || y > 63 ? 0 : (long)((ulong)x << y); }
inline long tf_shr(long x, long y) { return y < 0 || y > 63 ? (x < 0 ? -1 : 0) : x >> y; }
inline long tf_ipow(long x, long y) {
    if (y < 0) return x == 1 ? 1 : x == -1 ? ((y & 1) ? -1 : 1) : 0;
    ulong r = 1, b = (ulong)x;
    while (y) {
        if (y & 1) r *= b;
        b *= b;
        y >>= 1;
    }
    return (long)r;
}
#endif

/* apply(op, x, y): the binary formulas of src/ops/formulas.txt. */
//@formulas binary

/* out (operand 0) = a (1) op b (2); out is contiguous. */
kernel void binary(int op, long n, geom g, global T *out, global const T *a, global const T *b) {
    long i = get_global_id(0);
    if (i >= n) return;
    long ia = g.contiguous ? g.offset[1] + i : offset_of(&g, 1, i);
    long ib = g.contiguous ? g.offset[2] + i : offset_of(&g, 2, i);
    ST(out, g.offset[0] + i, apply(op, LD(a, ia), LD(b, ib)));
}

#if TF_DT == DT_F32
/* Contiguous f32 operands, four elements per work-item: 128-bit loads and
 * stores (offsets in elements, multiples of 4). */
kernel void binary4(int op, long n4, long oo, long ao, long bo, global float *out, global const float *a,
                    global const float *b) {
    long i = get_global_id(0);
    if (i >= n4) return;
    float4 x = vload4(i, a + ao), y = vload4(i, b + bo);
    vstore4(MAKE_FLOAT4(apply(op, x.x, y.x), apply(op, x.y, y.y), apply(op, x.z, y.z), apply(op, x.w, y.w)), i, out + oo);
}
#endif

/* ---- elementwise unary (floats; f16/bf16 in f32) ---- */
#if IS_FLOAT
/* apply_unary(op, x, alpha, lo, hi): the unary formulas of src/ops/formulas.txt. */
//@formulas unary

/* out (operand 0) = f(x (operand 1)); out is contiguous. */
kernel void unary(int op, C alpha, C lo, C hi, long n, geom g, global T *out, global const T *x) {
    long i = get_global_id(0);
    if (i >= n) return;
    long ix = g.contiguous ? g.offset[1] + i : offset_of(&g, 1, i);
    ST(out, g.offset[0] + i, apply_unary(op, LD(x, ix), alpha, lo, hi));
}
#endif

/* ---- batched matmul: TS x TS tiles in local memory ----
 * g: batch axes (shape), batch strides of a (0), b (1), out (2), c (3);
 * offsets. With `epilogue` (GEMM): out = alpha * a@b + beta * c, c not read
 * when beta == 0. */
kernel void matmul(long M, long N, long K, long4 ms, geom g, global T *out, global const T *a,
                   global const T *b, int epilogue, wide_t alpha, wide_t beta, global const T *c, long2 cs) {
    local C As[TS][TS];
    local C Bs[TS][TS];
    int tx = get_local_id(0), ty = get_local_id(1);
    /* Two dimensions: the batch is folded into the second (rows rounded up
     * to the tile, then batches), which every backend can launch. */
    long rows = (M + TS - 1) / TS * TS, batches = 1;
    long j = get_global_id(0), i = get_global_id(1) % rows, bi = get_global_id(1) / rows;
    for (int d = 0; d < g.ndim; d++) batches *= g.shape[d];
    if (bi >= batches) return;                    /* a whole work-group past the end (rows are whole tiles) */
    long ao = offset_of(&g, 0, bi), bo = offset_of(&g, 1, bi), oo = g.offset[2] + bi * M * N;
    C acc = 0;
    for (long t = 0; t < K; t += TS) {
        As[ty][tx] = (i < M && t + tx < K) ? LD(a, ao + i * ms.x + (t + tx) * ms.y) : (C)0;
        Bs[ty][tx] = (t + ty < K && j < N) ? LD(b, bo + (t + ty) * ms.z + j * ms.w) : (C)0;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < TS; k++) {
#if IS_FLOAT
            acc += As[ty][k] * Bs[k][tx];
#else
            acc = (long)((ulong)acc + (ulong)As[ty][k] * (ulong)Bs[k][tx]);
#endif
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (i < M && j < N) {
        if (!epilogue) {
            ST(out, oo + i * N + j, acc);
        } else {
            wide_t v = alpha * (wide_t)acc;
            if (beta != 0) v += beta * (wide_t)LD(c, offset_of(&g, 3, bi) + i * cs.x + j * cs.y);
            ST(out, oo + i * N + j, v);
        }
    }
}
#endif /* not bool */

/* ---- comparisons (any dtype) and logic (bool program): bool results ---- */

kernel void compare(int op, long n, geom g, global uchar *out, global const T *a, global const T *b) {
    long i = get_global_id(0);
    if (i >= n) return;
    long ia = g.contiguous ? g.offset[1] + i : offset_of(&g, 1, i);
    long ib = g.contiguous ? g.offset[2] + i : offset_of(&g, 2, i);
    C x = LD(a, ia), y = LD(b, ib);
    uchar r;
    switch (op) {
    case TF_OP_EQ: r = x == y; break;
    case TF_OP_NE: r = x != y; break;
    case TF_OP_LT: r = x < y; break;
    case TF_OP_LE: r = x <= y; break;
    case TF_OP_GT: r = x > y; break;
    case TF_OP_GE: r = x >= y; break;
    case TF_OP_LOGICAL_AND: r = x != 0 && y != 0; break;
    default: r = x != 0 || y != 0; break;        /* TF_OP_LOGICAL_OR */
    }
    out[g.offset[0] + i] = r;
}

/* logical_not (bool program), isnan, isinf (any program; false for integers) */
kernel void bool_unary(int op, long n, geom g, global uchar *out, global const T *x) {
    long i = get_global_id(0);
    if (i >= n) return;
    C v = LD(x, g.contiguous ? g.offset[1] + i : offset_of(&g, 1, i));
    uchar r;
#if IS_FLOAT
    r = op == TF_OP_LOGICAL_NOT ? v == 0 : op == TF_OP_ISNAN ? isnan(v) != 0 : isinf(v) != 0;
#else
    r = op == TF_OP_LOGICAL_NOT ? v == 0 : 0;
#endif
    out[g.offset[0] + i] = r;
}

/* where: operands out (0), cond (1, bool), a (2), b (3) */
kernel void where_select(long n, geom g, global RAW_T *out, global const uchar *cond, global const RAW_T *a,
                         global const RAW_T *b) {
    long i = get_global_id(0);
    if (i >= n) return;
    long ic = g.contiguous ? g.offset[1] + i : offset_of(&g, 1, i);
    long ia = g.contiguous ? g.offset[2] + i : offset_of(&g, 2, i);
    long ib = g.contiguous ? g.offset[3] + i : offset_of(&g, 3, i);
    out[g.offset[0] + i] = cond[ic] ? a[ia] : b[ib];
}


/* ---- reductions: a work-group tree per (output, group), then across groups ----
 * go: the kept axes (operand 0 = input strides, offset[0] = input offset);
 * gr: the reduced axes (operand 0 = input strides). */
#if IS_FLOAT
typedef C ACC;
#else
typedef long ACC;
#endif

kernel void reduce_partial(long M, long R, long G, geom go, geom gr, global const T *in, global ACC *partial) {
    local ACC scratch[RWG];
    long m = get_group_id(1), grp = get_group_id(0);
    if (m >= M) return;                           /* a whole group: a backend may round the groups up */
    int lid = get_local_id(0);
    long base = offset_of(&go, 0, m);
    gr.offset[0] = 0;
    ACC acc = 0;
    for (long r = grp * RWG + lid; r < R; r += G * RWG) {
#if IS_FLOAT
        acc += LD(in, base + offset_of(&gr, 0, r));
#else
        acc = (long)((ulong)acc + (ulong)LD(in, base + offset_of(&gr, 0, r)));
#endif
    }
    scratch[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = RWG / 2; s > 0; s >>= 1) {
        if (lid < s) {
#if IS_FLOAT
            scratch[lid] += scratch[lid + s];
#else
            scratch[lid] = (long)((ulong)scratch[lid] + (ulong)scratch[lid + s]);
#endif
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) partial[m * G + grp] = scratch[0];
}

/* Sums each output's G partials; divides by count for a mean. Float
 * outputs have the input dtype, integer and bool sums are i64. */
#if IS_FLOAT
kernel void reduce_final(long M, long G, long count, int mean, global const ACC *partial, global T *out, long off) {
#else
kernel void reduce_final(long M, long G, long count, int mean, global const ACC *partial, global long *out, long off) {
#endif
    long m = get_global_id(0);
    if (m >= M) return;
    ACC s = 0;
    for (long k = 0; k < G; k++) {
#if IS_FLOAT
        s += partial[m * G + k];
#else
        s = (long)((ulong)s + (ulong)partial[m * G + k]);
#endif
    }
#if IS_FLOAT
    if (mean) s = count ? s / (C)count : (C)NAN;
    ST(out, off + m, s);
#else
    out[off + m] = s;
#endif
}

/* ---- every reduction: one work-group per output ----
 * op: 0 sum 1 mean 2 max 3 min 4 argmax 5 argmin 6 prod 7 var 8 std 9 logsumexp.
 * Phases combine with P_SUM, P_PROD, P_MAX, P_MIN, P_ARGMAX or P_ARGMIN; an
 * index of -1 means "no element yet". NaN is sticky for max/min and wins
 * argmax/argmin (the first NaN); ties keep the smaller index. */
#define P_SUM 0
#define P_PROD 1
#define P_MAX 2
#define P_MIN 3
#define P_ARGMAX 4
#define P_ARGMIN 5

#if IS_FLOAT
#define ACC_NAN(x) isnan(x)
#define ACC_LOWEST ((ACC)-INFINITY)
#define ACC_HIGHEST ((ACC)INFINITY)
#else
#define ACC_NAN(x) 0
#define ACC_LOWEST ((ACC)LONG_MIN)
#define ACC_HIGHEST ((ACC)LONG_MAX)
#endif

inline ACC acc_add(ACC a, ACC b) {
#if IS_FLOAT
    return a + b;
#else
    return (long)((ulong)a + (ulong)b);
#endif
}

inline ACC acc_mul(ACC a, ACC b) {
#if IS_FLOAT
    return a * b;
#else
    return (long)((ulong)a * (ulong)b);
#endif
}

/* Fold value x (position r) into (*a, *ai). */
inline void fold(int p, ACC *a, long *ai, ACC x, long r) {
    switch (p) {
    case P_SUM: *a = acc_add(*a, x); break;
    case P_PROD: *a = acc_mul(*a, x); break;
    case P_MAX: *a = ACC_NAN(*a) ? *a : ACC_NAN(x) ? x : (x > *a ? x : *a); break;
    case P_MIN: *a = ACC_NAN(*a) ? *a : ACC_NAN(x) ? x : (x < *a ? x : *a); break;
    default: {
        bool take;
        if (*ai < 0) take = true;
        else if (ACC_NAN(*a)) take = ACC_NAN(x) && r < *ai;
        else if (ACC_NAN(x)) take = true;
        else if (x == *a) take = r < *ai;
        else take = p == P_ARGMAX ? x > *a : x < *a;
        if (take) {
            *a = x;
            *ai = r;
        }
    }
    }
}

inline ACC identity_of(int p) {
    return p == P_PROD ? (ACC)1 : p == P_MAX ? ACC_LOWEST : p == P_MIN ? ACC_HIGHEST : (ACC)0;
}

/* Tree over the work-group's partial results; the answer lands in v[0], ix[0]. */
inline void tree(int p, LOCAL_PTR ACC *v, LOCAL_PTR long *ix, int lid) {
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = RWG / 2; s > 0; s >>= 1) {
        if (lid < s && (p < P_ARGMAX || ix[lid + s] >= 0)) {
            ACC a = v[lid];
            long ai = ix[lid];
            fold(p, &a, &ai, v[lid + s], ix[lid + s]);
            v[lid] = a;
            ix[lid] = ai;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

kernel void reduce_full(int op, long R, long correction, geom go, geom gr, global const T *in, global uchar *out,
                        long out_off, int out_long) {
    local ACC v[RWG];
    local long ix[RWG];
    long m = get_group_id(0);
    int lid = get_local_id(0);
    long base = offset_of(&go, 0, m);
    gr.offset[0] = 0;
    int p = op == TF_OP_PROD ? P_PROD : op == TF_OP_MAX || op == TF_OP_LOGSUMEXP ? P_MAX : op == TF_OP_MIN ? P_MIN
          : op == TF_OP_ARGMAX ? P_ARGMAX : op == TF_OP_ARGMIN ? P_ARGMIN : P_SUM;
    ACC acc = identity_of(p);
    long ai = -1;
    for (long r = lid; r < R; r += RWG) fold(p, &acc, &ai, LD(in, base + offset_of(&gr, 0, r)), r);
    v[lid] = acc;
    ix[lid] = ai;
    tree(p, v, ix, lid);
    ACC result = v[0];
    long result_ix = ix[0];
#if IS_FLOAT
    if (op == TF_OP_MEAN) result = R ? result / (ACC)R : (ACC)NAN;
    bool lse = op == TF_OP_LOGSUMEXP;
    if (op == TF_OP_VAR || op == TF_OP_STD || lse) {   /* a second pass around the mean or the max */
        ACC center = lse ? result : (R ? result / (ACC)R : (ACC)NAN);
        if (!(lse && (isnan(center) || isinf(center)))) {
            barrier(CLK_LOCAL_MEM_FENCE);
            ACC acc2 = 0;
            for (long r = lid; r < R; r += RWG) {
                ACC d = LD(in, base + offset_of(&gr, 0, r)) - center;
                acc2 += lse ? exp(d) : d * d;
            }
            v[lid] = acc2;
            ix[lid] = -1;
            tree(P_SUM, v, ix, lid);
            if (lse) {
                result = center + log(v[0]);
            } else {
                ACC ss = v[0], div = (ACC)(R - correction);
                ACC var = div > 0 ? ss / div : (ss == 0 || isnan(ss)) ? (ACC)NAN : (ACC)INFINITY;
                result = op == TF_OP_STD ? sqrt(var) : var;
            }
        } else {
            result = center;
        }
    }
#endif
    if (lid == 0) {
        if (op == TF_OP_ARGMAX || op == TF_OP_ARGMIN) ((global long *)out)[out_off + m] = result_ix;
        else if (out_long) ((global long *)out)[out_off + m] = (long)result;
        else ST((global T *)out, out_off + m, result);
    }
}

#if IS_FLOAT
/* ---- row ops: one work-group per line ----
 * op: TF_OP_SOFTMAX, _LOG_SOFTMAX, _RMSNORM or _LAYERNORM; g covers the lines
 * (operand 0 = x, 1 = out); xs/os step along the line. */
kernel void row_op(int op, long len, long xs, long os, wide_t eps, int has_w, int has_b, geom g, global const T *x,
                   global T *out, global const T *w, long w_off, long ws, global const T *b, long b_off, long bs) {
    local ACC v[RWG];
    local long ix[RWG];
    long line = get_group_id(0);
    int lid = get_local_id(0);
    long xb = offset_of(&g, 0, line), ob = offset_of(&g, 1, line);
    if (op == TF_OP_SOFTMAX || op == TF_OP_LOG_SOFTMAX) {
        ACC acc = ACC_LOWEST;
        long ai = -1;
        for (long j = lid; j < len; j += RWG) fold(P_MAX, &acc, &ai, LD(x, xb + j * xs), j);
        v[lid] = acc;
        ix[lid] = -1;
        tree(P_MAX, v, ix, lid);
        ACC m = v[0];
        barrier(CLK_LOCAL_MEM_FENCE);
        acc = 0;
        for (long j = lid; j < len; j += RWG) acc += exp(LD(x, xb + j * xs) - m);
        v[lid] = acc;
        tree(P_SUM, v, ix, lid);
        ACC sum = v[0];
        for (long j = lid; j < len; j += RWG) {
            ACC d = LD(x, xb + j * xs) - m;
            ST(out, ob + j * os, op == TF_OP_SOFTMAX ? exp(d) / sum : d - log(sum));
        }
        return;
    }
    ACC mean = 0, acc = 0;
    if (op == TF_OP_LAYERNORM) {
        for (long j = lid; j < len; j += RWG) acc += LD(x, xb + j * xs);
        v[lid] = acc;
        ix[lid] = -1;
        tree(P_SUM, v, ix, lid);
        mean = v[0] / (ACC)len;
        barrier(CLK_LOCAL_MEM_FENCE);
        acc = 0;
    }
    for (long j = lid; j < len; j += RWG) {
        ACC d = LD(x, xb + j * xs) - mean;
        acc += d * d;
    }
    v[lid] = acc;
    ix[lid] = -1;
    tree(P_SUM, v, ix, lid);
    ACC inv = (ACC)1 / sqrt(v[0] / (ACC)len + (ACC)eps);
    for (long j = lid; j < len; j += RWG) {
        ACC r = (LD(x, xb + j * xs) - mean) * inv;
        if (has_w) r *= LD(w, w_off + j * ws);
        if (has_b) r += LD(b, b_off + j * bs);
        ST(out, ob + j * os, r);
    }
}

/* ---- rotary position embedding: one work-item per element ----
 * g: the shape of x, operand 0 = x, 1 = out. */
kernel void rope(long n, int neox, long rot, wide_t theta, int ax, geom g, global const T *x, global T *out,
                 global const uchar *pos, long p_off, long ps, int pos64) {
    long i = get_global_id(0);
    if (i >= n) return;
    long rest = i, xo = g.offset[0], c_ax = 0, e = 0;
    for (int d = g.ndim - 1; d >= 0; d--) {
        long c = rest % g.shape[d];
        rest /= g.shape[d];
        xo += c * g.stride[0][d];
        if (d == ax) c_ax = c;
        if (d == g.ndim - 1) e = c;
    }
    C v = LD(x, xo);
    if (e < rot) {
        long hd = rot / 2, k = neox ? e % hd : e / 2, partner = neox ? (e < hd ? e + hd : e - hd) : e ^ 1;
        bool first = neox ? e < hd : (e % 2) == 0;
        long pi = p_off + c_ax * ps;
        long p = pos64 ? ((global const long *)pos)[pi] : (long)((global const int *)pos)[pi];
        wide_t angle = (wide_t)p * pow(theta, (wide_t)(-2 * k) / (wide_t)rot);
        wide_t u = LD(x, xo + (partner - e) * g.stride[0][g.ndim - 1]), cs = cos(angle), sn = sin(angle);
        v = first ? (wide_t)v * cs - u * sn : u * sn + (wide_t)v * cs;
    }
    ST(out, g.contiguous ? g.offset[1] + i : offset_of(&g, 1, i), v);
}

/* ---- scaled dot-product attention: one work-item per query row, online
 * softmax over the keys (no scores matrix). Strides st[t] and offsets
 * off[t] for t = q, k, v, mask, out; axes (b, h, l, d). ---- */
#define MAX_DV 256
typedef struct attn_geom {
    long B, Hq, Lq, D, Hkv, Lk, Dv, q_off;
    long st[5][4];
    long off[5];
} attn_geom;

kernel void sdpa(wide_t scale, int causal, int has_mask, attn_geom a, global const T *q, global const T *k,
                 global const T *v, global const T *mask, global T *out) {
    long r = get_global_id(0);
    if (r >= a.B * a.Hq * a.Lq) return;
    long i = r % a.Lq, h = (r / a.Lq) % a.Hq, b = r / (a.Lq * a.Hq), kh = h / (a.Hq / a.Hkv);
    long qb = a.off[0] + b * a.st[0][0] + h * a.st[0][1] + i * a.st[0][2];
    long kb = a.off[1] + b * a.st[1][0] + kh * a.st[1][1], vb = a.off[2] + b * a.st[2][0] + kh * a.st[2][1];
    long mb = a.off[3] + b * a.st[3][0] + h * a.st[3][1] + i * a.st[3][2];
    C acc[MAX_DV];
    for (long e = 0; e < a.Dv; e++) acc[e] = 0;
    C m = -INFINITY, l = 0;
    for (long j = 0; j < a.Lk; j++) {
        if (causal && j > a.q_off + i) break;
        C s = 0;
        for (long d = 0; d < a.D; d++) s += LD(q, qb + d * a.st[0][3]) * LD(k, kb + j * a.st[1][2] + d * a.st[1][3]);
        s = s * (C)scale;
        if (has_mask) s += LD(mask, mb + j * a.st[3][3]);
        if (s == -INFINITY) continue;
        C m_new = (s > m || isnan(s)) ? s : m;
        C keep = exp(m - m_new), p = exp(s - m_new);
        l = l * keep + p;
        for (long e = 0; e < a.Dv; e++) acc[e] = acc[e] * keep + p * LD(v, vb + j * a.st[2][2] + e * a.st[2][3]);
        m = m_new;
    }
    long ob = a.off[4] + b * a.st[4][0] + h * a.st[4][1] + i * a.st[4][2];
    for (long e = 0; e < a.Dv; e++) ST(out, ob + e * a.st[4][3], acc[e] / l);   /* no visible key: 0/0 = NaN */
}

/* ---- conv2d and pooling (NCHW): one work-item per output element ----
 * cg: x = input, w = weight, b = bias, o = out; strides per (n, c, h, w). */
typedef struct conv_geom {
    long N, C, H, W, O, Ho, Wo, cg, kh, kw, groups;
    long stride[2], pad[2], dil[2];
    long xs[4], ws[4], os[4], bs;
    long x_off, w_off, o_off, b_off;
} conv_geom;

kernel void conv2d(int has_bias, conv_geom g, global const T *x, global const T *w, global const T *b, global T *out) {
    long i = get_global_id(0);
    if (i >= g.N * g.O * g.Ho * g.Wo) return;
    long xo = i % g.Wo, y = (i / g.Wo) % g.Ho, oc = (i / (g.Wo * g.Ho)) % g.O, n = i / (g.Wo * g.Ho * g.O);
    long c0 = (oc / (g.O / g.groups)) * g.cg;
    C acc = has_bias ? LD(b, g.b_off + oc * g.bs) : (C)0;
    for (long c = 0; c < g.cg; c++)
        for (long a = 0; a < g.kh; a++) {
            long yi = y * g.stride[0] - g.pad[0] + a * g.dil[0];
            if (yi < 0 || yi >= g.H) continue;
            for (long bb = 0; bb < g.kw; bb++) {
                long xi = xo * g.stride[1] - g.pad[1] + bb * g.dil[1];
                if (xi < 0 || xi >= g.W) continue;
                acc += LD(x, g.x_off + n * g.xs[0] + (c0 + c) * g.xs[1] + yi * g.xs[2] + xi * g.xs[3]) *
                       LD(w, g.w_off + oc * g.ws[0] + c * g.ws[1] + a * g.ws[2] + bb * g.ws[3]);
            }
        }
    ST(out, g.o_off + n * g.os[0] + oc * g.os[1] + y * g.os[2] + xo * g.os[3], acc);
}

/* is_max: max pooling (NaN sticky, -inf padding); else average pooling with
 * count_pad deciding whether padding counts in the divisor. kh/kw are the
 * window, C the channels. */
kernel void pool2d(int is_max, int count_pad, conv_geom g, global const T *x, global T *out) {
    long i = get_global_id(0);
    if (i >= g.N * g.C * g.Ho * g.Wo) return;
    long xo = i % g.Wo, y = (i / g.Wo) % g.Ho, c = (i / (g.Wo * g.Ho)) % g.C, n = i / (g.Wo * g.Ho * g.C);
    C acc = is_max ? (C)-INFINITY : (C)0;
    long counted = 0;
    for (long a = 0; a < g.kh; a++)
        for (long bb = 0; bb < g.kw; bb++) {
            long yi = y * g.stride[0] - g.pad[0] + a * g.dil[0], xi = xo * g.stride[1] - g.pad[1] + bb * g.dil[1];
            bool inside = yi >= 0 && yi < g.H && xi >= 0 && xi < g.W;
            if (!is_max && (inside || count_pad) && yi < g.H + g.pad[0] && xi < g.W + g.pad[1]) counted++;
            if (!inside) continue;
            C v = LD(x, g.x_off + n * g.xs[0] + c * g.xs[1] + yi * g.xs[2] + xi * g.xs[3]);
            if (!is_max) acc += v;
            else if (isnan(v) || v > acc) acc = isnan(acc) ? acc : v;
        }
    if (!is_max) acc = counted ? acc / (C)counted : (C)NAN;
    ST(out, g.o_off + n * g.os[0] + c * g.os[1] + y * g.os[2] + xo * g.os[3], acc);
}

/* ---- Adam / AdamW in place: operands param (0), grad (1), m (2), v (3) ---- */
kernel void adam(long n, geom g, wide_t lr, wide_t b1, wide_t b2, wide_t eps, wide_t wd, wide_t c1, wide_t c2,
                 int decoupled, global T *p, global const T *grad, global T *m, global T *v) {
    long i = get_global_id(0);
    if (i >= n) return;
    long po = offset_of(&g, 0, i), go = offset_of(&g, 1, i), mo = offset_of(&g, 2, i), vo = offset_of(&g, 3, i);
    wide_t pv = LD(p, po), gv = LD(grad, go);
    if (decoupled) pv *= 1 - lr * wd;
    else gv += wd * pv;
    wide_t mv = b1 * (wide_t)LD(m, mo) + (1 - b1) * gv, vv = b2 * (wide_t)LD(v, vo) + (1 - b2) * gv * gv;
    pv -= lr * (mv / c1) / (sqrt(vv / c2) + eps);
    ST(m, mo, mv);
    ST(v, vo, vv);
    ST(p, po, pv);
}
#endif

/* cumsum: one work-item per line; g covers the line index space
 * (operand 0 = input, 1 = output). */
kernel void cumsum(long lines, long len, geom g, long is, long os, global const T *in, global uchar *out, int out_long) {
    long i = get_global_id(0);
    if (i >= lines) return;
    long ip = offset_of(&g, 0, i), op = offset_of(&g, 1, i);
    ACC acc = 0;
    for (long j = 0; j < len; j++) {
        acc = acc_add(acc, LD(in, ip + j * is));
        if (out_long) ((global long *)out)[op + j * os] = (long)acc;
        else ST((global T *)out, op + j * os, acc);
    }
}

/* ---- sort, argsort, searchsorted ---- */

/* The op table's total order: NaN after every number and equal to NaN;
 * -0.0 equals 0.0. */
inline int sorts_before(C a, C b) {
#if IS_FLOAT
    return isnan(b) ? !isnan(a) : a < b;
#else
    return a < b;
#endif
}

/* sort / argsort: one work-item per element, which counts the elements of
 * its line that go before it (stable: equal ones only from the left) and
 * writes itself (or its position) there. O(len) per item, no scratch. g
 * covers the line index space (operand 0 = input, 1 = output). */
kernel void sort_rank(long lines, long len, geom g, long is, long os, int descending, int values,
                      global const T *in, global uchar *out) {
    long i = get_global_id(0);
    if (i >= lines * len) return;
    long line = i / len, k = i % len;
    long ip = offset_of(&g, 0, line), op = offset_of(&g, 1, line);
    C x = LD(in, ip + k * is);
    long rank = 0;
    for (long j = 0; j < len; j++) {
        C y = LD(in, ip + j * is);
        int ahead = descending ? sorts_before(x, y) : sorts_before(y, x);
        if (ahead || (j < k && !sorts_before(x, y) && !sorts_before(y, x))) rank++;
    }
    if (values) ((global RAW_T *)out)[op + rank * os] = ((global const RAW_T *)in)[ip + k * is];
    else ((global long *)out)[op + rank * os] = k;
}

/* searchsorted: one work-item per value, a binary search of the 1-d sorted
 * input (element offset so, stride ss). g covers the values (operand 0 =
 * values, 1 = output). */
kernel void searchsorted(long n, long len, geom g, long so, long ss, int right, global const T *sorted,
                         global const T *values, global long *out) {
    long i = get_global_id(0);
    if (i >= n) return;
    C v = LD(values, offset_of(&g, 0, i));
    long lo = 0, hi = len;
    while (lo < hi) {
        long mid = lo + (hi - lo) / 2;
        C s = LD(sorted, so + mid * ss);
        int after = right ? !sorts_before(v, s) : sorts_before(s, v);
        if (after) lo = mid + 1;
        else hi = mid;
    }
    out[offset_of(&g, 1, i)] = lo;
}

/* ---- copy / cast: this program's dtype is the destination ---- */

inline wide_t load_float_any(global const uchar *p, int dt, long i) {
    switch (dt) {
#ifdef TF_HAS_FP64
    case DT_F64: return ((global const double *)p)[i];
#endif
    case DT_F16: return vload_half(i, (global const half *)p);
    case DT_BF16: return as_float((uint)((global const ushort *)p)[i] << 16);
    default: return ((global const float *)p)[i];
    }
}

inline long load_long_any(global const uchar *p, int dt, long i) {
    switch (dt) {
    case DT_I8: return ((global const char *)p)[i];
    case DT_I32: return ((global const int *)p)[i];
    case DT_I64: return ((global const long *)p)[i];
    case DT_U8: return ((global const uchar *)p)[i];
    default: return ((global const uchar *)p)[i] != 0;
    }
}

/* The CPU reference's rules: floats round (through f32 for f16/bf16),
 * integers truncate and saturate with NaN -> 0, bool is v != 0. */
inline void store_from_float(global T *out, long i, wide_t v) {
#if TF_DT == DT_F16 || TF_DT == DT_BF16
    ST(out, i, (float)v);
#elif IS_FLOAT
    ST(out, i, v);
#elif TF_DT == DT_BOOL
    out[i] = v != 0;
#elif TF_DT == DT_I8
    out[i] = convert_char_sat_rtz(v);
#elif TF_DT == DT_I32
    out[i] = convert_int_sat_rtz(v);
#elif TF_DT == DT_I64
    out[i] = convert_long_sat_rtz(v);
#elif TF_DT == DT_U8
    out[i] = convert_uchar_sat_rtz(v);
#endif
}

inline void store_from_long(global T *out, long i, long v) {
#if TF_DT == DT_BOOL
    out[i] = v != 0;
#elif IS_FLOAT
    store_from_float(out, i, (wide_t)v);
#else
    ST(out, i, v);
#endif
}

/* g: operand 0 = out (contiguous, or a strided view for copies into part
 * of a tensor), 1 = source, in source elements. */
kernel void copy_from(int src_dt, long n, geom g, global T *out, global const uchar *src) {
    long i = get_global_id(0);
    if (i >= n) return;
    long is = g.contiguous ? g.offset[1] + i : offset_of(&g, 1, i);
    long io = g.contiguous ? g.offset[0] + i : offset_of(&g, 0, i);
    if (src_dt == TF_DT) ((global RAW_T *)out)[io] = ((global const RAW_T *)src)[is];
    else if (src_dt <= DT_BF16) store_from_float(out, io, load_float_any(src, src_dt, is));
    else store_from_long(out, io, load_long_any(src, src_dt, is));
}

/* index_select (gather = 0) and gather (gather = 1); g: shape = output
 * shape, operand 0 = x, 1 = index, 2 = out (contiguous). */
kernel void index_pick(int gather, int axis, long n, geom g, global RAW_T *out, global const RAW_T *x,
                       global const uchar *index, int index64) {
    long i = get_global_id(0);
    if (i >= n) return;
    long rest = i, xo = g.offset[0], io = g.offset[1], c_axis = 0;
    for (int d = g.ndim - 1; d >= 0; d--) {
        long e = g.shape[d], c = rest % e;
        rest /= e;
        if (d == axis) c_axis = c;
        else xo += c * g.stride[0][d];
        if (gather) io += c * g.stride[1][d];
    }
    if (!gather) io += c_axis * g.stride[1][0];
    long pick = index64 ? ((global const long *)index)[io] : (long)((global const int *)index)[io];
    out[g.offset[2] + i] = x[xo + pick * g.stride[0][axis]];
}

/* tril (upper = 0) / triu (upper = 1) over the last two axes; operand 0 =
 * out (contiguous), 1 = x. */
kernel void triangle(int upper, long k, long n, geom g, global RAW_T *out, global const RAW_T *x) {
    long i = get_global_id(0);
    if (i >= n) return;
    long cols = g.shape[g.ndim - 1], rows = g.shape[g.ndim - 2];
    long above = i % cols - (i / cols) % rows;
    bool keep = upper ? above >= k : above <= k;
    out[g.offset[0] + i] = keep ? x[g.contiguous ? g.offset[1] + i : offset_of(&g, 1, i)] : (RAW_T)0;
}

/* ---- creation ---- */

/* Every element of out[off, off + n) gets the bits of one element (low bytes of `bits`). */
kernel void fill(long n, ulong bits, global RAW_T *out, long off) {
    long i = get_global_id(0);
    if (i >= n) return;
#if TF_DT == DT_F32
    out[off + i] = as_float((uint)bits);
#elif TF_DT == DT_F64
    out[off + i] = as_double(bits);
#else
    out[off + i] = (RAW_T)bits;
#endif
}

#if TF_DT != DT_BOOL
kernel void arange(long n, wide_t start, wide_t step, global T *out, long off) {
    long i = get_global_id(0);
    if (i < n) store_from_float(out, off + i, start + (wide_t)i * step);
}
#endif

#if IS_FLOAT
/* Philox4x32-10, as in tensorframe/numerics.h: counter = element index. */
inline uint4 philox(ulong counter, ulong key) {
    uint c0 = (uint)counter, c1 = (uint)(counter >> 32), c2 = 0, c3 = 0;
    uint k0 = (uint)key, k1 = (uint)(key >> 32);
    for (int r = 0; r < 10; r++) {
        uint h0 = mul_hi(0xD2511F53u, c0), l0 = 0xD2511F53u * c0;
        uint h1 = mul_hi(0xCD9E8D57u, c2), l1 = 0xCD9E8D57u * c2;
        uint n0 = h1 ^ c1 ^ k0, n2 = h0 ^ c3 ^ k1;
        c1 = l1; c3 = l0; c0 = n0; c2 = n2;
        k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
    }
    return MAKE_UINT4(c0, c1, c2, c3);
}

kernel void rand_fill(int normal, long n, ulong seed, global T *out, long off) {
    long i = get_global_id(0);
    if (i >= n) return;
    uint4 w = philox((ulong)i, seed);
    wide_t v;
    if (normal) {
        wide_t u1 = ((wide_t)w.z + 1) * (wide_t)(1.0 / 4294967296.0);
        wide_t u2 = (wide_t)w.w * (wide_t)(1.0 / 4294967296.0);
        v = sqrt(-2 * log(u1)) * cos((wide_t)6.283185307179586 * u2);
    } else {
#if TF_DT == DT_F64
        ulong bits = (((ulong)w.x << 21) ^ (ulong)(w.y >> 11)) & ((1ul << 53) - 1);
        v = (wide_t)bits * (1.0 / 9007199254740992.0);
#else
        const int nb = TF_DT == DT_F16 ? 11 : TF_DT == DT_BF16 ? 8 : 24;
        v = (wide_t)(w.x >> (32 - nb)) / (wide_t)(1u << nb);
#endif
    }
    store_from_float(out, off + i, v);
}
#endif

/* ---- block-quantized dtypes (ggml's layouts; see cpu_quant.c) ----
 * The programs of the float dtypes decode (quant_decode: one work-item per
 * element, into this program's dtype) and encode (quant_encode: one
 * work-item per block, from it); the f32 program multiplies (qgemv for a
 * few activation rows, qmatmul in tiles for many). Decoding rounds exactly
 * as the CPU does (each product rounded before the add, so no contraction
 * into fused multiply-adds), so every device decodes the same bits. */
#if IS_FLOAT
#define DT_Q4_0 9
#define DT_Q4_1 10
#define DT_Q8_0 11
#define DT_Q4_K 12
#define DT_Q6_K 13
#define DT_Q5_0 14
#define DT_Q5_1 15
#define DT_Q2_K 16
#define DT_Q3_K 17
#define DT_Q5_K 18
#define DT_IQ4_NL 19
#define DT_IQ4_XS 20

#ifdef TF_CUDA
#define MUL_RN(a, b) __fmul_rn((a), (b))
#define ADD_RN(a, b) __fadd_rn((a), (b))
#else
#pragma OPENCL FP_CONTRACT OFF
#define MUL_RN(a, b) ((a) * (b))
#define ADD_RN(a, b) ((a) + (b))
#endif

inline int q_block_elems(int wt) {
    return wt == DT_Q4_K || wt == DT_Q6_K || wt == DT_Q2_K || wt == DT_Q3_K || wt == DT_Q5_K || wt == DT_IQ4_XS ? 256 : 32;
}

inline int q_block_bytes(int wt) {
    switch (wt) {
    case DT_Q4_0: return 18;
    case DT_Q4_1: return 20;
    case DT_Q8_0: return 34;
    case DT_Q4_K: return 144;
    case DT_Q5_0: return 22;
    case DT_Q5_1: return 24;
    case DT_Q2_K: return 84;
    case DT_Q3_K: return 110;
    case DT_Q5_K: return 176;
    case DT_IQ4_NL: return 18;
    case DT_IQ4_XS: return 136;
    default: return 210;
    }
}

/* The f16 at p (every f16 of every layout sits at an even byte). */
inline float q_f16(global const uchar *p) { return vload_half(0, (global const half *)p); }

/* IQ4_NL's and IQ4_XS's codebook entry i, from two packed words (no
 * constant arrays: the CUDA and HIP builds of this file have none). */
inline int iq4_value(int i) {
    ulong word = i < 8 ? 0xF6EADDCFBFAD9881ul : 0x7159453526190D01ul;
    return (int)(char)(uchar)(word >> (8 * (i % 8)));
}

/* Q4_K's and Q5_K's 6-bit scale and min of sub-block j. */
inline void q_k_scale_min(global const uchar *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
        *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

/* Q3_K's signed scale of group g (of 16), IQ4_XS's of sub-block j (of 32). */
inline int q3_k_scale(global const uchar *s, int g) {
    return (((s[g % 8] >> (4 * (g / 8))) & 15) | ((s[8 + g % 4] >> (2 * (g / 4))) & 3) << 4) - 32;
}
inline int iq4_xs_scale(global const uchar *b, int j) {
    return (((b[4 + j / 2] >> (4 * (j % 2))) & 15) | ((b[2 + j / 4] >> (2 * (j % 4))) & 3) << 4) - 32;
}

inline uint q_u32(global const uchar *p) { return (uint)p[0] | (uint)p[1] << 8 | (uint)p[2] << 16 | (uint)p[3] << 24; }

/* The 32 elements of chunk c (elements 32c .. 32c + 31) of a quantized
 * row: a whole block of the 32-element formats, a sub-block (one scale) of
 * the K-quants. Every kernel decodes a chunk at a time, so a block's header
 * is read and its switch taken once per 32 elements. */
inline void q_chunk32(int wt, global const uchar *row, long c, float *y) {
    switch (wt) {
    case DT_Q4_0: {
        global const uchar *b = row + c * 18;
        float d = q_f16(b);
        for (int j = 0; j < 16; j++) {
            y[j] = MUL_RN(d, (float)((b[2 + j] & 15) - 8));
            y[j + 16] = MUL_RN(d, (float)((b[2 + j] >> 4) - 8));
        }
        return;
    }
    case DT_Q4_1: {
        global const uchar *b = row + c * 20;
        float d = q_f16(b), m = q_f16(b + 2);
        for (int j = 0; j < 16; j++) {
            y[j] = ADD_RN(MUL_RN(d, (float)(b[4 + j] & 15)), m);
            y[j + 16] = ADD_RN(MUL_RN(d, (float)(b[4 + j] >> 4)), m);
        }
        return;
    }
    case DT_Q8_0: {
        global const uchar *b = row + c * 34;
        float d = q_f16(b);
        for (int j = 0; j < 32; j++) y[j] = MUL_RN((float)(char)b[2 + j], d);
        return;
    }
    case DT_Q4_K: {
        global const uchar *b = row + c / 8 * 144;
        int j = (int)(c % 8), sc, m;
        q_k_scale_min(b + 4, j, &sc, &m);
        float ds = MUL_RN(q_f16(b), (float)sc), dm = MUL_RN(q_f16(b + 2), (float)m);
        global const uchar *q = b + 16 + 32 * (j / 2);
        int shift = 4 * (j % 2);
        for (int l = 0; l < 32; l++) y[l] = ADD_RN(MUL_RN(ds, (float)((q[l] >> shift) & 15)), -dm);
        return;
    }
    case DT_Q5_0: case DT_Q5_1: {
        int one = wt == DT_Q5_1;
        global const uchar *b = row + c * (one ? 24 : 22), *qs = b + (one ? 8 : 6);
        uint qh = q_u32(b + (one ? 4 : 2));
        float d = q_f16(b), m = one ? q_f16(b + 2) : 0.0f;
        for (int j = 0; j < 16; j++) {
            int lo = (qs[j] & 15) | (int)((qh >> j) & 1) << 4, hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = one ? ADD_RN(MUL_RN(d, (float)lo), m) : MUL_RN(d, (float)(lo - 16));
            y[j + 16] = one ? ADD_RN(MUL_RN(d, (float)hi), m) : MUL_RN(d, (float)(hi - 16));
        }
        return;
    }
    case DT_Q2_K: {                                  /* chunk = 2-bit field r % 4 of bytes 32 (r / 4) .. */
        global const uchar *b = row + c / 8 * 84;
        int r = (int)(c % 8);
        float d = q_f16(b + 80), dmin = q_f16(b + 82);
        global const uchar *q = b + 16 + 32 * (r / 4);
        for (int l = 0; l < 32; l++) {
            int sc = b[2 * r + l / 16];
            float dl = MUL_RN(d, (float)(sc & 15)), ml = MUL_RN(dmin, (float)(sc >> 4));
            y[l] = ADD_RN(MUL_RN(dl, (float)((q[l] >> (2 * (r % 4))) & 3)), -ml);
        }
        return;
    }
    case DT_Q3_K: {
        global const uchar *b = row + c / 8 * 110;
        int r = (int)(c % 8);
        float d = q_f16(b + 108);
        float dl0 = MUL_RN(d, (float)q3_k_scale(b + 96, 2 * r)), dl1 = MUL_RN(d, (float)q3_k_scale(b + 96, 2 * r + 1));
        global const uchar *q = b + 32 + 32 * (r / 4);
        for (int l = 0; l < 32; l++) {
            int level = ((q[l] >> (2 * (r % 4))) & 3) - (((b[l] >> r) & 1) ? 0 : 4);
            y[l] = MUL_RN(l < 16 ? dl0 : dl1, (float)level);
        }
        return;
    }
    case DT_Q5_K: {
        global const uchar *b = row + c / 8 * 176;
        int j = (int)(c % 8), sc, m;
        q_k_scale_min(b + 4, j, &sc, &m);
        float ds = MUL_RN(q_f16(b), (float)sc), dm = MUL_RN(q_f16(b + 2), (float)m);
        global const uchar *q = b + 48 + 32 * (j / 2);
        for (int l = 0; l < 32; l++) {
            int v = ((q[l] >> (4 * (j % 2))) & 15) | ((b[16 + l] >> j) & 1) << 4;
            y[l] = ADD_RN(MUL_RN(ds, (float)v), -dm);
        }
        return;
    }
    case DT_IQ4_NL: {
        global const uchar *b = row + c * 18;
        float d = q_f16(b);
        for (int j = 0; j < 16; j++) {
            y[j] = MUL_RN(d, (float)iq4_value(b[2 + j] & 15));
            y[j + 16] = MUL_RN(d, (float)iq4_value(b[2 + j] >> 4));
        }
        return;
    }
    case DT_IQ4_XS: {
        global const uchar *b = row + c / 8 * 136;
        int j = (int)(c % 8);
        float dl = MUL_RN(q_f16(b), (float)iq4_xs_scale(b, j));
        global const uchar *q = b + 8 + 16 * j;
        for (int l = 0; l < 16; l++) {
            y[l] = MUL_RN(dl, (float)iq4_value(q[l] & 15));
            y[l + 16] = MUL_RN(dl, (float)iq4_value(q[l] >> 4));
        }
        return;
    }
    default: {                                       /* Q6_K: chunk = row r of the block's 8 */
        global const uchar *b = row + c / 8 * 210;
        int r = (int)(c % 8), lo_shift = 4 * ((r % 4) / 2), hi_shift = 2 * (r % 4);
        global const uchar *lo = b + 64 * (r / 4) + 32 * (r % 2), *hi = b + 128 + 32 * (r / 4);
        float d = q_f16(b + 208);
        float ds0 = MUL_RN(d, (float)(char)b[192 + 2 * r]), ds1 = MUL_RN(d, (float)(char)b[193 + 2 * r]);
        for (int l = 0; l < 32; l++) {
            int q = (((lo[l] >> lo_shift) & 15) | (((hi[l] >> hi_shift) & 3) << 4)) - 32;
            y[l] = MUL_RN(l < 16 ? ds0 : ds1, (float)q);
        }
        return;
    }
    }
}

/* One work-item per 32-element chunk. g: the shape, operand 0 = out, 1 =
 * the quantized source in elements (offset 0; its byte offset is src_off).
 * Chunks never straddle rows (rows are whole blocks, blocks whole chunks),
 * so chunk i's source starts at element offset_of(g, 1, 32 i). */
kernel void quant_decode(int wt, long nchunks, geom g, long src_off, global T *out, global const uchar *src) {
    long c = get_global_id(0);
    if (c >= nchunks) return;
    long first = 32 * c, is = g.contiguous ? first : offset_of(&g, 1, first);
    float y[32];
    q_chunk32(wt, src + src_off, is / 32, y);
    for (int e = 0; e < 32; e++)
        store_from_float(out, g.contiguous ? g.offset[0] + first + e : offset_of(&g, 0, first + e), (wide_t)y[e]);
}

/* f32 -> f16 -> f32: the value an f16 field of a block will hold. */
inline float round_f16(global uchar *slot, float v) {
    vstore_half_rte(v, 0, (global half *)slot);
    return q_f16(slot);
}

inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The element of largest magnitude among n, its sign kept. */
inline float signed_absmax(const float *x, int n) {
    float best = 0, amax = 0;
    for (int i = 0; i < n; i++)
        if (fabs(x[i]) > amax) {
            amax = fabs(x[i]);
            best = x[i];
        }
    return best;
}

/* The encoders of cpu_quant.c, step for step (one block each). */
inline void q4_0_encode(const float *x, global uchar *b) {
    float d = signed_absmax(x, 32) / -8, id = d != 0 ? 1.0f / d : 0.0f;
    round_f16(b, d);
    for (int j = 0; j < 16; j++) {
        int lo = clamp_int((int)ADD_RN(MUL_RN(x[j], id), 8.5f), 0, 15);
        int hi = clamp_int((int)ADD_RN(MUL_RN(x[j + 16], id), 8.5f), 0, 15);
        b[2 + j] = (uchar)(lo | hi << 4);
    }
}

inline void q4_1_encode(const float *x, global uchar *b) {
    float lo = x[0], hi = x[0];
    for (int j = 1; j < 32; j++) {
        lo = fmin(lo, x[j]);
        hi = fmax(hi, x[j]);
    }
    float d = (hi - lo) / 15, id = d != 0 ? 1.0f / d : 0.0f;
    round_f16(b, d);
    round_f16(b + 2, lo);
    for (int j = 0; j < 16; j++) {
        int a = clamp_int((int)ADD_RN(MUL_RN(x[j] - lo, id), 0.5f), 0, 15);
        int c = clamp_int((int)ADD_RN(MUL_RN(x[j + 16] - lo, id), 0.5f), 0, 15);
        b[4 + j] = (uchar)(a | c << 4);
    }
}

inline void q8_0_encode(const float *x, global uchar *b) {
    float amax = 0;
    for (int j = 0; j < 32; j++) amax = fmax(amax, fabs(x[j]));
    float d = amax / 127, id = d != 0 ? 1.0f / d : 0.0f;
    round_f16(b, d);
    for (int j = 0; j < 32; j++) b[2 + j] = (uchar)(char)clamp_int((int)round(MUL_RN(x[j], id)), -127, 127);
}

inline void put_q5(global uchar *qh_at, global uchar *qs, const int *q) {
    uint qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uchar)((q[j] & 15) | (q[j + 16] & 15) << 4);
        qh |= (uint)((q[j] >> 4) & 1) << j | (uint)((q[j + 16] >> 4) & 1) << (j + 16);
    }
    for (int i = 0; i < 4; i++) qh_at[i] = (uchar)(qh >> (8 * i));
}

inline void q5_0_encode(const float *x, global uchar *b) {
    float d = signed_absmax(x, 32) / -16, id = d != 0 ? 1.0f / d : 0.0f;
    int q[32];
    for (int e = 0; e < 32; e++) {
        int t = (int)(char)(int)ADD_RN(MUL_RN(x[e], id), 16.5f);
        q[e] = (uchar)(t < 31 ? t : 31);
    }
    round_f16(b, d);
    put_q5(b + 2, b + 6, q);
}

inline void q5_1_encode(const float *x, global uchar *b) {
    float lo = x[0], hi = x[0];
    for (int e = 1; e < 32; e++) {
        lo = x[e] < lo ? x[e] : lo;
        hi = x[e] > hi ? x[e] : hi;
    }
    float d = (hi - lo) / 31, id = d != 0 ? 1.0f / d : 0.0f;
    int q[32];
    for (int e = 0; e < 32; e++) {
        int t = (int)(uchar)(int)ADD_RN(MUL_RN(x[e] - lo, id), 0.5f);
        q[e] = t < 31 ? t : 31;
    }
    round_f16(b, d);
    round_f16(b + 2, lo);
    put_q5(b + 4, b + 8, q);
}

/* ---- the K-quants: cpu_quant_kfit.c's fits and encoders, step for step
 * (ggml's without an importance matrix; every product and sum rounded as
 * there, so MUL_RN/ADD_RN wherever CUDA would fuse). ---- */

/* ggml's nearest_int: round half to even through the f32 mantissa. */
inline int nearest_k(float v) { return (int)(as_uint(ADD_RN(v, 12582912.f)) & 0x007fffffu) - 0x00400000; }

inline float fit_scale_min(int n, int nmax, const float *x, const float *w, uchar *L, float *neg_min, float rmin,
                           float rdelta, int nstep, bool mad) {
    float min = x[0], max = x[0], sum_w = w[0], sum_x = MUL_RN(sum_w, x[0]);
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w = ADD_RN(sum_w, w[i]);
        sum_x = ADD_RN(sum_x, MUL_RN(w[i], x[i]));
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; i++) L[i] = 0;
        *neg_min = -min;
        return 0.f;
    }
    float iscale = (float)nmax / (max - min), scale = 1 / iscale, best_error = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uchar)clamp_int(nearest_k(MUL_RN(iscale, x[i] - min)), 0, nmax);
        float diff = ADD_RN(MUL_RN(scale, (float)L[i]), min) - x[i];
        diff = mad ? fabs(diff) : MUL_RN(diff, diff);
        best_error = ADD_RN(best_error, MUL_RN(w[i], diff));
    }
    uchar trial[32];
    for (int is = 0; is <= nstep; is++) {
        iscale = ADD_RN(ADD_RN(rmin, MUL_RN(rdelta, (float)is)), (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = clamp_int(nearest_k(MUL_RN(iscale, x[i] - min)), 0, nmax);
            trial[i] = (uchar)l;
            float wl = MUL_RN(w[i], (float)l);
            sum_l = ADD_RN(sum_l, wl);
            sum_l2 = ADD_RN(sum_l2, MUL_RN(wl, (float)l));
            sum_xl = ADD_RN(sum_xl, MUL_RN(wl, x[i]));
        }
        float det = MUL_RN(sum_w, sum_l2) - MUL_RN(sum_l, sum_l);
        if (!(det > 0)) continue;
        float this_scale = (MUL_RN(sum_w, sum_xl) - MUL_RN(sum_x, sum_l)) / det;
        float this_min = (MUL_RN(sum_l2, sum_x) - MUL_RN(sum_l, sum_xl)) / det;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        float error = 0;
        for (int i = 0; i < n; i++) {
            float diff = ADD_RN(MUL_RN(this_scale, (float)trial[i]), this_min) - x[i];
            diff = mad ? fabs(diff) : MUL_RN(diff, diff);
            error = ADD_RN(error, MUL_RN(w[i], diff));
        }
        if (error < best_error) {
            for (int i = 0; i < n; i++) L[i] = trial[i];
            best_error = error;
            scale = this_scale;
            min = this_min;
        }
    }
    *neg_min = -min;
    return scale;
}

inline float extreme_k(const float *x, int n) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++)
        if (fabs(x[i]) > amax) {
            amax = fabs(x[i]);
            max = x[i];
        }
    return amax < 1e-15f ? 0.f : max;
}

inline float fit_signed_refine(int n, int nmax, const float *x, char *L) {
    float max = extreme_k(x, n);
    if (max == 0) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.f;
    }
    float iscale = (float)-nmax / max, sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clamp_int(nearest_k(MUL_RN(iscale, x[i])), -nmax, nmax - 1);
        L[i] = (char)l;
        float w = MUL_RN(x[i], x[i]);
        sumlx = ADD_RN(sumlx, MUL_RN(MUL_RN(w, x[i]), (float)l));
        suml2 = ADD_RN(suml2, MUL_RN(MUL_RN(w, (float)l), (float)l));
    }
    for (int pass = 0; pass < 5; pass++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float w = MUL_RN(x[i], x[i]);
            float slx = sumlx - MUL_RN(MUL_RN(w, x[i]), (float)L[i]);
            if (!(slx > 0)) continue;
            float sl2 = suml2 - MUL_RN(MUL_RN(w, (float)L[i]), (float)L[i]);
            int l = clamp_int(nearest_k(MUL_RN(x[i], sl2) / slx), -nmax, nmax - 1);
            if (l == L[i]) continue;
            slx = ADD_RN(slx, MUL_RN(MUL_RN(w, x[i]), (float)l));
            sl2 = ADD_RN(sl2, MUL_RN(MUL_RN(w, (float)l), (float)l));
            if (sl2 > 0 && MUL_RN(MUL_RN(slx, slx), suml2) > MUL_RN(MUL_RN(sumlx, sumlx), sl2)) {
                L[i] = (char)l;
                sumlx = slx;
                suml2 = sl2;
                changed++;
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (char)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

inline void levels_at_k(int n, int nmax, const float *x, float iscale, float *sumlx, float *suml2) {
    float a = 0, c = 0;
    for (int i = 0; i < n; i++) {
        int l = clamp_int(nearest_k(MUL_RN(iscale, x[i])), -nmax, nmax - 1);
        float w = MUL_RN(x[i], x[i]);
        a = ADD_RN(a, MUL_RN(MUL_RN(w, x[i]), (float)l));
        c = ADD_RN(c, MUL_RN(MUL_RN(w, (float)l), (float)l));
    }
    *sumlx = a;
    *suml2 = c;
}

inline float fit_signed_sweep(int n, int nmax, const float *x, char *L) {
    float max = extreme_k(x, n);
    if (max == 0) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.f;
    }
    float iscale = (float)-nmax / max, sumlx, suml2;
    for (int i = 0; i < n; i++) L[i] = (char)(nmax + clamp_int(nearest_k(MUL_RN(iscale, x[i])), -nmax, nmax - 1));
    levels_at_k(n, nmax, x, iscale, &sumlx, &suml2);
    float scale = suml2 != 0 ? sumlx / suml2 : 0.0f, best = MUL_RN(scale, sumlx);
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -ADD_RN((float)nmax, MUL_RN(0.1f, (float)is)) / max;
        levels_at_k(n, nmax, x, iscale, &sumlx, &suml2);
        if (suml2 > 0 && MUL_RN(sumlx, sumlx) > MUL_RN(best, suml2)) {
            for (int i = 0; i < n; i++) L[i] = (char)(nmax + clamp_int(nearest_k(MUL_RN(iscale, x[i])), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = MUL_RN(scale, sumlx);
        }
    }
    return scale;
}

inline void pack_2bit_k(const uchar *L, global uchar *qs) {
    for (int i = 0; i < 64; i++) qs[i] = 0;
    for (int e = 0; e < 256; e++) qs[32 * (e / 128) + e % 32] |= (uchar)((L[e] & 3) << (2 * ((e % 128) / 32)));
}

inline void pack_nibbles_k(const uchar *L, global uchar *qs) {
    for (int i = 0; i < 128; i++) qs[i] = 0;
    for (int e = 0; e < 256; e++) qs[32 * (e / 64) + e % 32] |= (uchar)((L[e] & 15) << (4 * ((e / 32) % 2)));
}

inline float block_step_k(float max_value, float top) { return max_value > 0 ? top / max_value : 0.f; }

inline void q2_k_encode(const float *x, global uchar *b) {
    uchar L[256];
    float w[16], scales[16], mins[16], max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; j++) {
        for (int l = 0; l < 16; l++) w[l] = fabs(x[16 * j + l]);
        scales[j] = fit_scale_min(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    for (int i = 0; i < 84; i++) b[i] = 0;
    if (max_scale > 0) {
        float iscale = block_step_k(max_scale, 15.f);
        for (int j = 0; j < 16; j++) b[j] = (uchar)nearest_k(MUL_RN(iscale, scales[j]));
        round_f16(b + 80, max_scale / 15.f);
    }
    if (max_min > 0) {
        float iscale = block_step_k(max_min, 15.f);
        for (int j = 0; j < 16; j++) b[j] |= (uchar)(nearest_k(MUL_RN(iscale, mins[j])) << 4);
        round_f16(b + 82, max_min / 15.f);
    }
    for (int j = 0; j < 16; j++) {
        float d = MUL_RN(q_f16(b + 80), (float)(b[j] & 15));
        if (d == 0) continue;
        float dm = MUL_RN(q_f16(b + 82), (float)(b[j] >> 4));
        for (int l = 0; l < 16; l++) L[16 * j + l] = (uchar)clamp_int(nearest_k(ADD_RN(x[16 * j + l], dm) / d), 0, 3);
    }
    pack_2bit_k(L, b + 16);
}

inline void q3_k_encode(const float *x, global uchar *b) {
    char L[256];
    float scales[16], max_scale = 0, amax = 0;
    for (int j = 0; j < 16; j++) {
        scales[j] = fit_signed_refine(16, 4, x + 16 * j, L + 16 * j);
        if (fabs(scales[j]) > amax) {
            amax = fabs(scales[j]);
            max_scale = scales[j];
        }
    }
    for (int i = 0; i < 110; i++) b[i] = 0;
    global uchar *s = b + 96;
    if (max_scale != 0) {
        float iscale = -32.f / max_scale;
        for (int j = 0; j < 16; j++) {
            int l = clamp_int((char)nearest_k(MUL_RN(iscale, scales[j])), -32, 31) + 32;
            s[j % 8] |= (uchar)((l & 15) << (4 * (j / 8)));
            s[8 + j % 4] |= (uchar)((l >> 4) << (2 * (j / 4)));
        }
        round_f16(b + 108, 1 / iscale);
    }
    for (int j = 0; j < 16; j++) {
        int sc = ((s[j % 8] >> (4 * (j / 8))) & 15) | ((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4;
        float d = MUL_RN(q_f16(b + 108), (float)(sc - 32));
        if (d == 0) continue;
        for (int l = 0; l < 16; l++) L[16 * j + l] = (char)(clamp_int(nearest_k(x[16 * j + l] / d), -4, 3) + 4);
    }
    uchar low[256];
    for (int e = 0; e < 256; e++) {
        if (L[e] > 3) b[e % 32] |= (uchar)(1 << (e / 32));
        low[e] = (uchar)(L[e] & 3);
    }
    pack_2bit_k(low, b + 32);
}

inline void q4k_put_scale_min_k(global uchar *s, int j, int sc, int m) {
    if (j < 4) {
        s[j] |= (uchar)sc;
        s[j + 4] |= (uchar)m;
    } else {
        s[j + 4] = (uchar)((sc & 15) | (m & 15) << 4);
        s[j - 4] |= (uchar)((sc >> 4) << 6);
        s[j] |= (uchar)((m >> 4) << 6);
    }
}

inline void q4k_scale_min_k(global const uchar *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
        *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

inline void k_scale_min_encode(const float *x, int nmax, float rmin, int nstep, global uchar *dd, uchar *L) {
    float w[32], sc[8], mn[8], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 = ADD_RN(sum_x2, MUL_RN(x[32 * j + l], x[32 * j + l]));
        float av_x = sqrt(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av_x + fabs(x[32 * j + l]);
        sc[j] = fit_scale_min(32, nmax, x + 32 * j, w, L + 32 * j, &mn[j], rmin, 0.1f, nstep, false);
        if (sc[j] > max_scale) max_scale = sc[j];
        if (mn[j] > max_min) max_min = mn[j];
    }
    float inv_scale = block_step_k(max_scale, 63.f), inv_min = block_step_k(max_min, 63.f);
    global uchar *s = dd + 4;
    for (int i = 0; i < 12; i++) s[i] = 0;
    for (int j = 0; j < 8; j++) {
        uchar ls = (uchar)nearest_k(MUL_RN(inv_scale, sc[j])), lm = (uchar)nearest_k(MUL_RN(inv_min, mn[j]));
        q4k_put_scale_min_k(s, j, ls < 63 ? ls : 63, lm < 63 ? lm : 63);
    }
    round_f16(dd, max_scale / 63.f);
    round_f16(dd + 2, max_min / 63.f);
    for (int j = 0; j < 8; j++) {
        int a, m;
        q4k_scale_min_k(s, j, &a, &m);
        float d = MUL_RN(q_f16(dd), (float)a);
        if (d == 0) continue;
        float dm = MUL_RN(q_f16(dd + 2), (float)m);
        for (int l = 0; l < 32; l++) L[32 * j + l] = (uchar)clamp_int(nearest_k(ADD_RN(x[32 * j + l], dm) / d), 0, nmax);
    }
}

inline void q4_k_encode(const float *x, global uchar *b) {
    uchar L[256];
    k_scale_min_encode(x, 15, -1.f, 20, b, L);
    pack_nibbles_k(L, b + 16);
}

inline void q5_k_encode(const float *x, global uchar *b) {
    uchar L[256];
    k_scale_min_encode(x, 31, -0.5f, 15, b, L);
    global uchar *qh = b + 16;
    for (int i = 0; i < 32; i++) qh[i] = 0;
    for (int e = 0; e < 256; e++) qh[e % 32] |= (uchar)((L[e] >> 4) << (e / 32));
    pack_nibbles_k(L, b + 48);
}

inline void q6_k_encode(const float *x, global uchar *b) {
    char L[256];
    float scales[16], max_scale = 0, max_abs = 0;
    for (int j = 0; j < 16; j++) {
        scales[j] = fit_signed_sweep(16, 32, x + 16 * j, L + 16 * j);
        if (fabs(scales[j]) > max_abs) {
            max_abs = fabs(scales[j]);
            max_scale = scales[j];
        }
    }
    for (int i = 0; i < 210; i++) b[i] = 0;
    if (max_abs < 1e-15f) return;
    float iscale = -128.f / max_scale;
    round_f16(b + 208, 1 / iscale);
    global char *sc = (global char *)(b + 192);
    for (int j = 0; j < 16; j++) {
        int v = nearest_k(MUL_RN(iscale, scales[j]));
        sc[j] = (char)(v < 127 ? v : 127);
    }
    for (int j = 0; j < 16; j++) {
        float d = MUL_RN(q_f16(b + 208), (float)sc[j]);
        if (d == 0) continue;
        for (int l = 0; l < 16; l++) L[16 * j + l] = (char)(clamp_int(nearest_k(x[16 * j + l] / d), -32, 31) + 32);
    }
    global uchar *ql = b, *qh = b + 128;
    for (int e = 0; e < 256; e++) {
        int r = e / 32, c = e % 32, q = (uchar)L[e];
        ql[64 * (r / 4) + 32 * (r % 2) + c] |= (uchar)((q & 15) << (4 * ((r % 4) / 2)));
        qh[32 * (r / 4) + c] |= (uchar)((q >> 4) << (2 * (r % 4)));
    }
}

/* The codebook index nearest v (ties up), ggml's best_index_int8. */
inline int iq4_nearest(float v) {
    if (v <= -127.0f) return 0;
    if (v >= 113.0f) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (v < (float)iq4_value(mid)) hi = mid;
        else lo = mid;
    }
    return v - (float)iq4_value(hi - 1) < (float)iq4_value(hi) - v ? hi - 1 : hi;
}

/* cpu_quant_ext.c's iq4_fit and iq4_sub_block_scale (ggml's search). */
inline void iq4_fit(const float *x, float id, float *qx, float *q2) {
    *qx = 0;
    *q2 = 0;
    for (int j = 0; j < 32; j++) {
        float q = (float)iq4_value(iq4_nearest(MUL_RN(id, x[j]))), w = MUL_RN(x[j], x[j]);
        *qx = ADD_RN(*qx, MUL_RN(MUL_RN(w, q), x[j]));
        *q2 = ADD_RN(*q2, MUL_RN(MUL_RN(w, q), q));
    }
}

/* The element of largest magnitude (its sign kept); 0 for a block below 1e-15. */
inline float iq4_extreme(const float *x) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++)
        if (fabs(x[j]) > amax) {
            amax = fabs(x[j]);
            max = x[j];
        }
    return amax < 1e-15f ? 0.0f : max;
}

inline float iq4_sub_block_scale(const float *x, int ntry) {
    float max = iq4_extreme(x), qx, q2;
    if (max == 0) return 0;
    iq4_fit(x, 1 / (ntry > 0 ? -max / -127.0f : max / -127.0f), &qx, &q2);
    float d = q2 > 0 ? qx / q2 : 0.0f, best = MUL_RN(d, qx);
    for (int t = -ntry; t <= ntry; t++) {
        iq4_fit(x, ((float)t - 127.0f) / max, &qx, &q2);
        if (q2 > 0 && MUL_RN(qx, qx) > MUL_RN(best, q2)) {
            d = qx / q2;
            best = MUL_RN(d, qx);
        }
    }
    return d;
}

/* 32 elements' codes for scale d (0: the code nearest 0) into 16 bytes. */
inline void iq4_pack(const float *x, float d, global uchar *qs) {
    float id = d != 0 ? 1 / d : 0.0f;
    for (int j = 0; j < 16; j++)
        qs[j] = (uchar)(iq4_nearest(MUL_RN(id, x[j])) | iq4_nearest(MUL_RN(id, x[j + 16])) << 4);
}

/* As llama-quantize: 7 tries each way, the codes refitted to the f32 scale. */
inline void iq4_nl_encode(const float *x, global uchar *b) {
    float d = iq4_sub_block_scale(x, 7);
    round_f16(b, d);
    iq4_pack(x, d, b + 2);
}

inline void iq4_xs_encode(const float *x, global uchar *b) {
    float scales[8], max_scale = 0, amax_scale = 0;
    for (int j = 0; j < 8; j++) {
        scales[j] = iq4_sub_block_scale(x + 32 * j, 7);
        if (fabs(scales[j]) > amax_scale) {
            amax_scale = fabs(scales[j]);
            max_scale = scales[j];
        }
    }
    float d = -max_scale / 32, id = d != 0 ? 1 / d : 0.0f;
    uint high = 0;
    round_f16(b, d);
    for (int j = 0; j < 8; j++) {
        int l = clamp_int((int)rint(MUL_RN(id, scales[j])), -32, 31);
        iq4_pack(x + 32 * j, MUL_RN(d, (float)l), b + 8 + 16 * j);
        l += 32;
        if (j % 2 == 0) b[4 + j / 2] = (uchar)(l & 15);
        else b[4 + j / 2] |= (uchar)((l & 15) << 4);
        high |= (uint)(l >> 4) << (2 * j);
    }
    b[2] = (uchar)high;
    b[3] = (uchar)(high >> 8);
}

/* One work-item per block. g: the shape, operand 0 = the source (this
 * program's dtype), 1 = the quantized destination in elements (offset 0;
 * its byte offset is dst_off). The source row is read as f32 first, as on
 * the CPU. */
kernel void quant_encode(int wt, long nblocks, geom g, long dst_off, global uchar *dst, global const T *src) {
    long blk = get_global_id(0);
    if (blk >= nblocks) return;
    int n = q_block_elems(wt);
    long first = blk * n, step = g.stride[0][g.ndim - 1];
    long is = offset_of(&g, 0, first), od = offset_of(&g, 1, first);
    float x[256];
    for (int e = 0; e < n; e++) x[e] = (float)LD(src, is + e * step);
    global uchar *b = dst + dst_off + od / n * q_block_bytes(wt);
    switch (wt) {
    case DT_Q4_0: q4_0_encode(x, b); break;
    case DT_Q4_1: q4_1_encode(x, b); break;
    case DT_Q8_0: q8_0_encode(x, b); break;
    case DT_Q4_K: q4_k_encode(x, b); break;
    case DT_Q5_0: q5_0_encode(x, b); break;
    case DT_Q5_1: q5_1_encode(x, b); break;
    case DT_Q2_K: q2_k_encode(x, b); break;
    case DT_Q3_K: q3_k_encode(x, b); break;
    case DT_Q5_K: q5_k_encode(x, b); break;
    case DT_IQ4_NL: iq4_nl_encode(x, b); break;
    case DT_IQ4_XS: iq4_xs_encode(x, b); break;
    default: q6_k_encode(x, b); break;
    }
}

#if TF_DT == DT_F32
/* out[m, n] = sum_k x[m, k] w[n, k] with w quantized, rows of w `ldw` bytes
 * apart from w_off; x and out f32 with row strides ldx and ldo; K is whole
 * chunks of 32 (every format's blocks are).
 *
 * qgemv, for at most QGEMV_ROWS rows of x (token generation): QGEMV_LANES
 * work-items per output column (a warp on NVIDIA), RWG / QGEMV_LANES
 * columns per work-group. Lane l takes chunks l, l + 32, ...: neighbouring
 * lanes read neighbouring blocks, each chunk is decoded once for every
 * activation row, and a column's partial sums meet in local memory. */
#define QGEMV_ROWS 8
#define QGEMV_LANES 32
kernel void qgemv(int wt, long M, long N, long K, long x_off, long ldx, long w_off, long ldw, long o_off, long ldo,
                  global float *out, global const float *x, global const uchar *w) {
    local float part[RWG];
    int lid = get_local_id(0), lane = lid % QGEMV_LANES;
    long j = get_group_id(0) * (RWG / QGEMV_LANES) + lid / QGEMV_LANES;
    global const uchar *row = w + w_off + j * ldw;
    float acc[QGEMV_ROWS], y[32];
    for (int m = 0; m < QGEMV_ROWS; m++) acc[m] = 0;
    for (long c = lane; j < N && c < K / 32; c += QGEMV_LANES) {
        q_chunk32(wt, row, c, y);
        for (int m = 0; m < QGEMV_ROWS && m < M; m++) {
            global const float *xm = x + x_off + m * ldx + c * 32;
            float sum = 0;
            for (int e = 0; e < 32; e++) sum += xm[e] * y[e];
            acc[m] += sum;
        }
    }
    for (int m = 0; m < M; m++) {                       /* every work-item reaches every barrier */
        part[lid] = acc[m];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int s = QGEMV_LANES / 2; s > 0; s /= 2) {
            if (lane < s) part[lid] += part[lid + s];
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (lane == 0 && j < N) out[o_off + m * ldo + j] = part[lid];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* qmatmul, for many rows (a prompt): TS x TS output tiles over k-steps of
 * one chunk; the first TS work-items decode the tile's TS weight chunks
 * into local memory, all of them load the activations. */
kernel void qmatmul(int wt, long M, long N, long K, long x_off, long ldx, long w_off, long ldw, long o_off, long ldo,
                    global float *out, global const float *x, global const uchar *w) {
    local float As[TS][33];                             /* +1: columns off one bank */
    local float Ws[TS][33];
    int tx = get_local_id(0), ty = get_local_id(1), lid = ty * TS + tx;
    long i0 = get_group_id(1) * TS, j0 = get_group_id(0) * TS, i = i0 + ty, j = j0 + tx;
    float acc = 0, y[32];
    for (long c = 0; c < K / 32; c++) {
        for (int a = lid; a < TS * 32; a += TS * TS) {
            long r = i0 + a / 32;
            As[a / 32][a % 32] = r < M ? x[x_off + r * ldx + c * 32 + a % 32] : 0.0f;
        }
        if (lid < TS) {
            if (j0 + lid < N) q_chunk32(wt, w + w_off + (j0 + lid) * ldw, c, y);
            for (int e = 0; e < 32; e++) Ws[lid][e] = j0 + lid < N ? y[e] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < 32; k++) acc += As[ty][k] * Ws[tx][k];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (i < M && j < N) out[o_off + i * ldo + j] = acc;
}
#endif /* f32 */

#ifndef TF_CUDA
#pragma OPENCL FP_CONTRACT ON
#endif
#endif /* float programs */

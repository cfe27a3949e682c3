/* The host side of the portable kernels (kernels.cl): which kernel runs an
 * op, with which arguments and launch geometry. Shared by every backend that
 * runs kernels.cl: the OpenCL plugin hands them to clEnqueueNDRangeKernel,
 * the CUDA plugin (which compiles the same source with nvcc through
 * opencl_compat.h) to cudaLaunchKernel. A backend supplies a tf_pk_target:
 * how to name a buffer to a kernel, how to launch, scratch memory.
 *
 * Launch geometry is OpenCL's: `global` work-items per dimension (at most
 * 2), `local` the work-group or NULL for "any". Every kernel bounds-checks
 * its work-items, so a backend may round `global` up.
 */
#ifndef TF_PORTABLE_PLAN_H
#define TF_PORTABLE_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <tensorframe/backend.h>

/* The kernels of kernels.cl, in the order backends index them. */
#define TF_PK_KERNEL_LIST(X)                                                                                     \
    X(BINARY, binary) X(MATMUL, matmul) X(REDUCE_PARTIAL, reduce_partial) X(REDUCE_FINAL, reduce_final)          \
    X(COPY_FROM, copy_from) X(ARANGE, arange) X(RAND, rand_fill) X(UNARY, unary) X(COMPARE, compare)                  \
    X(BOOL_UNARY, bool_unary) X(WHERE, where_select) X(REDUCE_FULL, reduce_full) X(CUMSUM, cumsum)               \
    X(INDEX_PICK, index_pick) X(TRIANGLE, triangle) X(ROW_OP, row_op) X(ROPE, rope) X(SDPA, sdpa)                \
    X(CONV2D, conv2d) X(POOL2D, pool2d) X(ADAM, adam) X(BINARY4, binary4) X(FILL, fill)                          \
    X(QUANT_DECODE, quant_decode) X(QUANT_ENCODE, quant_encode) X(QGEMV, qgemv) X(QMATMUL, qmatmul)          \
    X(SORT_RANK, sort_rank) X(SEARCHSORTED, searchsorted)

typedef enum tf_pk_kernel {
#define TF__PK_ENUM(E, name) TF_PK_##E,
    TF_PK_KERNEL_LIST(TF__PK_ENUM)
#undef TF__PK_ENUM
    TF_PK_KERNEL_COUNT
} tf_pk_kernel;

extern const char *const tf_pk_kernel_names[TF_PK_KERNEL_COUNT];

/* Mirrors `geom` in kernels.cl: up to TF_PK_GEOM_DIMS axes (ops with more
 * are declined: the core runs them on the CPU). */
#define TF_PK_GEOM_DIMS 8
typedef struct tf_pk_geom {
    int64_t shape[TF_PK_GEOM_DIMS];
    int64_t stride[4][TF_PK_GEOM_DIMS];
    int64_t offset[4];
    int32_t ndim;
    int32_t contiguous;
} tf_pk_geom;

/* Mirrors `conv_geom` in kernels.cl. */
typedef struct tf_pk_conv_geom {
    int64_t N, C, H, W, O, Ho, Wo, cg, kh, kw, groups;
    int64_t stride[2], pad[2], dil[2];
    int64_t xs[4], ws[4], os[4], bs;
    int64_t x_off, w_off, o_off, b_off;
} tf_pk_conv_geom;

/* Mirrors `attn_geom` in kernels.cl. */
typedef struct tf_pk_attn_geom {
    int64_t B, Hq, Lq, D, Hkv, Lk, Dv, q_off;
    int64_t st[5][4];
    int64_t off[5];
} tf_pk_attn_geom;

/* The values of OpenCL's long4 and long2 kernel arguments. */
typedef struct tf_pk_long4 { int64_t s[4]; } tf_pk_long4;
typedef struct tf_pk_long2 { int64_t s[2]; } tf_pk_long2;

#define TF_PK_MAX_DV 256                 /* sdpa: widest value head */

/* One kernel argument: its bytes, as clSetKernelArg and cudaLaunchKernel take them. */
typedef struct tf_pk_arg { size_t size; const void *value; } tf_pk_arg;

typedef struct tf_pk_target {
    void *ctx;
    const tf_host_api *host;
    bool fp64;                           /* the kernels' wide_t is double (else float) */
    int rwg, ts;                         /* the RWG and TS the kernels were built with */
    /* The handle a kernel's pointer argument takes for t's buffer (a cl_mem,
     * a device pointer); kernels add t's element offset themselves. */
    void *(*mem)(const tf_tensor_desc *t);
    tf_status (*launch)(void *ctx, tf_dtype program, tf_pk_kernel kernel, int nargs, const tf_pk_arg *args, int dims,
                        const size_t *global, const size_t *local);
    /* Device scratch for queued work (partial sums): `handle` is what the
     * kernel takes, `token` what scratch_free gets back; freeing right after
     * the launches that use it must be safe (queued work keeps it alive). */
    tf_status (*scratch_alloc)(void *ctx, size_t nbytes, void **handle, void **token);
    void (*scratch_free)(void *ctx, void *token);
    /* qmatmul for every activation count, never qgemv: a device whose
     * barriers cost more than decoding a weight once per row (llvmpipe). */
    bool no_qgemv;
    /* (optional) Autotuning: how many groups per output a split SUM/MEAN
     * uses, given the built-in heuristic's answer. `run(closure, groups)`
     * launches the reduction with a candidate (every candidate writes the
     * same output), so the backend may time candidates on first use of a
     * shape and keep the winner. NULL: the heuristic. */
    int64_t (*reduce_groups)(void *ctx, const tf_op *op, int64_t M, int64_t R, int64_t heuristic,
                             tf_status (*run)(const void *closure, int64_t groups), const void *closure);
} tf_pk_target;

/* Bytes per element of a plain dtype (0 for a block-quantized or unknown one). */
size_t tf_pk_elsize(tf_dtype dt);
/* A block-quantized dtype's elements and bytes per block (0 for any other). */
int64_t tf_pk_block_elems(tf_dtype dt);
int64_t tf_pk_block_bytes(tf_dtype dt);
/* Whether every descriptor of op fits the kernels' geometry (TF_PK_GEOM_DIMS axes). */
bool tf_pk_dims_fit(const tf_op *op);
/* Can the portable kernels run op? (fp64: the device has doubles) */
bool tf_pk_supports(const tf_op *op, bool fp64);
/* The dtype whose program (-DTF_DT) holds op's kernel. */
tf_dtype tf_pk_program_dtype(const tf_op *op);
/* Launch op's kernels on tg. FILL is included (the fill kernel); a backend
 * with a native fill may handle FILL itself first. */
tf_status tf_pk_run(const tf_pk_target *tg, const tf_op *op);
/* GEMM's c, broadcast, copied into its output (a COPY op on tg): what a
 * BLAS call computing beta * out + alpha * a@b needs first. */
tf_status tf_pk_copy_c_into_out(const tf_pk_target *tg, const tf_op *gemm);
/* The op codes kernels.cl switches on, generated from the op table as
 * "#define TF_OP_ADD 0\n..." (OpenCL C has no enums from our headers): a
 * backend that compiles kernels.cl from source prepends them. Writes at most
 * n bytes into buf (NULL: measure) and returns the full length, as snprintf. */
size_t tf_pk_op_codes(char *buf, size_t n);
/* The bytes of one element of dtype dt holding v, by the CPU reference's
 * conversion rules (round to nearest, integers truncate and saturate). */
void tf_pk_encode_scalar(tf_dtype dt, double v, unsigned char *out);

#endif

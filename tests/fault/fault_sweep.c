/* Fault injection, SQLite's way: run one program that exercises every op
 * family, views, file round trips and mixed-device ops, failing its 1st,
 * 2nd, ... Nth allocation, for every N until the program completes. Three
 * sweeps: the library's own counter (host memory in the core and the CPU
 * backend, and every device buffer the core asks any backend for, plugins
 * included), then the example backend's own allocator, in-process
 * (mybackend) and as a plugin (testplug).
 *
 * Each run must hold up: the failing call returns TF_ERR_OUT_OF_MEMORY with
 * a message that starts with the public function's name, leaves its output
 * NULL, and every tensor the program holds reads back the values a clean run
 * had at that point; every call that succeeds gives the clean run's result
 * (an absorbed failure must not change a value); after the program releases
 * everything no device buffer is left (LeakSanitizer checks host memory at
 * exit). */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tensorframe/dlpack.h>
#include <tensorframe/tensorframe.h>

#include "mybackend.h"

#define MAX_HELD 512
#define MAX_STEPS 512

typedef struct world {
    tf_device *cpu, *my, *plug, *ocl, *wgpu;  /* ocl and wgpu may be NULL */
    const char *dir;                          /* scratch directory for files */
    bool recording;                           /* the clean run */
    int step;                                 /* current step */
    bool failed;                              /* a step failed in this run */
    int failed_step;
    tf_tensor *held[MAX_HELD];
    int n_held;
    int errors;                               /* problems found in this run */
    const char *sweep;
    int64_t nth;
} world;

/* Which calls failed under injection, and with what: the sweep's summary. */
#define MAX_SITES 256
typedef struct site { const char *fn; tf_status status; int count; } site;
static site sites[MAX_SITES];
static int n_sites;

static void note_site(const char *fn, tf_status s) {
    for (int i = 0; i < n_sites; i++)
        if (!strcmp(sites[i].fn, fn) && sites[i].status == s) {
            sites[i].count++;
            return;
        }
    if (n_sites < MAX_SITES) sites[n_sites++] = (site){fn, s, 1};
}

/* The clean run's hash of each held tensor after each step. */
static uint64_t clean_hash[MAX_STEPS][MAX_HELD];
static int clean_held[MAX_STEPS];
static int clean_steps;

/* ---- injection control: pause it while the harness itself reads ---- */

typedef enum { INJECT_LIBRARY, INJECT_MYBACKEND, INJECT_TESTPLUG } inject_kind;
static inject_kind injecting;
static int64_t lib_target;

static mybackend_fail_after_fn fail_after_of(const char *backend) {
    return (mybackend_fail_after_fn)tf_backend_proc_address(backend, "mybackend_fail_after");
}

static mybackend_stats stats_of(const char *backend) {
    mybackend_stats st;
    memset(&st, 0, sizeof st);
    mybackend_stats_fn f = (mybackend_stats_fn)tf_backend_proc_address(backend, "mybackend_stats");
    if (f) f(&st);
    return st;
}

/* Neither counter can be paused, so pausing records how far it got and
 * resuming arms it again for the rest: the harness's own reads (which may
 * copy a strided tensor on its device) must not consume the failure. */
static int64_t lib_counted_before_pause;
static uint64_t backend_countdown;
static const char *injected_backend(void) { return injecting == INJECT_MYBACKEND ? "mybackend" : "testplug"; }
static void pause_injection(void) {
    if (injecting == INJECT_LIBRARY) {
        if (!lib_target) return;
        lib_counted_before_pause = tf_debug_allocation_count();
        tf_debug_fail_allocation(0);
    } else {
        backend_countdown = stats_of(injected_backend()).failure_countdown;
        fail_after_of(injected_backend())(0);
    }
}
static void resume_injection(void) {
    if (injecting == INJECT_LIBRARY) {
        if (!lib_target) return;
        int64_t left = lib_target - lib_counted_before_pause;
        lib_target = left > 0 ? left : 0;
        tf_debug_fail_allocation(lib_target);
    } else {
        fail_after_of(injected_backend())((int64_t)backend_countdown);
    }
}

/* ---- hashing what a tensor holds ---- */

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t tensor_hash(world *w, const tf_tensor *t) {
    size_t n = (size_t)tf_tensor_nbytes(t);
    unsigned char *buf = malloc(n ? n : 1);
    uint64_t h = fnv(0xcbf29ce484222325ull, tf_tensor_shape(t), sizeof(int64_t) * (size_t)tf_tensor_ndim(t));
    tf_status s = tf_tensor_read(t, buf, n);
    if (s != TF_OK) {
        fprintf(stderr, "[%s N=%lld] step %d: reading a held tensor failed: %s: %s\n", w->sweep, (long long)w->nth,
                w->step, tf_status_name(s), tf_last_error());
        w->errors++;
    }
    h = fnv(h, buf, n);
    free(buf);
    return h;
}

/* Compare held tensors [from, n_held) with the clean run after step `at`. */
static void check_held(world *w, int from, int at) {
    if (at < 0) return;
    for (int i = from; i < w->n_held && i < clean_held[at]; i++) {
        uint64_t h = tensor_hash(w, w->held[i]);
        if (h != clean_hash[at][i]) {
            fprintf(stderr, "[%s N=%lld] step %d: held tensor %d (%s on %s) differs from the clean run\n", w->sweep,
                    (long long)w->nth, w->step, i, tf_dtype_name(tf_tensor_dtype(w->held[i])),
                    tf_device_name(tf_tensor_device(w->held[i])));
            w->errors++;
        }
    }
}

static void record_held(world *w) {
    clean_held[w->step] = w->n_held;
    for (int i = 0; i < w->n_held; i++) clean_hash[w->step][i] = tensor_hash(w, w->held[i]);
}

/* ---- one step ---- */

/* After a call: on success register its outputs and compare them (or, for
 * a call that writes its inputs, everything) with the clean run; on failure
 * check the error and every held tensor. Returns false to stop the program. */
static bool finish_step(world *w, const char *fn, tf_status s, tf_tensor **outs, int n_out, bool writes_inputs) {
    pause_injection();
    int first_new = w->n_held;
    bool go_on = true;
    if (s == TF_OK) {
        for (int i = 0; i < n_out; i++)
            if (outs[i] && w->n_held < MAX_HELD) w->held[w->n_held++] = outs[i];
        if (w->recording) record_held(w);
        else check_held(w, writes_inputs ? 0 : first_new, w->step);
    } else {
        const char *msg = tf_last_error();
        size_t fl = strlen(fn);
        if (w->recording) {
            fprintf(stderr, "clean run: step %d (%s) failed: %s: %s\n", w->step, fn, tf_status_name(s), msg);
            w->errors++;
        } else {
            note_site(fn, s);
            if (s != TF_ERR_OUT_OF_MEMORY || strncmp(msg, fn, fl) || msg[fl] != ':') {
                fprintf(stderr, "[%s N=%lld] step %d: %s returned %s with message '%s' (want TF_ERR_OUT_OF_MEMORY, "
                        "a message starting '%s:')\n", w->sweep, (long long)w->nth, w->step, fn, tf_status_name(s), msg, fn);
                w->errors++;
            }
            for (int i = 0; i < n_out; i++)
                if (outs[i] == (tf_tensor *)(uintptr_t)1) {
                    fprintf(stderr, "[%s N=%lld] step %d: %s failed without setting its output to NULL\n", w->sweep,
                            (long long)w->nth, w->step, fn);
                    w->errors++;
                } else if (outs[i]) {
                    fprintf(stderr, "[%s N=%lld] step %d: %s failed but left output %d set\n", w->sweep,
                            (long long)w->nth, w->step, fn, i);
                    w->errors++;
                    tf_tensor_release(outs[i]);
                }
            check_held(w, 0, w->step - 1);
        }
        w->failed = true;
        w->failed_step = w->step;
        go_on = false;
    }
    w->step++;
    resume_injection();
    return go_on;
}

/* A call whose last argument is its output tensor. */
#define OP(var, fn, ...)                                                              \
    tf_tensor *var = (tf_tensor *)(uintptr_t)1;                                       \
    do {                                                                              \
        tf_status s_ = fn(__VA_ARGS__, &var);                                         \
        if (!finish_step(w, #fn, s_, &var, 1, false)) return;                         \
    } while (0)
/* A call with no output tensor; `writes` says it updates held tensors. */
#define CALL(writes, fn, ...)                                                         \
    do {                                                                              \
        tf_status s_ = fn(__VA_ARGS__);                                               \
        if (!finish_step(w, #fn, s_, NULL, 0, writes)) return;                        \
    } while (0)

/* ---- the program ---- */

static void program_creation_and_views(world *w) {
    static const float v12[12] = {1, -2, 3, -4, 5, -6, 7.5f, -8, 9, 10, -11, 12};
    int64_t s34[2] = {3, 4}, s12 = 12, s43[2] = {4, 3}, s2x6[2] = {2, 6}, s134[3] = {1, 3, 4};
    OP(a, tf_tensor_from_data, w->cpu, TF_F32, 2, s34, v12);
    OP(b, tf_zeros, w->cpu, TF_F32, 2, s34);
    OP(c, tf_ones, w->my, TF_F32, 2, s34);
    OP(d, tf_full, w->plug, TF_F32, 2, s34, 0.25);
    OP(e, tf_arange, w->cpu, TF_I64, 0.0, 12.0, 1.0);
    OP(f, tf_rand, w->cpu, TF_F32, 2, s34, 7);
    OP(g, tf_randn, w->my, TF_F32, 2, s34, 8);
    OP(h, tf_eye, w->plug, TF_F32, 3, 4);
    OP(k, tf_scalar, w->cpu, TF_F32, 0.5);
    OP(r1, tf_reshape, a, 1, &s12);
    OP(t1, tf_transpose, a, 0, 1);
    OP(r2, tf_reshape, t1, 2, s2x6);                       /* a copy: t1 is not contiguous */
    OP(p1, tf_permute, a, (const int[]){1, 0});
    OP(sl, tf_slice, a, 1, 1, 4, 2);
    OP(ex, tf_expand, k, 2, s43);
    OP(us, tf_unsqueeze, a, 0);
    OP(sq, tf_squeeze, us, 0);
    OP(ct, tf_contiguous, p1);
    OP(cp, tf_copy, sl);
    OP(cs, tf_cast, a, TF_F16);
    OP(cb, tf_cast, e, TF_BF16);
    OP(m1, tf_tensor_to, a, w->my);
    OP(m2, tf_tensor_to, m1, w->plug);
    OP(m3, tf_tensor_to, t1, w->plug);                     /* a strided source */
    OP(m4, tf_tensor_to, m2, w->cpu);
    OP(x3, tf_reshape, m2, 3, s134);
    (void)b; (void)c; (void)d; (void)f; (void)g; (void)h; (void)r1; (void)r2; (void)ex; (void)sq; (void)ct;
    (void)cp; (void)cs; (void)cb; (void)m3; (void)m4; (void)x3;
    if (w->ocl) {
        OP(o1, tf_tensor_to, a, w->ocl);
        OP(o2, tf_add, o1, a);                             /* mixed: opencl and cpu */
        OP(o3, tf_sum, o2, 1, false);
        (void)o3;
    }
    if (w->wgpu) {
        OP(g1, tf_tensor_to, a, w->wgpu);
        OP(g2, tf_add, g1, a);                             /* mixed: webgpu and cpu */
        OP(g3, tf_tensor_to, g2, w->cpu);
        OP(g4, tf_sum, g2, 1, false);                      /* WGSL kernels with device scratch */
        (void)g3; (void)g4;
    }
}

static void program_elementwise(world *w, tf_tensor *a, tf_tensor *am, tf_tensor *ap) {
    OP(k, tf_scalar, w->cpu, TF_F32, 2.0);
    OP(add, tf_add, a, k);
    OP(mixed, tf_add, a, am);                              /* cpu + mybackend */
    OP(mixed2, tf_mul, ap, a);                             /* testplug + cpu */
    OP(mixed3, tf_sub, am, ap);                            /* mybackend + testplug */
    OP(dv, tf_div, a, k);
    OP(mx, tf_maximum, a, am);
    OP(pw, tf_pow, ap, k);
    OP(sw, tf_swiglu, a, am);
    OP(eq, tf_eq, a, am);
    OP(lt, tf_lt, ap, k);
    OP(la, tf_logical_and, eq, lt);
    OP(ln, tf_logical_not, la);
    OP(wh, tf_where, lt, a, am);
    OP(ng, tf_neg, am);
    OP(ex, tf_exp, ap);
    OP(gl, tf_gelu, a);
    OP(sg, tf_sigmoid, am);
    OP(lr, tf_leaky_relu, a, 0.1);
    OP(cl, tf_clamp, ap, -1.0, 1.0);
    OP(nan, tf_isnan, a);
    OP(cmp, tf_ge, mixed, mixed2);
    /* written into existing tensors: in place (no allocation), converted
     * into f16 and moved across devices (the result made apart first) */
    CALL(true, tf_binary_into, add, TF_OP_ADD, add, a);
    CALL(true, tf_unary_into, gl, TF_OP_TANH, gl);
    CALL(true, tf_where_into, wh, lt, am, a);
    OP(h16, tf_cast, a, TF_F16);
    CALL(true, tf_binary_into, h16, TF_OP_MUL, a, k);
    CALL(true, tf_binary_into, mixed3, TF_OP_ADD, a, a);
    CALL(true, tf_unary_into, eq, TF_OP_ISNAN, mixed2);
    (void)mixed3; (void)dv; (void)mx; (void)pw; (void)sw; (void)ln; (void)ng; (void)ex;
    (void)sg; (void)lr; (void)cl; (void)nan; (void)cmp;
}

static void program_reductions_and_linalg(world *w, tf_tensor *a, tf_tensor *am, tf_tensor *ap) {
    OP(s0, tf_sum, a, 0, false);
    OP(s1, tf_sum, am, TF_ALL_AXES, true);
    OP(mn, tf_mean, ap, 1, false);
    OP(mx, tf_max, am, 1, true);
    OP(ax, tf_argmax, ap, TF_ALL_AXES, false);
    OP(pr, tf_prod, a, 0, false);
    OP(vr, tf_var, am, 1, 1, false);
    OP(ls, tf_logsumexp, ap, 0, false);
    OP(cs, tf_cumsum, am, 1);
    OP(so, tf_sort, am, 1, true);                          /* the CPU's merge scratch, per thread */
    OP(aso, tf_argsort, a, 0, false);
    OP(flat, tf_reshape, so, 1, (int64_t[]){-1});
    OP(srt, tf_sort, flat, 0, false);
    OP(ss, tf_searchsorted, srt, ap, true);                /* the sorted keys' buffer */
    OP(amt, tf_transpose, am, 0, 1);                      /* LAPACK's host copies and results */
    OP(gram, tf_matmul, am, amt);
    OP(dt, tf_linalg_det, gram);
    tf_tensor *eu = NULL, *es = NULL, *ev = NULL, *qq = NULL, *rr = NULL;
    CALL(false, tf_linalg_svd, am, false, &eu, &es, &ev);   /* all or none made: released before the next step */
    tf_tensor_release(eu);
    tf_tensor_release(es);
    tf_tensor_release(ev);
    CALL(false, tf_linalg_qr, am, true, &qq, &rr);
    tf_tensor_release(qq);
    tf_tensor_release(rr);
    (void)aso; (void)ss; (void)dt;
    OP(t, tf_transpose, am, 0, 1);
    OP(mm, tf_matmul, a, t);                               /* cpu @ mybackend, a strided operand */
    OP(mm2, tf_matmul, ap, t);
    OP(gm, tf_gemm, a, ap, mm, 0.5, 2.0, false, true);
    OP(v, tf_sum, a, 0, false);
    OP(gv, tf_gemv, am, v);
    OP(ou, tf_outer, v, s0);
    (void)s1; (void)mn; (void)mx; (void)ax; (void)pr; (void)vr; (void)ls; (void)cs; (void)mm2; (void)gm; (void)gv;
    (void)ou;
}

/* The complex dtypes: built from parts on two devices, their ops on the
 * CPU's complex kernels (the other devices' through the fallback). */
static void program_complex(world *w, tf_tensor *a, tf_tensor *am, tf_tensor *ap) {
    OP(z, tf_complex, a, am);                              /* cpu parts and mybackend parts */
    OP(zp, tf_complex, ap, a);
    OP(zw, tf_cast, z, TF_C128);
    OP(zs, tf_mul, z, zp);
    OP(zd, tf_div, zw, ap);                                /* c128 with f32: promoted */
    OP(ze, tf_exp, zs);
    OP(za, tf_abs, zd);
    OP(zr, tf_real, ze);
    OP(zi, tf_imag, ze);
    OP(zc, tf_conj, zp);
    OP(zt, tf_transpose, zc, 0, 1);
    OP(zm, tf_matmul, z, zt);
    OP(zu, tf_sum, zm, 1, false);
    OP(zq, tf_eq, z, zc);
    OP(zv, tf_view_as_real, zw);
    OP(zx, tf_view_as_complex, zv);
    OP(zn, tf_isnan, zx);
    CALL(true, tf_binary_into, zs, TF_OP_ADD, zs, z);     /* in place */
    OP(zsq, tf_matmul, z, zt);                             /* square: LAPACK's complex routines */
    OP(zsol, tf_linalg_solve, zsq, z);
    OP(zdet, tf_linalg_det, zsq);
    tf_tensor *zu1 = NULL, *zs1 = NULL, *zv1 = NULL;
    CALL(false, tf_linalg_svd, z, false, &zu1, &zs1, &zv1);
    tf_tensor_release(zu1);
    tf_tensor_release(zs1);
    tf_tensor_release(zv1);
    int last = -1, both[2] = {0, 1};
    OP(zf, tf_fft, z, 2, both, false, TF_FFT_ORTHO);       /* FFTW's host buffers and the result */
    OP(rf, tf_rfft, am, 1, &last, TF_FFT_BACKWARD);
    OP(ri, tf_irfft, rf, 1, &last, tf_tensor_shape(am)[tf_tensor_ndim(am) - 1], TF_FFT_BACKWARD);
    (void)za; (void)zr; (void)zi; (void)zu; (void)zq; (void)zn; (void)zsol; (void)zdet; (void)zf; (void)ri;
}

static void program_indexing_and_composites(world *w, tf_tensor *a, tf_tensor *am, tf_tensor *ap) {
    static const int64_t idx[3] = {2, 0, 1};
    static const int64_t gidx[12] = {0, 1, 2, 3, 3, 2, 1, 0, 1, 1, 2, 2};
    int64_t three = 3, s34[2] = {3, 4}, sizes[2] = {1, 3}, pads[2] = {1, 2}, reps[2] = {2, 1};
    OP(ix, tf_tensor_from_data, w->cpu, TF_I64, 1, &three, idx);
    OP(gi, tf_tensor_from_data, w->my, TF_I64, 2, s34, gidx);
    OP(is, tf_index_select, am, 0, ix);
    OP(em, tf_embedding, ap, ix);
    OP(ga, tf_gather, a, 1, gi);
    OP(tl, tf_tril, am, 0);
    const tf_tensor *pair[2] = {a, am}, *three_of[3] = {a, am, ap};
    OP(cc, tf_concat, 2, pair, 1);
    OP(st, tf_stack, 3, three_of, 0);
    tf_tensor *parts[2] = {(tf_tensor *)(uintptr_t)1, (tf_tensor *)(uintptr_t)1};
    tf_status s = tf_split(ap, 1, 2, sizes, parts);
    if (s != TF_OK) parts[0] = parts[1] = NULL;            /* tf_split leaves outs NULL on error */
    if (!finish_step(w, "tf_split", s, parts, 2, false)) return;
    OP(pd, tf_pad, am, 1, pads, -1.0);
    OP(ti, tf_tile, ap, 2, reps);
    OP(fl, tf_flip, a, 1, (const int[]){0});
    (void)is; (void)em; (void)ga; (void)tl; (void)cc; (void)st; (void)pd; (void)ti; (void)fl;
}

static void program_nn_and_vision(world *w, tf_tensor *a, tf_tensor *am, tf_tensor *ap) {
    int64_t s4 = 4, q_shape[4] = {1, 2, 3, 4}, kv_shape[4] = {1, 1, 5, 4}, mask_shape[2] = {3, 5};
    int64_t x_shape[4] = {2, 2, 5, 5}, w_shape[4] = {3, 2, 3, 3}, c3 = 3, pos_n = 3, two = 2;
    static const int64_t pos[3] = {0, 1, 2};
    static const int64_t tgt[3] = {1, 3, 0};
    OP(wt, tf_ones, w->plug, TF_F32, 1, &s4);
    OP(bs, tf_zeros, w->cpu, TF_F32, 1, &s4);
    OP(sm, tf_softmax, am, 1);
    OP(lsm, tf_log_softmax, a, 0);
    OP(rn, tf_rmsnorm, a, wt, 1e-6);
    OP(lnm, tf_layernorm, am, wt, bs, 1e-5);
    OP(ps, tf_tensor_from_data, w->cpu, TF_I64, 1, &pos_n, pos);
    OP(ro, tf_rope, ap, ps, 0, 0, 10000.0, TF_ROPE_HALF_SPLIT);
    OP(q, tf_randn, w->cpu, TF_F32, 4, q_shape, 11);
    OP(kk, tf_randn, w->my, TF_F32, 4, kv_shape, 12);
    OP(vv, tf_randn, w->plug, TF_F32, 4, kv_shape, 13);
    OP(mk, tf_zeros, w->cpu, TF_F32, 2, mask_shape);
    OP(at, tf_sdpa, q, kk, vv, mk, 0.0, true, -1);
    /* the model-author composites: a padding mask as a bool mask, pooling, normalizing */
    static const uint8_t keep[5] = {1, 1, 1, 0, 0};
    OP(kp, tf_tensor_from_data, w->my, TF_BOOL, 2, (const int64_t[]){1, 5}, keep);
    OP(pm4, tf_key_padding_mask, kp);
    OP(atb, tf_sdpa, q, kk, vv, pm4, 0.0, false, 0);
    OP(hx, tf_randn, w->cpu, TF_F32, 3, (const int64_t[]){1, 5, 4}, 17);
    OP(mm, tf_masked_mean, hx, kp, 1, false);             /* mean over the 3 kept positions: [1, 4] */
    OP(nz, tf_normalize, am, 2.0, -1, 1e-12);
    (void)atb; (void)mm; (void)nz;
    OP(q1, tf_sum, q, 2, false);                           /* [1, 2, 4] */
    OP(sc, tf_attention_scores, q1, kk, 0.5);              /* keys [1, 1, 5, 4] broadcast: [1, 2, 5] */
    OP(ws, tf_weighted_sum_rows, sc, vv);                  /* [1, 2, 4] */
    (void)sm; (void)lsm; (void)rn; (void)lnm; (void)ro; (void)at; (void)ws;
    OP(x, tf_randn, w->my, TF_F32, 4, x_shape, 14);
    OP(cw, tf_randn, w->cpu, TF_F32, 4, w_shape, 15);
    OP(cb, tf_ones, w->plug, TF_F32, 1, &c3);
    OP(cv, tf_conv2d, x, cw, cb, NULL, (const int64_t[]){1, 1}, NULL, 1);
    OP(mp, tf_maxpool2d, x, (const int64_t[]){2, 2}, NULL, NULL, NULL);
    OP(ap2, tf_avgpool2d, cv, (const int64_t[]){2, 2}, NULL, NULL, true);
    OP(rm, tf_zeros, w->my, TF_F32, 1, &two);
    OP(rv, tf_ones, w->my, TF_F32, 1, &two);
    tf_tensor *bn = (tf_tensor *)(uintptr_t)1;
    tf_status s = tf_batch_norm(x, rm, rv, NULL, NULL, true, 0.1, 1e-5, &bn);
    if (!finish_step(w, "tf_batch_norm", s, &bn, 1, true)) return;
    OP(tg, tf_tensor_from_data, w->my, TF_I64, 1, &pos_n, tgt);
    OP(ce, tf_cross_entropy, ap, tg, -100, TF_REDUCTION_MEAN);
    OP(gr, tf_rand, w->cpu, TF_F32, 2, (const int64_t[]){3, 4}, 16);
    OP(pm, tf_copy, am);
    OP(m, tf_zeros, w->my, TF_F32, 2, (const int64_t[]){3, 4});
    OP(v, tf_zeros, w->my, TF_F32, 2, (const int64_t[]){3, 4});
    CALL(true, tf_adam_step, pm, gr, m, v, 1e-3, 0.9, 0.999, 1e-8, 0.01, 1, true);
    /* in-place writes into views: from another device, and overlapping itself */
    OP(into, tf_slice, v, 0, 1, 3, 1);
    OP(from, tf_slice, gr, 0, 0, 2, 1);
    CALL(true, tf_copy_into, into, from);
    OP(lo, tf_slice, pm, 0, 0, 2, 1);
    OP(hi, tf_slice, pm, 0, 1, 3, 1);
    CALL(true, tf_copy_into, hi, lo);
    (void)mp; (void)ap2; (void)ce;
}

/* A small GGUF (v3): two keys, one a string array, an f32 tensor and a
 * Q8_0 one (a block of 32, decoded by tf_gguf_load_as). */
static void write_gguf(const char *path) {
    static const unsigned char head[] = "GGUF\3\0\0\0" "\2\0\0\0\0\0\0\0" "\2\0\0\0\0\0\0\0"
        "\4\0\0\0\0\0\0\0arch" "\x08\0\0\0" "\5\0\0\0\0\0\0\0llama"
        "\4\0\0\0\0\0\0\0toks" "\x09\0\0\0" "\x08\0\0\0" "\2\0\0\0\0\0\0\0"
        "\1\0\0\0\0\0\0\0a" "\2\0\0\0\0\0\0\0bc"
        "\1\0\0\0\0\0\0\0w" "\1\0\0\0" "\4\0\0\0\0\0\0\0" "\0\0\0\0" "\0\0\0\0\0\0\0\0"
        "\1\0\0\0\0\0\0\0q" "\1\0\0\0" "\x20\0\0\0\0\0\0\0" "\x08\0\0\0" "\x20\0\0\0\0\0\0\0";
    static const float data[4] = {1, -2, 3, -4};
    static const unsigned char pad[32] = {0};
    unsigned char q8[34] = {0x00, 0x3c};               /* d = 1, then 32 int8 */
    for (int i = 0; i < 32; i++) q8[2 + i] = (unsigned char)(i * 7 - 100);
    FILE *fp = fopen(path, "wb");
    if (!fp) return;
    size_t n = sizeof head - 1;
    fwrite(head, 1, n, fp);
    fwrite(pad, 1, (32 - n % 32) % 32, fp);
    fwrite(data, 1, sizeof data, fp);
    fwrite(pad, 1, 32 - sizeof data, fp);
    fwrite(q8, 1, sizeof q8, fp);
    fclose(fp);
}

static void program_gguf(world *w) {
    char path[512];
    snprintf(path, sizeof path, "%s/m.gguf", w->dir);
    write_gguf(path);
    tf_gguf *f = NULL;
    tf_status s = tf_gguf_open(path, &f);
    if (!finish_step(w, "tf_gguf_open", s, NULL, 0, false)) return;
    tf_tensor *t = (tf_tensor *)(uintptr_t)1;
    s = tf_gguf_load(f, "w", w->my, &t);
    if (!finish_step(w, "tf_gguf_load", s, &t, 1, false)) {
        tf_gguf_close(f);
        return;
    }
    tf_tensor *q = (tf_tensor *)(uintptr_t)1;
    s = tf_gguf_load_as(f, "q", w->my, TF_BF16, &q);
    tf_gguf_close(f);
    finish_step(w, "tf_gguf_load_as", s, &q, 1, false);
}

/* Quantized dtypes: quantizing, both product paths (8-bit rows; decoded
 * panels for 16 rows), a GEMM that decodes first, an embedding, and a cast
 * on a device without the kernel (the CPU fallback's staging), an IQ4_XS
 * weight's encode, product and decode; then the
 * same product with a bf16 weight (tf_linear), both of its paths. */
static void program_quantized(world *w) {
    int64_t s_w[2] = {4, 64}, s_x[2] = {2, 64}, s_xs[2] = {16, 64}, n_ids = 2;
    static const int32_t ids[2] = {3, 1};
    OP(wf, tf_rand, w->cpu, TF_F32, 2, s_w, 11);
    OP(q, tf_cast, wf, TF_Q4_1);
    OP(x, tf_rand, w->cpu, TF_F32, 2, s_x, 12);
    OP(xs, tf_rand, w->cpu, TF_F32, 2, s_xs, 13);
    OP(y, tf_matmul_quantized, x, q);
    OP(ys, tf_matmul_quantized, xs, q);
    OP(g, tf_gemm, x, q, NULL, 2.0, 0.0, false, true);
    OP(id, tf_tensor_from_data, w->cpu, TF_I32, 1, &n_ids, ids);
    OP(e, tf_embedding, q, id);
    OP(qm, tf_tensor_to, q, w->my);
    OP(dm, tf_cast, qm, TF_F32);
    /* a later format (cpu_quant_ext.c's codecs and products): IQ4_XS's
     * encoder search, its product and a decode */
    int64_t s_wk[2] = {3, 256}, s_xk[2] = {2, 256};
    OP(wk, tf_rand, w->cpu, TF_F32, 2, s_wk, 16);
    OP(qk, tf_cast, wk, TF_IQ4_XS);
    OP(xk, tf_rand, w->cpu, TF_F32, 2, s_xk, 17);
    OP(yk, tf_matmul_quantized, xk, qk);
    OP(dk, tf_cast, qk, TF_F16);
    /* a bf16 weight under f32 activations: dot products for a few rows, a
     * widened copy of the weight for sgemm from 128 rows */
    int64_t s_xl[2] = {130, 64}, n_b = 4;
    OP(wh, tf_cast, wf, TF_BF16);
    OP(bias, tf_rand, w->cpu, TF_F32, 1, &n_b, 14);
    OP(xl, tf_rand, w->cpu, TF_F32, 2, s_xl, 15);
    OP(lh, tf_linear, x, wh, bias);
    OP(ll, tf_linear, xl, wh, bias);
    (void)y; (void)ys; (void)g; (void)e; (void)dm; (void)lh; (void)ll;
}

static void program_files(world *w, tf_tensor *a, tf_tensor *am, tf_tensor *ap) {
    char npy[512], st[512];
    snprintf(npy, sizeof npy, "%s/a.npy", w->dir);
    snprintf(st, sizeof st, "%s/w.safetensors", w->dir);
    CALL(false, tf_npy_save, npy, am);
    OP(ld, tf_npy_load, npy, w->plug);
    const char *names[2] = {"a", "b"};
    const tf_tensor *ts[2] = {a, ap};
    CALL(false, tf_safetensors_save, st, 2, names, ts);
    tf_safetensors *f = NULL;
    tf_status s = tf_safetensors_open(st, &f);
    if (!finish_step(w, "tf_safetensors_open", s, NULL, 0, false)) return;
    tf_tensor *sb = (tf_tensor *)(uintptr_t)1;
    s = tf_safetensors_load(f, "b", w->my, &sb);
    if (!finish_step(w, "tf_safetensors_load", s, &sb, 1, false)) {
        tf_safetensors_close(f);
        return;
    }
    tf_tensor *sc = (tf_tensor *)(uintptr_t)1;              /* with a cast on the device */
    s = tf_safetensors_load_as(f, "a", w->my, TF_BF16, &sc);
    tf_safetensors_close(f);
    if (!finish_step(w, "tf_safetensors_load_as", s, &sc, 1, false)) return;
    program_gguf(w);
    if (!w->failed) program_quantized(w);
    (void)ld;
}

/* A scope around a few ops, ended whatever happened: an allocation that
 * fails (a tensor, or the scope's own list) leaves nothing behind, and the
 * sweep's leak checks see the temporaries gone. */
static void program_scope(world *w, tf_tensor *a) {
    tf_scope *sc = NULL;
    tf_status s = tf_scope_begin(&sc);
    if (!finish_step(w, "tf_scope_begin", s, NULL, 0, false)) return;
    tf_tensor *b = NULL, *c = NULL, *d = NULL, *v = NULL;
    const char *what = "tf_add";                         /* the call that failed, if one did */
    s = tf_add(a, a, &b);
    if (s == TF_OK) s = tf_linear(b, b, NULL, &c), what = "tf_linear";
    if (s == TF_OK) s = tf_slice(c, 0, 1, 3, 1, &v), what = "tf_slice";
    if (s == TF_OK) s = tf_softmax(v, -1, &d), what = "tf_softmax";
    tf_status ended = tf_scope_end(sc);
    if (ended != TF_OK) {
        fprintf(stderr, "[%s N=%lld] tf_scope_end failed: %s\n", w->sweep, (long long)w->nth, tf_last_error());
        w->errors++;
    }
    finish_step(w, what, s, NULL, 0, false);
}

/* Inside a capture: a chain whose released temporaries the capture's pool
 * hands to later ones, and a constant made once buffers wait there (its
 * storage moves to a buffer of its own): the pool's records and that move
 * can fail too. */
static tf_status capture_chain(tf_device *cpu, const tf_tensor *c, const tf_tensor *a, tf_tensor **out, const char **what) {
    static const float ramp[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};   /* a is [3, 4] */
    tf_tensor *t = NULL, *k = NULL;
    tf_status st = tf_add(c, a, &t);
    *what = "tf_add";
    for (int step = 0; st == TF_OK && step < 4; step++) {
        tf_tensor *next = NULL;
        st = tf_mul(t, a, &next), *what = "tf_mul";
        tf_tensor_release(t);
        t = next;
    }
    if (st == TF_OK)
        st = tf_tensor_from_data(cpu, TF_F32, tf_tensor_ndim(a), tf_tensor_shape(a), ramp, &k), *what = "tf_tensor_from_data";
    if (st == TF_OK) st = tf_add(t, k, out), *what = "tf_add";
    tf_tensor_release(t);
    tf_tensor_release(k);
    return st;
}

/* A CPU stream (a worker thread) with ops queued on it, an event ordering
 * the default stream after them, a graph captured and replayed: every
 * stream, event, task and graph record allocation can fail. Whatever
 * failed, the objects made are destroyed. */
static void streams_and_graph_steps(world *w, tf_tensor *a, tf_stream **side, tf_event **done, tf_graph **g) {
    CALL(false, tf_stream_create, w->cpu, side);
    CALL(false, tf_event_create, 0, done);
    CALL(false, tf_stream_set_current, *side);
    OP(b, tf_add, a, a);                                  /* queued on the worker */
    OP(c, tf_mul, b, a);
    CALL(false, tf_event_record, *done, *side);
    CALL(false, tf_stream_set_current, tf_stream_default(w->cpu));
    CALL(false, tf_stream_wait_event, tf_stream_default(w->cpu), *done);
    /* begin, one op, end as one step: the harness's reads between steps
     * would be reads during the capture */
    tf_tensor *d = NULL;
    const char *what = "tf_graph_begin";
    tf_status st = tf_graph_begin(w->cpu);
    if (st == TF_OK) {
        st = capture_chain(w->cpu, c, a, &d, &what);
        tf_status ended = tf_graph_end(g);
        if (st == TF_OK) st = ended, what = "tf_graph_end";
    }
    if (st != TF_OK) {
        tf_tensor_release(d);
        d = NULL;
    }
    if (!finish_step(w, what, st, &d, 1, false)) return;
    CALL(true, tf_graph_replay, *g);
}

/* A graph of the example backend's own ops: a native graph (SDK 2.3) whose
 * capture can fail at any allocation and is then replayed node by node. */
static void native_graph_steps(world *w, tf_tensor *am, tf_graph **g) {
    tf_tensor *d = NULL, *e = NULL;
    const char *what = "tf_graph_begin";
    tf_status st = tf_graph_begin(w->my);
    if (st == TF_OK) {
        st = tf_add(am, am, &d), what = "tf_add";
        if (st == TF_OK) st = tf_mul(d, am, &e), what = "tf_mul";
        tf_status ended = tf_graph_end(g);
        if (st == TF_OK) st = ended, what = "tf_graph_end";
    }
    tf_tensor_release(d);
    if (st != TF_OK) {
        tf_tensor_release(e);
        e = NULL;
    }
    if (!finish_step(w, what, st, &e, 1, false)) return;
    CALL(true, tf_graph_replay, *g);
}

/* A fused linear layer (GEMM_EPILOGUE): on the CPU in f32 and bf16 (its
 * tile and row epilogues), on the example backend (run as its parts, each
 * placed or fallen back); an add + norm (ADD_NORM) on both; then a captured
 * linear + GELU + residual add, add, layernorm that the fusion pass merges
 * at tf_graph_end into two nodes, replayed. */
static void program_fused(world *w, tf_tensor *a, tf_tensor *am) {
    int64_t s_w[2] = {4, 4}, n_b = 4;
    OP(wf, tf_rand, w->cpu, TF_F32, 2, s_w, 21);
    OP(bf, tf_rand, w->cpu, TF_F32, 1, &n_b, 22);
    OP(lf, tf_linear_fused, a, wf, bf, TF_OP_GELU, a);
    OP(ah, tf_cast, a, TF_BF16);
    OP(wh, tf_cast, wf, TF_BF16);
    OP(lh, tf_linear_fused, ah, wh, NULL, TF_OP_SILU, ah);
    OP(wm, tf_tensor_to, wf, w->my);
    OP(lm, tf_linear_fused, am, wm, NULL, TF_OP_RELU, am);
    OP(lq, tf_linear_fused, a, wh, bf, TF_OP_GELU, a);      /* a kept bf16 weight: QMATMUL_EPILOGUE */
    OP(wmh, tf_tensor_to, wh, w->my);
    OP(lmq, tf_linear_fused, am, wmh, NULL, TF_OP_SILU, am); /* its parts on the example backend */
    OP(nf, tf_add_layernorm, a, bf, bf, bf, 1e-5);
    OP(nm, tf_add_rmsnorm, am, am, NULL, 1e-6);    /* parts on the example backend, the sum in its scratch */
    /* begin, three ops, end as one step (reads between steps would be reads
     * during the capture); the graph is replayed, then dropped */
    tf_graph *g = NULL;
    tf_tensor *h = NULL, *y = NULL;
    const char *what = "tf_graph_begin";
    tf_status st = tf_graph_begin(w->cpu);
    if (st == TF_OK) {
        st = tf_linear(a, wf, bf, &h), what = "tf_linear";
        if (st == TF_OK) st = tf_unary_into(h, TF_OP_GELU, h), what = "tf_unary_into";
        if (st == TF_OK) st = tf_linear(h, wf, NULL, &y), what = "tf_linear";
        if (st == TF_OK) st = tf_binary_into(y, TF_OP_ADD, y, a), what = "tf_binary_into";
        tf_tensor_release(h);
        h = NULL;
        if (st == TF_OK) st = tf_add(y, a, &h), what = "tf_add";              /* add + layernorm: one node */
        tf_tensor_release(y);
        y = NULL;
        if (st == TF_OK) st = tf_layernorm(h, bf, bf, 1e-5, &y), what = "tf_layernorm";
        tf_tensor_release(h);
        tf_status ended = tf_graph_end(&g);
        if (st == TF_OK) st = ended, what = "tf_graph_end";
    }
    if (st != TF_OK) {
        tf_tensor_release(y);
        y = NULL;
        tf_graph_destroy(g);                     /* a capture whose op failed */
        g = NULL;
    }
    if (!finish_step(w, what, st, &y, 1, false)) return;
    CALL(true, tf_graph_replay, g);
    pause_injection();
    tf_graph_destroy(g);
    resume_injection();
    (void)lf; (void)lh; (void)lm; (void)nf; (void)nm; (void)lq; (void)lmq;
}

static void program_streams_and_graph(world *w, tf_tensor *a, tf_tensor *am) {
    tf_stream *side = NULL;
    tf_event *done = NULL;
    tf_graph *g = NULL;
    streams_and_graph_steps(w, a, &side, &done, &g);
    tf_graph *native = NULL;
    if (!w->failed) native_graph_steps(w, am, &native);
    pause_injection();
    tf_graph_destroy(native);
    tf_stream_set_current(tf_stream_default(w->cpu));
    tf_graph_destroy(g);
    tf_event_destroy(done);
    tf_stream_destroy(side);
    resume_injection();
}

/* Autocast around a linear (three casts and a product in f16) and a
 * softmax (back to f32), ended whatever failed; then a loss scaler whose
 * unscale either rewrites every gradient or none. */
static void scaler_steps(world *w, tf_tensor *a, tf_tensor *am, tf_grad_scaler **sc) {
    CALL(false, tf_grad_scaler_create, NULL, sc);
    OP(g1, tf_copy, a);
    OP(g2, tf_copy, am);
    OP(loss, tf_sum, g1, TF_ALL_AXES, false);
    OP(scaled, tf_grad_scaler_scale, *sc, loss);
    bool finite = false;
    CALL(true, tf_grad_scaler_unscale, *sc, 2, (tf_tensor *[]){g1, g2}, &finite);
    CALL(false, tf_grad_scaler_update, *sc);
    (void)scaled;
}

static void program_amp(world *w, tf_tensor *a, tf_tensor *am) {
    tf_tensor *p = NULL, *sm = NULL;
    tf_status s = tf_autocast_begin(TF_F16);
    const char *what = "tf_linear";
    if (s == TF_OK) {
        s = tf_linear(a, a, NULL, &p);
        if (s == TF_OK) s = tf_softmax(p, -1, &sm), what = "tf_softmax";
        tf_autocast_end();
    }
    tf_tensor *outs[2] = {p, sm};
    if (!finish_step(w, what, s, outs, s == TF_OK ? 2 : 0, false)) {
        tf_tensor_release(p);
        tf_tensor_release(sm);
        return;
    }
    tf_grad_scaler *sc = NULL;
    scaler_steps(w, a, am, &sc);
    pause_injection();
    tf_grad_scaler_destroy(sc);
    resume_injection();
}

/* Imports m; on failure the managed tensor is still the caller's, whose
 * deleter (run outside the injection) gives the export's reference back. */
static tf_status import_or_give_back(DLManagedTensorVersioned *m, tf_tensor **out) {
    tf_status s = tf_tensor_from_dlpack(m, out);
    if (s != TF_OK) {
        pause_injection();
        m->deleter(m);
        resume_injection();
    }
    return s;
}

static tf_status import_legacy_or_give_back(DLManagedTensor *m, tf_tensor **out) {
    tf_status s = tf_tensor_from_dlpack_legacy(m, out);
    if (s != TF_OK) {
        pause_injection();
        m->deleter(m);
        resume_injection();
    }
    return s;
}

/* DLPack out and back in, zero-copy and (read-only: the misaligned path's
 * too) as a copy, and through the DLPack 0.x adapters, whose own
 * allocations fail in turn too. */
static void program_dlpack(world *w, tf_tensor *a) {
    DLManagedTensorVersioned *m = NULL, *rm = NULL;
    DLManagedTensor *lm = NULL;
    tf_tensor *u = (tf_tensor *)(uintptr_t)1, *ru = u, *lu = u;
    CALL(false, tf_tensor_to_dlpack, a, &m);
    if (!finish_step(w, "tf_tensor_from_dlpack", import_or_give_back(m, &u), &u, 1, false)) return;
    OP(sum, tf_add, u, a);
    CALL(false, tf_tensor_to_dlpack, a, &rm);
    rm->flags |= DLPACK_FLAG_BITMASK_READ_ONLY;
    if (!finish_step(w, "tf_tensor_from_dlpack", import_or_give_back(rm, &ru), &ru, 1, false)) return;
    OP(rsum, tf_add, ru, a);
    CALL(false, tf_tensor_to_dlpack_legacy, a, &lm);
    if (!finish_step(w, "tf_tensor_from_dlpack_legacy", import_legacy_or_give_back(lm, &lu), &lu, 1, false)) return;
    OP(lsum, tf_add, lu, a);
    (void)sum, (void)rsum, (void)lsum;
}

/* A training step on the CPU: a convolution, pooling, a linear layer, a
 * norm, attention and cross-entropy recorded for autograd; backward, a
 * clip by norm and an Adam step. The parameters are held, so a failing
 * backward or step must leave them as the clean run had them before it. */
static void training_steps(world *w, tf_optimizer **opt) {
    static const float wv[12] = {0.5f, -0.25f, 0.125f, 1, -1, 0.75f, 0.3f, -0.6f, 0.2f, 0.1f, -0.4f, 0.9f};
    static const int64_t targets[6] = {0, 2, 1, 1, -100, 2};
    int64_t three = 3, six = 6;
    OP(lw, tf_tensor_from_data, w->cpu, TF_F32, 2, (const int64_t[]){3, 4}, wv);
    OP(lb, tf_zeros, w->cpu, TF_F32, 1, &three);
    OP(nw, tf_ones, w->cpu, TF_F32, 1, &three);
    OP(cw, tf_randn, w->cpu, TF_F32, 4, (const int64_t[]){2, 1, 3, 3}, 21);
    tf_tensor *params[4] = {lw, lb, nw, cw};
    for (int i = 0; i < 4; i++) CALL(false, tf_set_requires_grad, params[i], true);
    OP(img, tf_randn, w->cpu, TF_F32, 4, (const int64_t[]){2, 1, 6, 4}, 22);
    OP(cv, tf_conv2d, img, cw, NULL, NULL, (const int64_t[]){1, 1}, NULL, 1);      /* [2, 2, 6, 4] */
    OP(mp, tf_maxpool2d, cv, (const int64_t[]){2, 2}, NULL, NULL, NULL);         /* [2, 2, 3, 2] */
    OP(rows, tf_reshape, mp, 3, (const int64_t[]){2, 3, 4});
    OP(h, tf_linear, rows, lw, lb);                                              /* [2, 3, 3] */
    OP(act, tf_gelu, h);
    OP(nh, tf_rmsnorm, act, nw, 1e-5);
    OP(heads, tf_reshape, nh, 4, (const int64_t[]){2, 1, 3, 3});
    OP(at, tf_sdpa, heads, heads, heads, NULL, 0.0, true, 0);
    OP(logits, tf_reshape, at, 2, (const int64_t[]){6, 3});
    OP(tg, tf_tensor_from_data, w->cpu, TF_I64, 1, &six, targets);
    OP(loss, tf_cross_entropy, logits, tg, -100, TF_REDUCTION_MEAN);
    CALL(false, tf_backward, loss, NULL, 0);
    double norm = 0;
    CALL(false, tf_clip_grad_norm, 4, params, 0.5, &norm);
    tf_optimizer_config cfg = tf_optimizer_defaults(TF_OPTIMIZER_ADAMW);
    CALL(false, tf_optimizer_create, &cfg, 4, params, opt);
    CALL(true, tf_optimizer_step, *opt);
    OP(again, tf_linear, rows, lw, lb);                                          /* the stepped weights in use */
    (void)again;
}

static void program_training(world *w) {
    tf_optimizer *opt = NULL;
    training_steps(w, &opt);
    pause_injection();
    tf_optimizer_destroy(opt);
    resume_injection();
}

static void program(world *w) {
    program_creation_and_views(w);
    if (w->failed) return;
    static const float v12[12] = {0.5f, -1, 2, -3, 4, 0.25f, -0.75f, 1.5f, 3, -2, 1, 0.125f};
    int64_t s34[2] = {3, 4};
    OP(a, tf_tensor_from_data, w->cpu, TF_F32, 2, s34, v12);
    OP(am, tf_tensor_to, a, w->my);
    OP(ap, tf_tensor_to, a, w->plug);
    program_elementwise(w, a, am, ap);
    if (!w->failed) program_reductions_and_linalg(w, a, am, ap);
    if (!w->failed) program_indexing_and_composites(w, a, am, ap);
    if (!w->failed) program_complex(w, a, am, ap);
    if (!w->failed) program_nn_and_vision(w, a, am, ap);
    if (!w->failed) program_files(w, a, am, ap);
    if (!w->failed) program_scope(w, a);
    if (!w->failed) program_streams_and_graph(w, a, am);
    if (!w->failed) program_fused(w, a, am);
    if (!w->failed) program_amp(w, a, am);
    if (!w->failed) program_dlpack(w, a);
    if (!w->failed) program_training(w);
}

/* ---- one run of the program and its checks ---- */

static void release_all(world *w) {
    for (int i = 0; i < w->n_held; i++) tf_tensor_release(w->held[i]);
    w->n_held = 0;
}

static void empty_caches(world *w) {
    tf_device *devs[5] = {w->cpu, w->my, w->plug, w->ocl, w->wgpu};
    for (int i = 0; i < 5; i++)
        if (devs[i]) tf_device_empty_cache(devs[i]);
}

static void check_nothing_left(world *w) {
    tf_memory_stats ms;
    if (tf_device_memory_stats(w->cpu, &ms) == TF_OK && ms.allocated) {
        fprintf(stderr, "[%s N=%lld] %llu bytes still allocated on cpu after releasing everything\n", w->sweep,
                (long long)w->nth, (unsigned long long)ms.allocated);
        w->errors++;
    }
    tf_device *gpus[2] = {w->ocl, w->wgpu};                /* the GPU plugins' allocators */
    for (int i = 0; i < 2; i++)
        if (gpus[i] && tf_device_memory_stats(gpus[i], &ms) == TF_OK && ms.allocated) {
            fprintf(stderr, "[%s N=%lld] %llu bytes still allocated on %s after releasing everything\n", w->sweep,
                    (long long)w->nth, (unsigned long long)ms.allocated, tf_device_name(gpus[i]));
            w->errors++;
        }
    const char *backends[2] = {"mybackend", "testplug"};
    for (int i = 0; i < 2; i++) {
        mybackend_stats st = stats_of(backends[i]);
        if (st.live_buffers) {
            fprintf(stderr, "[%s N=%lld] %llu %s buffers still live after releasing everything\n", w->sweep,
                    (long long)w->nth, (unsigned long long)st.live_buffers, backends[i]);
            w->errors++;
        }
    }
}

/* Run the program once; true if the injected failure happened. */
static bool run_once(world *w, inject_kind kind, int64_t nth) {
    w->step = 0;
    w->failed = false;
    w->failed_step = -1;
    w->sweep = kind == INJECT_LIBRARY ? "library" : kind == INJECT_MYBACKEND ? "mybackend" : "testplug";
    w->nth = nth;
    empty_caches(w);
    injecting = kind;
    uint64_t injected_before = 0;
    if (kind == INJECT_LIBRARY) {
        lib_target = nth;
        tf_debug_fail_allocation(nth);
    } else {
        const char *b = kind == INJECT_MYBACKEND ? "mybackend" : "testplug";
        injected_before = stats_of(b).injected_failures;
        fail_after_of(b)(nth);
    }
    program(w);
    bool fired;
    if (kind == INJECT_LIBRARY) {
        fired = lib_target == 0 || tf_debug_allocation_count() >= lib_target;
        tf_debug_fail_allocation(0);
        lib_target = 0;
    } else {
        const char *b = kind == INJECT_MYBACKEND ? "mybackend" : "testplug";
        fail_after_of(b)(0);
        fired = stats_of(b).injected_failures > injected_before;
    }
    if (!w->failed) check_held(w, 0, w->step - 1);          /* a completed run ends as the clean one did */
    release_all(w);
    check_nothing_left(w);
    return fired;
}

/* Returns the number of runs that found a problem. */
static int sweep(world *w, inject_kind kind, int *runs, int *failed_steps, int *absorbed) {
    int errors = 0;
    for (int64_t nth = 1; nth < 100000; nth++) {
        w->errors = 0;
        bool fired = run_once(w, kind, nth);
        errors += w->errors > 0;
        (*runs)++;
        if (w->failed) (*failed_steps)++;
        else if (fired) (*absorbed)++;
        if (!fired) return errors;                           /* the program completed without a failure */
        if (errors > 2000) return errors;
    }
    fprintf(stderr, "%s sweep did not end\n", w->sweep);
    return errors + 1;
}

static tf_device *device(const char *spec) {
    tf_device *d = NULL;
    if (tf_device_get(spec, &d) != TF_OK) return NULL;
    return d;
}

int main(void) {
    if (mybackend_register() != TF_OK) {
        fprintf(stderr, "cannot register mybackend: %s\n", tf_last_error());
        return 1;
    }
    tf_set_num_threads(1);                                   /* one allocation order */
    world w;
    memset(&w, 0, sizeof w);
    w.cpu = device("cpu");
    w.my = device("mybackend:0");
    w.plug = device("testplug:0");
    w.ocl = getenv("TF_FAULT_NO_OPENCL") ? NULL : device("opencl:0");
    w.wgpu = getenv("TF_FAULT_NO_WEBGPU") ? NULL : device("webgpu:0");
    if (!w.cpu || !w.my || !w.plug || !fail_after_of("mybackend") || !fail_after_of("testplug")) {
        fprintf(stderr, "fault_sweep needs cpu, mybackend:0 and testplug:0 (TF_PLUGIN_PATH) with their extras\n");
        return 1;
    }
    char dir[] = "/tmp/tf-fault-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    w.dir = dir;

    w.recording = true;
    w.sweep = "clean";
    program(&w);
    clean_steps = w.step;
    int errors = w.errors;
    release_all(&w);
    check_nothing_left(&w);
    errors += w.errors;
    w.recording = false;
    printf("clean run: %d steps%s%s\n", clean_steps, w.ocl ? " (opencl:0 included)" : "",
           w.wgpu ? " (webgpu:0 included)" : "");
    if (errors) return 1;

    static const char *const names[3] = {"library allocations (host and device)", "mybackend's allocator",
                                         "testplug's allocator (plugin)"};
    int total_runs = 0;
    for (int k = 0; k < 3; k++) {
        int runs = 0, failed_steps = 0, absorbed = 0;
        int e = sweep(&w, (inject_kind)k, &runs, &failed_steps, &absorbed);
        printf("%-40s %5d runs: %d failed a call, %d absorbed the failure, %d runs with problems\n", names[k],
               runs, failed_steps, absorbed, e);
        errors += e;
        total_runs += runs;
    }
    printf("calls that failed under injection (runs, status):\n");
    for (int i = 0; i < n_sites; i++)
        printf("  %-24s %5d  %s\n", sites[i].fn, sites[i].count, tf_status_name(sites[i].status));
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    tf_shutdown();
    printf("%d passed, %d failed\n", total_runs - errors, errors);
    return errors ? 1 : 0;
}

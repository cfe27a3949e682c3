/* mybackend: a complete tensorframe backend in one file, as a user would
 * write one. It owns its memory (a budgeted host allocator with canaries),
 * implements a subset of the ops in f32 — add, mul, sum, fill, copy — and
 * answers "unsupported" for the rest, which the core then runs on the CPU.
 *
 * Build it in-process (call mybackend_register) or as a plugin
 * (-DMYBACKEND_PLUGIN, exports tf_backend_plugin_init). With
 * -DMYBACKEND_OPAQUE it hides its host pointers, so the core must stage
 * data through upload/download as it would for a GPU. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mybackend.h"

#ifndef MYBACKEND_NAME
#define MYBACKEND_NAME "mybackend"
#endif
#define BUDGET_BYTES (1ull << 30)          /* what this device offers */
#define CANARY 0x6d796266u                 /* "mybf" */

typedef struct my_buffer {
    uint32_t canary;
    size_t nbytes;
    char *data;
} my_buffer;

static const tf_host_api *host;
static _Atomic uint64_t live_bytes, live_buffers, total_allocs, ops_run, injected;
static _Atomic int64_t fail_countdown;     /* > 0: the allocation that brings it to 0 fails */

/* Tests fail this backend's nth allocation (mybackend_fail_after). */
static bool injected_failure(void) {
    int64_t c = atomic_load(&fail_countdown);
    if (c <= 0 || atomic_fetch_sub(&fail_countdown, 1) != 1) return false;
    atomic_fetch_add(&injected, 1);
    return true;
}

/* ---- memory ---- */

static tf_status my_get_info(void *ctx, tf_backend_device_info *info) {
    (void)ctx;
    snprintf(info->description, sizeof info->description, "example backend (%s), host memory, %llu MiB budget",
             MYBACKEND_NAME, (unsigned long long)(BUDGET_BYTES >> 20));
    info->type = TF_DEVICE_TYPE_CPU;
    info->memory_total = BUDGET_BYTES;
    info->memory_free = BUDGET_BYTES - atomic_load(&live_bytes);
    info->caps.dtypes = (1u << TF_DTYPE_COUNT) - 1u;   /* stores anything; computes f32 */
    return TF_OK;
}

static tf_status my_alloc(void *ctx, size_t nbytes, tf_backend_buffer **out) {
    (void)ctx;
    if (nbytes > BUDGET_BYTES - atomic_load(&live_bytes))
        return host->set_error(TF_ERR_OUT_OF_MEMORY, MYBACKEND_NAME ": %zu bytes exceed the free budget", nbytes);
    my_buffer *b = injected_failure() ? NULL : malloc(sizeof *b);
    char *data = b && !injected_failure() ? malloc(nbytes ? nbytes : 1) : NULL;
    if (!data) {
        free(b);
        return host->set_error(TF_ERR_OUT_OF_MEMORY, MYBACKEND_NAME ": malloc(%zu) failed", nbytes);
    }
    *b = (my_buffer){CANARY, nbytes, data};
    atomic_fetch_add(&live_bytes, nbytes);
    atomic_fetch_add(&live_buffers, 1);
    atomic_fetch_add(&total_allocs, 1);
    *out = (tf_backend_buffer *)b;
    return TF_OK;
}

static void my_free(void *ctx, tf_backend_buffer *buf) {
    (void)ctx;
    my_buffer *b = (my_buffer *)buf;
    if (!b || b->canary != CANARY) {
        if (b) host->log(TF_LOG_ERROR, MYBACKEND_NAME ": freeing a buffer that is not ours");
        return;
    }
    atomic_fetch_sub(&live_bytes, b->nbytes);
    atomic_fetch_sub(&live_buffers, 1);
    b->canary = 0;
    free(b->data);
    free(b);
}

#ifndef MYBACKEND_OPAQUE
static void *my_host_ptr(void *ctx, tf_backend_buffer *buf) {
    (void)ctx;
    return ((my_buffer *)buf)->data;
}
#endif

static tf_status check_range(const my_buffer *b, size_t off, size_t n) {
    if (b->canary != CANARY || off > b->nbytes || n > b->nbytes - off)
        return host->set_error(TF_ERR_INVALID_ARGUMENT, MYBACKEND_NAME ": %zu bytes at %zu outside buffer", n, off);
    return TF_OK;
}

static tf_status my_upload(void *ctx, tf_backend_buffer *dst, size_t off, const void *src, size_t n) {
    (void)ctx;
    my_buffer *b = (my_buffer *)dst;
    tf_status s = check_range(b, off, n);
    if (s == TF_OK && n) memcpy(b->data + off, src, n);
    return s;
}

static tf_status my_download(void *ctx, tf_backend_buffer *src, size_t off, void *dst, size_t n) {
    (void)ctx;
    my_buffer *b = (my_buffer *)src;
    tf_status s = check_range(b, off, n);
    if (s == TF_OK && n) memcpy(dst, b->data + off, n);
    return s;
}

/* ---- kernels (f32 only) ---- */

static float *at(const tf_tensor_desc *d, const int64_t *idx) {
    int64_t e = 0;
    for (int i = 0; i < d->ndim; i++) e += idx[i] * d->strides[i];
    return (float *)(((my_buffer *)d->buffer)->data + d->offset) + e;
}

static int next_index(int ndim, const int64_t *shape, int64_t *idx) {
    for (int d = ndim - 1; d >= 0; d--) {
        if (++idx[d] < shape[d]) return 1;
        idx[d] = 0;
    }
    return 0;
}

static void run_elementwise(const tf_op *op) {
    const tf_tensor_desc *o = &op->output;
    int64_t idx[TF_MAX_DIMS] = {0};
    if (tf_desc_numel(o) == 0) return;
    do {
        float x = op->n_inputs ? *at(&op->inputs[0], idx) : (float)op->params.value;
        float y = op->n_inputs > 1 ? *at(&op->inputs[1], idx) : 0.0f;
        float r = op->kind == TF_OP_ADD ? x + y : op->kind == TF_OP_MUL ? x * y : x;
        *at(o, idx) = r;
    } while (next_index(o->ndim, o->shape, idx));
}

/* Sum: walk every input element and add it into its output slot (the
 * output index is the input index with reduced axes pinned to 0). */
static tf_status run_sum(const tf_op *op) {
    const tf_tensor_desc *in = &op->inputs[0], *o = &op->output;
    int64_t n_out = tf_desc_numel(o), idx[TF_MAX_DIMS] = {0}, oidx[TF_MAX_DIMS] = {0};
    double *acc = injected_failure() ? NULL : calloc((size_t)(n_out ? n_out : 1), sizeof *acc);
    if (!acc) return host->set_error(TF_ERR_OUT_OF_MEMORY, MYBACKEND_NAME ": no memory for the sum's accumulators");
    if (tf_desc_numel(in) > 0) {
        do {
            int64_t flat = 0;
            for (int i = 0; i < in->ndim; i++) {
                oidx[i] = o->shape[i] == 1 ? 0 : idx[i];
                flat = flat * o->shape[i] + oidx[i];
            }
            acc[flat] += *at(in, idx);
        } while (next_index(in->ndim, in->shape, idx));
    }
    memset(oidx, 0, sizeof oidx);
    for (int64_t k = 0; k < n_out; k++, next_index(o->ndim, o->shape, oidx)) *at(o, oidx) = (float)acc[k];
    free(acc);
    return TF_OK;
}

static bool my_supports(void *ctx, const tf_op *op) {
    (void)ctx;
    for (int i = 0; i < op->n_inputs; i++)
        if (op->inputs[i].dtype != TF_F32) return false;
    if (op->output.dtype != TF_F32) return false;
    switch (op->kind) {
    case TF_OP_ADD: case TF_OP_MUL: case TF_OP_SUM: case TF_OP_FILL: case TF_OP_COPY: return true;
    default: return false;
    }
}

static tf_status my_run(void *ctx, tf_backend_stream *stream, const tf_op *op) {
    (void)ctx;
    (void)stream;
    if (!my_supports(ctx, op)) return host->set_error(TF_ERR_UNSUPPORTED, MYBACKEND_NAME ": unsupported op");
    tf_status s = TF_OK;
    if (op->kind == TF_OP_SUM) s = run_sum(op);
    else run_elementwise(op);
    if (s == TF_OK) atomic_fetch_add(&ops_run, 1);
    return s;
}

static const tf_device_iface my_device_iface = {
    .abi_major = TF_BACKEND_ABI_MAJOR,
    .abi_minor = TF_BACKEND_ABI_MINOR,
    .get_info = my_get_info,
    .buffer_alloc = my_alloc,
    .buffer_free = my_free,
#ifndef MYBACKEND_OPAQUE
    .buffer_host_ptr = my_host_ptr,
#endif
    .buffer_upload = my_upload,
    .buffer_download = my_download,
    .supports = my_supports,
    .run = my_run,
};

static const tf_backend_device my_devices[1] = {{&my_device_iface, NULL}};

/* ---- registration ---- */

static void my_stats(mybackend_stats *out) {
    out->live_bytes = atomic_load(&live_bytes);
    out->live_buffers = atomic_load(&live_buffers);
    out->total_allocs = atomic_load(&total_allocs);
    out->ops_run = atomic_load(&ops_run);
    out->injected_failures = atomic_load(&injected);
    int64_t c = atomic_load(&fail_countdown);
    out->failure_countdown = c > 0 ? (uint64_t)c : 0;
}

static void my_fail_after(int64_t n) { atomic_store(&fail_countdown, n > 0 ? n : 0); }

static void *my_get_proc_address(void *ctx, const char *name) {
    (void)ctx;
    if (!strcmp(name, "mybackend_stats")) return (void *)(mybackend_stats_fn)my_stats;
    if (!strcmp(name, "mybackend_fail_after")) return (void *)(mybackend_fail_after_fn)my_fail_after;
    return NULL;
}

static void my_shutdown(void *ctx) {
    (void)ctx;
    if (atomic_load(&live_buffers))
        host->log(TF_LOG_WARN, MYBACKEND_NAME ": %llu buffers still live at shutdown",
                  (unsigned long long)atomic_load(&live_buffers));
}

static const tf_backend_iface my_backend_iface = {
    .abi_major = TF_BACKEND_ABI_MAJOR,
    .abi_minor = TF_BACKEND_ABI_MINOR,
    .shutdown = my_shutdown,
    .get_proc_address = my_get_proc_address,
};

static void fill_reg(tf_backend_reg *reg) {
    memset(reg, 0, sizeof *reg);
    reg->abi_major = TF_BACKEND_ABI_MAJOR;
    reg->abi_minor = TF_BACKEND_ABI_MINOR;
    reg->name = MYBACKEND_NAME;
    reg->iface = &my_backend_iface;
    reg->device_count = 1;
    reg->devices = my_devices;
    reg->note = "example backend: add, mul, sum, fill, copy in f32";
}

#ifdef MYBACKEND_PLUGIN
__attribute__((visibility("default"))) tf_status tf_backend_plugin_init(const tf_host_api *h, tf_backend_reg *out) {
    host = h;
    fill_reg(out);
    return TF_OK;
}
#else
tf_status mybackend_register(void) {
    tf_backend_reg reg;
    host = tf_host();
    fill_reg(&reg);
    return tf_backend_register(&reg);
}
#endif

/* The CPU's sort, argsort and searchsorted.
 *
 * Every dtype maps to one unsigned 64-bit key whose unsigned order is the
 * op table's total order: floats by their bits (the sign flipped, negatives
 * all flipped), -0.0 as 0.0 and every NaN as the largest key; integers with
 * the sign bit flipped. Descending sorts use the complement of the key, so a
 * stable ascending sort of it keeps equal values in their order both ways
 * and puts NaN first. The sort is a stable merge sort of (key, position)
 * pairs, one line at a time, lines spread over the threads.
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "cpu_common.h"
#include "threadpool.h"

typedef struct keyed {
    uint64_t key;
    int64_t at;
} keyed;

#define SIGN64 0x8000000000000000ull
#define RUN 24                      /* lines this short: insertion sort alone */

static uint64_t key_of(tf_dtype dt, const char *p) {
    if (!is_float(dt)) return (uint64_t)load_i64(dt, p) ^ SIGN64;
    double v = load_f64(dt, p);
    if (isnan(v)) return UINT64_MAX;
    if (v == 0) v = 0.0;                              /* -0.0 equals 0.0 */
    uint64_t b;
    memcpy(&b, &v, sizeof b);
    return b & SIGN64 ? ~b : b | SIGN64;
}

static void insertion_sort(keyed *a, int64_t n) {
    for (int64_t i = 1; i < n; i++) {
        keyed x = a[i];
        int64_t j = i;
        for (; j > 0 && a[j - 1].key > x.key; j--) a[j] = a[j - 1];   /* strict: equal keys stay behind */
        a[j] = x;
    }
}

/* Stable: on equal keys the left run's element goes first. */
static void merge(const keyed *a, int64_t na, const keyed *b, int64_t nb, keyed *out) {
    int64_t i = 0, j = 0, k = 0;
    while (i < na && j < nb) out[k++] = b[j].key < a[i].key ? b[j++] : a[i++];
    while (i < na) out[k++] = a[i++];
    while (j < nb) out[k++] = b[j++];
}

/* Sorts a[0..n) using tmp[0..n); returns where the sorted pairs ended up. */
static keyed *merge_sort(keyed *a, keyed *tmp, int64_t n) {
    for (int64_t i = 0; i < n; i += RUN) insertion_sort(a + i, n - i < RUN ? n - i : RUN);
    for (int64_t w = RUN; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            merge(a + lo, mid - lo, a + mid, hi - mid, tmp + lo);
        }
        keyed *t = a;
        a = tmp;
        tmp = t;
    }
    return a;
}

typedef struct sort_job {
    const tf_op *op;
    operand in, out;
    int ax, ndim;
    int64_t len, lines;
    int64_t line_shape[TF_MAX_DIMS];  /* the input's shape with the axis as 1 */
    atomic_int failed;
} sort_job;

static void line_start(const sort_job *j, int64_t line, const char **ip, char **op_) {
    const char *i = j->in.base;
    char *o = j->out.base;
    for (int d = j->ndim - 1; d >= 0; d--) {
        int64_t n = j->line_shape[d], at = line % n;
        line /= n;
        i += at * j->in.stride[d];
        o += at * j->out.stride[d];
    }
    *ip = i;
    *op_ = o;
}

static void sort_lines(void *jv, int64_t begin, int64_t end) {
    sort_job *j = jv;
    const tf_tensor_desc *I = &j->op->inputs[0], *O = &j->op->output;
    keyed *mem = tf_cpu_alloc(sizeof(keyed) * 2 * (size_t)j->len);
    if (!mem) {
        atomic_store(&j->failed, 1);
        return;
    }
    bool descending = j->op->params.flags & TF_SORT_DESCENDING, values = j->op->kind == TF_OP_SORT;
    int64_t is = j->ax >= 0 ? j->in.stride[j->ax] : 0, os = j->ax >= 0 ? j->out.stride[j->ax] : 0;
    size_t es = elsize(I->dtype);
    for (int64_t line = begin; line < end; line++) {
        const char *ip;
        char *op_;
        line_start(j, line, &ip, &op_);
        for (int64_t k = 0; k < j->len; k++) {
            uint64_t key = key_of(I->dtype, ip + k * is);
            mem[k] = (keyed){descending ? ~key : key, k};
        }
        const keyed *sorted = merge_sort(mem, mem + j->len, j->len);
        for (int64_t k = 0; k < j->len; k++) {
            if (values) memcpy(op_ + k * os, ip + sorted[k].at * is, es);   /* the value itself: NaN payloads, -0.0 */
            else store_i64(O->dtype, op_ + k * os, sorted[k].at);
        }
    }
    tf_cpu_free(mem);
}

static tf_status run_sort(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *I = &op->inputs[0];
    if (tf_desc_numel(&op->output) == 0) return TF_OK;
    sort_job j = {.op = op, .in = make_operand(I, address), .out = make_operand(&op->output, address)};
    j.ax = op->params.axis == TF_ALL_AXES ? -1 : op->params.axis;
    j.ndim = I->ndim;
    j.len = j.ax >= 0 ? I->shape[j.ax] : 1;
    for (int d = 0; d < I->ndim; d++) j.line_shape[d] = d == j.ax ? 1 : I->shape[d];
    j.lines = tf_desc_numel(I) / j.len;
    atomic_init(&j.failed, 0);
    int64_t grain = 16384 / (j.len + 1) + 1;
    tf_cpu_parallel_for(j.lines, grain, sort_lines, &j);
    if (atomic_load(&j.failed)) return tf_cpu_oom(op->kind == TF_OP_SORT ? "sort" : "argsort", sizeof(keyed) * 2 * (size_t)j.len);
    return TF_OK;
}

/* ---- searchsorted ---- */

typedef struct search_ctx {
    const uint64_t *keys;
    int64_t n;
    tf_dtype dt;
    bool right;
} search_ctx;

/* The first position whose key is not below v (left), or above v (right). */
static int64_t position_of(const search_ctx *c, uint64_t v) {
    int64_t lo = 0, hi = c->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        bool before = c->right ? c->keys[mid] <= v : c->keys[mid] < v;
        if (before) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static void search_row(const void *cv, int64_t n, char **p, const int64_t *s) {
    const search_ctx *c = cv;
    for (int64_t i = 0; i < n; i++)
        store_i64(TF_I64, p[0] + i * s[0], position_of(c, key_of(c->dt, p[1] + i * s[1])));
}

static tf_status run_searchsorted(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *S = &op->inputs[0], *V = &op->inputs[1], *O = &op->output;
    if (tf_desc_numel(O) == 0) return TF_OK;
    int64_t n = S->shape[0];
    uint64_t *keys = tf_cpu_alloc(sizeof(uint64_t) * (size_t)(n ? n : 1));
    if (!keys) return tf_cpu_oom("searchsorted", sizeof(uint64_t) * (size_t)(n ? n : 1));
    operand sorted = make_operand(S, address);
    for (int64_t i = 0; i < n; i++) keys[i] = key_of(S->dtype, sorted.base + i * sorted.stride[0]);
    search_ctx c = {keys, n, V->dtype, op->params.flags & TF_SEARCH_RIGHT};
    operand ops[2] = {make_operand(O, address), make_operand(V, address)};
    for_each_row_parallel(O->ndim, O->shape, 2, ops, search_row, &c);
    tf_cpu_free(keys);
    return TF_OK;
}

tf_cpu_kernel tf_cpu_sort_kernel(tf_op_kind kind) {
    switch (kind) {
    case TF_OP_SORT: case TF_OP_ARGSORT: return run_sort;
    case TF_OP_SEARCHSORTED: return run_searchsorted;
    default: return NULL;
    }
}

/* DLPack 1.x through the C API: exports hand out the tensor's own memory
 * (pointer checked) and keep it alive until the consumer's deleter, views
 * included; imports wrap the producer's memory without a copy and call its
 * deleter exactly once, when the last tensorframe tensor over it is gone;
 * a read-only import is a copy; every refusal leaves the managed tensor the
 * caller's (its deleter not called). */
#include <stdlib.h>
#include <string.h>

#include <tensorframe/dlpack.h>

#include "helpers.h"

/* ---- a producer of our own, with a deleter that counts ---- */

typedef struct producer {
    DLManagedTensorVersioned m;
    int64_t shape[4], strides[4];
    float data[64];
    int *deleted;
} producer;

static void producer_delete(DLManagedTensorVersioned *self) {
    producer *p = self->manager_ctx;
    (*p->deleted)++;
    free(p);
}

static producer *make_producer(int ndim, const int64_t *shape, const int64_t *strides, int *deleted) {
    producer *p = calloc(1, sizeof *p);
    assert_non_null(p);
    for (int i = 0; i < 64; i++) p->data[i] = (float)i * 0.5f - 3;
    for (int i = 0; i < ndim; i++) {
        p->shape[i] = shape[i];
        if (strides) p->strides[i] = strides[i];
    }
    p->deleted = deleted;
    p->m.version = (DLPackVersion){1, 0};
    p->m.manager_ctx = p;
    p->m.deleter = producer_delete;
    p->m.dl_tensor = (DLTensor){p->data, {kDLCPU, 0}, ndim, {kDLFloat, 32, 1}, p->shape, strides ? p->strides : NULL, 0};
    return p;
}

static void test_export_is_the_tensors_memory(void **state) {
    (void)state;
    float v[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[2] = {2, 3};
    tf_tensor *t = tensor_f32(cpu_device(), 2, shape, v);
    DLManagedTensorVersioned *m = NULL;
    OK(tf_tensor_to_dlpack(t, &m));
    assert_int_equal(m->version.major, 1);
    assert_int_equal(m->flags, 0);
    DLTensor *d = &m->dl_tensor;
    assert_int_equal(d->device.device_type, kDLCPU);
    assert_int_equal(d->ndim, 2);
    assert_true(d->dtype.code == kDLFloat && d->dtype.bits == 32 && d->dtype.lanes == 1);
    assert_true(d->shape[0] == 2 && d->shape[1] == 3 && d->strides[0] == 3 && d->strides[1] == 1);
    assert_memory_equal(d->data, v, sizeof v);
    ((float *)d->data)[4] = 50;                                   /* the same memory: a write shows */
    tf_tensor_release(t);                                         /* the consumer's reference keeps it */
    assert_true(((float *)d->data)[5] == 6);
    m->deleter(m);                                                /* ASan: everything freed here */
}

/* The address without a reference: a view's first element, no copy. */
static void test_native_memory(void **state) {
    (void)state;
    float v[12];
    for (int i = 0; i < 12; i++) v[i] = (float)i;
    int64_t shape[2] = {3, 4};
    tf_tensor *t = tensor_f32(cpu_device(), 2, shape, v), *sl = NULL;
    OK(tf_slice(t, 0, 1, 3, 1, &sl));                             /* rows 1..2: first element v[4] */
    void *p = NULL, *q = NULL;
    DLDevice where = {kDLCUDA, 7};
    OK(tf_tensor_native_memory(sl, &p, &where));
    assert_int_equal(where.device_type, kDLCPU);
    assert_int_equal(where.device_id, 0);
    assert_true(((const float *)p)[0] == 4 && ((const float *)p)[7] == 11);
    OK(tf_tensor_native_memory(t, &q, &where));
    assert_ptr_equal((char *)q + 4 * sizeof(float), p);          /* the same memory, offset by the view */
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "tensor is NULL", tf_tensor_native_memory(NULL, &p, &where));
    assert_null(p);
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "is NULL", tf_tensor_native_memory(t, NULL, &where));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "is NULL", tf_tensor_native_memory(t, &p, NULL));
    tf_tensor_release(sl);
    tf_tensor_release(t);
}

static void test_export_of_a_view(void **state) {
    (void)state;
    float v[12];
    for (int i = 0; i < 12; i++) v[i] = (float)i;
    int64_t shape[2] = {3, 4};
    tf_tensor *t = tensor_f32(cpu_device(), 2, shape, v), *tr = NULL, *sl = NULL;
    OK(tf_transpose(t, 0, 1, &tr));                               /* [4, 3], strides (1, 4) */
    OK(tf_slice(tr, 0, 1, 3, 1, &sl));                            /* rows 1..2: first element v[1] */
    DLManagedTensorVersioned *m = NULL;
    OK(tf_tensor_to_dlpack(sl, &m));
    DLTensor *d = &m->dl_tensor;
    assert_true(d->shape[0] == 2 && d->shape[1] == 3 && d->strides[0] == 1 && d->strides[1] == 4);
    const float *p = (const float *)((const char *)d->data + d->byte_offset);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) assert_true(p[i * d->strides[0] + j * d->strides[1]] == v[j * 4 + 1 + i]);
    tf_tensor_release(t);
    tf_tensor_release(tr);
    tf_tensor_release(sl);
    m->deleter(m);
}

static void test_import_without_a_copy(void **state) {
    (void)state;
    int deleted = 0;
    producer *p = make_producer(2, (int64_t[]){4, 4}, NULL, &deleted);
    tf_tensor *t = NULL, *v = NULL, *sum = NULL;
    OK(tf_tensor_from_dlpack(&p->m, &t));
    p->data[5] = 100;                                             /* the producer's memory, read in place */
    float back[16];
    OK(tf_tensor_read(t, back, sizeof back));
    assert_true(back[5] == 100 && back[6] == 0);
    OK(tf_slice(t, 1, 1, 3, 1, &v));                              /* a view holds the memory too */
    tf_tensor_release(t);
    assert_int_equal(deleted, 0);
    OK(tf_add(v, v, &sum));
    float s[8];
    OK(tf_tensor_read(sum, s, sizeof s));
    assert_true(s[0] == 2 * p->data[1] && s[1] == 2 * p->data[2] && s[2] == 200);   /* v[1, 0] is data[5] */
    tf_tensor_release(v);
    assert_int_equal(deleted, 1);                                 /* the last view gone: the deleter, once */
    tf_tensor_release(sum);
    assert_int_equal(deleted, 1);
}

static void test_import_strided_and_offset(void **state) {
    (void)state;
    int deleted = 0;
    producer *p = make_producer(2, (int64_t[]){3, 2}, (int64_t[]){1, 3}, &deleted);   /* a transposed [2, 3] */
    p->m.dl_tensor.byte_offset = 2 * sizeof(float);
    tf_tensor *t = NULL, *c = NULL;
    OK(tf_tensor_from_dlpack(&p->m, &t));
    OK(tf_contiguous(t, &c));
    float want[6], got[6];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) want[i * 2 + j] = p->data[2 + i + 3 * j];
    OK(tf_tensor_read(c, got, sizeof got));
    assert_memory_equal(got, want, sizeof want);
    tf_tensor_release(t);
    tf_tensor_release(c);
    assert_int_equal(deleted, 1);
}

/* Offsets and strides that lie: refused before anything is read, the
 * producer's tensor left to the caller. */
static void test_lying_offsets_and_strides_refused(void **state) {
    (void)state;
    int deleted = 0;
    producer *p = make_producer(1, (int64_t[]){2}, (int64_t[]){1}, &deleted);
    tf_tensor *t = (tf_tensor *)1;
    p->m.dl_tensor.byte_offset = (uint64_t)1 << 63;
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "not mapped in this process", tf_tensor_from_dlpack(&p->m, &t));
    assert_null(t);
    p->m.dl_tensor.byte_offset = UINT64_MAX;                      /* one byte before the buffer, by wrapping */
    FAILS_WITH(TF_ERR_SIZE, "wrap the address space", tf_tensor_from_dlpack(&p->m, &t));
    p->m.dl_tensor.byte_offset = 0;
    p->strides[0] = INT64_MAX / 4;
    FAILS_WITH(TF_ERR_SIZE, "past the addressable size", tf_tensor_from_dlpack(&p->m, &t));
    p->strides[0] = (int64_t)1 << 40;                             /* 4 TiB on: no object of the producer's */
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "not mapped in this process", tf_tensor_from_dlpack(&p->m, &t));
    p->strides[0] = (int64_t)1 << 61;
    FAILS_WITH(TF_ERR_SIZE, "past the addressable size", tf_tensor_from_dlpack(&p->m, &t));
    assert_null(t);
    assert_int_equal(deleted, 0);
    p->strides[0] = 1;
    OK(tf_tensor_from_dlpack(&p->m, &t));                         /* the same fields, told the truth */
    tf_tensor_release(t);
    assert_int_equal(deleted, 1);
}

/* Data misaligned for its dtype is copied to aligned memory (the kernels
 * load whole elements): the values arrive, the producer's tensor goes back
 * at once, and later writes to either side are not shared. */
static void test_misaligned_import_is_copied(void **state) {
    (void)state;
    int deleted = 0;
    producer *p = make_producer(1, (int64_t[]){3}, NULL, &deleted);
    unsigned char *bytes = (unsigned char *)p->data;
    float want[3] = {1.5f, -2.25f, 1e30f};
    memcpy(bytes + 1, want, sizeof want);
    p->m.dl_tensor.byte_offset = 1;
    tf_tensor *t = NULL, *sum = NULL;
    OK(tf_tensor_from_dlpack(&p->m, &t));
    assert_int_equal(deleted, 1);
    expect_f32(t, want, 3);
    OK(tf_add(t, t, &sum));
    expect_f32(sum, (float[]){3.0f, -4.5f, 2e30f}, 3);
    tf_tensor_release(sum);
    tf_tensor_release(t);
    assert_int_equal(deleted, 1);
}

static void test_read_only_is_copied(void **state) {
    (void)state;
    int deleted = 0;
    producer *p = make_producer(1, (int64_t[]){8}, NULL, &deleted);
    p->m.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
    float first = p->data[0];
    tf_tensor *t = NULL;
    OK(tf_tensor_from_dlpack(&p->m, &t));
    assert_int_equal(deleted, 1);                                 /* copied: given back at once */
    float back[8];
    OK(tf_tensor_read(t, back, sizeof back));
    assert_true(back[0] == first);
    tf_tensor_release(t);
    assert_int_equal(deleted, 1);
}

static void test_round_trip(void **state) {
    (void)state;
    float v[4] = {1, -2, 3, -4};
    int64_t n = 4;
    tf_tensor *t = tensor_f32(cpu_device(), 1, &n, v), *u = NULL;
    DLManagedTensorVersioned *m = NULL;
    OK(tf_tensor_to_dlpack(t, &m));
    void *data = m->dl_tensor.data;
    OK(tf_tensor_from_dlpack(m, &u));                             /* tensorframe owns m now */
    DLManagedTensorVersioned *m2 = NULL;
    OK(tf_tensor_to_dlpack(u, &m2));
    assert_ptr_equal(m2->dl_tensor.data, data);                   /* one memory all along */
    tf_tensor_release(t);
    tf_tensor_release(u);
    m2->deleter(m2);                                              /* the chain ends here: ASan checks */
}

static void test_refusals_leave_it_to_the_caller(void **state) {
    (void)state;
    int deleted = 0;
    producer *p = make_producer(2, (int64_t[]){2, 2}, NULL, &deleted);
    tf_tensor *t = NULL;
    p->m.version.major = 2;
    FAILS_WITH(TF_ERR_UNSUPPORTED, "DLPack 2.0", tf_tensor_from_dlpack(&p->m, &t));
    p->m.version.major = 1;
    p->m.dl_tensor.device.device_type = kDLCUDA;
    FAILS_WITH(TF_ERR_UNSUPPORTED, "device type 2", tf_tensor_from_dlpack(&p->m, &t));
    p->m.dl_tensor.device.device_type = kDLCPU;
    p->m.dl_tensor.dtype = (DLDataType){kDLComplex, 32, 1};   /* complex of two halves: no such dtype */
    FAILS_WITH(TF_ERR_DTYPE, "dtype code 5, 32 bits", tf_tensor_from_dlpack(&p->m, &t));
    p->m.dl_tensor.dtype = (DLDataType){kDLFloat, 32, 4};
    FAILS_WITH(TF_ERR_DTYPE, "4 lanes", tf_tensor_from_dlpack(&p->m, &t));
    p->m.dl_tensor.dtype = (DLDataType){kDLFloat, 32, 1};
    p->strides[0] = -2;
    p->strides[1] = 1;
    p->m.dl_tensor.strides = p->strides;
    FAILS_WITH(TF_ERR_UNSUPPORTED, "negative", tf_tensor_from_dlpack(&p->m, &t));
    p->m.dl_tensor.strides = NULL;
    p->m.dl_tensor.data = NULL;
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "data is NULL", tf_tensor_from_dlpack(&p->m, &t));
    p->m.dl_tensor.data = p->data;
    p->m.dl_tensor.ndim = TF_MAX_DIMS + 1;
    FAILS_WITH(TF_ERR_TOO_MANY_DIMS, "33 dimensions", tf_tensor_from_dlpack(&p->m, &t));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "managed tensor is NULL", tf_tensor_from_dlpack(NULL, &t));
    assert_null(t);
    assert_int_equal(deleted, 0);                                 /* still ours to give back */
    p->m.deleter(&p->m);
    assert_int_equal(deleted, 1);
    /* exports: quantized dtypes have no DLPack form */
    int64_t qshape[1] = {32};
    tf_tensor *q = NULL;
    DLManagedTensorVersioned *m = NULL;
    unsigned char block[34] = {0};                                /* one q8_0 block: scale and 32 weights */
    OK(tf_tensor_from_data(cpu_device(), TF_Q8_0, 1, qshape, block, &q));
    FAILS_WITH(TF_ERR_DTYPE, "q8_0", tf_tensor_to_dlpack(q, &m));
    assert_null(m);
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "tensor is NULL", tf_tensor_to_dlpack(NULL, &m));
    tf_tensor_release(q);
}

/* Imported memory outlives tf_shutdown while a tensor holds it, and the
 * deleter runs when that tensor goes (the host free path). */
static void test_import_released_after_shutdown(void **state) {
    (void)state;
    int deleted = 0;
    producer *p = make_producer(1, (int64_t[]){16}, NULL, &deleted);
    tf_tensor *t = NULL;
    OK(tf_tensor_from_dlpack(&p->m, &t));
    tf_shutdown();
    assert_int_equal(deleted, 0);
    tf_tensor_release(t);
    assert_int_equal(deleted, 1);
}

/* DLPack 0.x both ways: a legacy export is the tensor's memory and frees
 * through its own deleter; a legacy import is zero-copy, its deleter runs
 * once when the tensor goes, and a refusal leaves it the caller's. */
typedef struct legacy_producer {
    DLManagedTensor m;
    int64_t shape[1];
    float data[8];
    int deleted;
} legacy_producer;

static void legacy_producer_delete(DLManagedTensor *self) { ((legacy_producer *)self->manager_ctx)->deleted++; }

static void test_legacy_both_ways(void **state) {
    (void)state;
    float v[3] = {7, 8, 9};
    int64_t n = 3;
    tf_tensor *t = tensor_f32(cpu_device(), 1, &n, v), *u = NULL;
    DLManagedTensor *out = NULL;
    OK(tf_tensor_to_dlpack_legacy(t, &out));
    assert_true(out->dl_tensor.shape[0] == 3 && out->dl_tensor.device.device_type == kDLCPU);
    assert_memory_equal(out->dl_tensor.data, v, sizeof v);
    tf_tensor_release(t);
    assert_true(((float *)out->dl_tensor.data)[2] == 9);          /* alive until the deleter */
    out->deleter(out);

    legacy_producer p = {.shape = {8}};
    for (int i = 0; i < 8; i++) p.data[i] = (float)i;
    p.m = (DLManagedTensor){{p.data, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, p.shape, NULL, 0}, &p, legacy_producer_delete};
    p.m.dl_tensor.device.device_type = kDLCUDA;
    FAILS_WITH(TF_ERR_UNSUPPORTED, "device type 2", tf_tensor_from_dlpack_legacy(&p.m, &u));
    assert_int_equal(p.deleted, 0);
    p.m.dl_tensor.device.device_type = kDLCPU;
    OK(tf_tensor_from_dlpack_legacy(&p.m, &u));
    p.data[3] = 30;                                               /* read in place */
    expect_f32(u, (float[]){0, 1, 2, 30, 4, 5, 6, 7}, 8);
    assert_int_equal(p.deleted, 0);
    tf_tensor_release(u);
    assert_int_equal(p.deleted, 1);
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "out is NULL", tf_tensor_to_dlpack_legacy(t, NULL));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "tensor is NULL", tf_tensor_to_dlpack_legacy(NULL, &out));
    assert_null(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_export_is_the_tensors_memory),
        cmocka_unit_test(test_export_of_a_view),
        cmocka_unit_test(test_native_memory),
        cmocka_unit_test(test_import_without_a_copy),
        cmocka_unit_test(test_import_strided_and_offset),
        cmocka_unit_test(test_read_only_is_copied),
        cmocka_unit_test(test_lying_offsets_and_strides_refused),
        cmocka_unit_test(test_misaligned_import_is_copied),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_refusals_leave_it_to_the_caller),
        cmocka_unit_test(test_import_released_after_shutdown),
        cmocka_unit_test(test_legacy_both_ways),
    };
    return run_and_shutdown(cmocka_run_group_tests(tests, NULL, NULL));
}

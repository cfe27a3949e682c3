/* tf_tensor_from_dlpack and tf_tensor_from_dlpack_legacy against hostile
 * managed tensors: every field of DLManagedTensorVersioned (and of the
 * legacy struct) set, one at a time, to hostile values and their
 * neighbours. Each import either
 *   - succeeds, and the tensor holds exactly the producer's elements as the
 *     fields describe them (a reference gather reads them byte by byte),
 *     and the producer's deleter runs once: at the import when it copied
 *     (read-only or misaligned memory), else at the tensor's release; or
 *   - fails with a message naming the function, leaves *out NULL and the
 *     deleter not called (the caller still owns the tensor: this program
 *     then calls it, so every path ends with exactly one call).
 * The producer's 64 floats are the last bytes of a mapping whose next page
 * is unmapped, so any byte past them is outside this process's memory and
 * an import that reached it is a failure ASan or the kernel would report. */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <tensorframe/dlpack.h>
#include <tensorframe/tensorframe.h>

enum { N_FLOATS = 64 };

static int cases, accepted, problems;
static int deleted;                     /* calls of the current case's deleter */
static int want_deleted;                /* 1, or 0 for a case without a deleter */
static float *data;                     /* N_FLOATS, ending where the mapping ends */
static size_t page;

static void problem(const char *what, const char *detail) {
    printf("FAIL %s: %s\n", what, detail);
    problems++;
}

static void versioned_deleter(DLManagedTensorVersioned *self) { deleted++; }
static void legacy_deleter(DLManagedTensor *self) { deleted++; }

static void map_producer_memory(void) {
    page = (size_t)sysconf(_SC_PAGESIZE);
    char *two = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (two == MAP_FAILED || munmap(two + page, page)) abort();
    data = (float *)(two + page) - N_FLOATS;
    for (int i = 0; i < N_FLOATS; i++) data[i] = (float)i + 0.25f;
}

/* The page after the producer's memory must still be unmapped (nothing
 * else took the address), or the "outside" cases would read real memory. */
static void guard_still_unmapped(void) {
    unsigned char v;
    if (mincore((char *)(data + N_FLOATS), page, &v) == 0 || errno != ENOMEM) {
        printf("FAIL setup: the page after the producer's memory was mapped by someone else\n");
        exit(1);
    }
}

/* The elements as the fields describe them, gathered byte by byte. */
static void reference(const DLTensor *d, size_t elsize, unsigned char *out, int64_t numel) {
    int64_t idx[TF_MAX_DIMS + 1] = {0}, dense[TF_MAX_DIMS + 1];
    int64_t s = 1;
    for (int i = d->ndim - 1; i >= 0; i--) dense[i] = s, s *= d->shape[i];
    const unsigned char *first = (const unsigned char *)d->data + d->byte_offset;
    for (int64_t n = 0; n < numel; n++) {
        int64_t at = 0;
        for (int i = 0; i < d->ndim; i++) at += idx[i] * (d->strides ? d->strides[i] : dense[i]);
        memcpy(out + n * elsize, first + at * (int64_t)elsize, elsize);
        for (int i = d->ndim - 1; i >= 0 && ++idx[i] == d->shape[i]; i--) idx[i] = 0;
    }
}

static void check_accepted(const char *what, const DLTensor *d, tf_tensor *t, bool copies) {
    accepted++;
    size_t elsize = tf_dtype_size(tf_tensor_dtype(t));
    int64_t numel = tf_tensor_numel(t);
    if (copies && deleted != want_deleted) problem(what, "a copied import did not give the producer's tensor back at once");
    if (!copies && deleted != 0) problem(what, "a zero-copy import called the deleter while the tensor lives");
    unsigned char *want = malloc((size_t)numel * elsize + 1), *got = malloc((size_t)numel * elsize + 1);
    tf_tensor *c = NULL;
    if (!want || !got) abort();
    reference(d, elsize, want, numel);
    if (tf_contiguous(t, &c) != TF_OK || tf_tensor_read(c, got, (size_t)numel * elsize) != TF_OK)
        problem(what, tf_last_error());
    else if (memcmp(want, got, (size_t)numel * elsize))
        problem(what, "the tensor differs from the producer's elements");
    tf_tensor_release(c);
    tf_tensor_release(t);
    if (deleted != want_deleted) problem(what, "the deleter did not run exactly once by the tensor's release");
    free(want);
    free(got);
}

static void check_refused(const char *what, const char *fn, tf_status s, const tf_tensor *t) {
    const char *msg = tf_last_error();
    if (s >= 0) problem(what, "a refusal returned a non-error status");
    if (strncmp(msg, fn, strlen(fn))) {
        char buf[600];
        snprintf(buf, sizeof buf, "message '%s' does not name %s", msg, fn);
        problem(what, buf);
    }
    if (t) problem(what, "a refusal left *out set");
    if (deleted) problem(what, "a refusal called the deleter (the caller still owns the tensor)");
}

/* ---- one case, both structs ---- */

typedef struct spec {
    DLManagedTensorVersioned m;
    int64_t shape[TF_MAX_DIMS + 1], strides[TF_MAX_DIMS + 1];   /* one past the cap: a refused ndim's fields */
} spec;

/* A [4, 8] f32 over the producer's memory, row-major, writable. */
static spec base(void) {
    spec s = {0};
    s.shape[0] = 4, s.shape[1] = 8;
    s.strides[0] = 8, s.strides[1] = 1;
    s.m.version = (DLPackVersion){1, 0};
    s.m.deleter = versioned_deleter;
    s.m.dl_tensor = (DLTensor){data, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, s.shape, s.strides, 0};
    return s;
}

static void run_versioned(const char *what, spec *s) {
    cases++;
    deleted = 0;
    want_deleted = s->m.deleter != NULL;
    s->m.dl_tensor.shape = s->m.dl_tensor.shape ? s->shape : NULL;
    s->m.dl_tensor.strides = s->m.dl_tensor.strides ? s->strides : NULL;
    tf_tensor *t = (tf_tensor *)1;
    tf_status st = tf_tensor_from_dlpack(&s->m, &t);
    if (st == TF_OK) {
        bool misaligned = ((uintptr_t)s->m.dl_tensor.data + s->m.dl_tensor.byte_offset) % tf_dtype_size(tf_tensor_dtype(t));
        check_accepted(what, &s->m.dl_tensor, t, (s->m.flags & DLPACK_FLAG_BITMASK_READ_ONLY) || misaligned);
        return;
    }
    check_refused(what, "tf_tensor_from_dlpack", st, t);
    if (s->m.deleter) s->m.deleter(&s->m);
}

/* The same fields through the legacy struct (no version, no flags). */
static void run_legacy(const char *what, spec *s) {
    if (s->m.version.major != 1 || s->m.flags) return;
    cases++;
    deleted = 0;
    want_deleted = s->m.deleter != NULL;
    DLManagedTensor m = {s->m.dl_tensor, NULL, s->m.deleter ? legacy_deleter : NULL};
    m.dl_tensor.shape = s->m.dl_tensor.shape ? s->shape : NULL;
    m.dl_tensor.strides = s->m.dl_tensor.strides ? s->strides : NULL;
    tf_tensor *t = (tf_tensor *)1;
    tf_status st = tf_tensor_from_dlpack_legacy(&m, &t);
    if (st == TF_OK) {
        bool misaligned = ((uintptr_t)m.dl_tensor.data + m.dl_tensor.byte_offset) % tf_dtype_size(tf_tensor_dtype(t));
        check_accepted(what, &m.dl_tensor, t, misaligned);
        return;
    }
    check_refused(what, "tf_tensor_from_dlpack_legacy", st, t);
    if (m.deleter) m.deleter(&m);
}

#define CASE(label, ...)                                      \
    do {                                                      \
        char what_[160];                                      \
        snprintf(what_, sizeof what_, __VA_ARGS__);           \
        spec s_ = base();                                     \
        label;                                                \
        spec v_ = s_, l_ = s_;                                \
        run_versioned(what_, &v_);                            \
        run_legacy(what_, &l_);                               \
    } while (0)

/* ---- the fields ---- */

static void header_fields(void) {
    const uint32_t majors[] = {0, 1, 2, UINT32_MAX};
    for (size_t i = 0; i < sizeof majors / sizeof *majors; i++)
        CASE(s_.m.version.major = majors[i], "version.major %u", majors[i]);
    CASE(s_.m.version.minor = UINT32_MAX, "version.minor UINT32_MAX");
    CASE(s_.m.deleter = NULL, "deleter NULL");
    CASE(s_.m.manager_ctx = (void *)(uintptr_t)-1, "manager_ctx -1");
    const uint64_t flags[] = {DLPACK_FLAG_BITMASK_READ_ONLY, DLPACK_FLAG_BITMASK_IS_COPIED, 4, UINT64_MAX,
                              DLPACK_FLAG_BITMASK_READ_ONLY | DLPACK_FLAG_BITMASK_IS_COPIED};
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++)
        CASE(s_.m.flags = flags[i], "flags %#llx", (unsigned long long)flags[i]);
}

static void device_and_dtype(void) {
    const int32_t types[] = {0, kDLCPU, kDLCUDA, kDLCUDAHost, kDLOpenCL, kDLROCM, kDLROCMHost, kDLWebGPU, 17, -1,
                             INT32_MAX};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        CASE(s_.m.dl_tensor.device.device_type = (DLDeviceType)types[i], "device_type %d", types[i]);
    const int32_t ids[] = {-1, 1, INT32_MAX, INT32_MIN};
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++)
        CASE(s_.m.dl_tensor.device.device_id = ids[i], "device_id %d", ids[i]);
    const uint8_t bits[] = {0, 1, 7, 8, 16, 32, 64, 128, 255};
    const uint16_t lanes[] = {0, 1, 2, 65535};
    for (int code = 0; code <= 7; code++)
        for (size_t b = 0; b < sizeof bits / sizeof *bits; b++)
            for (size_t l = 0; l < sizeof lanes / sizeof *lanes; l++)
                CASE(s_.m.dl_tensor.dtype = ((DLDataType){(uint8_t)code, bits[b], lanes[l]});
                     s_.shape[1] = 2,                          /* 8 elements of 8 bytes fit 64 floats */
                     "dtype code %d bits %u lanes %u", code, bits[b], lanes[l]);
    CASE(s_.m.dl_tensor.dtype.code = 255, "dtype code 255");
}

static void shape_fields(void) {
    const int32_t ndims[] = {-1, 0, 1, 2, 8, 9, TF_MAX_DIMS, TF_MAX_DIMS + 1, INT32_MAX, INT32_MIN};
    for (size_t i = 0; i < sizeof ndims / sizeof *ndims; i++)
        CASE(s_.m.dl_tensor.ndim = ndims[i]; for (int k = 2; k <= TF_MAX_DIMS; k++) (s_.shape[k] = 1, s_.strides[k] = 1),
             "ndim %d", ndims[i]);
    CASE(s_.m.dl_tensor.shape = NULL, "shape NULL");
    CASE((s_.m.dl_tensor.shape = NULL, s_.m.dl_tensor.ndim = 0), "shape NULL for a 0-d tensor");
    const int64_t extents[] = {-1, 0, 1, 8, 9, 16, 17, INT64_MAX, INT64_MIN, (int64_t)1 << 62, INT64_MAX / 4,
                               (INT64_MAX / 4) + 1};
    for (size_t i = 0; i < sizeof extents / sizeof *extents; i++) {
        CASE(s_.shape[0] = extents[i], "shape[0] %lld", (long long)extents[i]);
        CASE(s_.shape[1] = extents[i], "shape[1] %lld", (long long)extents[i]);
        CASE((s_.shape[1] = extents[i], s_.m.dl_tensor.strides = NULL), "shape[1] %lld, no strides",
             (long long)extents[i]);
    }
}

static void strides_and_offset(void) {
    const int64_t strides[] = {-1, 0, 1, 7, 8, 9, 15, 16, 17, INT64_MAX / 4 - 1, INT64_MAX / 4, INT64_MAX / 4 + 1,
                               ((int64_t)1 << 61) - 1, (int64_t)1 << 61, ((int64_t)1 << 61) + 1, (int64_t)1 << 40,
                               INT64_MAX, INT64_MIN};
    for (size_t i = 0; i < sizeof strides / sizeof *strides; i++) {
        CASE(s_.strides[0] = strides[i], "strides[0] %lld", (long long)strides[i]);
        CASE(s_.strides[1] = strides[i], "strides[1] %lld", (long long)strides[i]);
        CASE((s_.m.dl_tensor.ndim = 1, s_.shape[0] = 2, s_.strides[0] = strides[i]), "shape {2} stride %lld",
             (long long)strides[i]);
    }
    CASE(s_.m.dl_tensor.strides = NULL, "strides NULL (row-major)");
    const uint64_t end = N_FLOATS * sizeof(float);
    const uint64_t offsets[] = {1, 2, 3, 4, 5, 8, end - 4, end, end + 4, end - 31 * 4, end - 32 * 4, end - 32 * 4 + 1,
                                end - 32 * 4 + 4, (uint64_t)1 << 63, ((uint64_t)1 << 63) - 1, ((uint64_t)1 << 63) + 1,
                                UINT64_MAX, UINT64_MAX - 1, UINT64_MAX - 3, UINT64_MAX - 4};
    for (size_t i = 0; i < sizeof offsets / sizeof *offsets; i++) {
        CASE(s_.m.dl_tensor.byte_offset = offsets[i], "byte_offset %llu", (unsigned long long)offsets[i]);
        CASE((s_.m.dl_tensor.byte_offset = offsets[i], s_.shape[0] = 1, s_.shape[1] = 1), "byte_offset %llu, one element",
             (unsigned long long)offsets[i]);
        CASE((s_.m.dl_tensor.byte_offset = offsets[i], s_.m.flags = DLPACK_FLAG_BITMASK_READ_ONLY, s_.shape[0] = 1),
             "byte_offset %llu, read-only", (unsigned long long)offsets[i]);
    }
    /* misaligned for the dtype, a view with strides: copied, right values */
    CASE((s_.m.dl_tensor.byte_offset = 2, s_.strides[0] = 1, s_.strides[1] = 4, s_.shape[1] = 7),
         "misaligned transposed view");
    CASE((s_.m.dl_tensor.dtype = (DLDataType){kDLFloat, 64, 1}, s_.m.dl_tensor.byte_offset = 4, s_.shape[1] = 3),
         "f64 at a 4-byte boundary");
}

static void data_field(void) {
    const uintptr_t addresses[] = {0, 1, 4, 4096, (uintptr_t)1 << 46, (uintptr_t)1 << 63, UINTPTR_MAX - 3,
                                   UINTPTR_MAX};
    for (size_t i = 0; i < sizeof addresses / sizeof *addresses; i++) {
        CASE(s_.m.dl_tensor.data = (void *)addresses[i], "data %#llx", (unsigned long long)addresses[i]);
        CASE((s_.m.dl_tensor.data = (void *)addresses[i], s_.shape[0] = 0), "data %#llx, no elements",
             (unsigned long long)addresses[i]);
    }
    CASE(s_.m.dl_tensor.data = (char *)data + 1, "data misaligned by 1");
    CASE(s_.m.dl_tensor.data = data + N_FLOATS, "data one past the end");
}

int main(void) {
    tf_device *cpu;                     /* the library's own mappings first */
    if (tf_device_get("cpu", &cpu) != TF_OK) return 1;
    map_producer_memory();
    guard_still_unmapped();
    header_fields();
    device_and_dtype();
    shape_fields();
    strides_and_offset();
    data_field();
    guard_still_unmapped();
    tf_shutdown();
    printf("dlpack_abuse: %d imports (%d accepted and read back), %d problems\n", cases, accepted, problems);
    return problems || accepted == 0 ? 1 : 0;
}

/* libFuzzer target for the file loaders: FUZZ_NPY or FUZZ_SAFETENSORS picks
 * which. Oracles, for every input:
 *  - a failed load names a status, has a message and leaves *out NULL;
 *  - a loaded tensor reads back;
 *  - load -> save -> load gives the same dtype, shape and bytes. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <tensorframe/tensorframe.h>

static tf_device *cpu;
static char in_path[64], out_path[64];

static void fail(const char *why) {
    fprintf(stderr, "oracle: %s (%s)\n", why, tf_last_error());
    abort();
}

/* The input as a file the loaders can map: a memfd, named through /proc. */
static void write_input(const uint8_t *data, size_t n) {
    static int fd = -1;
    if (fd < 0) {
        fd = memfd_create("tf-fuzz-input", 0);
        if (fd < 0) abort();
        snprintf(in_path, sizeof in_path, "/proc/self/fd/%d", fd);
        snprintf(out_path, sizeof out_path, "/tmp/tf-fuzz-%ld.out", (long)getpid());
        tf_device_get("cpu", &cpu);
    }
    if (ftruncate(fd, 0) || pwrite(fd, data, n, 0) != (ssize_t)n) abort();
}

static void *read_all(const tf_tensor *t, size_t *n) {
    *n = (size_t)tf_tensor_nbytes(t);
    void *buf = malloc(*n ? *n : 1);
    if (!buf) abort();
    if (tf_tensor_read(t, buf, *n) != TF_OK) fail("a loaded tensor does not read back");
    return buf;
}

static void same(const tf_tensor *a, const tf_tensor *b) {
    if (tf_tensor_dtype(a) != tf_tensor_dtype(b) || tf_tensor_ndim(a) != tf_tensor_ndim(b) ||
        memcmp(tf_tensor_shape(a), tf_tensor_shape(b), sizeof(int64_t) * (size_t)tf_tensor_ndim(a)))
        fail("load -> save -> load changed dtype or shape");
    size_t na, nb;
    void *x = read_all(a, &na), *y = read_all(b, &nb);
    if (na != nb || memcmp(x, y, na)) fail("load -> save -> load changed the bytes");
    free(x);
    free(y);
}

static void expect_failure_contract(tf_status s, const tf_tensor *out) {
    if (s >= 0) fail("a failed load returned a non-error status");
    if (!*tf_last_error()) fail("a failed load left no message");
    if (out) fail("a failed load left its output set");
}

#ifdef FUZZ_NPY
static void run(void) {
    tf_tensor *t = (tf_tensor *)1, *again = NULL;
    tf_status s = tf_npy_load(in_path, cpu, &t);
    if (s != TF_OK) {
        expect_failure_contract(s, t);
        return;
    }
    size_t n;
    free(read_all(t, &n));
    if (tf_npy_save(out_path, t) != TF_OK) fail("a loaded tensor does not save");
    if (tf_npy_load(out_path, cpu, &again) != TF_OK) fail("a saved tensor does not load");
    same(t, again);
    tf_tensor_release(t);
    tf_tensor_release(again);
}
#elif defined(FUZZ_GGUF)
/* Every value of every key read as what it claims to be (and as the wrong
 * kind, which must fail cleanly); every tensor loaded or refused, and a
 * loaded one holds exactly the bytes its info points at. */
static void read_every_value(const tf_gguf *f) {
    for (int64_t i = 0; i < tf_gguf_key_count(f); i++) {
        if (!tf_gguf_key(f, i)) fail("a key is missing");
        int64_t n = tf_gguf_array_length(f, i);
        n = n < 0 ? 1 : n > 256 ? 256 : n;
        for (int64_t e = 0; e < n; e++) {
            int64_t iv;
            double dv;
            const char *s;
            size_t len;
            tf_status a = tf_gguf_get_int(f, i, e, &iv), b = tf_gguf_get_float(f, i, e, &dv),
                      c = tf_gguf_get_string(f, i, e, &s, &len);
            /* Only a u64 beyond int64 reads as neither integer nor number. */
            if (a != TF_OK && b != TF_OK && c != TF_OK && a != TF_ERR_SIZE) fail("a value reads as nothing");
            volatile unsigned char sum = 0;   /* touch every byte of a string (ASan checks the range) */
            for (size_t k = 0; c == TF_OK && k < len; k++) sum ^= (unsigned char)s[k];
        }
    }
}

static void run(void) {
    tf_gguf *f = (tf_gguf *)1;
    tf_status s = tf_gguf_open(in_path, &f);
    if (s != TF_OK) {
        if (s >= 0 || !*tf_last_error() || f) fail("a failed open broke the contract");
        return;
    }
    read_every_value(f);
    for (int64_t i = 0; i < tf_gguf_tensor_count(f) && i < 64; i++) {
        tf_gguf_tensor info;
        if (tf_gguf_tensor_info(f, i, &info) != TF_OK) fail("a tensor has no info");
        tf_tensor *t = (tf_tensor *)1;
        s = tf_gguf_load_as(f, info.name, cpu, TF_F32, &t);   /* decodes the quantized blocks too */
        if (s != TF_OK) expect_failure_contract(s, t);
        else tf_tensor_release(t);
        t = (tf_tensor *)1;
        s = tf_gguf_load(f, info.name, cpu, &t);
        if (s != TF_OK) {
            expect_failure_contract(s, t);
            continue;
        }
        size_t n;
        void *got = read_all(t, &n);
        if (n != info.nbytes || memcmp(got, info.data, n)) fail("a loaded tensor differs from its bytes in the file");
        free(got);
        tf_tensor_release(t);
    }
    tf_gguf_close(f);
}
#else
static void run(void) {
    tf_safetensors *f = (tf_safetensors *)1;
    tf_status s = tf_safetensors_open(in_path, &f);
    if (s != TF_OK) {
        if (s >= 0 || !*tf_last_error() || f) fail("a failed open broke the contract");
        return;
    }
    int n = tf_safetensors_count(f);
    if (n < 0 || n > 64) {                        /* keep each run short: re-save at most 64 */
        tf_safetensors_close(f);
        return;
    }
    tf_tensor **ts = calloc((size_t)n + 1, sizeof *ts);
    const char **names = calloc((size_t)n + 1, sizeof *names);
    if (!ts || !names) abort();
    for (int i = 0; i < n; i++) {
        names[i] = tf_safetensors_name(f, i);
        if (!names[i]) fail("a name is missing");
        tf_tensor *t = (tf_tensor *)1;
        s = tf_safetensors_load(f, names[i], cpu, &t);
        if (s != TF_OK) expect_failure_contract(s, t), t = NULL;
        ts[i] = t;
    }
    bool all = true;
    for (int i = 0; i < n; i++) all &= ts[i] != NULL;
    if (all && tf_safetensors_save(out_path, n, names, (const tf_tensor *const *)ts) == TF_OK) {
        tf_safetensors *g = NULL;
        if (tf_safetensors_open(out_path, &g) != TF_OK) fail("a saved file does not open");
        for (int i = 0; i < n; i++) {
            tf_tensor *again = NULL;
            if (tf_safetensors_load(g, names[i], cpu, &again) != TF_OK) fail("a saved tensor does not load");
            same(ts[i], again);
            tf_tensor_release(again);
        }
        tf_safetensors_close(g);
    }
    for (int i = 0; i < n; i++) tf_tensor_release(ts[i]);
    free(ts);
    free(names);
    tf_safetensors_close(f);
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    write_input(data, size);
    run();
    return 0;
}

/* Shared helpers for the cmocka unit tests. */
#ifndef TF_TEST_HELPERS_H
#define TF_TEST_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <tensorframe/tensorframe.h>

#define OK(call) assert_int_equal((call), TF_OK)
/* A call must fail with `code`, say something containing `text`, and leave *out NULL. */
#define FAILS_WITH(code, text, call)                                                \
    do {                                                                           \
        tf_status s_ = (call);                                                     \
        if (s_ != (code) || !strstr(tf_last_error(), (text)))                      \
            fail_msg("%s returned %s (%s), expected %s mentioning '%s'", #call,      \
                     tf_status_name(s_), tf_last_error(), tf_status_name(code), text); \
    } while (0)

static inline tf_device *cpu_device(void) {
    tf_device *d = NULL;
    assert_int_equal(tf_device_get("cpu", &d), TF_OK);
    return d;
}

static inline tf_tensor *tensor_f32(tf_device *d, int ndim, const int64_t *shape, const float *v) {
    tf_tensor *t = NULL;
    assert_int_equal(tf_tensor_from_data(d, TF_F32, ndim, shape, v, &t), TF_OK);
    return t;
}

static inline void expect_f32(const tf_tensor *t, const float *want, size_t n) {
    float got[256];
    assert_true(n <= 256);
    assert_int_equal(tf_tensor_numel(t), (int64_t)n);
    assert_int_equal(tf_tensor_read(t, got, sizeof got), TF_OK);
    for (size_t i = 0; i < n; i++) {
        if (got[i] != want[i] && !(got[i] != got[i] && want[i] != want[i]))
            fail_msg("element %zu: got %g, expected %g", i, got[i], want[i]);
    }
}

static inline void expect_shape(const tf_tensor *t, int ndim, const int64_t *shape) {
    assert_int_equal(tf_tensor_ndim(t), ndim);
    for (int i = 0; i < ndim; i++) assert_int_equal(tf_tensor_shape(t)[i], shape[i]);
}

/* Run tests, then shut the library down so leak checkers see nothing. */
static inline int run_and_shutdown(int rc) {
    tf_shutdown();
    return rc;
}

#endif

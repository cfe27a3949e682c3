/* hello: pick the best device, build tensors, run a few ops, read back. */
#include <stdio.h>

#include <tensorframe/tensorframe.h>

#include "example.h"

int main(void) {
    tf_device *dev;
    CHECK(tf_device_get("auto", &dev));
    printf("running on %s\n", tf_device_name(dev));

    const float a_data[6] = {1, 2, 3, 4, 5, 6};            /* 2 x 3 */
    const float b_data[3] = {10, 20, 30};                  /* broadcasts over rows */
    int64_t a_shape[2] = {2, 3}, b_shape[1] = {3};
    tf_tensor *a, *b, *sum, *prod, *at, *total, *noise, *noise_mean;
    CHECK(tf_tensor_from_data(dev, TF_F32, 2, a_shape, a_data, &a));
    CHECK(tf_tensor_from_data(dev, TF_F32, 1, b_shape, b_data, &b));
    CHECK(tf_add(a, b, &sum));                             /* [2,3] + [3] */
    CHECK(tf_transpose(a, 0, 1, &at));                     /* a view, no copy */
    CHECK(tf_matmul(a, at, &prod));                        /* [2,3] x [3,2] */
    CHECK(tf_sum(prod, TF_ALL_AXES, false, &total));
    int64_t n_shape[1] = {100000};
    CHECK(tf_randn(dev, TF_F32, 1, n_shape, 42, &noise));
    CHECK(tf_mean(noise, 0, false, &noise_mean));

    float s[6], p[4], t, m;
    CHECK(tf_tensor_read(sum, s, sizeof s));
    CHECK(tf_tensor_read(prod, p, sizeof p));
    CHECK(tf_tensor_read(total, &t, sizeof t));
    CHECK(tf_tensor_read(noise_mean, &m, sizeof m));
    printf("a + b      = [[%g %g %g] [%g %g %g]]\n", s[0], s[1], s[2], s[3], s[4], s[5]);
    printf("a @ a^T    = [[%g %g] [%g %g]]\n", p[0], p[1], p[2], p[3]);
    printf("sum(a@a^T) = %g\n", t);
    printf("mean of 100000 normal samples (seed 42) = %.4f\n", m);

    tf_tensor *all[] = {a, b, sum, prod, at, total, noise, noise_mean};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tf_tensor_release(all[i]);
    tf_shutdown();
    return 0;
}

/* Built against an installed tensorframe: find_package, pkg-config, static. */
#include <stdio.h>
#include <tensorframe/backend.h>
#include <tensorframe/check.h>
#include <tensorframe/tensorframe.h>

/* The installed error idioms: TF_TRY propagates, TF_CHECK reports. */
static tf_status total_of(tf_device *dev, float *total) {
    tf_tensor *a = NULL, *s = NULL;
    tf_status st;
    TF_TRY(tf_arange(dev, TF_F32, 0, 4, 1, &a));
    TF_TRY_GOTO(st, tf_sum(a, 0, false, &s), done);
    TF_TRY_GOTO(st, tf_tensor_read(s, total, sizeof *total), done);
done:
    tf_tensor_release(a);
    tf_tensor_release(s);
    return st;
}

int main(void) {
    tf_device *dev;
    tf_tensor *a = NULL, *s = NULL;
    float total = 0;
    int64_t n = 4;
    TF_CHECK(tf_device_get("auto", &dev));
    TF_CHECK(total_of(dev, &total));
    if (total != 6.0f) return 1;
    if (tf_device_get("auto", &dev) != TF_OK || tf_arange(dev, TF_F32, 0, 4, 1, &a) != TF_OK ||
        tf_sum(a, 0, false, &s) != TF_OK || tf_tensor_read(s, &total, sizeof total) != TF_OK || total != 6.0f) {
        printf("consumer failed: %s\n", tf_last_error());
        return 1;
    }
    (void)n;
    printf("consumer OK on %s (sdk abi %d.%d)\n", tf_device_name(dev), TF_BACKEND_ABI_MAJOR, TF_BACKEND_ABI_MINOR);
    tf_tensor_release(a);
    tf_tensor_release(s);
    tf_shutdown();
    return 0;
}
